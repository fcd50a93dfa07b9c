"""Big graphs stay responsive: work on the GUI thread is cut into event-loop turns.

Small test graphs with the slice sizes forced down, so every turn boundary is exercised;
the end state must equal the one-pass result.
"""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from qtquant.app.views import looks as overlays  # noqa: E402
from qtquant.gui.canvas import scene as canvas  # noqa: E402
from qtquant.app.views.looks import Looks, compute_looks, fill_looks  # noqa: E402
from qtquant.gui.style import RAMPS, heat_color  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from builders import band_model  # noqa: E402
from test_gui import open_and_settle  # noqa: E402


@pytest.fixture
def win(make_win):
    return make_win(size=(1200, 800))


@pytest.fixture
def opened(qtbot, win, tmp_path):
    open_and_settle(qtbot, win, band_model(tmp_path / "bands.onnx"))
    qtbot.waitUntil(lambda: win.relay.perf() is not None and not win.controller.busy, timeout=20000)
    return win


def _state(win):
    return ({n: it._look_key for n, it in win.scene.nodes.items()}, [e._style_key for e in win.scene.edges],
            win.view.legend.title)


@pytest.mark.parametrize("mode", ["latency", "bits", "mismatch"])
def test_fill_looks_in_steps_equals_compute_looks(opened, mode):
    g, cs, perf = opened.session.graph, opened.relay.concats(), opened.relay.perf()
    whole = compute_looks(g, mode, cs, perf)
    looks = Looks()
    steps = sum(1 for _ in fill_looks(looks, g, mode, cs, perf, step=2))
    assert steps >= len(g.nodes) // 2  # a yield every two nodes
    assert looks.nodes == whole.nodes  # frozen looks: equal field by field
    assert looks.edges == whole.edges
    assert looks.legend == whole.legend


def test_looks_computed_over_turns_end_as_in_one_pass(qtbot, opened, monkeypatch):
    win = opened
    results = {}
    for mode in ("latency", "bits"):
        win.set_overlay(mode)
        win.scene.flush_looks()
        results[mode] = _state(win)
    win.set_overlay("none")
    win.scene.flush_looks()
    monkeypatch.setattr(canvas, "COMPUTE_SLICE_S", -1.0)  # one step per event-loop turn
    monkeypatch.setattr(overlays, "_STEP", 1)
    turns = []
    win.scene._apply_timer.timeout.connect(lambda: turns.append(1))
    win.set_overlay("latency")
    assert win.scene.looks_pending  # nothing computed in this turn beyond the first step
    assert _state(win) != results["latency"]
    qtbot.waitUntil(lambda: not win.scene.looks_pending, timeout=10000)
    assert _state(win) == results["latency"]
    assert len(turns) >= len(win.session.graph.nodes)
    # A new overlay while one is being computed: the old computation is dropped.
    win.set_overlay("none")
    win.set_overlay("latency")
    win.set_overlay("bits")
    qtbot.waitUntil(lambda: not win.scene.looks_pending, timeout=10000)
    assert _state(win) == results["bits"]
    # A screenshot or an export finishes the computation at once.
    win.set_overlay("latency")
    assert win.scene.looks_pending
    win.scene.flush_looks()
    assert not win.scene.looks_pending and not win.scene._apply_timer.isActive()
    assert _state(win) == results["latency"]


def test_direct_apply_looks_replaces_a_computation_under_way(qtbot, opened, monkeypatch):
    win = opened
    monkeypatch.setattr(canvas, "COMPUTE_SLICE_S", -1.0)
    win.set_overlay("latency")
    assert win.scene.looks_pending
    win.scene.apply_looks({}, {}, None)  # e.g. a reset of every look
    qtbot.wait(50)
    assert not win.scene.looks_pending
    assert all(it.fill == it.base_fill and not it.badges for it in win.scene.nodes.values())


def test_jobs_start_after_every_view_has_refreshed(qtbot, win, tmp_path):
    """On calibration the simulator and the fidelity check are submitted only once every
    ``calibrated`` listener ran: a worker started earlier would take the GIL from them."""
    seen = []
    win.relay.calibrated.connect(lambda: seen.append(("calibrated", sorted(j.kind for j in win.jobs.active()))))
    settled = []
    win.relay.settled.connect(lambda k: settled.append(k))
    open_and_settle(qtbot, win, band_model(tmp_path / "bands.onnx"))
    qtbot.waitUntil(lambda: win.relay.perf() is not None and not win.controller.busy, timeout=20000)
    cal = [kinds for k, kinds in seen if k == "calibrated"]
    assert cal and "perf" not in cal[0] and "fidelity" not in cal[0]
    assert "calibrated" in settled
    assert any(j.kind == "perf" and j.status == "done" for j in win.jobs.history)


def test_search_completer_made_when_the_bar_opens(qtbot, opened):
    bar = opened.search_bar
    bar.set_graph(opened.session.graph)
    assert bar.edit.completer() is None or bar._completer_for is None
    bar.open()
    comp = bar.edit.completer()
    assert comp is not None and bar._completer_for is opened.session.graph
    words = comp.model().stringList() if hasattr(comp.model(), "stringList") else []
    assert "cat_red" in words


def test_heat_ramp_ends_are_the_ramp_colours():
    for ramp, stops in RAMPS.items():
        assert heat_color(0.0, ramp) == QColor(stops[0])
        assert heat_color(1.0, ramp) == QColor(stops[-1])
        mid = heat_color(0.5, ramp)
        assert mid == QColor(stops[len(stops) // 2])  # 9 stops: 0.5 is the middle one
    assert heat_color(float("nan")).name() != heat_color(0.0).name()


def test_docks_keep_their_size_when_results_arrive(qtbot, win, tmp_path):
    """A dock growing with its content (a long summary line, a chart with more bars) re-lays
    out the window and repaints the whole canvas when calibration ends."""
    win.resize(1000, 650)
    # Under load the resize's layout may land late: wait until the canvas stops moving, so a
    # late one is not mistaken for a dock growing with its content.
    seen = []

    def settled():
        seen.append(win.view.viewport().size().toTuple())
        return len(seen) > 2 and seen[-1] == seen[-2] == seen[-3]

    qtbot.waitUntil(settled, timeout=5000)
    sizes = {}
    resizes = []

    def snapshot():
        sizes["before"] = {k: d.size().toTuple() for k, d in win.docks.items() if d.isVisible()}
        sizes["view"] = win.view.viewport().size().toTuple()

    win.controller.calibrationStarted.connect(snapshot)
    # The canvas is drawn off the GUI thread: under load the graph (and the scroll bar it needs)
    # can land after calibration ends, so the reference is the later of the two.
    win.controller.calibrationFinished.connect(
        lambda ok: resizes.append(win.view.viewport().size().toTuple()))
    win.canvas.built.connect(lambda spec: resizes.append(win.view.viewport().size().toTuple()))
    open_and_settle(qtbot, win, band_model(tmp_path / "bands.onnx"))
    qtbot.waitUntil(lambda: win.relay.perf() is not None and win.session.fidelity is not None
                    and not win.controller.busy, timeout=20000)
    qtbot.wait(50)
    after = {k: d.size().toTuple() for k, d in win.docks.items() if d.isVisible()}
    assert after == sizes["before"]
    assert win.view.viewport().size().toTuple() == resizes[-1]  # nothing moved after calibration
    assert win.concat_list.status.text().startswith("4 Concats")
    assert win.perf_summary.chart.rows


def test_simulation_after_calibration_waits_for_the_canvas(qtbot, win, tmp_path):
    """The simulator and the fidelity check start once the canvas has applied its looks (a
    job running meanwhile slows every call Qt makes into Python)."""
    state = {"busy": True}
    real = win.controller.views_busy
    win.controller.views_busy = lambda: state["busy"] or real()
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.open_model(band_model(tmp_path / "bands.onnx"))
    qtbot.wait(300)
    assert not any(j.kind in ("perf", "fidelity") for j in win.jobs.history)
    assert win.controller.busy and not win.jobs.busy  # waiting, and says so
    state["busy"] = False
    qtbot.waitUntil(lambda: win.relay.perf() is not None and win.session.fidelity is not None
                    and not win.controller.busy, timeout=20000)
    # A new calibration while the canvas is still busy: still nothing started early.
    state["busy"] = True
    n = len(win.jobs.history)
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.controller.calibrate()
    qtbot.wait(200)
    assert [j.kind for j in win.jobs.history[n:]] == ["calibrate"]
    state["busy"] = False
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=20000)
    assert {j.kind for j in win.jobs.history[n:]} == {"calibrate", "perf", "fidelity"}


def test_model_serialized_in_the_load_job_only(qtbot, win, tmp_path, monkeypatch):
    """The calibration and fidelity children get the bytes the load job made (here, those shape
    inference handed back): encoding a big model again in a worker thread held the GIL and froze
    the window when calibration ended."""
    from qtquant.model.graph import Graph

    made = []
    real = Graph.model_bytes

    def counting(self):
        had = self._model_bytes is not None
        made.append(had)
        return real(self)

    monkeypatch.setattr(Graph, "model_bytes", counting)
    win.controller.child_process_nodes = 1  # calibration in a child process too
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=30000):
        win.open_model(band_model(tmp_path / "bands.onnx"))
    qtbot.waitUntil(lambda: win.session.fidelity is not None and not win.controller.busy, timeout=30000)
    assert len(made) >= 2 and all(made)  # calibration, fidelity: the load kept the bytes


def test_jobs_start_after_the_views_stayed_idle_for_a_second_poll(qtbot, win, tmp_path, monkeypatch):
    """Idle at one poll is not enough: the repaint of the last looks runs in the next turn."""
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.open_model(band_model(tmp_path / "bands.onnx"))
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=20000)
    c = win.controller
    started = []
    monkeypatch.setattr(c, "refresh", lambda: started.append(True))
    c._settle_timer.stop()
    busy = {"on": True}
    c.views_busy = lambda: busy["on"]
    c._idle_polls = 0
    c._refresh_when_settled()
    busy["on"] = False
    c._refresh_when_settled()  # first idle poll: wait once more
    assert not started and c._settle_timer.isActive()
    busy["on"] = True
    c._refresh_when_settled()  # busy again: the count starts over
    busy["on"] = False
    c._refresh_when_settled()
    assert not started
    c._refresh_when_settled()
    assert started == [True]
