"""Editing in the app (issue 7), driven through real mouse and keyboard events (pytest-qt, offscreen).

The model: ``x * k`` branches into two Concats, so every ratio is known exactly:
cat1 joins x*1, x*3, x*6 (two rescales), cat2 joins x*0.5, x*4 (one rescale); cat2's
branch ends in Shape -> Reshape, whose int64 shape tensor can never be shared.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QEvent, QPoint, QPointF, QSettings, Qt  # noqa: E402
from PySide6.QtGui import QColor, QMouseEvent  # noqa: E402
from PySide6.QtWidgets import QApplication, QMessageBox  # noqa: E402

from builders import RESCALING_MARCH, edit_model  # noqa: E402
from qtquant.base.vocab import DEFAULT_MARCH  # noqa: E402
from guikit import open_settled, settle  # noqa: E402
from qtquant.gui.window.mainwindow import MainWindow  # noqa: E402
from qtquant.app.views.perfdata import simulator  # noqa: E402
from qtquant.gui.style import MISMATCH_BANDS  # noqa: E402

GREEN = QColor(MISMATCH_BANDS[0][2]).name()
ORANGE = QColor(MISMATCH_BANDS[2][2]).name()


def _send(view, kind, pos, buttons, modifiers=Qt.NoModifier):
    vp = view.viewport()
    p = QPointF(pos)
    button = Qt.NoButton if kind == QEvent.MouseMove else Qt.LeftButton
    QApplication.sendEvent(vp, QMouseEvent(kind, p, vp.mapToGlobal(p), button, buttons, modifiers))


def drag(view, a, b, modifiers=Qt.NoModifier, steps=10):
    """Press, move in steps and release on the viewport (QTest's mouseMove carries no buttons)."""
    a, b = QPointF(a), QPointF(b)
    _send(view, QEvent.MouseButtonPress, a, Qt.LeftButton, modifiers)
    for k in range(1, steps + 1):
        _send(view, QEvent.MouseMove, a + (b - a) * k / steps, Qt.LeftButton, modifiers)
    _send(view, QEvent.MouseButtonRelease, b, Qt.NoButton, modifiers)


def at(win, name):
    """Viewport position of a node's centre, scrolled into view first."""
    return win.view.mapFromScene(win.scene.nodes[name].pos())


def rubber_band(win, names):
    """Shift+drag a selection rectangle around ``names`` from empty space above-left."""
    sc = win.scene

    def box(it):  # what the user sees: the box (the bounding rect also covers the badge band)
        return it.mapToScene(it.shape().boundingRect()).boundingRect()

    r = box(sc.nodes[names[0]])
    for n in names[1:]:
        r = r.united(box(sc.nodes[n]))
    win.view.centerOn(r.center())
    drag(win.view, win.view.mapFromScene(r.left() - 10, r.top() - 12),
         win.view.mapFromScene(r.right() + 8, r.bottom() + 8), Qt.ShiftModifier)


def drag_node(win, src, dst):
    """Press on ``src``, drag onto ``dst`` (both kept on screen), release."""
    sc = win.scene
    r = sc.nodes[src].sceneBoundingRect().united(sc.nodes[dst].sceneBoundingRect())
    win.view.centerOn(r.center())
    drag(win.view, at(win, src), at(win, dst))


def press_keys(qtbot, win, key, modifiers):
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.view.setFocus()
    qtbot.keyClick(win.view, key, modifiers)


def confirm_share(qtbot, win, key=Qt.Key_Return):
    """The share confirmation is up; one key answers it.  Returns the dialog."""
    qtbot.waitUntil(lambda: win.edits.confirm is not None and win.edits.confirm.isVisible(), timeout=5000)
    d = win.edits.confirm
    qtbot.keyClick(d.focusWidget() or d, key)
    qtbot.waitUntil(lambda: not d.isVisible(), timeout=5000)
    return d


def concat(win, name):
    return win.relay.concat(name)


def perf_settled(qtbot, win):
    if simulator() is not None:
        qtbot.waitUntil(lambda: win.relay.perf() is not None and win.session.perf.revision == win.session.revision
                        and not win.controller.busy, timeout=20000)


def statistics_written(qtbot, win):
    qtbot.waitUntil(lambda: not win.jobs.active("statistics"), timeout=20000)


def state(win):
    """What the user sees for cat1/cat2 and in the summary."""
    sc = win.scene
    ps = win.perf_summary.values
    return {"fills": {n: sc.nodes[n].fill.name() for n in ("cat1", "cat2")},
            "badges": {n: sc.nodes[n].badge_texts for n in ("cat1", "cat2")},
            "latency": ps["latency"].text(), "rescales": ps["rescales"].text(),
            "groups": [tuple(g.members) for g in win.session.groups],
            "hulls": sorted(sc.hulls.hulls), "rows": win.groups_panel.tree.topLevelItemCount()}


# -- grouping by mouse and keyboard ------------------------------------------------------------------


def test_rubber_band_ctrl_g_shares_and_concat_turns_green(qtbot, win, model):
    open_settled(qtbot, win, model)
    perf_settled(qtbot, win)
    assert win.scene.nodes["cat1"].fill.name() == ORANGE
    assert win.scene.nodes["cat1"].badge_texts == ["+2 rescale"]
    assert win.perf_summary.values["rescales"].text() == "3 in 2 Concats"
    rubber_band(win, ["br_a", "br_b", "br_c", "cat1"])
    assert sorted(win.scene.selected_names()) == ["br_a", "br_b", "br_c", "cat1"]
    assert win.actions_by_name["share"].isEnabled()
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    confirm_share(qtbot, win)
    groups = list(win.session.groups)
    assert [g.members for g in groups] == [("br_a_out", "br_b_out", "br_c_out", "cat1_out")]
    # the Concat turns green, its badge disappears, its input edges are no longer highlighted
    assert win.scene.nodes["cat1"].fill.name() == GREEN
    assert win.scene.nodes["cat1"].badge_texts == []
    assert concat(win, "cat1").rescales == 0
    edges = {(e.tensor, e.dst): e for e in win.scene.edges}
    assert edges[("br_a_out", "cat1")].pen().widthF() < 2
    # a hull behind the four members, in the group's colour; the Groups dock lists it
    hull = win.scene.hulls.hulls[groups[0].id]
    assert set(hull.nodes) == {"br_a", "br_b", "br_c", "cat1"} and hull.zValue() < 1
    for n in hull.nodes:
        assert hull.shape().contains(win.scene.nodes[n].pos())
    assert not hull.shape().contains(win.scene.nodes["cat2"].pos())
    assert win.groups_panel.tree.topLevelItemCount() == 1
    row = win.groups_panel.rows[0]
    assert row.worst_bits == pytest.approx(np.log2(6.0), abs=0.01)  # x*1 next to x*6
    assert row.scale == pytest.approx(win.session.domains.scale_of("cat1_out"))
    assert "Shared 4 tensors" in win.statusBar().currentMessage()
    # the summary refreshes in the background and shows the change against the unedited model
    perf_settled(qtbot, win)
    assert win.perf_summary.values["rescales"].text().startswith("1 in 1 Concats")
    assert "was 3" in win.perf_summary.values["rescales"].text()
    row = win.groups_panel.rows[0]  # rebuilt with the new perf result
    if simulator() is not None:
        assert win.relay.perf().rescale_count == 1 and win.relay.perf(baseline=True).rescale_count == 3
        assert row.saved_us == pytest.approx(win.relay.perf(baseline=True).rescale_cost_by_concat()["cat1"])
        assert row.saved_us > 0
    qtbot.waitUntil(lambda: win.session.fidelity is not None
                    and win.session.fidelity.revision == win.session.revision, timeout=20000)
    assert "y1:" in win.perf_summary.values["sqnr"].text()
    fid = win.session.fidelity.value
    kind = "in-sample" if fid.in_sample else "held-out"
    # the sample count has a row of its own: the SQNR line is elided at the dock's width
    assert win.perf_summary.values["sqnr_basis"].text().startswith(f"{fid.samples} {kind} sample")


def test_share_on_a_selection_proposes_only_what_feeds_the_concat(qtbot, win, model):
    """Issue 20: the rectangle over cat1's branches also caught br_d (which feeds cat2); it
    used to join the group and lose bits without a word.  Now the dialog shows the members and
    the bits each would lose, leaves br_d out, and Enter confirms."""
    open_settled(qtbot, win, model)
    for n in ("br_a", "br_b", "br_c", "cat1", "br_d"):
        win.scene.nodes[n].setSelected(True)
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    qtbot.waitUntil(lambda: win.edits.confirm is not None and win.edits.confirm.isVisible(), timeout=5000)
    d = win.edits.confirm
    rows = [(d.table.item(r, 0).text(), d.table.item(r, 2).text()) for r in range(d.table.rowCount())]
    assert rows == [("br_a_out", f"{np.log2(6.0):.2f}"), ("br_b_out", f"{np.log2(2.0):.2f}"),
                    ("br_c_out", "0.00"), ("cat1_out", "0.00")]
    assert "br_d_out" in d.notes.text() and "does not feed cat1" in d.notes.text()
    assert "worst member loses 2.58 bits" in d.headline.text()
    assert win.session.groups.as_lists() == []  # nothing yet: the user has not answered
    qtbot.keyClick(d.focusWidget() or d, Qt.Key_Escape)  # Escape: nothing changes
    assert win.session.groups.as_lists() == [] and win.stack.count == 0
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    confirm_share(qtbot, win)  # one key confirms
    assert win.session.groups.as_lists() == [("br_a_out", "br_b_out", "br_c_out", "cat1_out")]
    assert win.stack.count == 1 and "left out 1" in win.statusBar().currentMessage()
    # Ctrl+G on a lone Concat needs no confirmation (it does exactly what it says)
    win.scene.clearSelection()
    win.scene.nodes["cat2"].setSelected(True)
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    assert ("br_d_out", "br_e_out", "cat2_out") in win.session.groups.as_lists()
    assert not win.edits.confirm.isVisible()


def test_drag_selection_onto_concat_joins_its_group(qtbot, win, model):
    open_settled(qtbot, win, model)
    rubber_band(win, ["br_d", "br_e"])
    assert sorted(win.scene.selected_names()) == ["br_d", "br_e"]
    drag_node(win, "br_d", "cat2")  # the pressed node is selected: the whole selection is dragged
    assert [g.members for g in win.session.groups] == [("br_d_out", "br_e_out", "cat2_out")]
    assert win.scene.nodes["cat2"].fill.name() == GREEN and win.scene.nodes["cat2"].badge_texts == []
    assert sorted(win.scene.selected_names()) == ["br_d", "br_e"]  # a drag keeps the selection
    # a single node onto a Concat joins it too (its inputs and output come along)
    win.scene.clearSelection()
    drag_node(win, "br_c", "cat1")
    g1 = win.session.groups.group_of("cat1_out")
    assert set(g1.members) == {"br_a_out", "br_b_out", "br_c_out", "cat1_out"}
    assert win.scene.nodes["cat1"].fill.name() == GREEN
    assert len(win.scene.hulls.hulls) == 2
    colours = {h.color.name() for h in win.scene.hulls.hulls.values()}
    assert len(colours) == 2  # one colour per group
    assert win.stack.count == 2


def test_drag_node_onto_node_shares_their_outputs(qtbot, win, model):
    open_settled(qtbot, win, model)
    drag_node(win, "br_b", "br_c")  # x*3 with x*6: only x*1 still needs a rescale at cat1
    assert [g.members for g in win.session.groups] == [("br_b_out", "br_c_out")]
    assert concat(win, "cat1").rescales == 1
    assert win.scene.nodes["cat1"].badge_texts == ["+1 rescale"]
    # a click without moving is a selection, not a drop
    win.scene.clearSelection()
    qtbot.mouseClick(win.view.viewport(), Qt.LeftButton, Qt.NoModifier, at(win, "br_a"))
    assert win.scene.selected_names() == ["br_a"] and win.stack.count == 1
    # releasing over empty space changes nothing
    drag(win.view, at(win, "br_a"), at(win, "br_a") + QPoint(0, 60))
    assert win.stack.count == 1 and not win.view.drag.pending


def test_refused_share_changes_nothing_and_says_why(qtbot, win, model):
    open_settled(qtbot, win, model)
    win.canvas.set_hide_shapes(False)  # the Shape node is hidden by default
    before = state(win)
    rev = win.session.revision
    drag_node(win, "relu2", "shape")  # Relu's output with Shape's int64 output
    assert "not quantized" in win.statusBar().currentMessage()
    assert "r2_shape" in win.statusBar().currentMessage()
    assert win.session.revision == rev and len(win.session.groups) == 0
    assert win.stack.count == 0 and not win.actions_by_name["undo"].isEnabled()
    assert state(win) == before
    # Ctrl+G on a lone non-Concat node: nothing to tie it to
    win.scene.clearSelection()
    win.scene.nodes["br_a"].setSelected(True)
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    assert "at least two tensors feeding one" in win.statusBar().currentMessage()
    assert win.stack.count == 0 and state(win) == before
    assert not win.errors  # a refusal is a status message, not an error dialog


# -- undo / redo ------------------------------------------------------------------------------------


def test_undo_redo_restore_colours_and_numbers(qtbot, win, model):
    open_settled(qtbot, win, model)
    perf_settled(qtbot, win)
    before = state(win)
    drag_node(win, "br_c", "cat1")
    perf_settled(qtbot, win)
    after = state(win)
    assert after["fills"]["cat1"] == GREEN and after["latency"] != before["latency"]
    press_keys(qtbot, win, Qt.Key_Z, Qt.ControlModifier)
    assert win.scene.nodes["cat1"].fill.name() == ORANGE  # at once, before the background refresh
    perf_settled(qtbot, win)
    assert state(win) == before
    press_keys(qtbot, win, Qt.Key_Z, Qt.ControlModifier | Qt.ShiftModifier)
    perf_settled(qtbot, win)
    assert state(win) == after
    # the history lists the edits; policy and march changes are undoable too
    win.option_widgets.policy.setCurrentIndex(win.option_widgets.policy.findData("max-input"))
    assert win.session.options.policy.value == "max-input"
    win.option_widgets.march.setCurrentText("nash-e")
    assert win.session.options.march == "nash-e"
    assert [win.stack.texts()[i] for i in range(win.stack.count)] == \
        ["Join cat1", "Policy: max-input", "March: nash-e"]
    assert win.undo_view.model().rowCount() == 4  # plus the "<unedited model>" row
    win.stack.undo()
    assert win.session.options.march == RESCALING_MARCH and win.option_widgets.march.currentText() == RESCALING_MARCH
    win.stack.undo()
    assert win.session.options.policy.value == "union" and win.option_widgets.policy.currentData() == "union"
    perf_settled(qtbot, win)
    assert state(win) == after


def test_ungroup_and_remove_member(qtbot, win, model):
    open_settled(qtbot, win, model)
    drag_node(win, "br_c", "cat1")
    gid = win.session.groups.group_of("cat1_out").id
    # selecting the group in the dock highlights its hull; Ctrl+Shift+G dissolves it
    win.groups_panel.select_group(gid)
    assert win.scene.hulls.highlighted == gid and win.scene.hulls.hulls[gid].emphasis == 1
    press_keys(qtbot, win, Qt.Key_G, Qt.ControlModifier | Qt.ShiftModifier)
    assert len(win.session.groups) == 0 and not win.scene.hulls.hulls
    assert win.scene.nodes["cat1"].fill.name() == ORANGE
    win.stack.undo()
    assert len(win.session.groups) == 1 and gid in win.scene.hulls.hulls
    # remove one member from the canvas context menu of its producer
    win.view.centerOn(win.scene.nodes["br_a"])
    win.view.contextRequested.emit("br_a", win.view.viewport().mapToGlobal(at(win, "br_a")))
    acts = {a.text(): a for a in win.edits.context_menu.actions()}
    acts[f"Remove br_a_out from group {gid}"].trigger()
    win.edits.context_menu.close()
    assert set(win.session.groups.get(gid).members) == {"br_b_out", "br_c_out", "cat1_out"}
    assert concat(win, "cat1").rescales == 1
    # and from the Groups dock (member row, context-menu signal)
    win.groups_panel.removeMemberRequested.emit(gid, "br_b_out")
    assert set(win.session.groups.get(gid).members) == {"br_c_out", "cat1_out"}
    # the undone Ungroup was dropped from the stack by the new edits
    assert [win.stack.texts()[i] for i in range(win.stack.count)] == \
        ["Join cat1", f"Remove br_a_out from group {gid}", f"Remove br_b_out from group {gid}"]


# -- auto-share ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("demo", ["attention", "yolo_neck"])
def test_auto_share_on_the_demos_removes_the_expected_rescales(qtbot, win, tmp_path, demo):
    from qtquant.app.demo import build_attention_demo, build_yolo_neck_demo

    p = tmp_path / f"{demo}.onnx"
    onnx.save(build_attention_demo() if demo == "attention" else build_yolo_neck_demo(), str(p))
    if demo == "attention":
        win.set_march(DEFAULT_MARCH)  # what `qtquant` opens it on: its upsampled windows rescale there too
    open_settled(qtbot, win, p)
    cats = {c.node: c.rescales for c in win.relay.concats()}
    if demo == "attention":
        # k and v join 3x3/7x7/9x9 windows: sharing costs 2.2-2.6 bits, over the default 1
        assert win.session.options.march == DEFAULT_MARCH
        assert cats == {"attn/k_cat": 2, "attn/v_cat": 2}
        win.option_widgets.bits.setValue(1.0)
        win.actions_by_name["autoshare"].trigger()
        rep = win.last_autoshare
        assert rep.grouped == [] and sorted(c for c, _ in rep.skipped) == ["attn/k_cat", "attn/v_cat"]
        assert all("bits > 1" in why for _, why in rep.skipped)
        assert win.stack.count == 0  # nothing grouped, nothing to undo
        assert "0 Concats shared" in win.statusBar().currentMessage()
        win.option_widgets.bits.setValue(3.0)
        win.actions_by_name["autoshare"].trigger()
        assert sorted(win.last_autoshare.grouped) == ["attn/k_cat", "attn/v_cat"]
        expect = {"attn/k_cat": 0, "attn/v_cat": 0}
    else:
        # the head Concat joins pixel boxes with [0, 1] scores: flagged, keeps its rescale
        win.actions_by_name["autoshare"].trigger()
        rep = win.last_autoshare
        assert [c for c, _ in rep.skipped] == ["model.14/head_cat"]
        expect = {n: (cats[n] if n == "model.14/head_cat" else 0) for n in cats}
    got = {c.node: c.rescales for c in win.relay.concats()}
    assert got == expect
    for n, r in got.items():
        item = win.scene.nodes[n]
        assert (item.badge_texts == []) == (r == 0)
        if r == 0:
            assert item.fill.name() == GREEN
    assert len(win.scene.hulls.hulls) == len(win.session.groups) > 0
    # the threshold is an option like any other: its change is an undo step of its own
    assert win.stack.texts() == (["Auto-share threshold: 3 bits", "Auto-share (≤ 3 bits)"] if demo == "attention"
                                 else ["Auto-share (≤ 1 bits)"])
    assert win.messages.report_dialogs and "auto-share" in win.messages.report_dialogs[-1].text.toPlainText()
    win.stack.undo()
    assert {c.node: c.rescales for c in win.relay.concats()} == cats


# -- export ---------------------------------------------------------------------------------------------


def test_export_writes_files_onnx_checker_accepts(qtbot, win, model, tmp_path, monkeypatch):
    import onnxruntime as ort
    from PIL import Image

    from qtquant.gui.window.exporting import ExportDialog

    open_settled(qtbot, win, model)
    drag_node(win, "br_c", "cat1")
    out = tmp_path / "out"
    out.mkdir()
    win.exports.remember_folder(str(out))
    monkeypatch.setattr(ExportDialog, "exec", lambda self: ExportDialog.Accepted)
    assert win.actions_by_name["export"].isEnabled()
    win.actions_by_name["export"].trigger()
    qtbot.waitUntil(lambda: win.exports.last_export is not None, timeout=30000)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["edit_fixed.onnx", "edit_fixed.overrides.json", "edit_fixed.perf.csv", "edit_fixed.perf.html",
                     "edit_fixed.plan.json", "edit_fixed.png"]
    onnx.checker.check_model(str(out / "edit_fixed.onnx"), full_check=True)
    sess = ort.InferenceSession(str(out / "edit_fixed.onnx"), providers=["CPUExecutionProvider"])
    res = sess.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    assert res[0].shape == (1, 9, 8, 8)
    plan = json.loads((out / "edit_fixed.plan.json").read_text())
    assert [sorted(m["tensor"] for m in g["members"]) for g in plan["groups"]] == \
        [["br_a_out", "br_b_out", "br_c_out", "cat1_out"]]
    ov = json.loads((out / "edit_fixed.overrides.json").read_text())
    assert len({ov[t][0]["scale"] for t in ("br_a_out", "br_b_out", "br_c_out", "cat1_out")}) == 1
    html = (out / "edit_fixed.perf.html").read_text()
    assert "as opened" in html and "edit.onnx" in html
    assert (out / "edit_fixed.perf.csv").read_text().startswith("name,op_type,")
    im = Image.open(out / "edit_fixed.png")
    assert im.size[0] > 300 and im.size[1] > 300
    # the same bytes as the CLI's writers, from the same functions
    from qtquant.files.plan import plan_dict

    assert plan == json.loads(json.dumps(plan_dict(win.session)))
    # an unwritable destination (a file where the folder should be; a folder that does not exist
    # yet is made) becomes an error dialog with a one-line message
    (tmp_path / "a_file").write_text("x")
    win.exports.remember_folder(str(tmp_path / "a_file"))
    n = len(win.errors)
    win.actions_by_name["export"].trigger()
    qtbot.waitUntil(lambda: len(win.errors) > n, timeout=20000)
    assert "is a file" in win.errors[-1][1] and "\n" not in win.errors[-1][1]
    assert win.messages.error_dialogs


# -- projects -------------------------------------------------------------------------------------------


def test_project_round_trips_with_cached_statistics(qtbot, make_win, prompts, model, tmp_path):
    from PySide6.QtCore import QMimeData, QUrl
    from PySide6.QtGui import QDropEvent

    w1 = make_win()
    open_settled(qtbot, w1, model)
    drag_node(w1, "br_c", "cat1")
    w1.option_widgets.policy.setCurrentIndex(w1.option_widgets.policy.findData("max-input"))
    w1.option_widgets.bits.setValue(2.5)
    w1.concat_list.float_output.setValue(3.0)
    assert w1.isWindowModified()
    proj = tmp_path / "work.qtquant"
    assert w1.projects.save_to(proj)
    assert proj.is_file()
    statistics_written(qtbot, w1)  # in the background, not on the GUI thread
    assert (tmp_path / "work.stats").is_dir()
    assert not w1.isWindowModified() and w1.stack.clean
    assert w1.windowTitle().startswith("work.qtquant")
    groups = [g.members for g in w1.session.groups]
    # a second window opens it by drag and drop: groups, options, statistics (no calibration)
    w2 = make_win()
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(proj))])
    with qtbot.waitSignal(w2.controller.modelLoaded, timeout=20000):
        w2.dropEvent(QDropEvent(QPointF(10, 10), Qt.CopyAction, md, Qt.LeftButton, Qt.NoModifier))
    settle(qtbot, w2)
    s2 = w2.session
    assert [g.members for g in s2.groups] == groups
    assert s2.options.policy.value == "max-input" and w2.option_widgets.policy.currentData() == "max-input"
    assert s2.options.auto_share_max_bits_lost == 2.5 and w2.option_widgets.bits.value() == 2.5
    assert s2.options.float_output_max_bits_lost == 3.0 and w2.concat_list.float_output.value() == 3.0
    assert w2.projects.last_report.stats_from_cache
    assert not any(j.kind == "calibrate" for j in w2.jobs.history)
    assert s2.calibration.ranges == w1.session.calibration.ranges
    assert w2.scene.nodes["cat1"].fill.name() == GREEN and len(w2.scene.hulls.hulls) == 1
    assert w2.projects.path == proj and not w2.isWindowModified() and w2.stack.count == 0
    # the model changes: the window warns and offers to re-map the groups by tensor name
    edit_model(model, k_e=5.0)
    prompts["answers"] = [QMessageBox.Yes]
    with qtbot.waitSignal(w2.controller.modelLoaded, timeout=20000):
        w2.open_project(proj)
    settle(qtbot, w2)
    assert prompts["asked"][-1][0] == "The model changed"
    assert [g.members for g in w2.session.groups] == groups
    assert w2.projects.modified  # re-mapped: the project file no longer matches the model
    assert w2.stack.texts() == [f"Re-map {len(groups)} project group(s) onto the changed model"]
    w2.stack.undo()  # the re-map is an edit like any other
    assert len(w2.session.groups) == 0
    w2.stack.redo()
    assert [g.members for g in w2.session.groups] == groups
    prompts["answers"] = [QMessageBox.Discard, QMessageBox.No]  # discard the re-map, drop the groups
    with qtbot.waitSignal(w2.controller.modelLoaded, timeout=20000):
        w2.open_project(proj)
    settle(qtbot, w2)
    assert len(w2.session.groups) == 0 and not w2.scene.hulls.hulls


def test_closing_with_unsaved_changes_prompts(qtbot, win, prompts, model, tmp_path):
    open_settled(qtbot, win, model)
    assert win.close() is False or not win.isVisible()  # unedited: closes without asking
    assert prompts["asked"] == []
    win.show()
    drag_node(win, "br_c", "cat1")
    prompts["answers"] = [QMessageBox.Cancel]
    assert win.close() is False and win.isVisible()
    assert prompts["asked"][-1][0] == "Unsaved changes"
    # Save without a project file asks where to put it
    from PySide6.QtWidgets import QFileDialog

    target = tmp_path / "saved.qtquant"
    prompts["answers"] = [QMessageBox.Save]
    import unittest.mock as mock

    with mock.patch.object(QFileDialog, "getSaveFileName", return_value=(str(target), "")):
        assert win.close() is True
    assert target.is_file() and json.loads(target.read_text())["groups"]
    # undoing back to the saved state is clean again; Discard closes without writing
    win.show()
    win.stack.undo()
    assert win.isWindowModified()
    prompts["answers"] = [QMessageBox.Discard]
    mtime = target.stat().st_mtime_ns
    assert win.close() is True and target.stat().st_mtime_ns == mtime


# -- more of the same surfaces: overlays, Escape, dock menu, hull geometry, entry point ---------------


def test_latency_overlay_follows_edits(qtbot, win, model):
    from qtquant.app.views.perfdata import node_us
    from qtquant.gui.style import fmt_us

    open_settled(qtbot, win, model)
    perf_settled(qtbot, win)
    win.set_overlay("latency")
    win.scene.flush_looks()  # a loaded machine can leave the looks to the next event-loop turn
    us = node_us(win.relay.perf())["cat1"]  # a mismatched channel Concat: a copy plus two rescales
    texts = win.scene.nodes["cat1"].badge_texts
    assert us > 0 and any(t.startswith(fmt_us(us) + " ") for t in texts), texts
    drag_node(win, "br_c", "cat1")
    perf_settled(qtbot, win)
    assert node_us(win.relay.perf())["cat1"] == 0  # done in place now
    assert not any("µs" in t for t in win.scene.nodes["cat1"].badge_texts)
    win.stack.undo()
    perf_settled(qtbot, win)
    assert any(t.startswith(fmt_us(us) + " ") for t in win.scene.nodes["cat1"].badge_texts)


def test_escape_cancels_a_drag_and_the_dock_menu_ungroups(qtbot, win, model):
    open_settled(qtbot, win, model)
    view = win.view
    r = win.scene.nodes["br_c"].sceneBoundingRect().united(win.scene.nodes["cat1"].sceneBoundingRect())
    view.centerOn(r.center())
    a, b = QPointF(at(win, "br_c")), QPointF(at(win, "cat1"))
    _send(view, QEvent.MouseButtonPress, a, Qt.LeftButton)
    for k in range(1, 6):
        _send(view, QEvent.MouseMove, a + (b - a) * k / 5, Qt.LeftButton)
    assert view.drag.started and view.drag.target == "cat1"
    assert any(it.zValue() == 3 for it in win.scene.items())  # the dashed link follows the cursor
    qtbot.keyClick(view, Qt.Key_Escape)
    _send(view, QEvent.MouseButtonRelease, b, Qt.NoButton)
    assert len(win.session.groups) == 0 and win.stack.count == 0
    assert not any(it.zValue() == 3 for it in win.scene.items())
    # the Groups dock's context menu: Ungroup on a group row
    drag_node(win, "br_c", "cat1")
    tree = win.groups_panel.tree
    item = tree.topLevelItem(0)
    win.groups_panel._menu(tree.visualItemRect(item).center())
    acts = {a.text(): a for a in win.groups_panel.menu.actions()}
    win.groups_panel.menu.close()
    next(a for t, a in acts.items() if t.startswith("Ungroup")).trigger()
    assert len(win.session.groups) == 0 and tree.topLevelItemCount() == 0


def test_hull_shape_is_one_region_around_its_members():
    from PySide6.QtCore import QRectF

    from qtquant.gui.canvas.hulls import hull_shape

    # side by side in one layer: one box, no seam; far apart: bridged into one region
    near = {"a": QRectF(0, 0, 172, 42), "b": QRectF(200, 0, 172, 42)}
    far = {"a": QRectF(0, 0, 172, 42), "b": QRectF(600, 400, 172, 42)}
    linked = {"a": QRectF(0, 0, 172, 42), "c": QRectF(100, 300, 172, 42)}
    for rects, links in ((near, []), (far, []), (linked, [("a", "c", [(86, 42), (120, 170), (186, 300)])])):
        path = hull_shape(rects, links)
        assert len(path.toFillPolygons()) == 1  # a single connected outline
        for r in rects.values():
            assert path.contains(r)
    assert not hull_shape(far, []).contains(QPointF(600, 0))  # empty corners stay empty


def test_broken_project_is_a_one_line_error_and_the_entry_point_opens_projects(qtbot, win, model, tmp_path,
                                                                                monkeypatch):
    import sys

    import qtquant.gui.window.app as appmod
    from qtquant.cli import main

    bad = tmp_path / "bad.qtquant"
    bad.write_text("{not json")
    win.open_project(bad)
    qtbot.waitUntil(lambda: bool(win.errors), timeout=20000)
    assert "bad.qtquant" in win.errors[-1][1] and "\n" not in win.errors[-1][1]
    assert win.session is None  # nothing half-open
    open_settled(qtbot, win, model)
    assert win.projects.path is None and win.windowTitle().startswith("edit.onnx")  # not the failed project
    # a good project through `qtquant PROJECT.qtquant`
    open_settled(qtbot, win, model)
    drag_node(win, "br_c", "cat1")
    proj = tmp_path / "p.qtquant"
    assert win.projects.save_to(proj)
    statistics_written(qtbot, win)
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp_path / "config"))
    QSettings.setPath(QSettings.NativeFormat, QSettings.UserScope, str(tmp_path / "config"))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    real = QApplication.instance()
    seen = []

    class App:  # stands in for the event loop
        def exec(self):
            w = [x for x in real.topLevelWidgets() if isinstance(x, MainWindow) and x.isVisible() and x is not win][-1]
            qtbot.waitUntil(lambda: w.relay.ready and w.scene.spec is not None and not w.controller.busy,
                            timeout=30000)
            seen.append(([g.members for g in w.session.groups], w.projects.path))
            w.close()
            return 0

    monkeypatch.setattr(appmod, "make_app", lambda argv=None: App())
    interval = sys.getswitchinterval()
    try:
        assert main([str(proj)]) == 0
    finally:
        sys.setswitchinterval(interval)
    assert seen == [([("br_a_out", "br_b_out", "br_c_out", "cat1_out")], proj)]


def test_drag_near_the_view_edge_scrolls_the_canvas(qtbot, win, model):
    open_settled(qtbot, win, model)
    win.view.set_zoom(2.0)  # the graph no longer fits: there is room to scroll
    win.view.centerOn(win.scene.nodes["br_a"])
    view = win.view
    a = QPointF(at(win, "br_a"))
    edge = QPointF(a.x(), view.viewport().height() - 5)
    _send(view, QEvent.MouseButtonPress, a, Qt.LeftButton)
    for k in range(1, 6):
        _send(view, QEvent.MouseMove, a + (edge - a) * k / 5, Qt.LeftButton)
    v0 = view.verticalScrollBar().value()
    qtbot.waitUntil(lambda: view.verticalScrollBar().value() > v0 + 40, timeout=5000)
    _send(view, QEvent.MouseButtonRelease, edge, Qt.NoButton)
    assert not view.drag._scroll.isActive() and not view.drag.pending
