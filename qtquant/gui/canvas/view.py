"""The graph view: wheel zoom around the cursor, pan, fit, search jumps, and the minimap and legend
it carries.  The scene it shows is :class:`~qtquant.gui.canvas.scene.GraphScene`."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QFrame, QGraphicsView

from .scene import LOD_OVERVIEW, GraphScene
from .dragdrop import NodeDrag
from .items import LOD_EDGE_LABEL, NodeItem
from .overlays import Legend, MiniMap

FIT_MIN_ZOOM = 0.2  # below this a whole-graph fit is unreadable: Fit shows the width at a readable zoom
BADGE_WEIGHT = 10  # a node with badges or a Concat hidden by the minimap counts as ten others

__all__ = ["GraphView"]


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
        self.fit_focus = None  # () -> the canvas name a readable fit centres on (the worst Concat), or None
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

    def graph_scroll_bars(self, shown: bool) -> None:
        """Scroll bars always shown while a graph is: one appearing when results widen the scene
        (badges, the minimap's room) would shrink the viewport and move every node by its width.
        As needed on the empty window's hint, which fits without them."""
        policy = Qt.ScrollBarAlwaysOn if shown else Qt.ScrollBarAsNeeded
        self.setHorizontalScrollBarPolicy(policy)
        self.setVerticalScrollBarPolicy(policy)

    def fit(self) -> None:
        """The whole graph in view; a graph that would fit only below :data:`FIT_MIN_ZOOM` (a tall
        single column: 0-2 %, nothing legible) shows its width at a readable zoom instead, centred on
        :attr:`fit_focus` (the worst Concat) or else its top, with the minimap for the rest."""
        r = self._graph_rect()
        if r.isEmpty():
            return
        vw, vh = max(1, self.viewport().width()), max(1, self.viewport().height())
        if min(vw / r.width(), vh / r.height()) < FIT_MIN_ZOOM:
            self.fit_top()
            name = self.fit_focus() if self.fit_focus is not None else None
            item = self.scene().nodes.get(name) if name else None
            if item is not None:
                self.centerOn(item)
            self._zoom_changed()
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
        mm = self.minimap
        if mm.drawn_for_another_box():
            mm.schedule_refresh()
        self._place_overlays()
        mm.follow()

    def _place_overlays(self) -> None:
        # The legend sits in a strip above the viewport (a viewport margin), not over the graph:
        # floating, it covered the top-left nodes, the first ones a fitted graph shows.
        # A canvas too small to spare the strip (narrower than the legend) keeps it floating.
        # The strip is as tall as the tallest legend: a legend growing with an overlay's ramp shrank
        # the viewport from the top, the graph jumped ~20 px and the first node's badge went under it.
        lg = self.legend
        top = lg.MAX_HEIGHT + 12
        if lg.isHidden() or self.width() < lg.width() + 40 or self.height() < 3 * top:
            top = 0
        if self.viewportMargins().top() != top:
            self.setViewportMargins(0, top, 0, 0)
        vp = self.viewport().geometry()
        self._place_minimap()
        lg.move(vp.left() + 10, vp.top() - top + (6 if top else 10))
        self.minimap_room()

    def _place_minimap(self) -> None:
        """Bottom-right, or bottom-left while the right corner would hide a Concat that needs a
        rescale (a node with badges) and the left one hides fewer: on the demo the minimap covered
        one of its two mismatched Concats, badge and all, in the first view."""
        mm = self.minimap
        vp = self.viewport().geometry()
        y = vp.bottom() - mm.height() - 10
        right, left = vp.right() - mm.width() - 10, vp.left() + 10
        if mm.isVisible() and not mm.dragging and not self.scene().overview_active:
            here, there = (left, right) if mm.on_left else (right, left)
            covered = self._hidden_under(QRect(here, y, mm.width(), mm.height()))
            if covered >= BADGE_WEIGHT or mm.on_left:
                other = self._hidden_under(QRect(there, y, mm.width(), mm.height()))
                # back to the right as soon as that hides nothing marked; to the left only for less
                if (other < covered) if not mm.on_left else (other < BADGE_WEIGHT):
                    mm.on_left = not mm.on_left
        mm.move(left if mm.on_left else right, y)

    def _hidden_under(self, rect: QRect) -> int:
        """How much of the graph a widget at ``rect`` (view coordinates) hides: each node with
        badges and each Concat (a shared one, green and without a badge, is what the user just
        made) counts BADGE_WEIGHT, any other node 1 (the scene's index answers, not a walk)."""
        vp = self.viewport().geometry()
        area = self.mapToScene(rect.translated(-vp.left(), -vp.top())).boundingRect()
        score = 0
        for it in self.scene().items(area, Qt.IntersectsItemBoundingRect):
            if isinstance(it, NodeItem) and it.isVisible():
                score += BADGE_WEIGHT if it.badges or it.title == "Concat" else 1
        return score

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
