"""The open dialog's "Cut at" field: typed by the user, it opens the subgraph ending at those
tensors (like ``--cut``); a name the model lacks is the dialog's own error, and nothing opens."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QDialogButtonBox  # noqa: E402

from builders import branchy_concat_model, detector_model, save  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog  # noqa: E402
from qtquant.gui.style import fmt_ratio  # noqa: E402


def _type_cut_and_ok(qtbot, monkeypatch, text, seen=None):
    def run(dlg):
        qtbot.addWidget(dlg)
        dlg.count.setValue(3)
        qtbot.keyClicks(dlg.cut_edit, text)
        qtbot.mouseClick(dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok), Qt.LeftButton)
        if seen is not None:
            seen.append(dlg.error.text())
        return dlg.result()

    monkeypatch.setattr(OpenDialog, "exec", run)


def test_cut_field_opens_the_cut_model(qtbot, make_win, tmp_path, monkeypatch):
    win = make_win()
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    _type_cut_and_ok(qtbot, monkeypatch, "conv0_out, cat_out")
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        assert win.request_open(p, ask=True)
    g = win.session.graph
    assert g.cut == ("conv0_out", "cat_out") and g.outputs == ["conv0_out", "cat_out"]
    assert "final_relu" not in g.nodes and "final_relu" not in win.scene.nodes
    assert "(cut at 2 tensors)" in win.windowTitle()
    # Remembered for this model, like its shapes and calibration.
    assert win.opener.model_settings.load(p)["cut"] == "conv0_out,cat_out"
    dlg = OpenDialog(p, win.opener.model_settings.load(p))
    qtbot.addWidget(dlg)
    assert dlg.cut_edit.text() == "conv0_out,cat_out"


def test_bad_cut_name_is_refused_in_the_dialog(qtbot, make_win, tmp_path, monkeypatch):
    """A cut at no tensor of the model is the dialog's own one-line error (OK does nothing), and
    nothing is opened or remembered for the model."""
    win = make_win()
    win.messages.show_dialogs = True
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    seen = []
    _type_cut_and_ok(qtbot, monkeypatch, "conv0_otu", seen)
    assert not win.request_open(p, ask=True)  # the dialog stayed open; the user cancelled it
    assert seen == ["cannot cut at 'conv0_otu': the model has no tensor of that name (did you mean 'conv0_out'?)"]
    assert not win.messages.errors and win.session is None  # nothing half-opened
    assert win.opener.model_settings.load(p) == {}


def test_inspector_names_the_compilers_rescale_nodes(qtbot, make_win, tmp_path):
    """bayes (widest-input, the window's march here): cat's output takes conv2's scale; the other
    inputs' rows name their requantize nodes as the X5 compiler and perf_model do."""
    win = make_win()
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    from qtquant.calib import CalibConfig

    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.open_model(p, calib=CalibConfig(count=4, observer="percentile"))
    qtbot.waitUntil(lambda: win.scene.spec is not None and not win.controller.busy, timeout=20000)
    item = win.scene.nodes["cat"]
    win.view.centerOn(item)
    qtbot.mouseClick(win.view.viewport(), Qt.LeftButton, Qt.NoModifier, win.view.mapFromScene(item.scenePos()))
    ins = win.inspector
    assert ins.node == "cat" and ins.concat.rowCount() == 4
    tips = [ins.concat.item(r, 1).toolTip() for r in range(4)]
    assert "conv0_out_calibrated_Requantize / cat_rescale_0" in tips[0]
    assert "conv1_out_calibrated_Requantize / cat_rescale_1" in tips[1]
    assert "the output takes this scale" in tips[2]
    assert ins.concat.item(2, 5).text() == "no rescale"


def test_inspector_says_which_inputs_bayes_e_writes_at_the_outputs_scale(qtbot, make_win, tmp_path):
    """bayes-e (the X5 logs' rule): each conv branch, made for cat alone, is written at its scale."""
    win = make_win()
    win.set_march("bayes-e")
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    from qtquant.calib import CalibConfig

    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.open_model(p, calib=CalibConfig(count=4, observer="percentile"))
    qtbot.waitUntil(lambda: win.scene.spec is not None and not win.controller.busy, timeout=20000)
    assert win.session.options.march == "bayes-e"
    win.inspector.show_node("cat")
    ins = win.inspector
    tips = [ins.concat.item(r, 1).toolTip() for r in range(3)]
    assert all("written at the output's scale by its producer" in t for t in tips), tips
    assert [ins.concat.item(r, 5).text() for r in range(3)] == ["no rescale"] * 3


def test_inspector_shows_an_output_the_export_leaves_in_float_as_float(qtbot, make_win, tmp_path):
    """The detector's head Concat (boxes x300 next to class scores) feeds the outputs, and the
    export leaves its output in float: its row in the Concat table says float, as the tensor table
    does, not the scale sharing would give it, and the inputs' ratios are to each other."""
    from guikit import open_settled

    win = make_win()
    open_settled(qtbot, win, save(detector_model(), tmp_path / "det.onnx"))
    info = win.relay.concat("head")
    assert info.export_float and info.rescales == 0
    item = win.scene.nodes["head"]
    win.view.centerOn(item)
    qtbot.mouseClick(win.view.viewport(), Qt.LeftButton, Qt.NoModifier, win.view.mapFromScene(item.scenePos()))
    ins = win.inspector
    assert ins.node == "head" and ins.concat.rowCount() == 3
    cells = [[ins.concat.item(r, c).text() for c in range(ins.concat.columnCount())] for r in range(3)]
    assert cells[2][0] == "out" and cells[2][2] == "float" and cells[2][3] == "—"
    assert "left in float by the export" in ins.concat.item(2, 1).toolTip()
    scales = sorted(m.scale for m in info.inputs)
    assert sorted([cells[0][3], cells[1][3]]) == sorted(["1×", fmt_ratio(scales[1] / scales[0])])
    out_row = next(r for r in range(ins.tensors.rowCount()) if ins.tensors.item(r, 0).text() == "out")
    assert ins.tensors.item(out_row, 4).text() == "float"
