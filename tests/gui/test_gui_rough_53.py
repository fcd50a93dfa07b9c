"""Issue 53's rough edges in the window, each through the real widgets."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")


from builders import branchy_concat_model, edit_model, save, synthetic_model  # noqa: E402
from guikit import open_settled, settle  # noqa: E402
from qtquant.app.scene.hierarchy import block_name  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402


def test_an_unreadable_photo_is_skipped_and_named_in_the_job_log(qtbot, make_win, tmp_path):
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    (folder / "broken.jpg").write_bytes(b"not an image")
    win = make_win(show_dialogs=False)
    win.open_model(save(branchy_concat_model(), tmp_path / "m.onnx"), calib=CalibConfig(source=str(folder), count=4))
    settle(qtbot, win)
    log = "\n".join(win.job_log.entries)
    assert "skipped unreadable image" in log and "broken.jpg" in log
    assert "up to 4 samples" in log  # the job says what it asked for, not a count it may not have
    assert win.session.calibration.samples == 3  # the three readable photos


def test_collapse_all_on_a_flat_model_says_why(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    win.actions_by_name["collapse_all"].trigger()
    assert "no module hierarchy" in win.statusBar().currentMessage()


def test_auto_share_is_offered_on_a_concat_not_on_a_mul(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    pos = win.view.mapToGlobal(win.view.rect().center())
    win.edits.show_context_menu("br_a", pos)
    assert not any("Auto-share" in a.text() for a in win.edits.context_menu.actions())
    win.edits.show_context_menu("cat1", pos)
    assert any("Auto-share" in a.text() for a in win.edits.context_menu.actions())
    win.edits.context_menu.close()


def test_auto_share_message_counts_in_words(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx", k_e=0.6))
    rep = win.editor.auto_share(0.5)
    assert rep is not None
    msg = win.statusBar().currentMessage()
    assert "1 Concats" not in msg and "1 groups" not in msg


def test_collapse_keeps_the_block_selected_so_shift_e_walks_up(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    B = block_name("/model.5")
    win.scene.clearSelection()
    win.scene.nodes[B].setSelected(True)
    win.actions_by_name["expand"].trigger()
    win.scene.nodes["/model.5/Concat"].setSelected(True)
    win.actions_by_name["collapse"].trigger()
    assert win.scene.selected_names() == [B]
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    assert vis.intersects(win.scene.nodes[B].sceneBoundingRect())


def test_fit_to_view_on_a_tall_graph_is_readable(qtbot, make_win, tmp_path):
    from qtquant.gui.canvas.view import FIT_MIN_ZOOM

    win = make_win()
    open_settled(qtbot, win, save(synthetic_model(400), tmp_path / "tall.onnx"))
    win.actions_by_name["fit"].trigger()
    assert win.view.zoom >= FIT_MIN_ZOOM
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    assert any(vis.intersects(it.sceneBoundingRect()) for it in win.scene.nodes.values())


def _three_heads(path):
    """Three Concats (c1..c3) of two Convs each, each reshaped, all three joined by c4 -> Relu -> y."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from builders import conv_node

    inits, nodes, joined = [], [], []
    shape = numpy_helper.from_array(np.array([1, 8, -1], np.int64), "flat")
    inits.append(shape)
    for k in range(3):
        a = conv_node(inits, "x", 3, 4, 3, f"h{k}a", gain=1.0 + k, seed=2 * k)
        b = conv_node(inits, "x", 3, 4, 3, f"h{k}b", gain=5.0 + 3 * k, seed=2 * k + 1)
        nodes += [a, b, helper.make_node("Concat", [a.output[0], b.output[0]], [f"c{k + 1}_out"], name=f"c{k + 1}",
                                         axis=1),
                  helper.make_node("Reshape", [f"c{k + 1}_out", "flat"], [f"r{k + 1}"], name=f"reshape{k + 1}")]
        joined.append(f"r{k + 1}")
    nodes.append(helper.make_node("Concat", joined, ["c4_out"], name="c4", axis=2))
    nodes.append(helper.make_node("Relu", ["c4_out"], ["y"], name="relu"))
    g = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def test_a_drop_that_links_three_groups_merges_them(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, _three_heads(tmp_path / "heads.onnx"))
    for c in ("c1", "c2", "c3"):
        assert win.editor.share_nodes([c])
    assert len(win.session.groups.as_lists()) == 3
    assert win.editor.drop(["c1"], "c4")
    groups = win.session.groups.as_lists()
    assert len(groups) == 1 and {"c1_out", "c2_out", "c3_out", "c4_out"} <= set(groups[0])
    assert win.stack.undo_text.startswith("Join") and win.stack.undo() is not None
    assert len(win.session.groups.as_lists()) == 3


def test_a_cancelled_calibration_is_not_remembered(qtbot, make_win, tmp_path, monkeypatch):
    import qtquant.gui.window.controller as ctl
    from qtquant.base.errors import Cancelled
    from qtquant.gui.window.opening import _calib_values

    path = edit_model(tmp_path / "edit.onnx")
    win = make_win(show_dialogs=False)
    opener = win.opener
    opener.model_settings.save(path, {"calib": _calib_values(CalibConfig(count=4))})
    real = ctl.calibrate

    def stopped_by_the_user(*a, **k):
        raise Cancelled("calibration cancelled")

    monkeypatch.setattr(ctl, "calibrate", stopped_by_the_user)
    stopped = []
    win.controller.calibrationFinished.connect(stopped.append)
    opener._open_remembering(path, {"calib": _calib_values(CalibConfig(count=7))})
    qtbot.waitUntil(lambda: stopped == [False], timeout=20000)
    assert opener.model_settings.load(path)["calib"]["count"] == 4  # what the last finished one used
    monkeypatch.setattr(ctl, "calibrate", real)
    opener._open_remembering(path, {"calib": _calib_values(CalibConfig(count=7))})
    qtbot.waitUntil(lambda: stopped[-1:] == [True], timeout=20000)
    assert opener.model_settings.load(path)["calib"]["count"] == 7


def test_export_report_and_html_give_the_exported_models_accuracy(qtbot, make_win, tmp_path):
    from builders import detector_model
    from qtquant.gui.window.exporting import ExportOptions, export_files

    win = make_win()
    open_settled(qtbot, win, save(detector_model(), tmp_path / "det.onnx"))
    out = tmp_path / "out"
    rep = export_files(win.session.snapshot(), ExportOptions(out, "det", png=False))
    n = win.session.calibration.check_samples
    assert rep.accuracy.startswith(f"accuracy of the exported model on {n} samples")
    assert all(f"{o} " in rep.accuracy for o in win.session.graph.outputs) and "dB" in rep.accuracy
    lines = rep.text().splitlines()
    assert lines[0].startswith("wrote ") and rep.accuracy in rep.lines
    assert any(ln.startswith("accuracy of") for ln in lines)
    html = (out / "det.perf.html").read_text()
    assert "accuracy: on " in html and f"{n} samples" in html


def test_inspector_names_show_what_tells_them_apart(qtbot, make_win, tmp_path):
    from qtquant.app.views.fmt import distinct_parts

    assert distinct_parts(["/model.1/conv/Conv_output_0", "/model.1/act/Sigmoid_output_0",
                           "/model.1/act/Mul_output_0"]) == ["…Conv…", "…Sigmoid…", "…Mul…"]
    assert distinct_parts(["/m/cv1/conv/Conv_output_0", "/m/cv2/conv/Conv_output_0"]) == [
        "…cv1/conv/Conv…", "…cv2/conv/Conv…"]  # as many trailing parts as tell them apart
    import onnx
    from onnx import TensorProto, helper

    from builders import conv_node

    inits = []
    conv = conv_node(inits, "x", 3, 4, 3, "/model.1/conv/Conv")
    conv.output[0] = "/model.1/conv/Conv_output_0"
    nodes = [conv, helper.make_node("Sigmoid", [conv.output[0]], ["/model.1/act/Sigmoid_output_0"],
                                    name="/model.1/act/Sigmoid"),
             helper.make_node("Mul", [conv.output[0], "/model.1/act/Sigmoid_output_0"], ["/model.1/act/Mul_output_0"],
                              name="/model.1/act/Mul"),
             helper.make_node("Relu", ["/model.1/act/Mul_output_0"], ["y"], name="/model.2/Relu")]
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "silu.onnx")
    win = make_win()
    open_settled(qtbot, win, str(tmp_path / "silu.onnx"))
    win.jump_to("/model.1/act/Mul")
    t = win.inspector.tensors
    qtbot.waitUntil(lambda: t.rowCount() == 3, timeout=5000)
    texts = [t.item(i, 1).text() for i in range(3)]
    assert texts == ["…Conv…", "…Sigmoid…", "…Mul…"]
    assert t.item(2, 1).toolTip() == "/model.1/act/Mul_output_0"
    # an int16 output's scale says so without widening the table past the dock
    from qtquant.app.commands import SetPrecisionCommand

    win.stack.push(SetPrecisionCommand.for_names(win.session, ["/model.1/act/Mul"], "int16"))
    settle(qtbot, win)
    win.jump_to("/model.1/act/Sigmoid")
    win.jump_to("/model.1/act/Mul")
    qtbot.waitUntil(lambda: t.item(2, 4) is not None and t.item(2, 4).text().endswith(" i16"), timeout=5000)
    assert not t.horizontalScrollBar().isVisible()


def test_the_minimap_keeps_off_a_concat_turned_green_by_sharing(qtbot, make_win, tmp_path):
    from qtquant.gui.canvas.view import BADGE_WEIGHT

    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    assert win.editor.share_nodes(["cat1"])
    settle(qtbot, win)
    v, sc = win.view, win.scene
    sc.flush_looks()
    green = sc.nodes["cat1"]
    assert not green.badges  # shared: no rescale badge left
    v.centerOn(green)
    vp = v.viewport().geometry()
    box = v.mapFromScene(green.sceneBoundingRect()).boundingRect().translated(vp.topLeft())
    assert v._hidden_under(box) >= BADGE_WEIGHT


def test_the_canvas_does_not_jump_when_the_overlay_changes(qtbot, make_win, tmp_path):
    from qtquant.base.vocab import Overlay

    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    v = win.view
    top_of_view = v.mapToScene(v.viewport().rect().topLeft())
    margin = v.viewportMargins().top()
    win.set_overlay(Overlay.LATENCY)
    settle(qtbot, win)
    qtbot.waitUntil(lambda: v.legend.mode == Overlay.LATENCY, timeout=5000)
    assert v.viewportMargins().top() == margin and margin >= v.legend.height() + 12
    assert v.mapToScene(v.viewport().rect().topLeft()) == top_of_view
    vp = v.viewport().geometry()
    assert v.legend.geometry().bottom() < vp.top()  # in its strip, over no node


def test_export_and_project_dialogs_start_in_this_models_folder(qtbot, make_win, tmp_path, monkeypatch):
    from qtquant.gui.window.exporting import ExportDialog

    seen = []
    monkeypatch.setattr(ExportDialog, "exec", lambda self: seen.append(self.folder.text()) or ExportDialog.Rejected)
    first = tmp_path / "first"
    first.mkdir()
    win = make_win()
    open_settled(qtbot, win, edit_model(first / "edit.onnx"))
    win.exports.remember_folder(tmp_path / "elsewhere")  # an export of this model went there
    other = tmp_path / "other"
    other.mkdir()
    open_settled(qtbot, win, edit_model(other / "other.onnx"))
    win.actions_by_name["export"].trigger()
    assert seen[-1] == str(other)  # not the first model's last folder
    hidden = tmp_path / ".cache" / "qtquant"
    hidden.mkdir(parents=True)
    open_settled(qtbot, win, edit_model(hidden / "demo.onnx"))
    win.actions_by_name["export"].trigger()
    from pathlib import Path

    assert seen[-1] == str(Path.home())  # not a hidden cache folder
    starts = []
    monkeypatch.setattr("qtquant.gui.window.projects.QFileDialog.getSaveFileName",
                        lambda parent, title, start, filt: starts.append(start) or ("", ""))
    win.projects.save_as()
    assert starts[-1] == str(Path.home() / "demo.qtquant")


def test_expand_all_keeps_the_view_and_says_how_far_the_drawing_is(qtbot, make_win, big_model, monkeypatch):
    import qtquant.gui.canvas.showing as cv

    win = make_win()
    open_settled(qtbot, win, big_model)
    B = block_name("/model.60")
    win.scene.clearSelection()
    win.scene.nodes[B].setSelected(True)
    win.view.centerOn(win.scene.nodes[B])
    zoom = win.view.zoom
    progress = []
    win.canvas.buildProgress.connect(lambda d, n: progress.append((d, n)))
    monkeypatch.setattr(cv, "BUILD_SLICE_MS", 0)  # every chunk its own slice
    monkeypatch.setattr(cv, "ISOLATE_MIN_UNITS", 1)  # laid out in a job and built in slices, as 20,000 nodes are
    with qtbot.waitSignal(win.canvas.built, timeout=60000):
        win.actions_by_name["expand_all"].trigger()
    assert progress and all(0 < d <= n for d, n in progress) and progress[-1][0] > progress[0][0]
    assert win.view.zoom == pytest.approx(zoom)
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    inside = [it for n, it in win.scene.nodes.items() if n.startswith("/model.60/")]
    assert inside and any(vis.intersects(it.sceneBoundingRect()) for it in inside)  # not back at the top
