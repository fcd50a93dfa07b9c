"""The Groups dock: every shared-observer group with its members, scale, bits lost and latency saved.

:func:`group_rows` is the Qt-free part (what each row says); :class:`GroupsPanel` shows it
as a tree (a group row, its member tensors below), keeps the selection across refreshes,
and offers Ungroup / Remove member in a context menu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QMenu, QTreeWidget, QTreeWidgetItem,
                               QVBoxLayout, QWidget)

from ..quant import bits_lost
from .hulls import group_color
from ..app.views.perfdata import rescale_us_by_concat
from .style import fmt_scale, fmt_us

__all__ = ["MemberRow", "GroupRow", "group_rows", "with_savings", "GroupsPanel"]


@dataclass
class MemberRow:
    tensor: str
    producer: str | None
    own_scale: float | None  # its scale without any group
    bits_lost: float | None  # log2(absmax(group) / absmax(tensor))


@dataclass
class GroupRow:
    id: int
    name: str
    members: list[MemberRow]
    scale: float | None
    worst_bits: float | None
    saved_us: float | None  # rescale cost of the Concats it touches, before minus after
    concats: list[str] = field(default_factory=list)
    notes: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """Short enough for the dock: auto-share names list every Concat ("auto: a, b, c ...")."""
        if not self.name:
            return f"group {self.id}"
        name = self.name.removeprefix("auto: ").removesuffix(" ...")
        parts = [p.strip() for p in name.split(", ")]
        more = len(self.concats) - 1 if self.name.startswith("auto: ") else len(parts) - 1
        return parts[0] + (f" +{more}" if more > 0 else "")


def _concats_by_group(graph, groups) -> dict[int, list[str]]:
    """Concats whose inputs or output a group holds; a Concat counts once, for the group
    holding its output if any, else the first group touching it (so savings add up)."""
    of = {t: g.id for g in groups for t in g.members}
    out: dict[int, list[str]] = {}
    for node in graph.concat_nodes():
        owner = of.get(node.outputs[0]) if node.outputs else None
        if owner is None:
            owner = next((of[t] for t in node.inputs if t in of), None)
        if owner is not None:
            out.setdefault(owner, []).append(node.name)
    return out


def group_rows(session, perf=None, baseline_perf=None) -> list[GroupRow]:
    g = session.graph
    groups = list(session.groups)
    ready = session.ready
    dm = session.domains if ready else None
    base = session.baseline_domains if ready else None
    after = rescale_us_by_concat(perf)
    before = rescale_us_by_concat(baseline_perf)
    by_group = _concats_by_group(g, groups)
    rows = []
    saved_of = _savings(after, before)
    for gr in groups:
        members, worst, scale = [], None, None
        for t in gr.members:
            p = g.tensors[t].producer if t in g.tensors else None
            b = own = None
            if dm is not None and t in dm.of:
                d = dm.domain_of(t)
                scale = d.scale if scale is None else scale
                own = base.scale_of(t)
                r = dm.member_range.get(t)
                if r is not None:
                    b = bits_lost(r, (d.lo, d.hi), dm.scheme)
                    worst = b if worst is None else max(worst, b)
            members.append(MemberRow(t, p, own, b))
        cats = by_group.get(gr.id, [])
        rows.append(GroupRow(gr.id, gr.name, members, scale, worst, saved_of(cats), cats, tuple(gr.notes)))
    return rows


def _savings(after: dict, before: dict):
    """Rescale cost saved over some Concats, before minus after (None without both results)."""
    return lambda cats: sum(before.get(c, 0.0) - after.get(c, 0.0) for c in cats) if after and before else None


def with_savings(rows, perf, baseline_perf) -> list[GroupRow]:
    """``rows`` with the latency saved according to another simulation."""
    saved_of = _savings(rescale_us_by_concat(perf), rescale_us_by_concat(baseline_perf))
    return [replace(r, saved_us=saved_of(r.concats)) for r in rows]


def _bits_text(b: float | None) -> str:
    if b is None:
        return "—"
    return "∞" if not math.isfinite(b) else f"{b:.2f}"


def _saved_text(us: float | None) -> str:
    return fmt_us(us) if us is not None else "—"


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

    HEADERS = ["Group", "Tensors", "Scale", "Bits lost", "Saved"]
    TIPS = ["group name (or id) and its members; the colour is its hull on the canvas",
            "number of tensors tied to the shared observer", "the shared scale",
            "worst bits a member loses by sharing: log2(absmax(group) / absmax(member))",
            "latency saved: rescale cost of the Concats it touches, before minus after"]

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
        self.rows = group_rows(s, self.relay.perf(), self.relay.perf(baseline=True)) if s is not None else []
        self.tree.blockSignals(True)
        self.tree.clear()
        select = None
        for r in self.rows:
            top = QTreeWidgetItem([r.title, str(len(r.members)), fmt_scale(r.scale), _bits_text(r.worst_bits),
                                   _saved_text(r.saved_us)])
            top.setIcon(0, _swatch(group_color(r.id)))
            top.setData(0, GID_ROLE, r.id)
            tip = [f"group {r.id}" + (f" ({r.name})" if r.name else "") + f": {len(r.members)} tensors"]
            if r.concats:
                tip.append("Concats: " + ", ".join(r.concats[:6]) + (" …" if len(r.concats) > 6 else ""))
            tip += list(r.notes)
            top.setToolTip(0, "\n".join(tip))
            for c in range(1, len(self.HEADERS)):
                top.setTextAlignment(c, Qt.AlignRight | Qt.AlignVCenter)
            for m in r.members:
                ch = QTreeWidgetItem([m.tensor, "", fmt_scale(m.own_scale), _bits_text(m.bits_lost), ""])
                ch.setData(0, GID_ROLE, r.id)
                ch.setData(0, TENSOR_ROLE, m.tensor)
                ch.setToolTip(0, f"{m.tensor}\nproduced by {m.producer or '(model input or constant)'}\n"
                                 f"own scale {fmt_scale(m.own_scale)}; right-click to remove it from the group")
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
        """A new simulation changes only the Saved column: the tree keeps its items."""
        self.rows = with_savings(self.rows, self.relay.perf(), self.relay.perf(baseline=True))
        for r in self.rows:
            it = self.item_of(r.id)
            if it is not None:
                it.setText(4, _saved_text(r.saved_us))

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
