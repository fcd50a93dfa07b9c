"""The graph canvas's scene (the view that shows it is :mod:`qtquant.gui.canvas.view`).

The scene is built once per layout from a :class:`~qtquant.app.scene.SceneSpec` whose
coordinates were computed in a worker thread.  Afterwards only looks change
(:meth:`GraphScene.apply_looks`): overlays never move an item.
"""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QPointF, QRectF, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsScene

from .hulls import HullLayer
from .overlays import Legend, MiniMap
from .items import (ITEM_CLASSES, LABEL_DX, LABEL_DY, LOD_FAST, OVERVIEW_MIN_NODES, EdgeItem, EdgeLabel,
                    NodeItem, OverviewItem)
from ...app.scene import SceneSpec, node_size, spread_ports
from ..style import category_color

__all__ = ["GraphScene", "MiniMap", "Legend"]

APPLY_SLICE = 500  # looks applied per event-loop turn (a Concat's look with badges: ~50 µs)
COMPUTE_SLICE_S = 0.015  # time per event-loop turn for computing looks (20,000 nodes: ~80 ms in all)
LOD_OVERVIEW = LOD_FAST


class GraphScene(QGraphicsScene):
    """Holds the items of one laid-out graph and applies looks to them."""

    looksChanged = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackgroundBrush(QColor("#fafbfc"))
        self.nodes: dict[str, NodeItem] = {}
        self.edges: list[EdgeItem] = []
        self.edges_in: dict[str, list[EdgeItem]] = {}
        self.edges_out: dict[str, list[EdgeItem]] = {}
        self._edge_index: dict[tuple, list] = {}
        self._applied: tuple = ({}, {}, None)
        self._pending_nodes: dict = {}  # item -> look still to apply
        self._pending_edges: dict = {}  # edge -> style (None: the default) still to apply
        self._edge_default = None
        self._looks_dirty = False
        self._computing = None  # (steps, finish): looks still being computed, see compute_looks
        self._apply_timer = QTimer(self, singleShot=True, interval=0)
        self._apply_timer.timeout.connect(self._apply_some)
        self.labels: list[EdgeLabel] = []
        self.spec: SceneSpec | None = None
        self.emphasised: set[str] = set()  # nodes the minimap draws at least 3 px (Concats)
        self._labels_visible = False
        self._label_specs: list[tuple[str, str, float, float]] = []  # (tensor, text, x, y) not made yet
        self.overview: OverviewItem | None = None
        self.overview_active = False
        self.switching = False  # True while items are swapped for the overview (selection churn)
        self._kept_selection: list[str] = []
        self.hulls = HullLayer(self)  # group hulls behind the nodes
        # Graph node -> the canvas item standing for it (itself, or the collapsed block around
        # it); set by the presenter.  Nodes missing here are their own item.
        self.units: dict[str, str] = {}

    # -- building -------------------------------------------------------------------------
    def reset(self, message: str = "") -> None:
        """Empty the scene, optionally showing a centred hint."""
        self.clear()
        self.hulls.forget()
        self.nodes.clear()
        self.edges.clear()
        self.labels.clear()
        self.edges_in.clear()
        self.edges_out.clear()
        self._edge_index: dict[tuple, list] = {}  # (tensor, consumer) -> edge items
        self._applied: tuple = ({}, {}, None)  # the looks last applied (items start at the defaults)
        self._pending_nodes, self._pending_edges = {}, {}  # looks of items about to be deleted
        self._computing = None
        self._looks_dirty = False
        self.spec = None
        self.overview = None
        self.overview_active = False
        self._kept_selection = []
        self._label_specs = []
        self._labels_visible = False
        if message:
            t = self.addSimpleText(message)
            t.setBrush(QColor("#888"))
            f = t.font()
            f.setPixelSize(15)
            t.setFont(f)
            r = t.boundingRect()
            t.setPos(-r.width() / 2, -r.height() / 2)
            # Just the text and a margin: a wider rect scrolled a narrow canvas (a 1200 px window)
            # to its middle, cutting the hint off at both ends behind a scroll bar.
            self.setSceneRect(QRectF(-r.width() / 2 - 16, -200, r.width() + 32, 400))
        self.looksChanged.emit()

    def build(self, spec: SceneSpec) -> None:
        for _ in self.build_steps(spec):
            pass

    def build_steps(self, spec: SceneSpec, chunk: int = 100):
        """:meth:`build` as a generator yielding every ``chunk`` items, so the caller can go back
        to the event loop between slices.  ``self.spec`` is set only once every item exists."""
        self.reset()
        lay = spec.layout
        # Indexed as the slices add items, in a tree of the final depth: switching the index on
        # at the end indexed all 50,000 items in one event-loop turn (~0.1 s on a big graph),
        # and Qt's automatic depth rebuilds the whole tree each time the item count doubles.
        total = len(spec.nodes) + len(spec.edges)
        m = 60  # the tree covers the scene rectangle: known from the layout, set before any item
        self.setSceneRect(QRectF(lay.left - m, lay.top - m, lay.width + 2 * m, lay.height + 2 * m))
        self.setItemIndexMethod(QGraphicsScene.BspTreeIndex)
        self.setBspTreeDepth(max(5, math.ceil(math.log2(max(total, 2)))))
        for ns, (x, y) in zip(spec.nodes, lay.pos):
            cls = ITEM_CLASSES.get(ns.kind, NodeItem)
            w, h = node_size(ns.kind)
            item = cls(ns.name, ns.title, ns.subtitle, w, h, category_color(ns.category), ns.kind)
            item.setPos(x, y)
            self.addItem(item)
            self.nodes[ns.name] = item
            if len(self.nodes) % chunk == 0:
                self._index_now()
                yield
        names = [n.name for n in spec.nodes]
        routes = spec.routes
        if routes is None:  # a layout made without layout_scene
            routes = [list(r.points) for r in lay.routes]
            spread_ports(spec, routes, lay.pos)
        label_at: dict[str, tuple[float, float]] = {}
        for es, pts in zip(spec.edges, routes):
            e = EdgeItem(es.tensor, names[es.src], names[es.dst], pts)
            self.addItem(e)
            self.edges.append(e)
            self.edges_out.setdefault(e.src, []).append(e)
            self.edges_in.setdefault(e.dst, []).append(e)
            self._edge_index.setdefault((e.tensor, e.dst), []).append(e)
            label_at.setdefault(es.tensor, (pts[0][0] + LABEL_DX, pts[0][1] + LABEL_DY))
            if len(self.edges) % chunk == 0:
                self._index_now()
                yield
        # Shape labels are made the first time the zoom makes them legible (most large
        # graphs are first seen zoomed out): one label per tensor, at its first edge.
        label_of = {es.tensor: es.label for es in spec.edges}
        self._label_specs = [(t, label_of[t], x, y) for t, (x, y) in label_at.items()]
        self.emphasised = {n.name for n in spec.nodes if n.category == "concat"}
        self._labels_visible = False
        self._index_now()
        if len(self.nodes) >= OVERVIEW_MIN_NODES:
            self.overview = OverviewItem(self.sceneRect())
            self.overview.setVisible(False)
            self.addItem(self.overview)
            self.overview.rebuild(self.nodes.values(), self.edges)
        self.spec = spec

    def item_for(self, name: str) -> str:
        """The canvas item that shows graph node ``name`` now (a collapsed block hides it)."""
        return name if name in self.nodes else self.units.get(name, name)

    def morph(self, spec: SceneSpec) -> dict:
        """Change the items to ``spec`` in place (expand / collapse): see :mod:`.morph`."""
        from .morph import morph_scene

        return morph_scene(self, spec)

    def _index_now(self) -> None:
        # Qt indexes added items lazily, at the first query (a paint, a click): all 50,000 of
        # a big graph at once, ~0.25 s.  A query of an empty spot indexes this slice's items.
        self.items(QRectF(0, 0, 1e-3, 1e-3))

    # -- looks ----------------------------------------------------------------------------
    def apply_looks(self, node_looks: dict, edge_styles: dict, edge_default=None, *, now: bool = True) -> None:
        """``node_looks[name]``: a :class:`~qtquant.app.views.looks.NodeLook`; missing -> the plain look.

        ``edge_styles[(tensor, dst)]``: an ``EdgeLook``; others get ``edge_default``.
        Only items whose look differs from the last call are visited: after an edit on a
        20,000-node graph that is a few Concats, not 50,000 items.
        """
        self._computing = None  # these looks replace any still being computed
        prev_nodes, prev_edges, prev_default = self._applied
        for name in node_looks.keys() | prev_nodes.keys():
            look, prev = node_looks.get(name), prev_nodes.get(name)
            # Most nodes keep the very same shared look object: "is" spares a comparison call.
            if look is not prev and look != prev:
                item = self.nodes.get(name)
                if item is not None:
                    self._pending_nodes[item] = look
        if edge_default == prev_default:
            todo = [e for k in edge_styles.keys() | prev_edges.keys()
                    if edge_styles.get(k) is not prev_edges.get(k) and edge_styles.get(k) != prev_edges.get(k)
                    for e in self._edge_index.get(k, ())]
        else:
            todo = self.edges
        for e in todo:
            self._pending_edges[e] = edge_styles.get((e.tensor, e.dst))
        self._edge_default = edge_default
        self._applied = (dict(node_looks), dict(edge_styles), edge_default)
        if now:
            self._apply_some()
        elif self.looks_pending:
            self._apply_timer.start()

    def compute_looks(self, steps, finish) -> None:
        """Run the generator ``steps`` (it fills the looks) in slices of COMPUTE_SLICE_S, then
        ``apply_looks(*finish())``.  A small graph's looks are done within this call; a new
        call drops a computation still under way."""
        self._computing = (iter(steps), finish)
        self._apply_some()

    def _compute_some(self, budget: float | None) -> bool:
        """Advance the computation; True once its looks have been handed to apply_looks."""
        steps, finish = self._computing
        t0 = time.perf_counter()
        for _ in steps:
            if budget is not None and time.perf_counter() - t0 > budget:
                return False
        self._computing = None
        # A long slice leaves the first items to the next turn; a small graph's looks show now.
        # (A small graph always: one slice of items, and a loaded machine must not defer them.)
        now = budget is None or time.perf_counter() - t0 < budget / 2 or len(self.nodes) <= APPLY_SLICE
        self.apply_looks(*finish(), now=now)
        return True

    def _apply_some(self) -> None:
        """Apply up to APPLY_SLICE pending looks; the rest in the next event-loop turn (a
        switch of overlay restyles 50,000 items on a big graph)."""
        if self._computing is not None:
            if not self._compute_some(COMPUTE_SLICE_S):
                self._apply_timer.start()
            return  # apply_looks has applied the first slice
        n = 0
        while self._pending_nodes and n < APPLY_SLICE:
            item, look = self._pending_nodes.popitem()
            key = item._look_key
            item.set_look(look)
            self._looks_dirty |= item._look_key != key
            n += 1
        while self._pending_edges and n < APPLY_SLICE:
            e, st = self._pending_edges.popitem()
            key = e._style_key
            e.set_style(st or self._edge_default)
            self._looks_dirty |= e._style_key != key
            z = 1.2 if st else 1
            if e.zValue() != z:
                e.setZValue(z)
            n += 1
        if self._pending_nodes or self._pending_edges:
            self._apply_timer.start()
            return
        if self._looks_dirty:
            self._looks_dirty = False
            if self.overview is not None:
                self.overview.rebuild(self.nodes.values(), self.edges)
            self.looksChanged.emit()

    def flush_looks(self) -> None:
        """Apply every pending look now (before a screenshot or an export)."""
        if self._computing is not None:
            self._compute_some(None)
        while self.looks_pending:
            self._apply_some()
        self._apply_timer.stop()

    @property
    def looks_pending(self) -> bool:
        return bool(self._pending_nodes or self._pending_edges or self._computing is not None)

    def set_overview(self, on: bool) -> None:
        """Swap the per-item drawing for the batched overview (large graphs, far zoom)."""
        if self.overview is None or on == self.overview_active:
            return
        self.switching = True
        try:
            if on:
                self._kept_selection = self.selected_names()
            for it in self.nodes.values():
                it.setVisible(not on)
            for e in self.edges:
                e.setVisible(not on)
            for lab in self.labels:
                lab.setVisible(not on and self._labels_visible)
            self.overview.setVisible(on)
            self.overview_active = on
            if on:
                self.overview.selected = [self.nodes[n].sceneBoundingRect() for n in self._kept_selection]
            else:
                for n in self._kept_selection:  # hiding deselected them
                    if n in self.nodes:
                        self.nodes[n].setSelected(True)
                self._kept_selection = []
        finally:
            self.switching = False

    def nearest_node(self, pos: QPointF, radius: float) -> str | None:
        best, bd = None, radius * radius
        for name, it in self.nodes.items():
            p = it.pos()
            d = (p.x() - pos.x()) ** 2 + (p.y() - pos.y()) ** 2
            if d < bd:
                best, bd = name, d
        return best

    def set_labels_visible(self, on: bool) -> None:
        if on == self._labels_visible:
            return
        self._labels_visible = on
        if on and self._label_specs:
            for t, text, x, y in self._label_specs:
                lab = EdgeLabel(text, x, y, t)
                self.addItem(lab)
                self.labels.append(lab)
            self._label_specs = []
        for lab in self.labels:
            lab.setVisible(on and not self.overview_active)

    def node_at(self, scene_pos: QPointF) -> NodeItem | None:
        for it in self.items(scene_pos):
            if isinstance(it, NodeItem):
                return it
        return None

    def selected_names(self) -> list[str]:
        if self.overview_active:
            return list(self._kept_selection)
        return [it.name for it in self.selectedItems() if isinstance(it, NodeItem)]
