"""Group hulls: a translucent coloured shape behind the members of each shared-observer group.

Members of one group can sit far apart in a layered drawing (an FPN Concat joins an
upsampled tensor with one from many layers up), so a convex hull would cover unrelated
nodes.  The shape here is a light "bubble set" (Collins et al., 2009): a padded rounded
box around each member's node, united with a band along the drawn edges that connect
members (a member feeding a grouped Concat), and straight bridges that join whatever is
still apart (a minimum spanning tree over the pieces).  Layout is never touched.

Hulls live at z 0.3: below the edges (1) and nodes (2), above the overview drawing (0.5
is hidden when items show).
"""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainterPath, QPainterPathStroker, QPen
from PySide6.QtWidgets import QGraphicsPathItem

from ...app.scene import INPUT_PREFIX
from ...app.views.palette import group_hex
from ..style import qcolor

__all__ = ["group_color", "GroupHull", "HullLayer", "member_nodes"]
NEIGHBOUR_GAP = 60.0  # same-row members closer than this share one box (nothing fits between)
PAD = 13.0  # scene units around a member box
HULL_Z = 0.3


def group_color(group_id: int) -> QColor:
    """Stable per group: ids survive undo/redo (snapshots), so colours do too."""
    return QColor(qcolor(group_hex(group_id)))


def member_nodes(graph, members) -> dict[str, list[str]]:
    """Canvas node -> the group's tensors it produces (graph inputs map to their terminal).

    Constants have no node on the canvas and are left out.
    """
    out: dict[str, list[str]] = {}
    for t in members:
        tt = graph.tensors.get(t)
        if tt is None:
            continue
        if tt.producer:
            out.setdefault(tt.producer, []).append(t)
        elif t in graph.inputs:
            out.setdefault(INPUT_PREFIX + t, []).append(t)
    return out


def _route_path(points) -> QPainterPath:
    """The edge's curve (items._edge_path's cubic segments) as a polyline.

    Straight lines and bevel joins keep the union (``simplified``) cheap: curved strokes
    flatten into ~10x more segments.  Vertical stretches need no samples.
    """
    path = QPainterPath(QPointF(*points[0]))
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        steps = 1 if abs(x1 - x0) < 1.0 else 6
        for k in range(1, steps + 1):
            t = k / steps
            u = 1.0 - t
            # control points (x0, y0 + dy), (x1, y1 - dy) with dy = (y1 - y0) / 2
            x = (u * u * u + 3 * u * u * t) * x0 + (3 * u * t * t + t * t * t) * x1
            y = u * u * u * y0 + 3 * u * u * t * (y0 + (y1 - y0) * 0.5) + 3 * u * t * t * (y1 - (y1 - y0) * 0.5) \
                + t * t * t * y1
            path.lineTo(QPointF(x, y))
    return path


def _stroke(path: QPainterPath, width: float) -> QPainterPath:
    s = QPainterPathStroker()
    s.setWidth(width)
    s.setCapStyle(Qt.FlatCap)  # the ends sit inside the padded boxes
    s.setJoinStyle(Qt.BevelJoin)
    return s.createStroke(path)


def _rect_gap(a: QRectF, b: QRectF) -> float:
    dx = max(0.0, max(a.left(), b.left()) - min(a.right(), b.right()))
    dy = max(0.0, max(a.top(), b.top()) - min(a.bottom(), b.bottom()))
    return math.hypot(dx, dy)


def _closest_points(a: QRectF, b: QRectF) -> tuple[QPointF, QPointF]:
    """Points on the two boxes facing each other (for a bridge between them)."""
    ca, cb = a.center(), b.center()
    pa = QPointF(min(max(cb.x(), a.left()), a.right()), min(max(cb.y(), a.top()), a.bottom()))
    pb = QPointF(min(max(ca.x(), b.left()), b.right()), min(max(ca.y(), b.top()), b.bottom()))
    return pa, pb


def hull_shape(rects: dict[str, QRectF], links: list[tuple[str, str, list]]) -> QPainterPath:
    """Union of padded boxes, bands along linking edges and bridges between the pieces."""
    path = QPainterPath()
    path.setFillRule(Qt.WindingFill)
    for r in rects.values():
        path.addRoundedRect(r.adjusted(-PAD, -PAD, PAD, PAD), PAD + 4, PAD + 4)
    # Pieces joined by a drawn edge (union-find over node names).
    parent = {n: n for n in rects}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b, pts in links:
        path.addPath(_stroke(_route_path(pts), PAD * 1.6))
        parent[find(a)] = find(b)
    # Neighbours in one layer (Concat inputs side by side): one box over both, no seam.
    by_row: dict[float, list[str]] = {}
    for n, r in rects.items():
        by_row.setdefault(round(r.center().y(), 1), []).append(n)
    for row in by_row.values():
        row.sort(key=lambda n: rects[n].left())
        for a, b in zip(row, row[1:]):
            ra, rb = rects[a], rects[b]
            if rb.left() - ra.right() <= NEIGHBOUR_GAP:
                both = ra.united(rb).adjusted(-PAD, -PAD, PAD, PAD)
                path.addRoundedRect(both, PAD + 4, PAD + 4)
                parent[find(a)] = find(b)
    # Bridge the remaining pieces: Prim's MST over piece-to-piece box gaps.
    pieces: dict[str, list[str]] = {}
    for n in rects:
        pieces.setdefault(find(n), []).append(n)
    comps = list(pieces.values())
    if len(comps) > 1:
        joined = [comps[0]]
        rest = comps[1:]
        while rest:
            best = None
            for i, comp in enumerate(rest):
                for a in (n for c in joined for n in c):
                    for b in comp:
                        d = _rect_gap(rects[a], rects[b])
                        if best is None or d < best[0]:
                            best = (d, i, a, b)
            _, i, a, b = best
            pa, pb = _closest_points(rects[a], rects[b])
            line = QPainterPath(pa)
            line.lineTo(pb)
            path.addPath(_stroke(line, PAD * 1.2))
            joined.append(rest.pop(i))
    return path.simplified()


class GroupHull(QGraphicsPathItem):
    """One group's shape; ``set_emphasis`` brightens it (selected in the Groups dock) or dims it."""

    def __init__(self, group_id: int, path: QPainterPath, nodes):
        super().__init__(path)
        self.group_id = group_id
        self.nodes = tuple(nodes)
        self.color = group_color(group_id)
        self.emphasis = 0  # -1 dimmed, 0 normal, 1 highlighted
        self.setZValue(HULL_Z)
        self.setAcceptedMouseButtons(Qt.NoButton)
        self._restyle()

    def set_emphasis(self, e: int) -> None:
        if e != self.emphasis:
            self.emphasis = e
            self._restyle()

    def _restyle(self) -> None:
        c = QColor(self.color)
        fill_alpha, line_alpha, width = {-1: (22, 60, 1.2), 0: (52, 150, 1.6), 1: (95, 235, 3.2)}[self.emphasis]
        c.setAlpha(fill_alpha)
        self.setBrush(QBrush(c))
        lc = QColor(self.color)
        lc.setAlpha(line_alpha)
        pen = QPen(lc, width)
        pen.setJoinStyle(Qt.RoundJoin)
        if self.emphasis < 0:
            pen.setStyle(Qt.DashLine)
        self.setPen(pen)


class HullLayer:
    """The scene's hulls, rebuilt per group only when that group's members change."""

    def __init__(self, scene):
        self.scene = scene
        self.hulls: dict[int, GroupHull] = {}
        self._keys: dict[int, tuple] = {}
        self.highlighted: int | None = None

    def invalidate(self) -> None:
        """The items moved (a block expanded or collapsed): every hull is made again at the next update."""
        for item in self.hulls.values():
            self.scene.removeItem(item)
        self.hulls.clear()
        self._keys.clear()

    def forget(self) -> None:
        """The scene was cleared (its items are gone): drop the references."""
        self.hulls.clear()
        self._keys.clear()
        self.highlighted = None

    def update(self, graph, groups) -> None:
        sc = self.scene
        want = {}
        for g in groups or ():
            want[g.id] = tuple(g.members)
        for gid in [k for k in self.hulls if k not in want or self._keys.get(k) != want[k]]:
            sc.removeItem(self.hulls.pop(gid))
            self._keys.pop(gid, None)
        if graph is None or not sc.nodes:
            return
        for gid, members in want.items():
            if gid in self.hulls:
                continue
            item = self._build(graph, gid, members)
            if item is not None:
                sc.addItem(item)
                self.hulls[gid] = item
                self._keys[gid] = members
        if self.highlighted not in want:
            self.highlighted = None
        self._apply_emphasis()

    def _build(self, graph, gid: int, members) -> GroupHull | None:
        sc = self.scene
        nodes: dict[str, list[str]] = {}
        for n, ts in member_nodes(graph, members).items():  # a member inside a collapsed block: the block
            u = sc.item_for(n)
            if u in sc.nodes:
                nodes.setdefault(u, []).extend(ts)
        if not nodes:
            return None
        rects = {}
        for n in nodes:
            it = sc.nodes[n]
            p = it.pos()
            rects[n] = QRectF(p.x() - it.width / 2, p.y() - it.height / 2, it.width, it.height)
        links = []
        for n, ts in nodes.items():
            for e in sc.edges_out.get(n, ()):
                if e.tensor in ts and e.dst in nodes and e.dst != n:
                    links.append((n, e.dst, e.points))
        return GroupHull(gid, hull_shape(rects, links), nodes)

    def highlight(self, gid: int | None) -> None:
        self.highlighted = gid if gid in self.hulls else None
        self._apply_emphasis()

    def _apply_emphasis(self) -> None:
        h = self.highlighted
        for gid, item in self.hulls.items():
            item.set_emphasis(0 if h is None else (1 if gid == h else -1))

    def bounds(self, gid: int) -> QRectF:
        item = self.hulls.get(gid)
        return item.sceneBoundingRect() if item is not None else QRectF()
