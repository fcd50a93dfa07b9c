"""The Sensitivity dock ranks int16 and float side by side by gain per µs, applies a row from the dock
(Enter, the Apply button, the context menu) as one undoable command, and reaches a target SQNR for
the least latency in one undoable step (issue 53)."""

import pytest
from PySide6.QtCore import Qt

from builders import save, spiky_chain_model
from guikit import open_settled
from qtquant.base.vocab import Precision


@pytest.fixture
def spiky(tmp_path):
    return save(spiky_chain_model(spike=4000.0), tmp_path / "spiky.onnx")


def _measured(qtbot, win, top=1):
    dock = win.sensitivity
    dock.top_n.setValue(top)
    qtbot.mouseClick(dock.measure, Qt.LeftButton)
    qtbot.waitUntil(lambda: win.relay.accuracy() is not None, timeout=180000)
    return dock


def _row(dock, node, precision):
    return next(i for i in range(dock.table.rowCount())
                if dock.node_at(i) == node and dock.table.item(i, 1).text() == precision)


def test_int16_first_and_applied_from_the_row(qtbot, make_win, spiky):
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, spiky)
    dock = _measured(qtbot, win)
    header = [dock.table.horizontalHeaderItem(j).text() for j in range(dock.table.columnCount())]
    assert "dB/µs" in header
    # the cheapest fix per µs first: int16 of the node whose scale crushes the signal
    assert dock.node_at(0) == "add_spike" and dock.table.item(0, 1).text() == "int16"
    # Enter on the selected row applies it
    dock.table.setFocus()
    dock.table.selectRow(0)
    qtbot.keyClick(dock.table, Qt.Key_Return)
    assert win.session.precision == {"b": Precision.INT16}
    assert "add_spike" in win.stack.undo_text and "int16" in win.stack.undo_text
    win.stack.undo()
    assert win.session.precision == {}
    # the Apply button applies the selected row: float this time
    dock.table.selectRow(_row(dock, "add_spike", "float"))
    assert dock.apply.isEnabled()
    qtbot.mouseClick(dock.apply, Qt.LeftButton)
    assert win.session.precision == {"b": Precision.FLOAT}
    win.stack.undo()
    # the context menu of a row offers the same
    acts = dock.context_actions(_row(dock, "add_spike", "int16"))
    assert any("int16" in a.text() for a in acts)
    next(a for a in acts if a.text().startswith("Apply")).trigger()
    assert win.session.precision == {"b": Precision.INT16}


def test_reach_a_target_for_the_least_latency_is_one_undo_step(qtbot, make_win, spiky):
    win = make_win(show_dialogs=False)
    open_settled(qtbot, win, spiky)
    dock = _measured(qtbot, win)
    rep = win.relay.accuracy()
    i16 = next(r for r in rep.sensitivity if r.precision is Precision.INT16 and not r.estimate)
    dock.target.setValue(rep.base.worst_db + i16.gain - 1.0)
    steps = win.stack.count
    qtbot.mouseClick(dock.reach, Qt.LeftButton)
    qtbot.waitUntil(lambda: win.accuracy_jobs.last_reach is not None, timeout=120000)
    assert win.session.precision == {"b": Precision.INT16}  # int16 is enough: no float node
    assert win.stack.count == steps + 1 and win.stack.undo_text.startswith("Reach")
    assert "reached" in dock.status.text()
    win.stack.undo()
    assert win.session.precision == {}
