"""Robustness of the app (issue 8, GUI half): autosave and recovery after a crash, and faults
injected into background jobs, driven through the real window (pytest-qt, offscreen).

Every window here answers QMessageBox.question from a script (``prompts``), so no prompt can
block a test, and points its recovery folder at tmp_path (the ``recovery/dir`` settings key).
"""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QLabel, QMessageBox  # noqa: E402

from builders import other_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.window import recovery as recovery_mod  # noqa: E402
from qtquant.gui.window.mainwindow import MainWindow  # noqa: E402
import guikit  # noqa: E402
from guikit import settle  # noqa: E402

CAT1 = ["br_a_out", "br_b_out", "br_c_out", "cat1_out"]



@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(recovery_mod.ENV_VAR, raising=False)
    return tmp_path / "recovery"


@pytest.fixture
def make_win(make_win, rec_dir):
    """Windows on one settings file whose recovery folder is ``rec_dir``."""
    return lambda settings_name="settings.ini", **kw: make_win(settings_name, recovery_dir=rec_dir, size=(1200, 800),
                                                               **kw)


def open_settled(qtbot, win, path, count=4):
    guikit.open_settled(qtbot, win, path, count, zoom=None)


def crash(win):
    """Drop the window the way a crash would: no closeEvent, the recovery file stays, and its
    lock is no longer held by a live owner (in one process: let go of it)."""
    win.recovery.stop()
    win.recovery._lock.unlock()
    win.controller.shutdown()
    win.setAttribute(Qt.WA_DeleteOnClose, False)
    win.hide()


def edited_then_crashed(qtbot, make_win, model):
    """A window that shared cat1, autosaved and crashed: the recovery file stays behind."""
    w = make_win()
    open_settled(qtbot, w, model)
    w.editor.share_nodes(["cat1"])
    assert w.recovery.autosave()
    crash(w)
    return w


def groups(win):
    s = win.session
    return [sorted(g.members) for g in s.groups] if s is not None else None


# -- autosave and recovery -------------------------------------------------------------------------
def test_autosave_after_an_edit_and_restore_after_a_crash(qtbot, make_win, model, prompts, rec_dir):
    w1 = make_win()
    open_settled(qtbot, w1, model)
    assert not w1.recovery.pending()  # nothing unsaved yet: nothing written
    assert w1.editor.share_nodes(["cat1"])
    assert groups(w1) == [CAT1]
    qtbot.waitUntil(w1.recovery.pending, timeout=recovery_mod.EDIT_DEBOUNCE_MS + 5000)  # debounced write
    doc = json.loads(w1.recovery.project_path.read_text())
    assert [sorted(g["members"]) for g in doc["groups"]] == [CAT1]
    qtbot.waitUntil(lambda: not w1.jobs.active("statistics"), timeout=20000)  # written off the GUI thread
    assert (w1.recovery.dir / recovery_mod.STATS_NAME).is_dir()  # the restore needs no calibration
    crash(w1)

    prompts["answers"] = [QMessageBox.Open]
    w2 = make_win("settings.ini")
    qtbot.waitUntil(lambda: groups(w2) == [CAT1] and w2.relay.ready, timeout=20000)
    assert prompts["asked"][0][0] == "Recover unsaved changes"
    assert "1 group(s)" in prompts["asked"][0][1]
    assert w2.recovery.restored
    assert w2.session.calibration is not None and not w2.controller.calibrating  # from the cache
    assert w2.projects.modified and w2.projects.path is None  # unsaved, and Save never targets the autosave
    assert "edit.onnx" in w2.windowTitle()
    settle(qtbot, w2)
    assert w2.scene.nodes["cat1"] is not None
    qtbot.waitUntil(lambda: w2.recovery.writes >= 1, timeout=recovery_mod.EDIT_DEBOUNCE_MS + 5000)  # kept
    assert w2.recovery.pending()

    # A clean close (the save prompt answered Discard) removes the recovery file.
    w2.close()
    assert prompts["asked"][-1][0] == "Unsaved changes"
    assert not w2.recovery.pending() and not list(rec_dir.iterdir())  # the slot went with it


def test_saving_a_restored_state_removes_the_autosave(qtbot, make_win, model, prompts, rec_dir, tmp_path):
    edited_then_crashed(qtbot, make_win, model)
    prompts["answers"] = [QMessageBox.Open]
    w2 = make_win(offer_recovery=False)
    assert w2.recovery.offer()
    qtbot.waitUntil(lambda: groups(w2) == [CAT1] and w2.relay.ready, timeout=20000)
    assert w2.stack.clean and w2.projects.modified  # unsaved without an undo entry
    assert w2.projects.save_to(tmp_path / "saved.qtquant")
    assert not w2.projects.modified and not w2.recovery.pending()


def test_save_undo_and_clean_close_remove_the_autosave(qtbot, make_win, model, rec_dir, tmp_path):
    w = make_win()
    open_settled(qtbot, w, model)
    w.editor.share_nodes(["cat1"])
    assert w.recovery.autosave() and w.recovery.pending()
    w.stack.undo()  # back to the unedited model: nothing to recover
    assert not w.recovery.pending()
    w.stack.redo()
    assert w.recovery.autosave() and w.recovery.pending()
    assert w.projects.save_to(tmp_path / "p.qtquant")  # saved: nothing to recover
    assert not w.recovery.pending()
    assert not w.recovery.autosave()  # and a timer tick on a clean window writes nothing
    w.editor.share_nodes(["cat2"])
    assert w.recovery.autosave()
    meta = w.recovery.meta()
    assert meta["project"].endswith("p.qtquant") and meta["groups"] == 2
    w.stack.set_clean()
    w.close()
    assert not w.recovery.pending()


def test_offer_discard_deletes_cancel_keeps(qtbot, make_win, model, prompts, rec_dir):
    edited_then_crashed(qtbot, make_win, model)
    prompts["answers"] = [QMessageBox.Cancel]
    w2 = make_win(offer_recovery=False)
    assert w2.recovery.offer() is False and w2.recovery.pending()  # kept for the next start
    prompts["answers"] = [QMessageBox.Discard]
    assert w2.recovery.offer() is False and not w2.recovery.pending()
    assert w2.session is None
    assert w2.recovery.offer() is False and len(prompts["asked"]) == 2  # nothing left to offer


def test_restore_of_a_vanished_model_is_an_error_dialog(qtbot, make_win, model, prompts, rec_dir):
    edited_then_crashed(qtbot, make_win, model)
    model.unlink()
    prompts["answers"] = [QMessageBox.Open]
    w2 = make_win(show_dialogs=False)  # errors recorded, not shown
    assert w2.recovery.offer()
    qtbot.waitUntil(lambda: bool(w2.errors), timeout=10000)
    title, msg, _ = w2.errors[0]
    assert "\n" not in msg and "Traceback" not in msg
    assert w2.session is None and w2.recovery.pending()  # the file stays for another try


def test_windows_on_other_settings_never_autosave(qtbot, tmp_path, monkeypatch):
    monkeypatch.delenv(recovery_mod.ENV_VAR, raising=False)
    w = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    assert not w.recovery.enabled and not w.recovery.autosave()
    monkeypatch.setenv(recovery_mod.ENV_VAR, str(tmp_path / "env"))
    assert recovery_mod.recovery_dir(w.settings, False) == tmp_path / "env"


# -- faults in background jobs -----------------------------------------------------------------------
def ort_fault(monkeypatch, fail_at: int):
    """onnxruntime raises (its own exception type, a multi-line message) on run call ``fail_at``."""
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    real = ort.InferenceSession.run
    calls = {"n": 0}
    lock = threading.Lock()

    def run(self, *a, **kw):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == fail_at:
            raise RuntimeException("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned "
                                   "while running Conv node.\n Name:'conv' Status Message: out of memory")
        return real(self, *a, **kw)

    monkeypatch.setattr(ort.InferenceSession, "run", run)
    return lambda: monkeypatch.setattr(ort.InferenceSession, "run", real)


def gated_calibrate(monkeypatch, stop_at: int):
    """Calibration pauses after batch ``stop_at`` until released (the test acts meanwhile)."""
    import qtquant.gui.window.controller as ctl

    real = ctl.calibrate
    reached, release, calls = threading.Event(), threading.Event(), []

    def cal(graph, cfg, progress=None, cancel=None, **kw):
        calls.append(graph.path)
        first = len(calls) == 1

        def prog(done, total=0):
            if progress is not None:
                progress(done, total)
            if first and done == stop_at:
                reached.set()
                release.wait(20)

        def stop():
            # Point 0 pauses at the first cancel poll, before any batch runs: without the pause
            # a loaded machine could finish all four batches before the test's click lands.
            if first and stop_at == 0 and not reached.is_set():
                reached.set()
                release.wait(20)
            return cancel()

        return real(graph, cfg, progress=prog, cancel=stop if cancel is not None else None, **kw)

    monkeypatch.setattr(ctl, "calibrate", cal)
    return reached, release, calls


def one_line(win):
    assert win.errors, "no error reported"
    title, msg, _ = win.errors[-1]
    assert msg and "\n" not in msg and "Traceback" not in msg and len(msg) <= 320
    return title, msg


def test_synthetic_samples_a_model_with_a_shape_input_cannot_run_on_say_what_to_do(qtbot, make_win, tmp_path):
    """onnxruntime fails on synthetic samples when an integer input holds a shape (they give it
    zeros): the dialog says so and where to give real values, as the command line does."""
    from builders import expand_shape_model, save

    path = save(expand_shape_model(), tmp_path / "expand.onnx")
    w = make_win()
    w.open_model(path, calib=CalibConfig(count=2))
    qtbot.waitUntil(lambda: bool(w.errors), timeout=20000)
    title, msg, _ = w.errors[-1]
    assert "\n" not in msg and "Traceback" not in msg
    assert title.startswith("Calibrate (synthetic") and "onnxruntime failed on synthetic sample" in msg
    assert "integer input(s) shape zeros" in msg and "Calibration data" in msg
    dialog = w.messages.error_dialogs[-1]
    assert dialog.isVisible() and "Calibration data in the app" in " ".join(
        lb.text() for lb in dialog.findChildren(QLabel))  # the whole sentence is shown, not cut
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=10000)
    assert w.scene.nodes  # the graph is still shown


@pytest.mark.parametrize("fail_at", [1, 3])
def test_onnxruntime_raising_mid_calibration(qtbot, make_win, model, monkeypatch, fail_at):
    undo = ort_fault(monkeypatch, fail_at)
    w = make_win()
    w.open_model(model, calib=CalibConfig(count=6))
    qtbot.waitUntil(lambda: bool(w.errors), timeout=20000)
    title, msg = one_line(w)
    assert title == "Calibrate (synthetic, up to 6 samples) failed"
    assert "onnxruntime failed on synthetic sample" in msg and "RUNTIME_EXCEPTION" in msg  # the core's own error
    assert w.messages.error_dialogs and w.messages.error_dialogs[-1].isVisible()  # the dialog, not a traceback
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=10000)
    assert w.session.calibration is None and not w.relay.ready  # nothing half-calibrated applied
    assert not w.controller.calibrating and not w.progress.bar.isVisible()
    assert w.scene.nodes.get("cat1") is not None  # the canvas is still there
    # Still usable: the fault gone, calibrating again works.
    undo()
    w.messages.error_dialogs[-1].close()
    w.controller.calibrate()
    settle(qtbot, w)
    assert w.relay.concat("cat1").rescales == 2


@pytest.mark.parametrize("point", [0, 1, 3, 4])
def test_cancel_calibration_at_several_points(qtbot, make_win, model, monkeypatch, point):
    """Cancel before the first batch, after batch 1, mid-way, and after the last batch."""
    reached, release, _ = gated_calibrate(monkeypatch, point)
    w = make_win()
    w.open_model(model, calib=CalibConfig(count=4, holdout=0))
    stopped = []
    w.controller.calibrationFinished.connect(stopped.append)
    qtbot.waitUntil(reached.is_set, timeout=20000)
    assert w.jobs.active("calibrate")
    qtbot.waitUntil(w.progress.cancel_button.isVisible, timeout=5000)
    qtbot.mouseClick(w.progress.cancel_button, Qt.LeftButton)
    release.set()
    qtbot.waitUntil(lambda: stopped == [False], timeout=20000)
    job = [j for j in w.jobs.history if j.kind == "calibrate"][-1]
    assert job.status == "cancelled"
    assert w.session.calibration is None  # even a finished result is dropped once cancelled
    assert not w.errors and not w.controller.calibrating
    qtbot.waitUntil(lambda: not w.progress.bar.isVisible(), timeout=5000)
    release.set()
    w.controller.calibrate()  # and it can run again
    settle(qtbot, w)
    assert w.relay.concat("cat1").rescales == 2


@pytest.mark.parametrize("kind", ["perf", "fidelity"])
def test_edit_while_a_job_runs_applies_only_the_newest(qtbot, make_win, model, monkeypatch, kind):
    import qtquant.gui.window.controller as ctl

    w = make_win()
    w.open_model(model, calib=CalibConfig(count=4))
    settle(qtbot, w)
    getter = ctl.simulator if kind == "perf" else ctl.fidelity_measure
    real = getter() if kind == "perf" else getter(w.controller.fidelity_worker)
    gate, entered, results = threading.Event(), threading.Event(), []

    def slow(*a, **kw):
        r = real(*a, **kw)
        if not entered.is_set():  # the first job (the unedited revision) is held back
            entered.set()
            gate.wait(20)
        results.append(r)
        return r

    monkeypatch.setattr(ctl, "simulator" if kind == "perf" else "fidelity_measure", lambda *a: slow)
    rev0 = w.session.revision
    (w.controller.refresh_perf if kind == "perf" else w.controller.refresh_fidelity)()
    qtbot.waitUntil(entered.is_set, timeout=10000)
    assert w.editor.share_nodes(["cat1"])  # the user edits while the job runs
    rev1 = w.session.revision
    assert rev1 != rev0
    def result():
        return getattr(w.session, kind)

    qtbot.waitUntil(lambda: result() is not None and result().revision == rev1, timeout=20000)
    newest = result()
    gate.set()  # the old job now finishes...
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)
    old = [j for j in w.jobs.history if j.kind == kind][-2]
    assert old.status in ("stale", "cancelled")  # ...and is dropped
    assert result() is newest and not w.session.is_stale(newest)
    assert not w.errors


def test_opening_a_second_model_while_the_first_calibrates(qtbot, make_win, model, monkeypatch, tmp_path):
    reached, release, calls = gated_calibrate(monkeypatch, 4)  # after the last batch: a result comes back
    w = make_win()
    w.open_model(model, calib=CalibConfig(count=4, holdout=0))
    qtbot.waitUntil(reached.is_set, timeout=20000)
    second = other_model(tmp_path / "other.onnx")
    w.open_model(second, calib=CalibConfig(count=4))
    # Not settle(): the first job still holds a worker, so the controller stays busy until released.
    qtbot.waitUntil(lambda: w.relay.ready and w.session.graph.path == second and w.scene.spec is not None
                    and w.scene.spec is w.controller.spec, timeout=20000)
    assert [j.status for j in w.jobs.history if j.kind == "calibrate"][0] == "running"  # still in flight
    release.set()  # the first calibration completes after the switch
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=20000)
    first_job = [j for j in w.jobs.history if j.kind == "calibrate"][0]
    assert first_job.status in ("stale", "cancelled")
    assert [p.name for p in calls] == ["edit.onnx", "other.onnx"]
    assert w.controller.path == second and w.session.graph.path == second
    assert set(w.scene.nodes) >= {"other_mul", "other_relu"} and "cat1" not in w.scene.nodes
    assert set(w.session.calibration.ranges) <= set(w.session.graph.tensors)  # the second model's
    assert "other.onnx" in w.windowTitle() and not w.errors


@pytest.mark.parametrize("bad", ["garbage", "truncated", "empty"])
def test_corrupt_model_gives_the_error_dialog(qtbot, make_win, model, tmp_path, bad):
    w = make_win()
    p = tmp_path / "bad.onnx"
    data = model.read_bytes()
    p.write_bytes({"garbage": b"\x08\xff\xff\xff\xff" + bytes(range(256)) * 4,
                   "truncated": data[:len(data) // 2], "empty": b""}[bad])
    w.open_model(p)
    qtbot.waitUntil(lambda: bool(w.errors), timeout=20000)
    one_line(w)
    assert w.messages.error_dialogs and w.messages.error_dialogs[-1].isVisible()
    assert w.session is None and w.controller.path is None
    open_settled(qtbot, w, model)  # usable afterwards
    assert "cat1" in w.scene.nodes


@pytest.mark.parametrize("content", ["{not json", '{"format": "qtquant-project", "version": 99, "model": "m.onnx"}',
                                     '{"format": "qtquant-project", "version": 1, "model": "missing.onnx"}', "[]"])
def test_bad_project_gives_the_error_dialog(qtbot, make_win, model, tmp_path, content, prompts):
    w = make_win()
    open_settled(qtbot, w, model)
    w.editor.share_nodes(["cat1"])
    p = tmp_path / "bad.qtquant"
    p.write_text(content)
    w.stack.set_clean()
    if "missing" in content:  # a missing model is offered to be located (Cancel: nothing happens)
        prompts["answers"] = [QMessageBox.Cancel]
        assert w.open_project(p, ask=False) is None
        assert prompts["asked"][-1][0] == "Model not found" and not w.errors
    else:
        w.open_project(p, ask=False)
        qtbot.waitUntil(lambda: bool(w.errors), timeout=20000)
        one_line(w)
    # The open model stays, with its groups, and the window is not renamed after the bad file.
    assert w.session.graph.path == model and groups(w) == [CAT1]
    assert w.projects.path is None and "bad" not in w.windowTitle()


# -- the scene is built in slices ---------------------------------------------------------------------
def test_scene_builds_in_slices_and_a_newer_model_drops_a_half_built_one(qtbot, make_win, model, monkeypatch,
                                                                          tmp_path):
    import qtquant.gui.canvas.showing as mw
    from qtquant.gui.canvas.scene import GraphScene

    real = GraphScene.build_steps
    monkeypatch.setattr(mw, "BUILD_SLICE_MS", 0)  # one chunk per event-loop turn
    monkeypatch.setattr(GraphScene, "build_steps", lambda self, spec, chunk=400: real(self, spec, chunk=2))
    w = make_win()
    slices = []
    w.canvas._build_timer.timeout.connect(lambda: slices.append(len(w.scene.nodes)))
    w.open_model(model, calib=CalibConfig(count=4))
    settle(qtbot, w)
    assert len(slices) >= 5 and slices == sorted(slices)  # built over several event-loop turns
    assert set(w.scene.nodes) >= {"cat1", "cat2", "br_a", "reshape"} and w.scene.spec is w.controller.spec
    assert w.scene.nodes["cat1"].badge_texts == ["+2 rescale"]  # looks applied once complete

    second = other_model(tmp_path / "other.onnx")
    built = []
    w.canvas.built.connect(built.append)
    w.canvas._build_timer.setInterval(200)  # ~15 slices: seconds, while the second model loads in milliseconds
    with qtbot.waitSignal(w.controller.layoutReady, timeout=20000) as first:
        w.open_model(model, calib=CalibConfig(count=4))
    assert w.canvas._build is not None and w.scene.spec is None  # half built...
    w.open_model(second, calib=CalibConfig(count=4))  # ...when another model opens
    settle(qtbot, w)
    assert first.args[0] not in built and len(built) == 1  # the first scene was never finished
    assert set(w.scene.nodes) >= {"other_mul", "other_relu"} and "cat1" not in w.scene.nodes
    assert w.scene.spec is w.controller.spec and not w.errors


# -- bad plans: the app reads plans only through `qtquant screenshot --plan` -----------------------------
@pytest.mark.parametrize("content", ['{"format": "qtquant-plan", "version": 1, "groups": '
                                     '[{"members": ["nope_a", "nope_b"]}]}', "{bad", "[]", ""])
def test_bad_plan_in_the_screenshot_command_is_one_line(qtbot, model, tmp_path, capsys, content):
    from qtquant.cli import main

    plan = tmp_path / "bad.plan.json"
    plan.write_text(content)
    out = tmp_path / "o.png"
    assert main(["screenshot", str(model), "--plan", str(plan), "-o", str(out), "--calib-count", "2"]) == 3
    stderr = capsys.readouterr().err
    err = [ln for ln in stderr.splitlines() if ln.startswith("qtquant")]
    assert len(err) == 1 and "bad.plan.json" in err[0] and "Traceback" not in stderr
    assert not out.exists()


def test_big_model_path_calibrates_in_a_child_process(qtbot, make_win, model):
    """Calibration in a child process (what big graphs get) gives the in-thread analysis."""
    ref = make_win()
    ref.open_model(model, calib=CalibConfig(count=4))
    settle(qtbot, ref)
    w = make_win()
    w.controller.child_process_nodes = 0
    w.open_model(model, calib=CalibConfig(count=4))
    settle(qtbot, w)
    assert w.session.calibration.batches == ref.session.calibration.batches
    assert w.session.calibration.ranges == ref.session.calibration.ranges
    assert [(c.node, c.rescales) for c in w.relay.concats()] == [(c.node, c.rescales) for c in ref.relay.concats()]
    assert w.session.fidelity is not None and w.session.fidelity.value.sqnr_db == ref.session.fidelity.value.sqnr_db
    assert not w.errors


def test_garbage_cycles_are_collected_on_the_gui_thread(qtbot, make_win):
    """The automatic collector is off (a worker could destroy a Qt object held by a cycle);
    a GUI-thread timer collects instead."""
    import gc
    import weakref

    from qtquant.gui.collector import install_collector

    make_win()
    col = install_collector()
    assert not gc.isenabled() and col is install_collector()  # one per application
    where = []

    class Cycle:
        def __del__(self):
            where.append(threading.current_thread() is threading.main_thread())

    a = Cycle()
    a.me = a
    ref = weakref.ref(a)
    del a
    junk = [[] for _ in range(gc.get_threshold()[0] * 2)]  # past the first generation's threshold
    qtbot.waitUntil(lambda: ref() is None, timeout=5000)
    assert where == [True] and junk


def test_a_bulk_of_new_objects_is_frozen_not_walked(qtbot, make_win):
    """Tens of thousands of objects born since the last check are a result that lives on:
    the collector freezes them (free) instead of walking them (10-40 ms of held GIL)."""
    import gc

    from qtquant.gui import collector

    make_win()
    col = collector.install_collector()
    col.timer.stop()
    try:
        gc.collect(0)
        before_freezes, before_runs = col.bulk_freezes, list(col.collections)
        frozen = gc.get_freeze_count()
        keep = [[] for _ in range(collector.BULK_OBJECTS + 1000)]
        col.check()
        assert col.bulk_freezes == before_freezes + 1 and col.collections == before_runs
        assert gc.get_freeze_count() >= frozen + len(keep)
        small = [[] for _ in range(gc.get_threshold()[0] * 2)]
        col.check()  # an ordinary amount: collected as usual
        assert col.bulk_freezes == before_freezes + 1 and sum(col.collections) > sum(before_runs)
        assert small
    finally:
        col.timer.start()
