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


@pytest.fixture
def win(make_win):
    return make_win()


@pytest.fixture
def model(tmp_path):
    return edit_model(tmp_path / "edit.onnx")


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
    win.stack.set_clean()
