"""Widgets floating over the canvas: the minimap and the overlay legend."""

from __future__ import annotations

import time

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QImage, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import QWidget

from ...base.vocab import Overlay
from ..style import MISMATCH_BANDS, SELECT, heat_color, paint_ended

__all__ = ["MiniMap", "Legend"]


class MiniMap(QWidget):
    """Overview of the whole graph with the visible area; click or drag to move there.

    Drawn from the node items' positions and current fills (not a scene render): one
    small rectangle per node stays readable where a scaled-down render would be a smear.
    """

    BOX = 210  # longest side in pixels, on a canvas big enough (see box)
    MIN_BOX = 120
    BOX_SHARE = 0.3  # of the viewport's shorter side: on a small canvas a 210 px box hid what it shows
    SLICE_S = 0.015  # per event-loop turn: with the paint that follows, well under 0.1 s

    def __init__(self, view):
        super().__init__(view)
        self.view = view
        self.setCursor(Qt.PointingHandCursor)
        self.setFixedSize(self.BOX, self.BOX * 3 // 4)
        self._img: QImage | None = None
        self._src = QRectF()
        self._timer = QTimer(self, singleShot=True, interval=150)
        self._timer.timeout.connect(self.refresh)
        self._base: QImage | None = None  # the edges, for _base_key
        self._rects: list[QRectF] = []  # node boxes in minimap pixels, in scene.nodes order
        self._base_key = None
        self._building = None  # (key, generator) while the base is drawn in slices
        self._step_timer = QTimer(self, singleShot=True, interval=0)
        self._step_timer.timeout.connect(self.refresh)
        self.wanted = True  # View › Minimap: off keeps it hidden whatever the view shows
        self.dragging = False  # a drag in the minimap moves the view: the minimap stays where it is meanwhile
        self.on_left = False  # moved to the bottom-left corner (the view's _place_minimap)

    @property
    def box(self) -> int:
        """The longest side for the view's viewport now."""
        vp = self.view.viewport().size()
        return max(self.MIN_BOX, min(self.BOX, int(self.BOX_SHARE * min(vp.width(), vp.height()))))

    def set_wanted(self, on: bool) -> None:
        self.wanted = bool(on)
        self.follow()

    def drawn_for_another_box(self) -> bool:
        """Drawn at a size the viewport no longer gives it (refresh sets the longest side to box + 8)."""
        return self._img is not None and max(self.width(), self.height()) - 8 != self.box

    def schedule_refresh(self) -> None:
        self._timer.start()

    def flush(self) -> None:
        """Refresh now, all slices at once (before a screenshot)."""
        slice_s, self.SLICE_S = self.SLICE_S, float("inf")
        try:
            self.refresh()
        finally:
            self.SLICE_S = slice_s
        self._step_timer.stop()

    def follow(self) -> None:
        """Track the view: shown only while part of the graph is off screen."""
        sc = self.view.scene()
        if sc is None:  # the window is being torn down
            return
        if not sc.nodes:
            self.setVisible(False)
            return
        # The graph's own extent (the scene rectangle has margins around it: after Fit to view
        # the minimap stayed up for them).  Not itemsBoundingRect: a Python call per item.
        graph_rect = getattr(self.view, "_graph_rect", None)
        r = graph_rect() if graph_rect is not None and sc.spec is not None else QRectF()
        if r.isEmpty():
            r = self._src if not self._src.isEmpty() else sc.sceneRect()
        vis = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
        self.setVisible(self.wanted and not vis.adjusted(-2, -2, 2, 2).contains(r))
        self.view._place_minimap()  # the corner that hides less of what matters, for this view
        self.view.minimap_room()
        self.update()

    def _target(self) -> QRectF:
        r = self._src
        if r.isEmpty():
            return QRectF()
        s = min((self.width() - 8) / r.width(), (self.height() - 8) / r.height())
        w, h = r.width() * s, r.height() * s
        return QRectF((self.width() - w) / 2, (self.height() - h) / 2, w, h)

    def refresh(self) -> None:
        sc = self.view.scene()
        nodes = list(sc.nodes.values())
        if not nodes:
            self._img = None
            self.setVisible(False)
            return
        # The layout's rectangle: itemsBoundingRect asks every item (a Python call each) for its bounds.
        self._src = sc.sceneRect() if sc.spec is not None else sc.itemsBoundingRect()
        a = self._src.width() / max(self._src.height(), 1.0)
        box = self.box
        w, h = (box, max(70, int(box / a))) if a >= 1 else (max(70, int(box * a)), box)
        self.setFixedSize(min(w, box) + 8, min(h, box) + 8)
        self.view._place_overlays()
        t = self._target()
        size = (max(1, int(t.width())), max(1, int(t.height())))
        s = t.width() / self._src.width()
        ox, oy = self._src.left(), self._src.top()
        key = (id(sc.spec), len(nodes), len(sc.edges), size, (ox, oy, s))
        if self._base_key != key:  # edges and node boxes never move: drawn and placed once per size
            if self._building is None or self._building[0] != key:
                self._building = (key, self._base_steps(sc, nodes, size, ox, oy, s))
            t0 = time.perf_counter()
            for _ in self._building[1]:  # in slices: 50,000 items take ~0.15 s
                if time.perf_counter() - t0 > self.SLICE_S:
                    self._step_timer.start()
                    return
            self._building = None
            self._base_key = key
        by_colour: dict[tuple, list] = {}  # one drawRects per colour instead of a fillRect per node
        for it, r in zip(nodes, self._rects):
            by_colour.setdefault(it.colour_key, []).append(r)
        img = self._base.copy()
        p = QPainter(img)
        p.setPen(Qt.NoPen)
        for (rgba, faded), rects in by_colour.items():
            c = QColor.fromRgba(rgba).darker(118)
            if faded:
                c.setAlpha(70)
            p.setBrush(c)
            p.drawRects(rects)
        p.end()
        self._img = img
        self.follow()

    def _base_steps(self, sc, nodes, size, ox, oy, s, chunk: int = 2000):
        """Draw the edges and place the node boxes, yielding every ``chunk`` items."""
        base = QImage(*size, QImage.Format_ARGB32_Premultiplied)
        base.fill(Qt.transparent)
        pen = QPen(QColor(150, 160, 170, 110), 0.6)
        for k in range(0, len(sc.edges), chunk):
            p = QPainter(base)
            p.setPen(pen)
            for e in sc.edges[k:k + chunk]:
                pts = e.points
                p.drawLine(QPointF((pts[0][0] - ox) * s, (pts[0][1] - oy) * s),
                           QPointF((pts[-1][0] - ox) * s, (pts[-1][1] - oy) * s))
            p.end()
            yield
        rects = []
        for k in range(0, len(nodes), chunk):
            for it in nodes[k:k + chunk]:
                pos = it.pos()
                big = it.name in sc.emphasised
                mw, mh = max(it.width * s, 3.0 if big else 1.5), max(it.height * s, 3.0 if big else 1.5)
                rects.append(QRectF((pos.x() - ox) * s - mw / 2, (pos.y() - oy) * s - mh / 2, mw, mh))
            yield
        self._base, self._rects = base, rects

    def paintEvent(self, ev):
        paint_ended(self, ev, self._paint)

    def _paint(self, p, ev):
        p.setRenderHint(QPainter.Antialiasing)
        p.setPen(QPen(QColor("#b0b8c1"), 1))
        p.setBrush(QColor(255, 255, 255, 225))
        p.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 6, 6)
        t = self._target()
        if self._img is not None and not t.isEmpty():
            p.drawImage(t.topLeft(), self._img)
            vis = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
            s = t.width() / self._src.width()
            vr = QRectF(t.left() + (vis.left() - self._src.left()) * s, t.top() + (vis.top() - self._src.top()) * s,
                        vis.width() * s, vis.height() * s).intersected(QRectF(self.rect()).adjusted(1, 1, -1, -1))
            if vr.width() < 4 or vr.height() < 4:  # keep the marker findable when zoomed far in
                vr = QRectF(vr.center().x() - 3, vr.center().y() - 3, 6, 6)
            p.setPen(QPen(SELECT, 1.5))
            p.setBrush(QColor(21, 101, 192, 30))
            p.drawRect(vr)

    def _go(self, pos) -> None:
        t = self._target()
        if t.isEmpty():
            return
        s = t.width() / self._src.width()
        x = self._src.left() + (pos.x() - t.left()) / s
        y = self._src.top() + (pos.y() - t.top()) / s
        self.view.centerOn(QPointF(x, y))
        self.update()

    def mousePressEvent(self, ev):
        self.dragging = True
        self._go(ev.position())

    def mouseReleaseEvent(self, ev):
        self.dragging = False

    def mouseMoveEvent(self, ev):
        if ev.buttons() & Qt.LeftButton:
            self._go(ev.position())


class Legend(QWidget):
    """Top-left key: Concat mismatch bands always, plus the active overlay's scale."""

    def __init__(self, view):
        super().__init__(view)
        self.view = view
        self.setAttribute(Qt.WA_TransparentForMouseEvents)
        self.mode = Overlay.NONE
        self.title = ""
        self.lo_text = self.hi_text = ""
        self._resize()

    def set_wanted(self, on: bool) -> None:
        """View › Legend (the view gives back the strip it reserved for it)."""
        self.setVisible(bool(on))
        self.view._place_overlays()

    def set_overlay(self, mode: str, title: str = "", lo_text: str = "", hi_text: str = "") -> None:
        self.mode, self.title, self.lo_text, self.hi_text = mode, title, lo_text, hi_text
        self._resize()
        self.view._place_overlays()  # (its strip keeps its height: the canvas does not jump)
        self.update()

    def _ramped(self) -> bool:
        # The Error overlay has no ramp before the first accuracy check (no values to span).
        return self.mode in (Overlay.LATENCY, Overlay.BITS) or (self.mode in (Overlay.ERROR, Overlay.COSINE)
                                                                and bool(self.lo_text))

    MAX_HEIGHT = 94  # with a title and a ramp: the strip above the canvas is this tall whatever it shows

    def _resize(self) -> None:
        h = 50 + (44 if self._ramped() else 20 if self.title else 0)
        self.setFixedSize(330, h)

    def paintEvent(self, ev):
        paint_ended(self, ev, self._paint)

    def _paint(self, p, ev):
        p.setRenderHint(QPainter.Antialiasing)
        p.setPen(QPen(QColor("#b0b8c1"), 1))
        p.setBrush(QColor(255, 255, 255))
        p.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 6, 6)
        f = p.font()
        f.setPixelSize(11)
        p.setFont(f)
        p.setPen(QColor("#333"))
        p.drawText(QRectF(10, 4, 310, 16), Qt.AlignLeft | Qt.AlignVCenter, "Concat scale mismatch (max/min scale)")
        x = 10.0
        fm = p.fontMetrics()
        for _, name, col in MISMATCH_BANDS:
            p.setPen(QPen(QColor(col).darker(140), 1))
            p.setBrush(QColor(col))
            p.drawRoundedRect(QRectF(x, 25, 16, 16), 3, 3)
            p.setPen(QColor("#333"))
            w = fm.horizontalAdvance(name) + 2  # entries as wide as their words: none runs into the next swatch
            p.drawText(QRectF(x + 20, 24, w, 18), Qt.AlignLeft | Qt.AlignVCenter, name)
            x += 20 + w + 12
        if self.title:
            p.drawText(QRectF(10, 48, 310, 16), Qt.AlignLeft | Qt.AlignVCenter, self.title)
        if self._ramped():
            g = QLinearGradient(10, 0, 320, 0)
            for i in range(9):
                g.setColorAt(i / 8, heat_color(i / 8, self.mode))
            p.setPen(QPen(QColor("#999"), 1))
            p.setBrush(g)
            p.drawRect(QRectF(10, 67, 310, 10))
            p.setPen(QColor("#333"))
            p.drawText(QRectF(10, 78, 150, 14), Qt.AlignLeft | Qt.AlignVCenter, self.lo_text)
            p.drawText(QRectF(170, 78, 150, 14), Qt.AlignRight | Qt.AlignVCenter, self.hi_text)
