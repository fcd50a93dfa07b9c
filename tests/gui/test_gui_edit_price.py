"""The Performance dock prices precision edits against the model as opened (issue 53): keep in float
and int16 show their latency change with the right sign, the SQNR its change, and with a group too
the price splits into sharing and precision."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from builders import edit_model  # noqa: E402
from guikit import open_settled, settle  # noqa: E402
from qtquant.app.commands import SetPrecisionCommand, ShareCommand  # noqa: E402
from qtquant.app.views.perf import BAD, GOOD  # noqa: E402


def _settled(qtbot, win):
    rev = win.session.revision
    qtbot.waitUntil(lambda: win.session.fidelity is not None and win.session.fidelity.revision == rev,
                    timeout=30000)
    settle(qtbot, win, timeout=30000)
    return win.perf_summary.values


@pytest.mark.parametrize("precision", ["float", "int16"])
def test_a_precision_edit_shows_its_price(qtbot, make_win, tmp_path, precision):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    vals = _settled(qtbot, win)
    assert "(" not in vals["latency"].text()  # nothing edited: no change shown
    win.stack.push(SetPrecisionCommand.for_names(win.session, ["br_b"], precision))
    vals = _settled(qtbot, win)
    assert f'color:{BAD}">(+' in vals["board"].text()  # slower on the board: a plus, in red
    # The static estimate is the BPU part: int16 costs it more, a node kept in float leaves it for the CPU.
    assert (f'color:{GOOD}">(−' if precision == "float" else f'color:{BAD}">(+') in vals["latency"].text()
    assert "precision" in vals["price"].text() and "sharing" not in vals["price"].text()
    assert " dB <span" in vals["sqnr"].full_text()  # the SQNR says what the edit changed
    assert "as opened" in win.perf_summary.note.text()
    # The chart of the slowest layers marks a node kept in float as the CPU's.
    assert any(cpu for name, _, _, cpu in win.perf_summary.chart.rows if name == "br_b") == (precision == "float")


def test_sharing_and_precision_are_priced_apart(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    _settled(qtbot, win)
    win.stack.push(ShareCommand(tensors=("br_d_out", "br_e_out")))
    vals = _settled(qtbot, win)
    assert f'color:{GOOD}">(−' in vals["latency"].text()
    win.stack.push(SetPrecisionCommand.for_names(win.session, ["br_b"], "float"))
    vals = _settled(qtbot, win)
    price = vals["price"].text()
    assert f'sharing <span style="color:{GOOD}">−' in price and f'precision <span style="color:{BAD}">+' in price
