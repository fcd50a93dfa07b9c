"""The inspector dock on its own (a Session built headless, the dock wrapped with ``qtbot.addWidget``):
its histogram comes from the app's histogram use case, its clipping range follows edits made on the
stack, and a tensor the statistics carry no histogram of is asked for once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from builders import RESCALING_MARCH, branchy_concat_model, save  # noqa: E402
from qtquant.app import Options, open_model  # noqa: E402
from qtquant.app.commands import SetPrecisionCommand, ShareCommand  # noqa: E402
from qtquant.app.histograms import clip_range, tensor_histogram  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.docks.inspector import Inspector  # noqa: E402
from qtquant.gui.relay import SessionRelay  # noqa: E402


@pytest.fixture
def session(tmp_path):
    s = open_model(save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx"),
                   options=Options(march=RESCALING_MARCH, calib=CalibConfig(count=3)))
    s.run_calibration()
    return s


@pytest.fixture
def inspector(qtbot, session):
    relay = SessionRelay(session)
    w = Inspector(relay)
    qtbot.addWidget(w)
    w.resize(360, 720)
    w.show()
    return relay, w


def test_histogram_and_clip_follow_the_stack(inspector, session, tmp_path):
    relay, w = inspector
    w.show_node("conv1")
    assert w.hist.tensor == "conv1_out" and w.hist.has_data and w.hist.counts.sum() > 0
    assert w.hist.clip == clip_range(session, "conv1_out")
    w.grab().save(str(tmp_path / "inspector.png"))
    clip = w.hist.clip
    relay.stack.push(ShareCommand(("conv0_out", "conv1_out", "conv2_out", "cat_out")))
    assert w.hist.tensor == "conv1_out" and w.hist.clip[1] > clip[1]  # the group's wider range
    relay.stack.push(SetPrecisionCommand(["conv1_out"], "float"))
    assert w.hist.has_data and w.hist.clip is None  # shipped in float: nothing clips it
    relay.stack.undo()
    relay.stack.undo()
    assert w.hist.clip == clip


def test_a_tensor_without_a_stored_histogram_is_asked_for_once(qtbot, inspector, session):
    relay, w = inspector
    del session.calibration.stats["conv2_out"]  # statistics that keep no histogram of it
    wanted = []

    def compute(t):  # what the window's controller does, in a job
        wanted.append(t)
        tensor_histogram(session, t)
        w.show_tensor(t)

    w.histogramWanted.connect(compute)
    w.show_node("conv2")
    assert wanted == ["conv2_out"] and w.hist.has_data
    assert np.array_equal(w.hist.counts, session.histograms["conv2_out"][0])
    w.show_node("conv2")  # remembered: not computed again
    assert wanted == ["conv2_out"] and w.hist.has_data


def test_a_graph_output_can_be_left_to_the_application(qtbot, inspector, session, tmp_path):
    """A graph output's checkbox: the deployment hands it over as integers, so the board estimate converts
    nothing for it; one undoable option edit, and the box follows undo."""
    from PySide6.QtCore import QPoint, Qt

    from qtquant.perf import simulate_session

    relay, w = inspector
    w.show_node("conv1")
    assert not w.int_output.isVisibleTo(w)  # an op: no such choice
    out = session.graph.outputs[0]
    w.show_node(f"output:{out}")
    box = w.int_output
    assert box.isVisibleTo(w) and not box.isChecked()
    def on_cpu():
        return [io.on_cpu for io in simulate_session(session).board_io if io.tensor == out]

    assert on_cpu() == [True]
    qtbot.mouseClick(box, Qt.LeftButton, pos=QPoint(8, box.height() // 2))
    assert box.isChecked() and session.options.int_outputs == (out,)
    assert on_cpu() == [False]
    assert relay.stack.undo_text == f"Outputs the application dequantises: {out}"
    w.grab().save(str(tmp_path / "inspector_output.png"))
    relay.stack.undo()
    assert session.options.int_outputs == () and not box.isChecked() and on_cpu() == [True]
    # Its node kept in float: the output is float32 from the CPU, nothing to dequantise, so no choice.
    from qtquant.app.commands import SetPrecisionCommand

    relay.stack.push(SetPrecisionCommand([out], "float"))
    assert not box.isEnabled() and "kept in float" in box.toolTip() and on_cpu() == [False]
    relay.stack.undo()
    assert box.isEnabled() and "hb_model_modifier" in box.toolTip() and on_cpu() == [True]


def test_a_node_the_x5_runs_on_the_cpu_says_why(qtbot, tmp_path):
    """The demo's attention Softmax reads a 3-D tensor: the X5 runs it on the CPU (perf/placement.py), and
    the inspector says so once a simulation has priced it; a BPU node says nothing of the kind."""
    from qtquant.app.demo import build_attention_demo
    from qtquant.perf import simulate_session

    s = open_model(save(build_attention_demo(), tmp_path / "a.onnx"),
                   options=Options(march="bayes-e", calib=CalibConfig(count=2)))
    s.run_calibration()
    relay = SessionRelay(s)
    w = Inspector(relay)
    qtbot.addWidget(w)
    w.show()
    w.show_node("attn/softmax")
    assert "Runs on the CPU" not in w.notes.text()  # nothing priced yet
    s.set_perf(simulate_session(s), s.revision)
    w.show_node("attn/softmax")
    assert w.notes.isVisibleTo(w)
    text = w.notes.text()
    assert text.startswith("Runs on the CPU (") and "only on a 4-D input" in text and "3-D over axis 2" in text
    w.show_node("attn/qk")
    assert "Runs on the CPU" not in w.notes.text()
