"""The canvas context menu's precision entries (Keep in float / int16 / int8), driven through a real
right-click on the canvas, undone with Ctrl+Z, with the node's precision badge."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QContextMenuEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from builders import edit_model  # noqa: E402
from guikit import open_settled  # noqa: E402


def right_click(win, name):
    """A context-menu event on the node, as a right mouse click sends it."""
    win.view.centerOn(win.scene.nodes[name])
    vp = win.view.viewport()
    pos = win.view.mapFromScene(win.scene.nodes[name].sceneBoundingRect().center())
    QApplication.sendEvent(vp, QContextMenuEvent(QContextMenuEvent.Mouse, pos, vp.mapToGlobal(pos)))
    return {a.text(): a for a in win.edits.context_menu.actions()}


def badges(win, name):
    win.scene.flush_looks()
    return win.scene.nodes[name].badge_texts


def test_keep_in_float_and_int16_from_the_menu_undo_with_ctrl_z(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    acts = right_click(win, "br_b")
    assert {"Keep in float (CPU)", "int16", "int8"} <= set(acts)
    assert acts["int8"].isChecked() and not acts["int16"].isChecked()
    acts["Keep in float (CPU)"].trigger()
    win.edits.context_menu.close()
    assert win.session.precision == {"br_b_out": "float"}
    assert win.stack.undo_text == "Keep br_b in float"
    assert "float·CPU" in badges(win, "br_b")
    # the menu shows the state it changed; int16 on the same node replaces it
    acts = right_click(win, "br_b")
    assert acts["Keep in float (CPU)"].isChecked()
    acts["int16"].trigger()
    win.edits.context_menu.close()
    assert win.session.precision == {"br_b_out": "int16"}
    assert "int16" in badges(win, "br_b") and "float·CPU" not in badges(win, "br_b")
    # Ctrl+Z, typed as a user does, undoes one edit at a time
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.view.setFocus()
    qtbot.keyClick(win.view, Qt.Key_Z, Qt.ControlModifier)
    assert win.session.precision == {"br_b_out": "float"} and "float·CPU" in badges(win, "br_b")
    qtbot.keyClick(win.view, Qt.Key_Z, Qt.ControlModifier)
    assert win.session.precision == {} and not {"float·CPU", "int16"} & set(badges(win, "br_b"))
    # the canvas background has no precision entries
    win.scene.clearSelection()
    win.view.contextRequested.emit("", win.view.viewport().mapToGlobal(QPoint(5, 5)))
    assert "int16" not in {a.text() for a in win.edits.context_menu.actions()}
    win.edits.context_menu.close()


def test_selection_is_set_at_once(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    for n in ("br_a", "br_c"):
        win.scene.nodes[n].setSelected(True)
    win.view.contextRequested.emit("br_a", win.view.viewport().mapToGlobal(QPoint(5, 5)))
    acts = {a.text(): a for a in win.edits.context_menu.actions()}
    acts["int16"].trigger()
    win.edits.context_menu.close()
    assert win.session.precision == {"br_a_out": "int16", "br_c_out": "int16"}
    assert win.stack.undo_text == "2 nodes: int16"
    win.stack.undo()
    assert win.session.precision == {}


def test_whole_scale_domain_from_the_submenu(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    from qtquant.app.commands import ShareCommand

    win.stack.push(ShareCommand(("br_a_out", "br_b_out", "br_c_out", "cat1_out")))
    acts = right_click(win, "br_a")
    sub = next(a.menu() for a in win.edits.context_menu.actions() if a.text().startswith("Whole scale domain"))
    assert sub is not None and "(4 tensors)" in next(a.text() for a in win.edits.context_menu.actions()
                                                     if a.menu() is sub)
    {a.text(): a for a in sub.actions()}["int16"].trigger()
    win.edits.context_menu.close()
    assert win.session.precision == {t: "int16" for t in ("br_a_out", "br_b_out", "br_c_out", "cat1_out")}
    win.stack.undo()
    assert win.session.precision == {}
    assert acts  # the single-node entries were there too


def test_the_inspector_shows_the_scale_the_export_gives(qtbot, make_win, tmp_path):
    """int16 tensors show their int16 scale and clip at the int16 range; a tensor kept in float
    shows no scale and no clip lines (it is not quantized in the file)."""
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    ins = win.inspector

    def out_row():
        win.scene.clearSelection()
        win.scene.nodes["br_b"].setSelected(True)
        rows = [[ins.tensors.item(r, c).text() for c in range(ins.tensors.columnCount())]
                for r in range(ins.tensors.rowCount())]
        return next(r for r in rows if r[0] == "out" and r[1] == "br_b_out")

    int8_scale = win.session.domains.scale_of("br_b_out")
    assert out_row()[4] == f"{int8_scale:.4g}" or float(out_row()[4]) == pytest.approx(int8_scale, rel=1e-3)
    right_click(win, "br_b")["int16"].trigger()
    win.edits.context_menu.close()
    scale, zp = out_row()[4], out_row()[5]
    assert scale.endswith(" i16") and float(scale.split()[0]) < int8_scale / 100 and zp == "0"
    ins.show_tensor("br_b_out")
    qtbot.waitUntil(lambda: ins.hist.tensor == "br_b_out" and ins.hist.clip is not None, timeout=10000)
    assert ins.hist.clip[1] == pytest.approx(32767 * float(scale.split()[0]), rel=1e-3)
    right_click(win, "br_b")["Keep in float (CPU)"].trigger()
    win.edits.context_menu.close()
    assert out_row()[4] == "float" and out_row()[5] == ""
    ins.show_tensor("br_b_out")
    assert ins.hist.clip is None


def test_a_node_the_x5_runs_on_the_cpu_wears_a_cpu_badge(qtbot, make_win, tmp_path):
    """The demo's 3-D attention Softmax runs on the X5's CPU (perf/placement.py): its node wears a "CPU"
    badge once priced, in every overlay; on a march that runs it on the BPU the badge goes."""
    from builders import save
    from qtquant.app.demo import build_attention_demo

    win = make_win()
    win.set_march("bayes-e")
    open_settled(qtbot, win, save(build_attention_demo(), tmp_path / "a.onnx"))
    qtbot.waitUntil(lambda: win.relay.perf() is not None, timeout=20000)
    qtbot.waitUntil(lambda: "CPU" in badges(win, "attn/softmax"), timeout=20000)
    assert "CPU" not in badges(win, "attn/qk") and "float·CPU" not in badges(win, "attn/softmax")
    with qtbot.waitSignal(win.controller.perfFinished, timeout=20000):
        win.perf_summary.march.setCurrentText("nash-e")
    qtbot.waitUntil(lambda: "CPU" not in badges(win, "attn/softmax"), timeout=20000)
    win.stack.set_clean()
