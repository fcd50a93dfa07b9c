"""Canvas items: op boxes, graph terminals, edges and their shape labels.

Painting is level-of-detail aware: the item asks the painter how large one scene unit is
on screen and skips text, borders and badges that would be illegible.  Zoomed out, a
node is a single ``fillRect``, which keeps a 5,000-node overview cheap to repaint.
Overlays change an item's fill and badges in place (:meth:`NodeItem.set_look` with a frozen
:class:`~qtquant.app.views.looks.NodeLook`); the layout never reruns for a colour change.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsSimpleTextItem

from ...app.views.looks import EdgeLook, NodeLook
from ...app.views.palette import EDGE as EDGE_HEX
from ..style import SELECT, qcolor, text_color_on

__all__ = ["ITEM_CLASSES", "OVERVIEW_MIN_NODES", "NodeItem", "BlockItem", "EdgeItem", "EdgeLabel", "OverviewItem",
           "LABEL_DX", "LABEL_DY", "LOD_FAST", "LOD_TITLE", "LOD_NAME",
           "LOD_EDGE_LABEL", "LOD_BADGE_TEXT", "FONTS"]

# Level-of-detail thresholds (screen pixels per scene unit).  Text is drawn only where
# its on-screen height is at least ~6 px.
LOD_FAST = 0.28  # below: a plain filled rectangle
LOD_TITLE = 0.5
LOD_NAME = 0.72
LOD_BADGE_TEXT = 0.45
LOD_EDGE_LABEL = 0.85


class _Fonts:
    """Created lazily: a QFont needs a QGuiApplication."""

    def __init__(self):
        self._made = False

    def _make(self):
        self.title = QFont("DejaVu Sans")
        self.title.setPixelSize(13)
        self.title.setBold(True)
        self.name = QFont("DejaVu Sans")
        self.name.setPixelSize(10)
        self.badge = QFont("DejaVu Sans")
        self.badge.setPixelSize(10)
        self.badge.setBold(True)
        self.edge = QFont("DejaVu Sans")
        self.edge.setPixelSize(9)
        self.name_metrics = QFontMetricsF(self.name)
        self.title_metrics = QFontMetricsF(self.title)
        self.badge_metrics = QFontMetricsF(self.badge)
        self._made = True

    def __getattr__(self, item):
        if item.startswith("_"):
            raise AttributeError(item)
        self._make()
        return object.__getattribute__(self, item)


FONTS = _Fonts()


PLAIN = NodeLook()


class NodeItem(QGraphicsRectItem):
    """An op box (kind 'op') or a graph input/output terminal (kind 'input'/'output').

    A rect item whose rect is the bounding box (box, badge band, border), drawn by
    :meth:`paint`: Qt asks an item for its bounds at every paint, index update and dirty
    check, and a Python ``boundingRect`` made each of those a call into Python, which waits
    for the GIL whenever a background job runs (thousands per repaint of a big graph).
    """

    def __init__(self, name: str, title: str, subtitle: str, width: float, height: float, base: QColor,
                 kind: str = "op"):
        super().__init__()
        self.name = name
        self.kind = kind
        self.title = title
        self._w, self._h = width, height
        self._rect = QRectF(-width / 2, -height / 2, width, height)
        self.base_fill = QColor(base)
        self.fill = QColor(base)
        self._text = text_color_on(self.fill)
        self.badges: tuple = ()  # qtquant.app.views.looks.Badge
        self.faded = False
        self.flash = False
        self.border_width = 1.0
        self._elided: str | None = None  # made at the first paint that shows it (~0.15 ms a node)
        self.full_subtitle = subtitle
        self._badge_geom: list[tuple[QRectF, object]] = []
        self._look_key = PLAIN  # the look applied: a NodeLook is its own change key
        self.colour_key = (self.base_fill.rgba(), False)  # (fill RGBA, faded): what the minimap groups by
        self.setPen(Qt.NoPen)
        self.setRect(self._bounds_for(()))
        self.setFlag(QGraphicsItem.ItemIsSelectable, True)
        self.setAcceptHoverEvents(False)
        self.setToolTip(f"{title}\n{subtitle}")
        self.setZValue(2)

    # -- look -----------------------------------------------------------------------------
    def set_look(self, look: NodeLook | None = None) -> None:
        look = look or PLAIN
        if look is self._look_key or look == self._look_key:  # most items keep their look: skip the work
            return
        self._look_key = look
        self.fill = qcolor(look.fill) if look.fill is not None else self.base_fill
        self._text = text_color_on(self.fill)
        self.badges = look.badges
        self.faded = look.faded
        self.border_width = look.border_width
        # Kept here: the minimap groups 20,000 nodes by it per refresh, and a Qt call per node
        # for the fill would be most of that refresh.
        self.colour_key = (self.fill.rgba(), look.faded)
        self._layout_badges()
        self.update()

    def _layout_badges(self) -> None:
        if not self.badges and not self._badge_geom:
            return
        geom = []
        x = self._rect.right() + 6
        fm = FONTS.badge_metrics
        for b in self.badges:
            w = fm.horizontalAdvance(b.text) + 12
            x -= w
            geom.append((QRectF(x, self._rect.top() - 14, w, 18), b))
            x -= 4
        bounds = self._bounds_for(geom)
        self._badge_geom = geom
        if bounds != self.rect():
            # Only badges wider than the node move its bounds: a geometry change re-indexes
            # the item in the scene, which for a recolour of 2,000 Concats costs Qt ~0.1 s.
            self.setRect(bounds)

    @property
    def subtitle(self) -> str:
        """The name line as drawn: elided in the middle to the box's width."""
        if self._elided is None:
            self._elided = FONTS.name_metrics.elidedText(self.full_subtitle, Qt.ElideMiddle, self._w - 14)
        return self._elided

    @property
    def badge_texts(self) -> list[str]:
        return [b.text for b in self.badges]

    def _bounds_for(self, geom) -> QRectF:
        # The band above the box where badges sit is always included (see _layout_badges).
        r = self._rect.adjusted(-4, -15, 7, 4)
        for g, _ in geom:
            r = r.united(g.adjusted(-1, -1, 1, 1))
        return r

    def shape(self) -> QPainterPath:
        """The box and its badges (not the empty band above the box): what a click hits."""
        path = QPainterPath()
        path.addRect(self._rect.adjusted(-4, -4, 4, 4))
        for g, _ in self._badge_geom:
            path.addRect(g)
        return path

    # -- painting -------------------------------------------------------------------------
    def paint(self, p, option, widget=None):
        lod = option.levelOfDetailFromTransform(p.worldTransform())
        r = self._rect
        selected = self.isSelected()
        fill = self.fill
        if self.faded:
            fill = QColor(fill)
            fill.setAlpha(90)
        if lod < LOD_FAST:
            p.fillRect(r, fill)
            if selected or self.flash:
                p.setPen(QPen(SELECT, 3.0 / max(lod, 0.02)))
                p.setBrush(Qt.NoBrush)
                p.drawRect(r)
            for g, b in self._badge_geom:
                p.fillRect(g, qcolor(b.bg))
            return
        if selected or self.flash:
            p.setPen(Qt.NoPen)
            p.setBrush(QColor(21, 101, 192, 70))
            p.drawRoundedRect(r.adjusted(-4, -4, 4, 4), 9, 9)
        border = fill.darker(150 if self.kind == "op" else 120)
        pen = QPen(SELECT if selected else border, 2.5 if selected else self.border_width)
        p.setPen(pen)
        p.setBrush(fill)
        radius = r.height() / 2 if self.kind != "op" else 6
        p.drawRoundedRect(r, radius, radius)
        if lod >= LOD_TITLE:
            tc = self._text if not self.faded else QColor(120, 120, 120)
            p.setPen(tc)
            if lod >= LOD_NAME and self.subtitle:
                p.setFont(FONTS.title)
                p.drawText(QRectF(r.left() + 6, r.top() + 3, r.width() - 12, 18), Qt.AlignCenter, self.title)
                p.setFont(FONTS.name)
                tc2 = QColor(tc)
                tc2.setAlpha(190)
                p.setPen(tc2)
                p.drawText(QRectF(r.left() + 6, r.top() + 21, r.width() - 12, 16), Qt.AlignCenter, self.subtitle)
            else:
                p.setFont(FONTS.title)
                p.drawText(r, Qt.AlignCenter, self.title)
        for g, b in self._badge_geom:
            bg = qcolor(b.bg)
            p.setPen(QPen(bg.darker(130), 1))
            p.setBrush(bg)
            p.drawRoundedRect(g, 9, 9)
            if lod >= LOD_BADGE_TEXT:
                p.setPen(qcolor(b.fg))
                p.setFont(FONTS.badge)
                p.drawText(g, Qt.AlignCenter, b.text)

    # -- geometry helpers for edges -------------------------------------------------------
    @property
    def width(self) -> float:
        return self._w

    @property
    def height(self) -> float:
        return self._h


class BlockItem(NodeItem):
    """A collapsed block of the module hierarchy: a stack of cards, its label and what it holds.

    Double-click (or the Expand action) opens it; its badges aggregate what is inside.
    """

    def paint(self, p, option, widget=None):
        lod = option.levelOfDetailFromTransform(p.worldTransform())
        if lod >= LOD_FAST:  # the cards behind: "there is more in here"
            r = self._rect
            fill = QColor(self.fill)
            if self.faded:
                fill.setAlpha(90)
            p.setPen(QPen(fill.darker(160), 1.0))
            p.setBrush(fill.darker(108))
            for k in (2, 1):
                p.drawRoundedRect(r.translated(4 * k, 4 * k), 7, 7)
        super().paint(p, option, widget)
        if lod >= LOD_TITLE:
            p.setPen(QPen(self.fill.darker(190), 1.6))
            r = self._rect
            x, y = r.left() + 12, r.center().y()
            p.drawLine(QPointF(x - 5, y), QPointF(x + 5, y))  # a "+": it expands
            p.drawLine(QPointF(x, y - 5), QPointF(x, y + 5))


def _edge_path(points: list[tuple[float, float]]) -> QPainterPath:
    """Smooth vertical curve through the route points (dagre-like), with an arrow head."""
    path = QPainterPath(QPointF(*points[0]))
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        dy = (y1 - y0) * 0.5
        path.cubicTo(QPointF(x0, y0 + dy), QPointF(x1, y1 - dy), QPointF(x1, y1))
    x, y = points[-1]
    path.moveTo(x - 4.5, y - 8)
    path.lineTo(x, y)
    path.lineTo(x + 4.5, y - 8)
    return path


_PENS: dict[tuple, QPen] = {}


class EdgeItem(QGraphicsPathItem):
    """A tensor flowing from one node to another (C++-painted path: cheap at any zoom)."""

    def __init__(self, tensor: str, src: str, dst: str, points):
        super().__init__(_edge_path(points))
        self.tensor, self.src, self.dst = tensor, src, dst
        self.points = points
        self._style_key = None
        self.setAcceptedMouseButtons(Qt.NoButton)
        self.setZValue(1)
        self.set_style()

    def set_points(self, points) -> None:
        """A new route (expanding a block moved its ends)."""
        if points != self.points:
            self.points = points
            self.setPath(_edge_path(points))

    def set_style(self, look: EdgeLook | None = None) -> None:
        key = (look.color or EDGE_HEX, look.width, look.dashed) if look is not None else (EDGE_HEX, 1.3, False)
        if key == self._style_key:
            return
        self._style_key = key
        color, width, dashed = key
        pen = _PENS.get(key)
        if pen is None:  # a handful of distinct styles: build each pen once
            pen = _PENS[key] = QPen(qcolor(color), width)
            pen.setCapStyle(Qt.RoundCap)
            pen.setJoinStyle(Qt.RoundJoin)
            if dashed:
                pen.setStyle(Qt.DashLine)
        self.setPen(pen)

    @property
    def color(self) -> QColor:
        return self.pen().color()


# Where a shape label sits from its edge's first point: below the stacked cards a collapsed
# block draws under its box (they hid a label 2 px down).
LABEL_DX, LABEL_DY = 5.0, 10.0


class EdgeLabel(QGraphicsSimpleTextItem):
    """Tensor shape next to an edge; shown only at readable zoom (toggled by the view)."""

    def __init__(self, text: str, x: float, y: float, tensor: str = ""):
        super().__init__(text)
        self.tensor = tensor
        self.setFont(FONTS.edge)
        self.setBrush(QColor("#5f6b77"))
        self.setPos(x, y)
        self.setZValue(1.5)
        self.setAcceptedMouseButtons(Qt.NoButton)


class OverviewItem(QGraphicsItem):
    """The whole graph in a handful of batched draw calls, for far zoom on large graphs.

    Thousands of per-item paint calls cannot fill a frame in time; here nodes are
    ``drawRects`` per fill colour and edges one path per colour, rebuilt only when the
    looks change.  The scene swaps this in (and the real items out) below a zoom level.
    """

    def __init__(self, rect: QRectF):
        super().__init__()
        self._rect = QRectF(rect)
        self.setZValue(0.5)
        self.setAcceptedMouseButtons(Qt.NoButton)
        self._fills: list[tuple[QColor, list]] = []
        self._edges: list[tuple[QColor, QPainterPath]] = []
        self._badges: list[QRectF] = []
        self._pending = None  # (nodes, edges) to batch at the next paint
        self.selected: list[QRectF] = []

    def boundingRect(self) -> QRectF:
        return self._rect

    def rebuild(self, nodes, edges) -> None:
        """Mark the batches stale; they are rebuilt when next painted.

        Most opens and edits happen zoomed in, where this item is hidden and never painted:
        rebuilding eagerly cost the GUI thread ~0.2 s per looks change at 5,000 nodes.
        """
        self._pending = (nodes, edges)
        self.update()

    def _rebuild_now(self) -> None:
        nodes, edges = self._pending
        self._pending = None
        fills: dict[int, tuple[QColor, list]] = {}
        badges = []
        for it in nodes:
            c = QColor(it.fill)
            if it.faded:
                c.setAlpha(90)
            r = QRectF(it.pos().x() - it.width / 2, it.pos().y() - it.height / 2, it.width, it.height)
            fills.setdefault(c.rgba(), (c, []))[1].append(r)
            if it.badges:
                badges.append(QRectF(r.right() - 40, r.top() - 16, 46, 22))
        paths: dict[tuple, tuple[QColor, QPainterPath]] = {}
        for e in edges:
            pen = e.pen()
            key = (pen.color().rgba(), pen.widthF() > 2)
            if key not in paths:
                paths[key] = (QColor(pen.color()), QPainterPath())
            path = paths[key][1]
            pts = e.points
            path.moveTo(QPointF(*pts[0]))
            for x, y in pts[1:]:
                path.lineTo(QPointF(x, y))
        self._fills = list(fills.values())
        self._edges = sorted(paths.values(), key=lambda cp: cp[0].alpha())
        self._badges = badges

    def paint(self, p, option, widget=None):
        if self._pending is not None:
            self._rebuild_now()
        p.setRenderHint(p.RenderHint.Antialiasing, False)
        for col, path in self._edges:
            p.setPen(QPen(col, 0))  # cosmetic: one pixel whatever the zoom
            p.setBrush(Qt.NoBrush)
            p.drawPath(path)
        p.setPen(Qt.NoPen)
        for col, rects in self._fills:
            p.setBrush(col)
            p.drawRects(rects)
        if self._badges:
            p.setBrush(QColor("#c62828"))
            p.drawRects(self._badges)
        if self.selected:
            pen = QPen(SELECT, 3)
            pen.setCosmetic(True)
            p.setPen(pen)
            p.setBrush(Qt.NoBrush)
            for r in self.selected:
                p.drawRect(r.adjusted(-30, -30, 30, 30))


# Item class per node kind: the one place to swap in a different look for a kind.
ITEM_CLASSES = {"op": NodeItem, "input": NodeItem, "output": NodeItem, "block": BlockItem}
# Graphs with at least this many nodes switch to batched drawing below LOD_OVERVIEW zoom.
OVERVIEW_MIN_NODES = 800
