"""The Undo History dock: the command stack's entries, the current one selected.

Row 0 is the unedited model, row *i* the state after the *i*-th command; clicking a row
undoes or redoes up to it.  The rows come from :meth:`CommandStack.texts` and
:attr:`CommandStack.index`: the view keeps no history of its own.
"""

from __future__ import annotations

from PySide6.QtCore import QStringListModel
from PySide6.QtWidgets import QAbstractItemView, QListView

__all__ = ["HistoryView"]

EMPTY_LABEL = "<unedited model>"


class HistoryView(QListView):
    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.setModel(QStringListModel(self))
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.clicked.connect(self._go)
        relay.stackChanged.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        st = self.relay.stack
        rows = [EMPTY_LABEL] + st.texts()
        if rows != self.model().stringList():
            self.model().setStringList(rows)
        self.setCurrentIndex(self.model().index(st.index, 0))

    def _go(self, index) -> None:
        st, s = self.relay.stack, self.relay.session
        if s is None:
            return
        with s.batch():  # several steps, one refresh of the views
            while st.index > index.row() and st.can_undo:
                st.undo()
            while st.index < index.row() and st.can_redo:
                st.redo()
