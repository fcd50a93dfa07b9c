"""The rough edges of issue 20 (minor items), each through the real widgets."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402

from builders import edit_model  # noqa: E402
from guikit import open_settled  # noqa: E402


def key(qtbot, win, k, modifiers=Qt.NoModifier):
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.view.setFocus()
    qtbot.keyClick(win.view, k, modifiers)


def test_toolbar_does_not_reflow_when_the_undo_text_changes(qtbot, win, model):
    """The Undo/Redo buttons showed "Undo Share 4 tensors": everything after them moved ~100 px."""
    open_settled(qtbot, win, model)
    combo = win.option_widgets.overlay

    def x():
        qtbot.wait(50)  # the toolbar lays out on the next turn
        return combo.mapTo(win, QPoint(0, 0)).x()

    before = x()
    win.editor.share_nodes(["cat1"])
    assert win.actions_by_name["undo"].text() == "Undo Share 4 tensors"
    assert x() == before
    assert "Share 4 tensors" in win.actions_by_name["undo"].toolTip()  # the tooltip says what
    win.stack.undo()
    assert x() == before


def test_status_messages_expire_or_are_replaced(qtbot, win, model, monkeypatch):
    shown = []
    real = win.statusBar().showMessage
    monkeypatch.setattr(win.statusBar(), "showMessage", lambda t, ms=0: (shown.append((t, ms)), real(t, ms)))
    open_settled(qtbot, win, model)
    assert any(t.startswith("Loading") for t, _ in shown)
    assert all(ms > 0 for _, ms in shown)  # nothing stays up for good
    assert not win.statusBar().currentMessage().startswith("Loading")
    win.scene.nodes["cat1"].setSelected(True)
    key(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    assert win.statusBar().currentMessage().startswith("Shared 4 tensors")
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier)
    assert win.statusBar().currentMessage() == "Undid Share 4 tensors"  # the share's message is gone
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier | Qt.ShiftModifier)
    assert win.statusBar().currentMessage() == "Redid Share 4 tensors"
    # A new edit that has nothing more to say is named as itself, not as a redo.
    combo = win.perf_summary.march
    other = next(combo.itemText(i) for i in range(combo.count()) if combo.itemText(i) != combo.currentText())
    combo.setCurrentText(other)
    assert win.statusBar().currentMessage() == win.stack.undo_text and other in win.stack.undo_text
    assert not win.statusBar().currentMessage().startswith(("Redid", "Undid"))
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier)
    assert win.statusBar().currentMessage().startswith("Undid ") and other in win.statusBar().currentMessage()
    win.stack.set_clean()


def test_a_text_file_named_onnx_is_an_error_before_any_prompt(qtbot, win, model, tmp_path, prompts, monkeypatch):
    from qtquant.gui.dialogs.modeldialog import OpenDialog

    monkeypatch.setattr(OpenDialog, "exec", lambda self: pytest.fail("no calibration dialog for a text file"))
    open_settled(qtbot, win, model)
    win.editor.share_nodes(["cat1"])  # unsaved work: the save prompt must not come first either
    fake = tmp_path / "notes.onnx"
    fake.write_text("just some text\n")
    assert not win.request_open(fake, ask=True)
    assert prompts["asked"] == []
    title, msg, _ = win.errors[-1]
    assert "notes.onnx is not a readable ONNX model" in msg and "\n" not in msg
    assert win.session.graph.path == model and win.stack.count == 1  # the work is still there
    win.stack.set_clean()


def test_open_dialog_offers_the_recorded_shape_with_readable_dims(qtbot, tmp_path):
    import onnx
    from PySide6.QtWidgets import QLabel

    from qtquant.gui.dialogs.modeldialog import OpenDialog
    from builders import dynamic_model

    p = tmp_path / "yolo320.onnx"
    onnx.save(dynamic_model({"imgsz": "[320, 320]"}), str(p))
    d = OpenDialog(p)
    qtbot.addWidget(d)
    assert d.shape_edits["images"].text() == "1x3x320x320"  # was 1x3x640x640
    labels = [w.text() for w in d.findChildren(QLabel)]
    assert "images (batch x 3 x height x width):" in labels
    assert not any("DynamicDimension" in t for t in labels)


def test_concat_row_unhighlights_when_the_selection_is_cleared(qtbot, win, model):
    open_settled(qtbot, win, model)
    table = win.concat_list.table
    win.scene.nodes["cat1"].setSelected(True)
    assert [i.row() for i in table.selectionModel().selectedRows()] == [win.concat_list.row_of("cat1")]
    win.scene.clearSelection()
    assert not table.selectionModel().hasSelection()


def test_minimap_hides_after_fit_and_both_overlays_toggle_from_view(qtbot, make_win, tmp_path):
    from builders import band_model

    win = make_win(size=(900, 600))
    open_settled(qtbot, win, band_model(tmp_path / "bands.onnx"), zoom=2.0)
    mm, legend = win.view.minimap, win.view.legend
    mm.follow()
    assert mm.isVisible()  # zoomed in: part of the graph is off screen
    win.actions_by_name["fit"].trigger()
    assert not mm.isVisible()  # the whole graph in view: nothing to navigate
    win.view.set_zoom(2.0)
    mm.follow()
    assert mm.isVisible()
    win.actions_by_name["minimap"].setChecked(False)
    assert not mm.isVisible()
    win.view.set_zoom(2.5)
    mm.follow()
    assert not mm.isVisible()  # stays off while unchecked
    assert legend.isVisible()
    win.actions_by_name["legend"].setChecked(False)
    assert not legend.isVisible()
    win.actions_by_name["legend"].setChecked(True)
    assert legend.isVisible()


def test_inspector_elides_names_in_the_middle_and_columns_resize(qtbot, win, tmp_path):
    """The tensor and producer columns showed "…utput_0" for every row."""
    from PySide6.QtWidgets import QHeaderView

    from builders import yolov8n
    from qtquant.base.fileio import atomic_write_bytes

    p = tmp_path / "y.onnx"
    atomic_write_bytes(p, yolov8n(size=64, nc=2).SerializeToString())
    open_settled(qtbot, win, p, count=2)
    cat = next(n.name for n in win.session.graph.concat_nodes())
    win.scene.nodes[cat].setSelected(True)
    t = win.inspector.concat
    assert t.rowCount() >= 2 and t.textElideMode() == Qt.ElideMiddle
    hh = t.horizontalHeader()
    assert all(hh.sectionResizeMode(i) == QHeaderView.Interactive for i in range(t.columnCount()))
    for r in range(t.rowCount()):
        assert t.item(r, 1).text() in t.item(r, 1).toolTip()  # the full name is the tooltip
    before = hh.sectionSize(1)
    hh.resizeSection(1, before + 60)  # a user drags the column wider
    assert hh.sectionSize(1) == before + 60


def test_report_dialog_fits_its_longest_line_and_puts_warnings_first(qtbot, win):
    from PySide6.QtGui import QFontMetrics

    long_line = "  /model.22/Concat_24: keep rescale; " + "x" * 45  # ~600 px: fits the offscreen screen
    text = "Exported 3 files\n" + long_line + "\nwarning: bias of Gemm 'fc' did not fit int32\n"
    d = win.messages.report("Export", text)
    qtbot.addWidget(d)
    shown = d.text.toPlainText().splitlines()
    assert shown[0].startswith("warning: bias") and shown[1] == "Exported 3 files"
    adv = QFontMetrics(d.text.font()).horizontalAdvance(long_line)
    assert adv < d.width() <= max(adv + 100, 480)  # its content's width, not a fixed 900 px


def test_export_makes_a_folder_that_does_not_exist_yet(qtbot, tmp_path):
    from qtquant.app import Options, open_model
    from qtquant.calib import CalibConfig
    from qtquant.base.errors import BadInputError
    from qtquant.gui.window.exporting import ExportOptions, export_files

    s = open_model(edit_model(tmp_path / "edit.onnx"), options=Options(calib=CalibConfig(count=4)))
    s.run_calibration()
    new = tmp_path / "exports" / "today"
    rep = export_files(s, ExportOptions(new, "out", plan=True, overrides=False, report=False, png=False))
    assert (new / "out.onnx").is_file() and len(rep.written) == 2
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(BadInputError, match="is a file"):
        export_files(s, ExportOptions(tmp_path / "a_file", "out", plan=True, overrides=False, report=False,
                                      png=False))


def test_zero_zooms_to_100_percent_around_the_selection(qtbot, make_win, tmp_path):
    from builders import band_model

    win = make_win()
    open_settled(qtbot, win, band_model(tmp_path / "bands.onnx"), zoom=None)
    v = win.view
    v.set_zoom(2.5)
    v.centerOn(v.sceneRect().topLeft())  # the selected node is far from the centre
    names = sorted(win.scene.nodes, key=lambda n: win.scene.nodes[n].pos().x())
    name = names[len(names) // 2]  # one the view can centre (not against the scene's edge)
    win.scene.nodes[name].setSelected(True)
    key(qtbot, win, Qt.Key_0)
    assert v.zoom == pytest.approx(1.0)
    at = v.mapFromScene(win.scene.nodes[name].sceneBoundingRect().center())
    mid = v.viewport().rect().center()
    # centred on the node (as far as the scene's edge allows: this graph is wide and flat)
    assert abs(at.x() - mid.x()) <= 12 and v.viewport().rect().contains(at)


def test_concat_inspector_total_names_the_forced_copy(qtbot, win, model):
    """1.80 µs per input × 3 next to "total 9.60 µs" left 4.2 µs unexplained."""
    open_settled(qtbot, win, model)
    qtbot.waitUntil(lambda: win.relay.perf() is not None and not win.controller.busy, timeout=30000)
    win.scene.nodes["cat1"].setSelected(True)
    t = win.inspector.concat
    out = next(r for r in range(t.rowCount()) if t.item(r, 0).text() == "out")
    text = t.item(out, 5).text()
    total = win.relay.perf().rescale_cost_by_concat()["cat1"]
    ins = [float(t.item(r, 5).text().split()[0]) for r in range(t.rowCount())
           if t.item(r, 0).text() != "out" and t.item(r, 5).text().endswith("µs")]
    assert ins and text.startswith("total ")
    if total - sum(ins) > 0.01:
        assert "incl. copy" in text and "force" in t.item(out, 5).toolTip()


def test_performance_dock_keeps_its_columns_when_deltas_appear(qtbot, win, model):
    open_settled(qtbot, win, model)
    qtbot.waitUntil(lambda: win.relay.perf() is not None and not win.controller.busy, timeout=30000)
    ps = win.perf_summary
    before = (ps.chart.x(), ps.chart.width())
    win.editor.share_nodes(["cat1"])
    qtbot.waitUntil(lambda: "was" in ps.values["rescales"].text() and not win.controller.busy, timeout=30000)
    qtbot.wait(50)
    assert "(" in ps.values["latency"].text()  # a delta is shown
    assert (ps.chart.x(), ps.chart.width()) == before  # the chart beside the figures did not move


def test_sqnr_and_quantization_lines_elide_with_the_whole_text_as_tooltip(qtbot, win, model):
    """Both wrapped and their last line was clipped by the dock: now one line ending in "…"."""
    from dataclasses import replace

    from qtquant.app.views.perf import perf_summary

    open_settled(qtbot, win, model)
    quant = win.model_info.fields["quantization"]
    full = quant.full_text()
    assert full.startswith("float model, ")
    win.resizeDocks([win.docks["model"]], [140], Qt.Horizontal)
    qtbot.waitUntil(lambda: quant.text().endswith("…"), timeout=5000)
    assert quant.text() != full and full in quant.toolTip()
    assert quant.height() < 2 * quant.fontMetrics().lineSpacing() + 4  # one line, not wrapped
    ps = win.perf_summary
    line = "; ".join(f"output_{i}: {20 + i}.0 dB" for i in range(12))
    ps._show_sqnr(replace(perf_summary(win.session), sqnr_html=line, sqnr_tip="the report"))
    sqnr = ps.values["sqnr"]
    assert sqnr.text().endswith("…") and sqnr.text().startswith("output_0: 20.0 dB")
    assert line in sqnr.toolTip() and "the report" in sqnr.toolTip()
    assert sqnr.fontMetrics().horizontalAdvance(sqnr.text()) <= sqnr.contentsRect().width()


def test_open_model_dialog_shows_whole_file_sizes(qtbot, win, tmp_path, monkeypatch):
    """File > Open's Size column was too narrow: "12.3 MB" showed as "12…"."""
    from PySide6.QtWidgets import QDialog, QFileDialog, QFileSystemModel, QTreeView

    (tmp_path / "m").mkdir()
    open_settled(qtbot, win, edit_model(tmp_path / "m" / "edit.onnx"))
    (tmp_path / "m" / "big.onnx").write_bytes(b"\0" * 1_234_567)
    seen = {}

    def exec_(self):
        tree = self.findChild(QTreeView, "treeView")
        fs = self.findChild(QFileSystemModel)
        qtbot.waitUntil(lambda: fs.rowCount(fs.index(str(tmp_path / "m"))) > 1, timeout=5000)
        row = fs.index(str(tmp_path / "m" / "big.onnx"))
        text = fs.data(fs.index(row.row(), 1, row.parent()))
        seen["size"] = text
        seen["need"] = tree.fontMetrics().horizontalAdvance(text) + 16  # the item's padding
        seen["width"] = tree.header().sectionSize(1)
        return QDialog.Rejected

    monkeypatch.setattr(QFileDialog, "exec", exec_)
    win.actions_by_name["open"].trigger()
    assert seen["size"].endswith("B") and seen["width"] >= seen["need"]


def test_legend_sits_in_a_strip_above_the_graph_not_over_it(qtbot, make_win, tmp_path):
    """The legend floated over the viewport and covered the top-left nodes of a fitted graph."""
    from builders import band_model

    win = make_win(size=(1400, 900))
    open_settled(qtbot, win, band_model(tmp_path / "bands.onnx"))
    view, legend = win.view, win.view.legend
    win.actions_by_name["fit"].trigger()
    assert legend.isVisible()
    assert not legend.geometry().intersects(view.viewport().geometry())  # nothing drawn under it
    assert view.viewport().geometry().top() >= legend.geometry().bottom()
    full = view.viewport().height()
    win.actions_by_name["legend"].setChecked(False)
    assert view.viewportMargins().top() == 0 and view.viewport().height() > full  # the strip is given back
    win.actions_by_name["legend"].setChecked(True)
    assert legend.isVisible() and not legend.geometry().intersects(view.viewport().geometry())


def test_calibrate_can_change_the_input_shape(qtbot, win, tmp_path, monkeypatch):
    """Calibrate… reused the open dialog with the shapes greyed out: a new size meant File > Open."""
    import onnx

    from guikit import settle
    from qtquant.calib import CalibConfig
    from builders import branchy_concat_model
    from qtquant.gui.dialogs.modeldialog import OpenDialog

    p = tmp_path / "dyn.onnx"
    onnx.save(branchy_concat_model(dynamic=True), str(p))
    win.open_model(p, {"x": (1, 3, 16, 16)}, CalibConfig(count=2))
    settle(qtbot, win)
    seen = {}

    def exec_(dlg):
        e = dlg.shape_edits["x"]
        seen["start"], seen["enabled"], seen["cut"] = e.text(), e.isEnabled(), dlg.cut_edit.isEnabled()
        e.setText("1x3x8x12")
        return OpenDialog.Accepted

    monkeypatch.setattr(OpenDialog, "exec", exec_)
    win.actions_by_name["calibrate"].trigger()
    assert seen == {"start": "1x3x16x16", "enabled": True, "cut": False}  # the open model's shape
    qtbot.waitUntil(lambda: win.session is not None and win.session.graph.input_shapes.get("x")
                    == (1, 3, 8, 12), timeout=20000)
    settle(qtbot, win)
    assert "1x3x8x12" in win.model_info.fields["inputs"].text()


def test_export_dialog_sets_the_scheme_and_the_percentile_like_the_cli(qtbot, win, tmp_path, monkeypatch):
    """Export had no --scheme / --percentile: an asym model or another percentile needed the CLI."""
    import onnx

    from guikit import settle
    from qtquant.calib import CalibConfig
    from qtquant.gui.window.exporting import ExportDialog
    from qtquant.base.vocab import Scheme

    win.open_model(edit_model(tmp_path / "edit.onnx"), calib=CalibConfig(count=4, observer="percentile"))
    settle(qtbot, win)
    seen = {}

    def exec_(dlg):
        seen["scheme"], seen["pct"] = dlg.scheme.currentText(), dlg.percentile.value()
        seen["pct_on"] = dlg.percentile.isEnabled()
        dlg.folder.setText(str(tmp_path / "out"))
        for k in ("plan", "overrides", "report", "png"):
            dlg.checks[k].setChecked(False)
        dlg.scheme.setCurrentText("asym")
        dlg.percentile.setValue(99.5)
        return ExportDialog.Accepted

    monkeypatch.setattr(ExportDialog, "exec", exec_)
    with qtbot.waitSignal(win.exports.exported, timeout=30000):
        win.actions_by_name["export"].trigger()
    assert seen == {"scheme": "sym", "pct": 99.99, "pct_on": True}
    s = win.session
    assert s.options.scheme is Scheme.ASYMMETRIC_UINT8 and s.calibration.config.percentile == 99.5
    m = onnx.load(str(tmp_path / "out" / "edit_fixed.onnx"))
    init = {i.name: i for i in m.graph.initializer}
    acts = [init[n.input[2]].data_type for n in m.graph.node
            if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[0] not in init]
    assert acts and set(acts) == {onnx.TensorProto.UINT8}  # activations uint8: the asym scheme
    assert win.stack.texts() == ["Scheme: uint8-asym", "Percentile: 99.5"]  # each an edit on the stack
    win.stack.undo()
    assert s.calibration.config.percentile == 99.99 and s.options.calib.percentile == 99.99
    win.stack.undo()
    assert win.session.options.scheme is Scheme.SYMMETRIC_INT8


def test_every_node_can_be_scrolled_out_from_under_the_minimap(qtbot, make_win, tmp_path):
    """Scrolled to the end, the graph's bottom-right nodes stayed under the minimap."""
    from builders import band_model

    win = make_win(size=(1400, 900))
    open_settled(qtbot, win, band_model(tmp_path / "bands.onnx"), zoom=2.0)
    view, mm = win.view, win.view.minimap
    mm.follow()
    assert mm.isVisible()
    for bar in (view.horizontalScrollBar(), view.verticalScrollBar()):
        bar.setValue(bar.maximum())
    corner = view.mapFromScene(view._graph_rect().adjusted(30, 30, -30, -30).bottomRight())
    box = mm.geometry().translated(-view.viewport().geometry().topLeft())  # in viewport pixels
    assert corner.x() < box.left() or corner.y() < box.top()
    win.actions_by_name["fit"].trigger()
    assert not mm.isVisible() and view.sceneRect() == view.scene().sceneRect()  # the room goes with it


def test_a_qdq_file_invalid_at_its_opset_says_so_in_the_model_panel(qtbot, win, tmp_path):
    """onnxruntime's quantize_static writes per-channel Q/DQ into opset-11 files, which are not valid
    ONNX: the panel's quantization line says so, and its tooltip why."""
    from builders import branchy_concat_model, save
    from ortkit import ort_qdq_file

    src = save(branchy_concat_model(opset=11), tmp_path / "f11.onnx")
    bad = ort_qdq_file(src, str(tmp_path / "q11.onnx"), per_channel=True)
    open_settled(qtbot, win, bad)
    quant = win.model_info.fields["quantization"]
    assert quant.full_text().startswith("QDQ file (invalid at opset 11), ")
    assert "only from opset 13" in quant.toolTip() and "onnxruntime refuses it" in quant.toolTip()


def test_the_zoom_in_the_status_bar_says_it_is_the_zoom(qtbot, win, model):
    """A bare "100%" right of the job's progress bar read as the job's progress."""
    open_settled(qtbot, win, model)
    win.actions_by_name["zoom_in"].trigger()
    assert win.zoom_label.text() == f"Zoom {win.view.zoom * 100:.0f}%"
