"""The accuracy debugger in the app: the Sensitivity dock (Measure, sortable table, row -> node),
the Error overlay with its local toggle and legend, the inspector's two SQNR figures, and
auto-share by accuracy as one undoable step with its trade-off plot."""

import pytest
from PySide6.QtCore import Qt

from builders import detector_model, save, spiky_chain_model
from guikit import open_settled
from qtquant.app.views.accuracy import error_range
from qtquant.gui.style import heat_color


@pytest.fixture
def spiky(tmp_path):
    return save(spiky_chain_model(spike=4000.0), tmp_path / "spiky.onnx")


def _click_cell(qtbot, table, row, col):
    table.scrollToItem(table.item(row, col))
    rect = table.visualItemRect(table.item(row, col))
    assert table.viewport().rect().contains(rect.center())
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=rect.center())


def _measured(qtbot, win):
    dock = win.sensitivity
    qtbot.mouseClick(dock.measure, Qt.LeftButton)
    qtbot.waitUntil(lambda: win.relay.accuracy() is not None, timeout=180000)
    return dock


def test_dock_ranks_sorts_and_jumps(qtbot, make_win, spiky):
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, spiky)
    dock = win.sensitivity
    assert dock.table.rowCount() == 0 and "No accuracy check yet" in dock.status.text()
    dock.top_n.setValue(2)
    _measured(qtbot, win)
    rep = win.relay.accuracy()
    assert dock.table.rowCount() == len(rep.sensitivity) > 2
    # sorted by gain, highest first: the node whose scale crushes the signal
    assert dock.node_at(0) == "add_spike" and dock.table.item(0, 3).text() == "measured"
    assert "samples in-sample" in dock.status.text() and "4 candidates measured" in dock.status.text()
    # clicking a row selects and centres its node on the canvas
    _click_cell(qtbot, dock.table, 0, 0)
    assert win.scene.nodes["add_spike"].isSelected()
    # a header click sorts by that column (node names ascending)
    qtbot.mouseClick(dock.table.horizontalHeader().viewport(), Qt.LeftButton, pos=_header_point(dock.table, 0))
    names = [dock.node_at(i) for i in range(dock.table.rowCount())]
    assert names in (sorted(names), sorted(names, reverse=True)) and names[0] != names[-1]
    _click_cell(qtbot, dock.table, names.index("sub_spike"), 0)
    assert win.scene.nodes["sub_spike"].isSelected() and not win.scene.nodes["add_spike"].isSelected()


def _header_point(table, col):
    from PySide6.QtCore import QPoint

    h = table.horizontalHeader()
    return QPoint(h.sectionViewportPosition(col) + h.sectionSize(col) // 2, h.height() // 2)


def test_error_overlay_toggle_legend_and_inspector(qtbot, make_win, spiky):
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, spiky)
    combo = win.option_widgets.overlay
    combo.setCurrentIndex(combo.findData("error"))
    win.scene.flush_looks()
    assert win.canvas.overlay == "error" and "no accuracy check yet" in win.view.legend.title
    _measured(qtbot, win)
    win.scene.flush_looks()
    rep = win.relay.accuracy()
    figs = rep.node_figures()
    lo, hi = error_range(t.sqnr_db for t in figs.values())
    item = win.scene.nodes["sub_spike"]
    v = figs["sub_spike"].sqnr_db
    assert item.fill == heat_color((hi - v) / (hi - lo), "error")
    assert any(t == f"{v:.1f} dB" for t in item.badge_texts)
    # the worst node is darker than the best one
    best = max(figs, key=lambda n: figs[n].sqnr_db)
    assert win.scene.nodes[best].fill.lightness() > item.fill.lightness()
    legend = win.view.legend
    assert legend.mode == "error" and legend.title.startswith("Cumulative SQNR") and legend.lo_text.endswith("dB")
    # the toggle: local SQNR instead
    qtbot.mouseClick(win.sensitivity.local, Qt.LeftButton)
    win.scene.flush_looks()
    assert win.canvas.error_local and legend.title.startswith("Local SQNR")
    lv = figs["sub_spike"].local_sqnr_db
    assert any(t == f"{lv:.1f} dB" for t in win.scene.nodes["sub_spike"].badge_texts)
    # the inspector shows both figures of the selected tensor
    win.jump_to("sub_spike")
    qtbot.waitUntil(lambda: win.inspector.node == "sub_spike", timeout=5000)
    text = win.inspector.error_label.text()
    assert f"{v:.2f} dB cumulative" in text and f"{lv:.2f} dB local" in text and win.inspector.error_label.isVisible()


def test_auto_share_by_accuracy_is_one_undo_step(qtbot, make_win, tmp_path):
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, save(detector_model(), tmp_path / "det.onnx"))
    dock = win.sensitivity
    dock.budget.setValue(1000.0)  # every share that saves latency
    before = win.stack.undo_text
    qtbot.mouseClick(dock.share, Qt.LeftButton)
    qtbot.waitUntil(lambda: win.accuracy_jobs.last_share is not None, timeout=180000)
    rep = win.accuracy_jobs.last_share
    assert rep.accepted and win.session.groups.as_lists() and win.stack.undo_text != before
    assert "accuracy" in win.stack.undo_text
    assert len(dock.plot.points) == len(rep.steps) >= 2 and dock.plot.budget is not None
    assert "auto-share by measured accuracy" in dock.status.text()
    win.stack.undo()
    assert win.session.groups.as_lists() == []
    win.stack.redo()
    assert win.session.groups.as_lists()
    dock.plot.repaint()  # paints without error


def test_an_argmax_only_model_ranks_by_agreement_in_the_dock(qtbot, make_win, tmp_path):
    """No float output: the dock's gain column is in percentage points and its status says the
    least-agreeing integer output, instead of a column of n/a."""
    from builders import tied_classifier

    path = tied_classifier(tmp_path / "cls_only.onnx", with_logits=False)
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, path, count=16)
    dock = _measured(qtbot, win)
    header = [dock.table.horizontalHeaderItem(j).text() for j in range(dock.table.columnCount())]
    assert header[2] == "Gain pp"
    assert dock.node_at(0) == "Gemm_0" and dock.table.item(0, 3).text() == "measured"
    assert float(dock.table.item(0, 2).text()) > 0 and dock.table.item(0, 4).text().endswith("% equal")
    assert "least agreeing cls" in dock.status.text() and "% equal" in dock.status.text()
    # Back to a model with a float output: the column is in dB again
    open_settled(qtbot, win, save(spiky_chain_model(spike=4000.0), tmp_path / "spiky.onnx"))
    _measured(qtbot, win)
    assert dock.table.horizontalHeaderItem(2).text() == "Gain dB"


def test_auto_share_by_accuracy_on_integer_outputs_only_says_why_in_one_line(qtbot, make_win, tmp_path):
    from builders import tied_classifier

    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, tied_classifier(tmp_path / "cls_only.onnx", with_logits=False), count=8)
    qtbot.mouseClick(win.sensitivity.share, Qt.LeftButton)
    qtbot.waitUntil(lambda: bool(win.errors), timeout=60000)
    _, msg, _ = win.errors[-1]
    assert "\n" not in msg and "outputs are all integer (least agreeing: cls)" in msg
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=10000)
    status = win.sensitivity.status.text()  # not left saying it is measuring
    assert "measuring each candidate" not in status and status.startswith("Auto-share by accuracy failed: ")
    assert win.session.groups.as_lists() == [] and win.accuracy_jobs.last_share is None
