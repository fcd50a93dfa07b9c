"""The desktop app, driven through its real widgets (pytest-qt, offscreen).

Models are built with onnx.helper: ``x * k`` branches into Concats give exact, known
mismatch ratios (the same input, scaled), so every colour band can be checked.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QSettings, Qt  # noqa: E402

from builders import RESCALING_MARCH, BAND_CATS as CATS  # noqa: E402
from builders import band_model  # noqa: E402
from qtquant.base.vocab import DEFAULT_MARCH  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.dialogs.modeldialog import ErrorDialog, ModelSettings, OpenDialog, calib_config  # noqa: E402
from qtquant.gui.window.mainwindow import MainWindow  # noqa: E402
from qtquant.app.views.looks import node_bits  # noqa: E402
from qtquant.app.views.perfdata import node_us, simulator  # noqa: E402
from qtquant.gui.style import MISMATCH_BANDS, fmt_us, heat_color, mismatch_band, mismatch_color  # noqa: E402



@pytest.fixture
def settings(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    yield w
    w.show_dialogs = False  # a failed test must not leave a save prompt blocking the run
    w.controller.shutdown()


@pytest.fixture
def model(tmp_path):
    return band_model(tmp_path / "bands.onnx")


def open_and_settle(qtbot, win, path, calib=None, timeout=20000, **kw):
    """Open, wait for calibration to finish and the layout to be on the canvas, then for idle."""
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=timeout) as blocker:
        win.open_model(path, calib=calib or CalibConfig(count=4), **kw)
    assert blocker.args == [True]
    qtbot.waitUntil(lambda: win.scene.spec is not None and win.scene.spec is win.controller.spec, timeout=timeout)
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=timeout)


def click_node(qtbot, win, name):
    item = win.scene.nodes[name]
    win.view.centerOn(item)
    pos = win.view.mapFromScene(item.scenePos())
    qtbot.mouseClick(win.view.viewport(), Qt.LeftButton, Qt.NoModifier, pos)


def visible_rect(win):
    return win.view.mapToScene(win.view.viewport().rect()).boundingRect()


# -- opening and calibrating ------------------------------------------------------------------------


def test_open_calibrate_colours_and_badges(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    g = win.session.graph
    # every op plus the input and the four output terminals is on the canvas
    assert set(g.nodes) <= set(win.scene.nodes)
    assert "input:x" in win.scene.nodes and len(win.scene.nodes) == len(g.nodes) + 1 + 4
    info = {c.node: c for c in win.relay.concats()}
    for cat, (k, band) in CATS.items():
        c = info[cat]
        assert c.ratio == pytest.approx(k, rel=1e-4)
        assert mismatch_band(c.ratio, c.rescales) == band
        item = win.scene.nodes[cat]
        assert item.fill.name() == QColorName(MISMATCH_BANDS[band][2])
        if band == 0:
            assert item.badge_texts == []
        else:
            assert item.badge_texts == [f"+{c.rescales} rescale"] and c.rescales == 1
    # non-Concat nodes keep their category colour
    assert win.scene.nodes["mul_a"].fill == win.scene.nodes["mul_a"].base_fill
    # the rescaled input edge is highlighted, the matching one is not
    edges = {(e.tensor, e.dst): e for e in win.scene.edges}
    assert edges[("mul_a_out", "cat_red")].pen().widthF() > edges[("mul_a_out", "cat_equal")].pen().widthF()
    assert "4 Concats, 3 mismatched, 3 rescales" in win.concat_list.status.text()
    assert not win.errors


def QColorName(hex_):
    from PySide6.QtGui import QColor

    return QColor(hex_).name()


@pytest.mark.parametrize("march", [DEFAULT_MARCH, RESCALING_MARCH])
def test_demo_concats_are_mismatched(qtbot, win, tmp_path, march):
    from qtquant.app.demo import build_attention_demo

    p = tmp_path / "demo.onnx"
    onnx.save(build_attention_demo(), str(p))
    # The 7x7 and 9x9 windows reach their Concat through a Resize (a view keeping its conv's
    # scale): rescaled on bayes-e's producers-write rule as on bayes's widest-input rule.
    win.set_march(march)
    open_and_settle(qtbot, win, p)
    assert win.session.options.march == march
    cs = {c.node: c for c in win.relay.concats()}
    assert set(cs) == {"attn/k_cat", "attn/v_cat"}
    for name, c in cs.items():
        assert c.rescales == 2 and c.ratio > 1.2  # the demo exists to show mismatched windows
        item = win.scene.nodes[name]
        assert item.fill == mismatch_color(c.ratio, c.rescales)
        assert mismatch_band(c.ratio, c.rescales) >= 1
        assert item.badge_texts == [f"+{c.rescales} rescale"]


def test_uncalibrated_concats_are_grey_until_calibration(qtbot, settings, model):
    w = MainWindow(settings, auto_calibrate=False)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.controller.layoutReady, timeout=20000):
        w.open_model(model)
    qtbot.waitUntil(lambda: w.scene.spec is not None)
    assert w.relay.concats() is None
    assert w.scene.nodes["cat_red"].badge_texts == []
    assert w.scene.nodes["cat_red"].fill.name() == "#bdbdbd"
    with qtbot.waitSignal(w.controller.calibrationFinished, timeout=20000):
        w.controller.calibrate(CalibConfig(count=3))
    assert w.scene.nodes["cat_red"].badge_texts == ["+1 rescale"]
    w.controller.shutdown()


# -- inspector ------------------------------------------------------------------------------------------


def test_click_node_shows_inspector_and_histogram(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    click_node(qtbot, win, "cat_orange")
    assert win.scene.selected_names() == ["cat_orange"]
    ins = win.inspector
    assert ins.node == "cat_orange"
    assert ins.title.text() == "Concat"
    assert ins.name_label.text() == "cat_orange"
    # tensors: two inputs and the output, with shape, range and scale
    rows = [[ins.tensors.item(r, c).text() for c in range(ins.tensors.columnCount())]
            for r in range(ins.tensors.rowCount())]
    assert [r[0] for r in rows] == ["in", "in", "out"]
    assert rows[2][1] == "cat_orange_out" and rows[2][2] == "1×6×8×8"
    out_scale = win.session.domains.scale_of("cat_orange_out")
    assert float(rows[2][4]) == pytest.approx(out_scale, rel=1e-3)
    assert rows[0][3].startswith("[")
    # histogram of the output, clipping thresholds at the quantization range
    qtbot.waitUntil(lambda: ins.hist.has_data, timeout=10000)
    assert ins.hist.tensor == "cat_orange_out"
    assert ins.hist.counts.sum() > 0
    lo, hi = ins.hist.clip
    assert hi == pytest.approx(127 * out_scale, rel=1e-6) and lo == pytest.approx(-128 * out_scale, rel=1e-6)
    # Concat table: both inputs and the output; input 0 (x * 1) needs the rescale at ratio 1x
    assert ins.concat.isVisibleTo(ins) and ins.concat.rowCount() == 3
    cells = [[ins.concat.item(r, c).text() for c in range(ins.concat.columnCount())] for r in range(3)]
    assert [c[0] for c in cells] == ["0", "1", "out"]
    assert cells[0][3] == "1×" and cells[1][3] == "4×"
    assert float(cells[0][4]) == pytest.approx(2.0, abs=0.01)  # log2(4): bits lost if shared
    assert cells[1][5] == "no rescale"
    # clicking another tensor row switches the histogram
    ins.tensors.selectRow(0)
    qtbot.waitUntil(lambda: ins.hist.tensor == "mul_a_out" and ins.hist.has_data, timeout=10000)


def test_selecting_a_plain_op_hides_concat_table(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    click_node(qtbot, win, "mul_cat_red")
    assert win.inspector.title.text() == "Mul"
    assert not win.inspector.concat.isVisibleTo(win.inspector)
    # clicking empty canvas clears the selection and the inspector
    win.scene.clearSelection()
    assert win.inspector.node is None and win.inspector.title.text() == "Nothing selected"


# -- navigation -----------------------------------------------------------------------------------------


def test_search_jumps_to_node_and_tensor(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    win.view.set_zoom(1.0)
    win.view.centerOn(win.scene.nodes["input:x"])
    qtbot.keyClick(win, Qt.Key_F, Qt.ControlModifier)
    assert win.search_bar.isVisible()
    qtbot.keyClicks(win.search_bar.edit, "cat_red_relu")
    qtbot.keyClick(win.search_bar.edit, Qt.Key_Return)
    assert win.scene.selected_names() == ["cat_red_relu"]
    assert visible_rect(win).contains(win.scene.nodes["cat_red_relu"].scenePos())
    # a tensor name jumps to its producer; Enter cycles through several hits
    win.search_bar.edit.setText("mul_cat_orange_out")
    qtbot.keyClick(win.search_bar.edit, Qt.Key_Return)
    assert win.scene.selected_names() == ["mul_cat_orange"]
    win.search_bar.edit.setText("Concat")  # op type: all four
    hits = set()
    for _ in range(4):
        qtbot.keyClick(win.search_bar.edit, Qt.Key_Return)
        hits.update(win.scene.selected_names())
    assert hits == set(CATS)
    assert win.search_bar.count.text() == "4 / 4"
    win.search_bar.edit.setText("no_such_thing")
    qtbot.keyClick(win.search_bar.edit, Qt.Key_Return)
    assert win.search_bar.count.text() == "no match"


def test_concat_list_click_selects_and_centres(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    table = win.concat_list.table
    # sorted by ratio, largest first
    assert table.model().index(0, 0).data() == "cat_red"
    row = win.concat_list.row_of("cat_yellow")
    win.view.set_zoom(1.0)
    win.view.centerOn(win.scene.nodes["input:x"])
    rect = table.visualRect(table.model().index(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, Qt.NoModifier, rect.center())
    assert win.scene.selected_names() == ["cat_yellow"]
    assert win.inspector.node == "cat_yellow"
    assert visible_rect(win).contains(win.scene.nodes["cat_yellow"].scenePos())
    # sorting by rescales then by name keeps the click mapping right
    table.sortByColumn(0, Qt.AscendingOrder)
    assert [table.model().index(r, 0).data() for r in range(4)] == sorted(CATS)


def test_zoom_level_of_detail_and_fit(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    win.view.set_zoom(0.3)
    assert not any(lab.isVisible() for lab in win.scene.labels)
    win.view.set_zoom(1.2)
    assert all(lab.isVisible() for lab in win.scene.labels)
    z = win.view.zoom
    vp = win.view.viewport()
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QWheelEvent

    ev = QWheelEvent(QPointF(vp.width() / 2, vp.height() / 2), QPointF(vp.mapToGlobal(QPoint(0, 0))), QPoint(0, 0),
                     QPoint(0, -240), Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False)
    win.view.wheelEvent(ev)
    assert win.view.zoom < z
    win.view.fit()
    r = win.scene.itemsBoundingRect()
    assert visible_rect(win).adjusted(-2, -2, 2, 2).contains(r)


# -- overlays -------------------------------------------------------------------------------------------


def test_overlays_recolour_in_place(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    pos_before = {n: it.pos() for n, it in win.scene.nodes.items()}
    items_before = set(map(id, win.scene.items()))
    combo = win.option_widgets.overlay

    combo.setCurrentIndex(combo.findData("mismatch"))
    assert win.canvas.overlay == "mismatch"
    assert win.scene.nodes["cat_red_relu"].faded
    # mul_a's output is the input every mismatched Concat rescales; x*20 already has the output scale
    assert not win.scene.nodes["mul_a"].faded
    assert win.scene.nodes["mul_cat_red"].faded
    assert win.scene.nodes["cat_red"].fill == mismatch_color(20.0, 1)
    edges = {(e.tensor, e.dst): e for e in win.scene.edges}
    assert edges[("mul_a_out", "cat_red")].color.name() == "#d32f2f"

    combo.setCurrentIndex(combo.findData("bits"))
    bits = node_bits(win.session.graph, win.relay.concats())
    assert bits["cat_red"] == pytest.approx(np.log2(20.0), abs=0.01)
    assert win.scene.nodes["cat_red"].fill == heat_color(bits["cat_red"] / 8.0, "bits")
    assert any(t.startswith("worst −4.3") for t in win.scene.nodes["cat_red"].badge_texts)
    assert win.scene.nodes["cat_red_relu"].faded

    if simulator() is not None:
        qtbot.waitUntil(lambda: win.relay.perf() is not None, timeout=20000)
        combo.setCurrentIndex(combo.findData("latency"))
        us = node_us(win.relay.perf())
        slowest = max(us, key=us.get)
        item = win.scene.nodes[slowest]
        assert item.badge_texts[0].startswith(fmt_us(us[slowest]) + " ")  # "12.3 µs mem"
        assert item.fill == heat_color(1.0, "latency") != item.base_fill
        for name, v in us.items():  # fused ops (0 µs) carry no latency badge
            if v < 0.005:
                assert not any("µs" in t for t in win.scene.nodes[name].badge_texts)
        assert win.view.legend.mode == "latency"

    combo.setCurrentIndex(combo.findData("none"))
    assert win.scene.nodes["mul_a"].fill == win.scene.nodes["mul_a"].base_fill
    assert win.scene.nodes["cat_red"].badge_texts == ["+1 rescale"]
    # re-coloured in place: same items at the same places
    assert set(map(id, win.scene.items())) == items_before
    assert all(win.scene.nodes[n].pos() == p for n, p in pos_before.items())
    # the View menu's radio actions follow the combo
    checked = [a.data() for a in win.window_actions.overlay_actions.actions() if a.isChecked()]
    assert checked == ["none"]


def test_perf_dock_and_march_resimulates(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    qtbot.waitUntil(lambda: win.relay.perf() is not None, timeout=20000)
    ps = win.perf_summary
    assert " ms" in ps.values["latency"].text()
    assert ps.values["rescales"].text() == "3 in 3 Concats"
    assert ps.chart.rows
    rev = win.session.revision
    with qtbot.waitSignal(win.controller.perfFinished, timeout=20000):
        ps.march.setCurrentText("nash-e")
    assert win.session.options.march == "nash-e"
    assert win.option_widgets.march.currentText() == "nash-e"
    assert win.session.perf.revision == win.session.revision > rev
    assert getattr(win.relay.perf(), "march", "nash-e") == "nash-e"
    assert win.stack.count == 1  # the march change is an undoable edit...
    win.stack.set_clean()  # ...which closing the window would otherwise ask to save


def test_board_clock_typed_in_the_perf_dock_reprices_the_board_line(qtbot, win, model):
    """The board's BPU clock, typed into the Performance dock: the board estimate drops, the static one
    stays; it is one undoable edit, and undo shows the march's clock again."""
    open_and_settle(qtbot, win, model)
    qtbot.waitUntil(lambda: win.relay.perf() is not None, timeout=20000)
    ps = win.perf_summary
    box = ps.board_clock
    assert box.value() == 0 and box.text() == "march's (1 GHz)"
    before = win.relay.perf()
    box.setFocus()
    box.lineEdit().selectAll()
    with qtbot.waitSignal(win.controller.perfFinished, timeout=20000):
        qtbot.keyClicks(box.lineEdit(), "2")
        qtbot.keyClick(box.lineEdit(), Qt.Key_Return)
    assert win.session.options.board_bpu_ghz == 2.0 and win.stack.count == 1
    after = win.relay.perf()
    assert after.total_us == pytest.approx(before.total_us) and after.board_us < before.board_us
    assert "at the board's clock (2 GHz)" in ps.values["board"].toolTip()
    assert win.stack.undo_text == "Board BPU clock: 2 GHz"
    # Ctrl+Z with the focus still in the box undoes the edit (not the box's own text history)...
    assert box.hasFocus()
    with qtbot.waitSignal(win.controller.perfFinished, timeout=20000):
        qtbot.keyClick(box, Qt.Key_Z, Qt.ControlModifier)
    assert win.session.options.board_bpu_ghz == 0 and box.value() == 0 and box.text() == "march's (1 GHz)"
    assert win.relay.perf().board_us == pytest.approx(before.board_us)
    # ...and Ctrl+Shift+Z redoes it; while a value is being typed, Ctrl+Z is the text's.
    qtbot.keyClick(box, Qt.Key_Z, Qt.ControlModifier | Qt.ShiftModifier)
    assert win.session.options.board_bpu_ghz == 2.0 and box.value() == 2.0
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "3")
    qtbot.keyClick(box, Qt.Key_Z, Qt.ControlModifier)
    assert win.session.options.board_bpu_ghz == 2.0 and win.stack.undo_text == "Board BPU clock: 2 GHz"
    win.stack.set_clean()



def test_empty_window_shows_the_options_a_model_opens_with_and_the_whole_hint(qtbot, settings):
    """Before any model: the toolbar and the Performance dock show the march the next model opens
    on (they showed the list's first, bernoulli2, while it opened on bayes-e), and the canvas hint
    fits a 1200 px window's canvas (it was cut off at both ends behind a scroll bar)."""
    from qtquant.app import Options

    w = MainWindow(settings, Options(march="nash-e", auto_share_max_bits_lost=1.5, float_output_max_bits_lost=2.25))
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    qtbot.waitExposed(w)
    try:
        assert w.option_widgets.march.currentText() == "nash-e"
        assert w.perf_summary.march.currentText() == "nash-e"
        assert w.option_widgets.bits.value() == 1.5 and w.concat_list.float_output.value() == 2.25
        hint = w.scene.items()[0]
        assert "Open a model" in hint.text()
        shown = w.view.mapToScene(w.view.viewport().rect()).boundingRect()
        assert shown.contains(hint.sceneBoundingRect())
        assert not w.view.horizontalScrollBar().isVisible()
        # Choosing a march with no model open is what the model then opens with.
        w.option_widgets.march.setCurrentText("bayes")
        assert w.controller.options.march == "bayes"
        assert w.perf_summary.march.currentText() == "bayes"
    finally:
        w.show_dialogs = False
        w.controller.shutdown()


def test_a_narrow_window_keeps_room_for_the_canvas_and_a_wide_one_keeps_its_docks(qtbot, settings, model):
    """The side docks are sized in pixels for a wide window: at half a 1920 px screen they left the
    canvas ~120 px, under the minimap.  A narrow window gives the canvas at least CANVAS_SHARE of
    its width, the inspector giving way first; the Concat table keeps every column in view.
    Widened again, the docks get their widths back, except one the user resized meanwhile."""
    from qtquant.gui.window.mainwindow import CANVAS_SHARE

    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.resize(1600, 900)
    w.show()
    qtbot.waitExposed(w)
    try:
        open_and_settle(qtbot, w, model)
        wide = (w.docks["concats"].width(), w.docks["inspector"].width())
        assert w.centralWidget().width() >= CANVAS_SHARE * w.width()
        w.resize(960, 900)
        qtbot.waitUntil(lambda: w.centralWidget().width() >= CANVAS_SHARE * w.width() - 2, timeout=3000)
        assert w.docks["inspector"].width() < wide[1] and w.docks["concats"].width() > w.docks["inspector"].width()
        assert not w.concat_list.table.horizontalScrollBar().isVisible()
        # widened again, the docks get back what the window took (their narrow widths had stuck)
        w.resize(1600, 900)
        qtbot.waitUntil(lambda: (w.docks["concats"].width(), w.docks["inspector"].width()) == wide, timeout=3000)
        assert w.centralWidget().width() >= CANVAS_SHARE * w.width()
        # ... unless the user resized a side meanwhile: theirs is kept
        w.resize(960, 900)
        qtbot.waitUntil(lambda: w.docks["inspector"].width() < wide[1], timeout=3000)
        w.resizeDocks([w.docks["concats"]], [w.docks["concats"].width() - 30], Qt.Horizontal)
        qtbot.wait(20)
        mine = w.docks["concats"].width()
        w.resize(1600, 900)
        qtbot.waitUntil(lambda: w.docks["inspector"].width() == wide[1], timeout=3000)
        assert w.docks["concats"].width() == mine
    finally:
        w.show_dialogs = False
        w.controller.shutdown()


def test_a_big_graph_opened_in_the_window_is_inferred_early_in_the_child(qtbot, settings, model, monkeypatch):
    """The app's way of opening a big graph (here any graph: the threshold set to 0): the file's
    bytes go to the kept shape-inference child before the node table is read; the window then
    shows, calibrates and analyses the model as from an in-process open."""
    from qtquant.model import shape_child
    from qtquant.model.graph import load_graph

    monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    early = []
    result = shape_child.Early.result
    monkeypatch.setattr(shape_child.Early, "result", lambda e: early.append(1) or result(e))
    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    try:
        shape_child._child.call(b"")  # the child the window started has booted
        open_and_settle(qtbot, w, model)
        assert early == [1]
        monkeypatch.setattr(shape_child, "MIN_NODES", None)
        ref = load_graph(model)
        g = w.session.graph
        assert {n: (t.shape, t.kind) for n, t in g.tensors.items()} == \
            {n: (t.shape, t.kind) for n, t in ref.tensors.items()}
        assert set(w.scene.nodes) >= {n.name for n in ref.concat_nodes()}
        assert w.concat_list.model.rowCount() == len(ref.concat_nodes()) and w.session.calibration is not None
    finally:
        w.show_dialogs = False
        w.controller.shutdown()
        shape_child.close()


# -- background jobs ----------------------------------------------------------------------------------


def test_cancel_long_calibration_keeps_window_usable(qtbot, win, model):
    with qtbot.waitSignal(win.controller.layoutReady, timeout=20000):
        win.open_model(model, calib=CalibConfig(count=200000))
    qtbot.waitUntil(lambda: win.controller.calibrating and win.progress.bar.isVisible(), timeout=10000)
    qtbot.waitUntil(lambda: any(j.kind == "calibrate" and j.done > 0 for j in win.jobs.active()), timeout=20000)
    assert win.progress.cancel_button.isVisible()
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000) as blocker:
        qtbot.mouseClick(win.progress.cancel_button, Qt.LeftButton)
    assert blocker.args == [False]
    qtbot.waitUntil(lambda: not win.jobs.busy, timeout=10000)
    qtbot.waitUntil(lambda: not win.progress.bar.isVisible() and not win.progress.cancel_button.isVisible(),
                    timeout=5000)
    assert not win.errors and not win.messages.error_dialogs  # cancelling is not an error
    assert any("cancelled" in e for e in win.job_log.entries)
    # still usable: select, search, and a new calibration runs to the end
    click_node(qtbot, win, "cat_red")
    assert win.inspector.node == "cat_red"
    assert win.search("mul_a") == "mul_a"
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000) as blocker:
        win.controller.calibrate(CalibConfig(count=3))
    assert blocker.args == [True]
    assert win.scene.nodes["cat_red"].badge_texts == ["+1 rescale"]


def test_corrupt_model_shows_error_dialog(qtbot, win, model, tmp_path):
    open_and_settle(qtbot, win, model)
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf" * 10)
    win.open_model(bad)
    qtbot.waitUntil(lambda: bool(win.messages.error_dialogs), timeout=10000)
    dlg = win.messages.error_dialogs[-1]
    assert isinstance(dlg, ErrorDialog) and not dlg.isModal()
    assert "broken.onnx is not a readable ONNX model" in dlg.message
    assert "\n" not in dlg.message
    dlg.toggle.click()
    assert dlg.details.isVisibleTo(dlg)
    dlg.close()
    # the previous model stays open and usable
    assert win.session.graph.path == model
    assert "cat_red" in win.scene.nodes and not win.jobs.busy


def test_missing_model_error_has_one_line_message(qtbot, win, tmp_path):
    win.open_model(tmp_path / "nope.onnx")
    qtbot.waitUntil(lambda: bool(win.errors), timeout=10000)
    title, msg, details = win.errors[-1]
    assert "model file not found" in msg and "\n" not in msg


def test_unexpected_exception_in_job_becomes_dialog(qtbot, win):
    def boom(progress, cancelled):
        raise RuntimeError("kaboom\nsecond line")

    win.jobs.submit("test", "test job", boom)
    qtbot.waitUntil(lambda: bool(win.messages.error_dialogs), timeout=10000)
    dlg = win.messages.error_dialogs[-1]
    assert dlg.message == "unexpected RuntimeError: kaboom second line"
    assert "Traceback" in dlg.details.toPlainText()


def test_stale_results_are_dropped(qtbot, win):
    gate = threading.Event()
    got = []

    def slow(progress, cancelled):
        gate.wait(10)
        return "old"

    j1 = win.jobs.submit("k", "slow", slow, got.append)
    j2 = win.jobs.submit("k", "fast", lambda p, c: "new", got.append)
    qtbot.waitUntil(lambda: j2.status == "done", timeout=10000)
    gate.set()
    qtbot.waitUntil(lambda: j1.status != "running", timeout=10000)
    assert got == ["new"] and j1.status in ("stale", "cancelled")
    # a key that changes while the job runs makes the result stale too
    key = [1]
    gate2 = threading.Event()
    j3 = win.jobs.submit("k2", "keyed", lambda p, c: gate2.wait(10) and "x", got.append, stale_key=lambda: key[0])
    key[0] = 2
    gate2.set()
    qtbot.waitUntil(lambda: j3.status != "running", timeout=10000)
    assert j3.status == "stale" and got == ["new"]


# -- dialogs, settings, screenshot ---------------------------------------------------------------------


def test_open_dialog_defaults_and_remembered_values(qtbot, settings, tmp_path):
    p = band_model(tmp_path / "dyn.onnx", dynamic=True)
    dlg = OpenDialog(p, {})
    qtbot.addWidget(dlg)
    assert dlg.shape_edits["x"].text() == "1x3x640x640"
    dlg.shape_edits["x"].setText("1x3x32x32")
    dlg.count.setValue(5)
    vals = dlg.values()
    assert vals["shapes"] == {"x": "1x3x32x32"} and vals["calib"]["count"] == 5
    ms = ModelSettings(settings)
    ms.save(p, vals)
    dlg2 = OpenDialog(p, ms.load(p))
    qtbot.addWidget(dlg2)
    assert dlg2.shape_edits["x"].text() == "1x3x32x32" and dlg2.count.value() == 5
    assert calib_config(vals["calib"]).count == 5
    dlg2.shape_edits["x"].setText("1x3xbad")
    with pytest.raises(Exception, match="bad input shape"):
        dlg2.values()


def test_request_open_uses_remembered_shapes_without_asking(qtbot, win, tmp_path, monkeypatch):
    p = band_model(tmp_path / "dyn.onnx", dynamic=True)
    win.opener.model_settings.save(p, {"shapes": {"x": "1x3x16x16"}, "calib": {"count": 3}})
    monkeypatch.setattr(OpenDialog, "exec", lambda self: pytest.fail("dialog shown"))
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        assert win.request_open(p)
    assert win.session.graph.input_shapes == {"x": (1, 3, 16, 16)}
    assert win.opener.recent_files()[0] == str(p.resolve())
    assert win.window_actions.recent_menu.actions()[0].text() == "dyn.onnx"


def test_drop_opens_model_through_dialog(qtbot, win, model, monkeypatch):
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    monkeypatch.setattr(OpenDialog, "exec", lambda self: OpenDialog.Accepted)
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(model))])
    ev = QDropEvent(QPointF(10, 10), Qt.CopyAction, md, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=20000):
        win.dropEvent(ev)
    assert win.session.graph.path == model


@pytest.mark.slow
def test_screenshot_command_writes_png(qtbot, model, tmp_path, capsys):
    from PIL import Image

    from qtquant.cli import main

    out = tmp_path / "shot.png"
    rc = main(["screenshot", str(model), "-o", str(out), "--overlay", "mismatch", "--select", "cat_red",
               "--size", "900x600", "--calib-count", "3", "--canvas-only"])
    assert rc == 0
    im = Image.open(out)
    assert im.size == (900, 600)
    assert capsys.readouterr().out.strip().endswith(f"wrote {out} (900x600)")
    # A size below the window's minimum grows to it, and the line says so
    small = tmp_path / "small.png"
    assert main(["screenshot", str(model), "-o", str(small), "--size", "300x200", "--calib-count", "2"]) == 0
    got = Image.open(small).size
    assert got != (300, 200)
    assert capsys.readouterr().out.strip().endswith(
        f"wrote {small} ({got[0]}x{got[1]}; --size asked 300x200, the window's minimum size is larger)")
    # the red band colour is on the picture (the selected Concat)
    px = np.asarray(im.convert("RGB")).reshape(-1, 3)
    assert (np.abs(px.astype(int) - (0xE5, 0x39, 0x35)).sum(axis=1) < 8).sum() > 200
    full = tmp_path / "full.png"
    assert main(["screenshot", str(model), "-o", str(full), "--calib-count", "2"]) == 0
    assert Image.open(full).size == (1600, 1000)
    assert main(["screenshot", str(model), "-o", str(out), "--select", "nope", "--calib-count", "2"]) == 3


def test_qtquant_command_opens_model_and_demo(qtbot, tmp_path, monkeypatch, model):
    """``qtquant MODEL.onnx`` and plain ``qtquant`` (the demo) through the real entry point."""
    import sys

    from PySide6.QtWidgets import QApplication

    import qtquant.gui.window.app as appmod
    from qtquant.cli import main

    QSettings.setPath(QSettings.NativeFormat, QSettings.UserScope, str(tmp_path / "config"))
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # run_app installs its own
    real = QApplication.instance()
    seen = []

    class App:  # stands in for the event loop: wait for the analysis, then close the window
        def exec(self):
            win = [w for w in real.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()][-1]
            qtbot.waitUntil(lambda: win.relay.concats() is not None and win.scene.spec is not None, timeout=30000)
            seen.append((win.session.graph.path.name, win.session.options.march,
                         sorted(c.node for c in win.relay.concats() if c.rescales)))
            qtbot.waitUntil(lambda: not win.controller.busy, timeout=30000)
            win.close()
            return 0

    monkeypatch.setattr(appmod, "make_app", lambda argv=None: App())
    interval = sys.getswitchinterval()  # run_app shortens it for the app's process
    try:
        assert main([str(model)]) == 0
        assert main([]) == 0
    finally:
        sys.setswitchinterval(interval)
    assert seen[0] == ("bands.onnx", DEFAULT_MARCH, ["cat_orange", "cat_red", "cat_yellow"])
    # the demo opens on the default march, and both its Concats rescale their upsampled windows there
    assert seen[1] == ("multiscale_attention.onnx", DEFAULT_MARCH, ["attn/k_cat", "attn/v_cat"])
    assert (tmp_path / "cache" / "qtquant").is_dir()


def _drag(view, a, b, modifiers=Qt.NoModifier):
    """Press, move in steps and release on the viewport (QTest's mouseMove carries no buttons)."""
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    vp = view.viewport()

    def send(kind, pos, buttons):
        p = QPointF(pos)
        ev = QMouseEvent(kind, p, vp.mapToGlobal(p), Qt.LeftButton if kind != QEvent.MouseMove else Qt.NoButton,
                         buttons, modifiers)
        QApplication.sendEvent(vp, ev)

    send(QEvent.MouseButtonPress, a, Qt.LeftButton)
    for k in range(1, 11):
        send(QEvent.MouseMove, a + (b - a) * k / 10, Qt.LeftButton)
    send(QEvent.MouseButtonRelease, b, Qt.NoButton)


def test_drag_pans_and_shift_drag_selects(qtbot, win, model):
    open_and_settle(qtbot, win, model)
    win.view.set_zoom(1.0)
    sc = win.scene
    # empty background just below the output terminals
    below = max(it.pos().y() for it in sc.nodes.values()) + 120
    win.view.centerOn(sc.nodes["mul_a"].pos().x(), below - 150)
    start = win.view.mapFromScene(sc.nodes["mul_a"].pos().x(), below)
    h0 = win.view.horizontalScrollBar().value()
    _drag(win.view, start, start + QPoint(-150, 0))
    assert win.view.horizontalScrollBar().value() == h0 + 150  # plain drag pans
    assert sc.selected_names() == []
    # Shift+drag from empty space: a rubber band around the two Concats on the left
    left = sorted(CATS, key=lambda n: sc.nodes[n].pos().x())[:2]
    win.view.centerOn(sc.nodes[left[0]])
    r = sc.nodes[left[0]].sceneBoundingRect().united(sc.nodes[left[1]].sceneBoundingRect())
    a = win.view.mapFromScene(r.left() - 20, r.top() - 25)
    b = win.view.mapFromScene(r.right() + 5, r.bottom() + 5)
    _drag(win.view, a, b, Qt.ShiftModifier)
    assert sorted(sc.selected_names()) == sorted(left)
    assert win.inspector.title.text() == "2 nodes selected"


def test_minimap_drawn_in_slices_equals_one_pass(qtbot, win, model, monkeypatch):
    """Big graphs draw the minimap base over several event-loop turns; the picture is the same."""
    from qtquant.gui.canvas import overlays as minimap

    open_and_settle(qtbot, win, model)
    mm = win.view.minimap
    mm.refresh()
    whole = mm._img.copy()
    mm._base_key = None  # as if the size changed: draw the base again, now in many slices
    monkeypatch.setattr(minimap.MiniMap, "SLICE_S", -1.0)
    steps = []
    mm._step_timer.timeout.connect(lambda: steps.append(1))
    real = mm._base_steps
    monkeypatch.setattr(mm, "_base_steps", lambda *a: real(*a, chunk=1))
    mm.refresh()
    qtbot.waitUntil(lambda: mm._building is None and mm._base_key is not None, timeout=5000)
    assert not mm._step_timer.isActive()
    assert mm._img == whole
    assert len(steps) >= len(win.scene.edges) + len(win.scene.nodes) - 1  # one event-loop turn per item


def test_looks_applied_in_slices_end_as_in_one_pass(qtbot, win, model, monkeypatch):
    """Big graphs restyle over several event-loop turns; the end state is the same."""
    from qtquant.gui.canvas import scene as canvas

    open_and_settle(qtbot, win, model)
    win.set_overlay("mismatch")
    whole = {n: it._look_key for n, it in win.scene.nodes.items()}
    edges = [e._style_key for e in win.scene.edges]
    win.set_overlay("none")
    monkeypatch.setattr(canvas, "APPLY_SLICE", 1)
    changed = []
    win.scene.looksChanged.connect(lambda: changed.append(1))
    win.set_overlay("mismatch")
    assert win.scene.looks_pending and not changed  # one item done, the rest to come
    qtbot.waitUntil(lambda: not win.scene.looks_pending, timeout=5000)
    assert changed == [1]  # announced once, when complete
    assert {n: it._look_key for n, it in win.scene.nodes.items()} == whole
    assert [e._style_key for e in win.scene.edges] == edges
    win.set_overlay("none")
    win.scene.flush_looks()  # a screenshot or export applies everything at once
    assert not win.scene.looks_pending and not win.scene._apply_timer.isActive()


def test_minimap_moves_off_a_mismatched_concat_and_fits_a_small_canvas(qtbot, win, model, monkeypatch):
    """On the demo the minimap (bottom-right, 210 px on any canvas) hid one of the two mismatched
    Concats, badge and all, in the first view.  It now takes the bottom-left corner while the right
    one would hide a node with badges and the left hides less, comes back once the right hides none,
    and is smaller on a small canvas."""
    from qtquant.gui.canvas.view import BADGE_WEIGHT

    open_and_settle(qtbot, win, model)
    v, mm, sc = win.view, win.view.minimap, win.scene
    v.set_zoom(1.0)
    qtbot.waitUntil(lambda: mm.isVisible(), timeout=3000)
    vp = v.viewport().geometry()
    # What a widget over a node hides: a node with badges counts BADGE_WEIGHT, another 1
    marked = next(it for it in sc.nodes.values() if it.badges)
    v.centerOn(marked)
    box = v.mapFromScene(marked.sceneBoundingRect()).boundingRect().translated(vp.topLeft())
    assert v._hidden_under(box) >= BADGE_WEIGHT
    plain = next(it for it in sc.nodes.values() if not it.badges and it.kind == "op" and it.title != "Concat")
    v.centerOn(plain)
    box = v.mapFromScene(plain.sceneBoundingRect().adjusted(20, 5, -20, -5)).boundingRect().translated(vp.topLeft())
    assert v._hidden_under(box) == 1
    # Which corner, from what each would hide
    hides = {}
    monkeypatch.setattr(v, "_hidden_under", lambda r: hides["left" if r.x() < vp.center().x() else "right"])
    for right, left, on_left in ((BADGE_WEIGHT, 2, True), (BADGE_WEIGHT + 3, 1, True), (0, BADGE_WEIGHT, False),
                                 (2 * BADGE_WEIGHT, 2 * BADGE_WEIGHT + 1, False), (BADGE_WEIGHT, 0, True),
                                 (3, 0, False)):
        mm.on_left = False
        hides.update(right=right, left=left)
        v._place_minimap()
        assert mm.on_left is on_left, (right, left)
        assert (mm.x() < vp.center().x()) is on_left
    hides.update(right=BADGE_WEIGHT - 1, left=0)  # on the left, and the right now hides nothing marked: back
    mm.on_left = True
    v._place_minimap()
    assert not mm.on_left
    mm.dragging, mm.on_left = True, False  # a drag in the minimap: it stays where it is
    hides.update(right=BADGE_WEIGHT, left=0)
    v._place_minimap()
    assert not mm.on_left
    mm.dragging = False
    win.resize(700, 600)  # a small canvas: a smaller minimap
    qtbot.waitUntil(lambda: max(mm.width(), mm.height()) - 8 == mm.box < mm.BOX, timeout=3000)
