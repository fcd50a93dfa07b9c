"""The confirmation before Share on a selection: the members, and the bits each would lose.

The proposal is :class:`~qtquant.app.shareplan.SharePlan` (app layer); this only shows it.
Enter confirms (Share is the default button), Escape cancels.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QLabel, QTableWidget,
                               QTableWidgetItem, QVBoxLayout)

__all__ = ["ShareConfirmDialog"]


def _bits(b) -> str:
    return "—" if b is None else f"{b:.2f}"


class ShareConfirmDialog(QDialog):
    def __init__(self, plan, parent=None):
        super().__init__(parent)
        self.plan = plan
        self.setWindowTitle("Share these tensors?")
        self.setWindowModality(Qt.WindowModal)
        lay = QVBoxLayout(self)
        worst = plan.worst
        head = (f"Share {len(plan.members)} tensors feeding {', '.join(plan.concats)}"
                + ("" if worst is None else f" — worst member loses {worst:.2f} bits"))
        self.headline = QLabel(head)
        self.headline.setWordWrap(True)
        lay.addWidget(self.headline)
        self.table = t = QTableWidget(len(plan.members), 3)
        t.setHorizontalHeaderLabels(["Tensor", "Bits lost now", "Bits lost after"])
        t.verticalHeader().hide()
        t.setEditTriggers(QAbstractItemView.NoEditTriggers)
        t.setSelectionMode(QAbstractItemView.NoSelection)
        t.setFocusPolicy(Qt.NoFocus)  # Enter goes to the default button
        for r, m in enumerate(plan.members):
            name = QTableWidgetItem(m)
            name.setToolTip(m)
            t.setItem(r, 0, name)
            for c, val in ((1, plan.now.get(m)), (2, plan.bits.get(m))):
                it = QTableWidgetItem(_bits(val))
                it.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                t.setItem(r, c, it)
        hh = t.horizontalHeader()
        hh.setSectionResizeMode(0, QHeaderView.Stretch)  # the name takes the room; numbers stay by it
        for c in (1, 2):
            hh.setSectionResizeMode(c, QHeaderView.ResizeToContents)
        lay.addWidget(t, 1)
        notes = [f"Left out {name}: {why}" for name, why in plan.left_out]
        if plan.unquantized:
            notes.append(f"Left out {plan.unquantized} outputs that cannot be quantized")
        self.notes = QLabel("\n".join(notes))
        self.notes.setWordWrap(True)
        self.notes.setVisible(bool(notes))
        lay.addWidget(self.notes)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Cancel)
        self.share_button = self.buttons.addButton("Share", QDialogButtonBox.AcceptRole)
        self.share_button.setDefault(True)
        self.share_button.setAutoDefault(True)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        # Wide enough for the longest name: the member list is what the user checks.
        width = (t.fontMetrics().horizontalAdvance(max(plan.members, key=len)) + 24
                 + sum(hh.sectionSizeHint(c) for c in (1, 2)) + t.frameWidth() * 2 + 40)
        self.resize(min(max(width, 480), 1100), min(160 + 30 * len(plan.members) + 20 * len(notes), 700))
        self.share_button.setFocus()
