"""Small widgets the window and the docks share."""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDoubleSpinBox

__all__ = ["OptionSpinBox", "bits_box"]


class OptionSpinBox(QDoubleSpinBox):
    """A spin box for an option that is an undoable edit once committed (Enter, focus out).

    Ctrl+Z / Ctrl+Shift+Z with nothing typed and uncommitted go to the window's Undo and Redo: a focused
    line edit would otherwise take them for its own text history and the user's undo would do nothing
    visible. While a value is being typed they stay the text's."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setKeyboardTracking(False)  # typed "2.5" is one change (one undo step), not "2" then "2.5"

    def shown_text(self) -> str:
        """The text the committed value shows."""
        if self.specialValueText() and self.value() == self.minimum():
            return self.specialValueText()
        return self.prefix() + self.textFromValue(self.value()) + self.suffix()

    def event(self, e) -> bool:
        if (e.type() == QEvent.ShortcutOverride and (e.matches(QKeySequence.Undo) or e.matches(QKeySequence.Redo))
                and self.text() == self.shown_text()):
            e.ignore()  # not overridden: the window's shortcut fires
            return False
        return super().event(e)


def bits_box(prefix: str = "") -> QDoubleSpinBox:
    """A spin box for a threshold in bits lost (the options' ``*_max_bits_lost``)."""
    box = OptionSpinBox()
    box.setRange(0.0, 16.0)
    box.setSingleStep(0.25)
    box.setDecimals(2)
    box.setPrefix(prefix)
    box.setSuffix(" bits")
    return box
