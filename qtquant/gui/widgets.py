"""Small widgets the window and the docks share."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox

__all__ = ["bits_box"]


def bits_box(prefix: str = "") -> QDoubleSpinBox:
    """A spin box for a threshold in bits lost (the options' ``*_max_bits_lost``)."""
    box = QDoubleSpinBox()
    box.setRange(0.0, 16.0)
    box.setSingleStep(0.25)
    box.setDecimals(2)
    box.setPrefix(prefix)
    box.setSuffix(" bits")
    box.setKeyboardTracking(False)  # typed "2.5" is one change (one undo step), not "2" then "2.5"
    return box
