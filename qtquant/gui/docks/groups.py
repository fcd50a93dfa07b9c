"""The Groups dock: every shared-observer group with its members, scale, bits lost and latency saved.

What each row says is :func:`qtquant.app.views.groups.group_rows` (Qt-free); :class:`GroupsPanel`
shows it as a tree (a group row, its member tensors below), keeps the selection across
refreshes, and offers Ungroup / Remove member in a context menu.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QMenu, QTreeWidget, QTreeWidgetItem,
                               QVBoxLayout, QWidget)

from ...app.views.groups import GROUP_HEADERS, GROUP_TIPS, GroupRow, group_rows
from ..style import qcolor

__all__ = ["GroupsPanel"]

SAVED = GROUP_HEADERS.index("Saved")


def _swatch(color: QColor) -> QIcon:
    pm = QPixmap(14, 14)
    pm.fill(Qt.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.Antialiasing)
    fill = QColor(color)
    fill.setAlpha(120)
    p.setBrush(fill)
    p.setPen(color)
    p.drawRoundedRect(1, 1, 12, 12, 3, 3)
    p.end()
    return QIcon(pm)


GID_ROLE = Qt.UserRole
TENSOR_ROLE = Qt.UserRole + 1


class GroupsPanel(QWidget):
    """Groups and members; select a group to highlight its hull, right-click to edit."""

    groupSelected = Signal(int)  # -1: none
    ungroupRequested = Signal(list)  # group ids
    removeMemberRequested = Signal(int, str)
    nodeActivated = Signal(str)

    HEADERS = list(GROUP_HEADERS)
    TIPS = list(GROUP_TIPS)

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.rows: list[GroupRow] = []
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(self.HEADERS))
        self.tree.setHeaderLabels(self.HEADERS)
        for i, tip in enumerate(self.TIPS):
            self.tree.headerItem().setToolTip(i, tip)
        self.tree.setSelectionMode(QAbstractItemView.SingleSelection)
        self.tree.setUniformRowHeights(True)
        self.tree.setTextElideMode(Qt.ElideLeft)
        self.tree.setIconSize(QSize(14, 14))
        self.tree.setContextMenuPolicy(Qt.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._menu)
        self.tree.itemSelectionChanged.connect(self._selection)
        self.tree.itemDoubleClicked.connect(self._activated)
        hh = self.tree.header()
        hh.setStretchLastSection(False)
        hh.setSectionResizeMode(0, QHeaderView.Stretch)
        for i in range(1, len(self.HEADERS)):
            hh.setSectionResizeMode(i, QHeaderView.ResizeToContents)
        self.hint = QLabel("No groups. Shift+drag to select producers, then Share (Ctrl+G); or drag nodes "
                           "onto a Concat; or Auto-share.")
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("color: #666; padding: 4px")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.tree)
        lay.addWidget(self.hint)
        self._expanded: set[int] = set()
        relay.on_state_change(self.refresh)
        relay.perfChanged.connect(self.show_perf)

    # -- content ---------------------------------------------------------------------------
    def refresh(self) -> None:
        s = self.relay.session
        keep = self.selected_group()
        for i in range(self.tree.topLevelItemCount()):
            it = self.tree.topLevelItem(i)
            gid = it.data(0, GID_ROLE)
            if it.isExpanded():
                self._expanded.add(gid)
            else:
                self._expanded.discard(gid)
        self.rows = group_rows(s) if s is not None else []
        self.tree.blockSignals(True)
        self.tree.clear()
        select = None
        for r in self.rows:
            top = QTreeWidgetItem(list(r.cells))
            top.setIcon(0, _swatch(qcolor(r.color)))
            top.setData(0, GID_ROLE, r.id)
            top.setToolTip(0, r.tooltip)
            for c in range(1, len(self.HEADERS)):
                top.setTextAlignment(c, Qt.AlignRight | Qt.AlignVCenter)
            for m in r.members:
                ch = QTreeWidgetItem(list(m.cells))
                ch.setData(0, GID_ROLE, r.id)
                ch.setData(0, TENSOR_ROLE, m.tensor)
                ch.setToolTip(0, m.tooltip)
                ch.setToolTip(2, "the member's own scale, before sharing")
                for c in (2, 3):
                    ch.setTextAlignment(c, Qt.AlignRight | Qt.AlignVCenter)
                top.addChild(ch)
            self.tree.addTopLevelItem(top)
            top.setExpanded(r.id in self._expanded)
            if r.id == keep:
                select = top
        if select is not None:
            select.setSelected(True)
        self.tree.blockSignals(False)
        if keep is not None and select is None:  # the selected group is gone (undo, ungroup)
            self.groupSelected.emit(-1)
        self.hint.setVisible(not self.rows)

    def show_perf(self) -> None:
        """A new simulation changes only the Saved column: the tree keeps its items (selection,
        expansion, scroll position)."""
        s = self.relay.session
        self.rows = group_rows(s) if s is not None else []
        for r in self.rows:
            it = self.item_of(r.id)
            if it is not None:
                it.setText(SAVED, r.cells[SAVED])

    def row(self, gid: int) -> GroupRow | None:
        return next((r for r in self.rows if r.id == gid), None)

    def item_of(self, gid: int) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            it = self.tree.topLevelItem(i)
            if it.data(0, GID_ROLE) == gid:
                return it
        return None

    def selected_group(self) -> int | None:
        items = self.tree.selectedItems()
        return items[0].data(0, GID_ROLE) if items else None

    def select_group(self, gid: int | None) -> None:
        self.tree.clearSelection()
        it = self.item_of(gid) if gid is not None else None
        if it is not None:
            it.setSelected(True)
            self.tree.scrollToItem(it)

    # -- interaction ---------------------------------------------------------------------
    def _selection(self) -> None:
        gid = self.selected_group()
        self.groupSelected.emit(-1 if gid is None else gid)

    def _activated(self, item, col) -> None:
        t = item.data(0, TENSOR_ROLE)
        s = self.relay.session
        if t and s is not None and t in s.graph.tensors and s.graph.tensors[t].producer:
            self.nodeActivated.emit(s.graph.tensors[t].producer)

    def _menu(self, pos) -> None:
        item = self.tree.itemAt(pos)
        if item is None:
            return
        gid = item.data(0, GID_ROLE)
        t = item.data(0, TENSOR_ROLE)
        menu = QMenu(self)
        if t:
            menu.addAction(f"Remove {t} from the group", lambda: self.removeMemberRequested.emit(gid, t))
            menu.addAction("Show its producer", lambda: self._activated(item, 0))
        menu.addAction(f"Ungroup {self.row(gid).title if self.row(gid) else gid}",
                       lambda: self.ungroupRequested.emit([gid]))
        self.menu = menu  # kept for tests
        menu.popup(self.tree.viewport().mapToGlobal(pos))
