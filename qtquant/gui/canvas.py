"""The graph canvas: scene, view (zoom, pan, fit, search jumps), minimap and legend.

The scene is built once per layout from a :class:`~qtquant.app.scene.SceneSpec` whose
coordinates were computed in a worker thread.  Afterwards only looks change
(:meth:`GraphScene.apply_looks`): overlays never move an item.
"""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QFrame, QGraphicsScene, QGraphicsView

from .dragdrop import NodeDrag
from .hulls import HullLayer
from .minimap import Legend, MiniMap
from .items import LOD_EDGE_LABEL, LOD_FAST, BlockItem, EdgeItem, EdgeLabel, NodeItem, OverviewItem
from ..app.scene import SceneSpec, node_size, spread_ports
from .style import category_color

__all__ = ["GraphScene", "GraphView", "MiniMap", "Legend", "ITEM_CLASSES"]

# Item class per node kind: the one place to swap in a different look for a kind.
ITEM_CLASSES = {"op": NodeItem, "input": NodeItem, "output": NodeItem, "block": BlockItem}
# Graphs with at least this many nodes switch to batched drawing below LOD_OVERVIEW zoom.
OVERVIEW_MIN_NODES = 800
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
        self._label_specs: list[tuple[str, float, float]] = []
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
            self.setSceneRect(QRectF(-r.width(), -200, 2 * r.width(), 400))
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
            label_at.setdefault(es.tensor, (pts[0][0] + 5, pts[0][1] + 2))
            if len(self.edges) % chunk == 0:
                self._index_now()
                yield
        # Shape labels are made the first time the zoom makes them legible (most large
        # graphs are first seen zoomed out): one label per tensor, at its first edge.
        label_of = {es.tensor: es.label for es in spec.edges}
        self._label_specs = [(label_of[t], x, y) for t, (x, y) in label_at.items()]
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
        """Change the items to ``spec`` in place (expand / collapse): see :mod:`.canvasmorph`."""
        from .canvasmorph import morph_scene

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
            for text, x, y in self._label_specs:
                lab = EdgeLabel(text, x, y)
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


class GraphView(QGraphicsView):
    """Wheel zoom around the cursor, drag to pan (Shift+drag: rubber-band select), fit, jump.

    Dragging from a node onto another node reports ``nodesDropped(sources, target)``
    (sources: the selection when the pressed node is part of it); a right click reports
    ``contextRequested(node name or "", global position)``.
    """

    zoomChanged = Signal(float)
    nodesDropped = Signal(list, str)
    activated = Signal(str)  # a node or block double-clicked
    contextRequested = Signal(str, object)
    MIN_SCALE, MAX_SCALE = 0.01, 4.0

    def __init__(self, scene: GraphScene, parent=None):
        super().__init__(scene, parent)
        self.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
        self.setDragMode(QGraphicsView.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.AnchorViewCenter)
        self.setViewportUpdateMode(QGraphicsView.SmartViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.DontAdjustForAntialiasing, True)
        self.setFrameShape(QFrame.NoFrame)
        self.setRubberBandSelectionMode(Qt.IntersectsItemShape)
        self.setAcceptDrops(False)  # the main window takes dropped model files
        self._panning_mid: QPointF | None = None
        self.drag = NodeDrag(self)
        self._press_at = None  # overview mode: a click (not a drag) jumps to the nearest node
        self._flashing: str | None = None
        self._flash_timer = QTimer(self, singleShot=True, interval=900)
        self._flash_timer.timeout.connect(self._end_flash)
        self.minimap = MiniMap(self)
        self.legend = Legend(self)
        self._mm_room = False  # the view's scene rectangle is widened for the minimap
        self._in_room = False
        scene.sceneRectChanged.connect(lambda _r: self.minimap_room())
        scene.looksChanged.connect(self.minimap.schedule_refresh)
        self.horizontalScrollBar().valueChanged.connect(self.minimap.follow)
        self.verticalScrollBar().valueChanged.connect(self.minimap.follow)

    # -- zoom -----------------------------------------------------------------------------
    @property
    def zoom(self) -> float:
        return self.transform().m11()

    def set_zoom(self, s: float) -> None:
        s = max(self.MIN_SCALE, min(self.MAX_SCALE, s))
        f = s / self.zoom
        if abs(f - 1.0) > 1e-9:
            self.scale(f, f)
        self._zoom_changed()

    def zoom_100(self) -> None:
        """100 % around the selection when there is one (the mouse anchor alone zoomed around
        whatever empty space the cursor was over), else around the cursor."""
        sel = [it for it in self.scene().selectedItems() if it.isVisible()]
        if not sel:
            self.set_zoom(1.0)
            return
        r = sel[0].sceneBoundingRect()
        for it in sel[1:]:
            r = r.united(it.sceneBoundingRect())
        self.set_zoom(1.0)
        self.centerOn(r.center())

    def _zoom_changed(self) -> None:
        self.scene().set_overview(self.zoom < LOD_OVERVIEW)
        self.scene().set_labels_visible(self.zoom >= LOD_EDGE_LABEL)
        self.minimap.follow()
        self.zoomChanged.emit(self.zoom)

    def wheelEvent(self, ev):
        dy = ev.angleDelta().y() or ev.angleDelta().x()
        if not dy:
            return
        if ev.modifiers() & Qt.ShiftModifier:  # shift+wheel scrolls sideways
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - dy)
            return
        f = 1.0015 ** dy
        s = max(self.MIN_SCALE, min(self.MAX_SCALE, self.zoom * f))
        f = s / self.zoom
        self.scale(f, f)
        self._zoom_changed()

    def fit(self) -> None:
        r = self._graph_rect()
        if r.isEmpty():
            return
        self.fitInView(r, Qt.KeepAspectRatio)
        if self.zoom > 1.0:  # small graphs: readable, not blown up
            self.set_zoom(1.0)
            self.centerOn(r.center())
        self._zoom_changed()

    def _graph_rect(self) -> QRectF:
        """The graph's extent: the layout's rectangle once built (itemsBoundingRect asks every
        item, a Python call each: 50,000 of them on a big graph)."""
        sc = self.scene()
        if sc.spec is not None:
            lay = sc.spec.layout
            return QRectF(lay.left, lay.top, lay.width, lay.height).adjusted(-30, -30, 30, 30)
        return sc.itemsBoundingRect().adjusted(-30, -30, 30, 30)

    def fit_top(self, min_zoom: float = 0.55) -> None:
        """Fit when the whole graph is legible; otherwise show its top at a readable zoom."""
        sc = self.scene()
        r = self._graph_rect()
        if r.isEmpty():
            return
        vw, vh = max(1, self.viewport().width()), max(1, self.viewport().height())
        s = min(vw / r.width(), vh / r.height())
        if s >= min_zoom:
            self.fit()
            return
        self.set_zoom(max(min_zoom, min(1.0, vw / r.width())))
        vis = self.mapToScene(self.viewport().rect()).boundingRect()
        # Deep graphs drift sideways: centre on the nodes that are in the top band.
        pos = sc.spec.layout.pos if sc.spec is not None else [(it.pos().x(), it.pos().y()) for it in sc.nodes.values()]
        band = [x for x, y in pos if y < r.top() + vis.height()]
        cx = (min(band) + max(band)) / 2 if band else r.center().x()
        self.centerOn(QPointF(cx, r.top() + vis.height() / 2))

    def center_on(self, name: str, *, select: bool = True, min_zoom: float = 0.8) -> bool:
        sc: GraphScene = self.scene()
        item = sc.nodes.get(name)
        if item is None:
            return False
        if self.zoom < min_zoom:
            self.set_zoom(1.0)
        self.centerOn(item)
        if select:
            sc.clearSelection()
            item.setSelected(True)
        item.flash = True
        item.update()
        self._flashing = name
        self._flash_timer.start()
        return True

    def _end_flash(self) -> None:
        # Looked up by name: the scene may have been rebuilt since (items deleted).
        item = self.scene().nodes.get(self._flashing) if self._flashing else None
        self._flashing = None
        if item is not None:
            item.flash = False
            item.update()

    def keyPressEvent(self, ev):
        k = ev.key()
        if k in (Qt.Key_Plus, Qt.Key_Equal):
            self.set_zoom(self.zoom * 1.25)
        elif k == Qt.Key_Minus:
            self.set_zoom(self.zoom / 1.25)
        elif k == Qt.Key_0:
            self.zoom_100()
        elif k == Qt.Key_F and not ev.modifiers():
            self.fit()
        elif k == Qt.Key_Escape and self.drag.pending:
            self.drag.cancel()
        else:
            super().keyPressEvent(ev)

    # -- mouse: left drag pans; shift+left drag selects; middle drag always pans ------------
    def mousePressEvent(self, ev):
        if ev.button() == Qt.MiddleButton:
            self._panning_mid = ev.position()
            self.viewport().setCursor(Qt.ClosedHandCursor)
            ev.accept()
            return
        if ev.button() == Qt.LeftButton and ev.modifiers() & (Qt.ShiftModifier | Qt.ControlModifier):
            self.setDragMode(QGraphicsView.RubberBandDrag)
        self._press_at = ev.position() if ev.button() == Qt.LeftButton else None
        super().mousePressEvent(ev)
        if ev.button() == Qt.LeftButton and not ev.modifiers() & (Qt.ShiftModifier | Qt.ControlModifier):
            sc = self.scene()
            item = sc.node_at(self.mapToScene(ev.position().toPoint())) if not sc.overview_active else None
            if item is not None:  # the scene selected it already (or kept the multi-selection)
                self.drag.begin(item.name, ev.position(), sc.selected_names())

    def mouseMoveEvent(self, ev):
        if self._panning_mid is not None:
            d = ev.position() - self._panning_mid
            self._panning_mid = ev.position()
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - int(d.x()))
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() - int(d.y()))
            ev.accept()
            return
        if self.drag.pending:
            self.drag.move(ev.position())
        super().mouseMoveEvent(ev)

    def mouseReleaseEvent(self, ev):
        if self._panning_mid is not None and ev.button() == Qt.MiddleButton:
            self._panning_mid = None
            self.viewport().unsetCursor()
            ev.accept()
            return
        dropped = self.drag.finish() if self.drag.pending and ev.button() == Qt.LeftButton else None
        super().mouseReleaseEvent(ev)
        sc = self.scene()
        if (self._press_at is not None and sc.overview_active and ev.button() == Qt.LeftButton
                and (ev.position() - self._press_at).manhattanLength() < 4):
            hit = sc.nearest_node(self.mapToScene(ev.position().toPoint()), 12 / max(self.zoom, 1e-6))
            if hit is not None:
                self.center_on(hit)
        self._press_at = None
        if self.dragMode() != QGraphicsView.ScrollHandDrag:
            self.setDragMode(QGraphicsView.ScrollHandDrag)
        if dropped is not None:
            self.nodesDropped.emit(*dropped)

    def mouseDoubleClickEvent(self, ev):
        sc = self.scene()
        item = sc.node_at(self.mapToScene(ev.position().toPoint())) if not sc.overview_active else None
        if ev.button() == Qt.LeftButton and item is not None:
            self.drag.cancel()
            self.activated.emit(item.name)
            ev.accept()
            return
        super().mouseDoubleClickEvent(ev)

    def contextMenuEvent(self, ev):
        sc = self.scene()
        item = sc.node_at(self.mapToScene(ev.pos())) if not sc.overview_active else None
        if item is not None and not item.isSelected():
            sc.clearSelection()
            item.setSelected(True)
        self.contextRequested.emit(item.name if item is not None else "", ev.globalPos())
        ev.accept()

    def resizeEvent(self, ev):
        super().resizeEvent(ev)
        self._place_overlays()
        self.minimap.follow()

    def _place_overlays(self) -> None:
        # The legend sits in a strip above the viewport (a viewport margin), not over the graph:
        # floating, it covered the top-left nodes, the first ones a fitted graph shows.
        # A canvas too small to spare the strip (narrower than the legend) keeps it floating.
        lg = self.legend
        top = lg.height() + 12
        if lg.isHidden() or self.width() < lg.width() + 40 or self.height() < 3 * top:
            top = 0
        if self.viewportMargins().top() != top:
            self.setViewportMargins(0, top, 0, 0)
        vp = self.viewport().geometry()
        mm = self.minimap
        mm.move(vp.right() - mm.width() - 10, vp.bottom() - mm.height() - 10)
        lg.move(vp.left() + 10, vp.top() - top + (6 if top else 10))
        self.minimap_room()

    def minimap_room(self) -> None:
        """While the minimap is up, the view scrolls past the graph's bottom-right by the
        minimap's size, so every node can come out from under it (it hid the last nodes)."""
        sc, mm = self.scene(), self.minimap
        if sc is None or self._in_room:
            return
        self._in_room = True  # setSceneRect scrolls, and scrolling calls follow(), which calls this
        try:
            if not mm.isVisible():
                if self._mm_room:
                    self._mm_room = False
                    self.setSceneRect(QRectF())  # follow the scene's rectangle again
                return
            z = max(self.zoom, 1e-6)
            base, vp = sc.sceneRect(), self.viewport().size()
            # Only along an axis that scrolls already: widening one that fits would re-centre
            # the graph (and could take it out of view, and the minimap on and off).
            dx = (mm.width() + 20) / z if base.width() * z > vp.width() else 0.0
            dy = (mm.height() + 20) / z if base.height() * z > vp.height() else 0.0
            r = base.adjusted(0, 0, dx, dy)
            self._mm_room = True
            if r != self.sceneRect():
                self.setSceneRect(r)
        finally:
            self._in_room = False
