"""Dragging nodes onto nodes: the gesture behind "drop the selection on a Concat to join its group".

Pressing on a node selects it as usual (a node that is already part of a multi-selection
keeps the selection); moving past the platform's drag distance starts a link drag: a dashed
line follows the cursor and the node under it is outlined.  Releasing over another node
reports ``(sources, target)``; releasing elsewhere, or Escape, does nothing.  Items never
move: the layout is fixed.  Near the edge of the view the canvas scrolls by itself, so a
target further away can be reached without letting go.
"""

from __future__ import annotations

from PySide6.QtCore import QLineF, QPointF, Qt, QTimer
from PySide6.QtGui import QColor, QPainterPath, QPen
from PySide6.QtWidgets import QApplication, QGraphicsLineItem, QGraphicsPathItem

__all__ = ["NodeDrag", "DROP_OK", "DROP_NONE"]

DROP_OK = QColor("#2e7d32")
DROP_NONE = QColor("#78909c")
EDGE_MARGIN = 36  # pixels from the viewport border where a drag scrolls the canvas


class NodeDrag:
    def __init__(self, view):
        self.view = view
        self.origin: str | None = None  # the pressed node
        self.sources: list[str] = []
        self.press_pos: QPointF | None = None
        self.started = False
        self.target: str | None = None
        self._line: QGraphicsLineItem | None = None
        self._mark: QGraphicsPathItem | None = None
        self._last = QPointF()
        self._scroll = QTimer(view, interval=30)
        self._scroll.timeout.connect(self._autoscroll)

    @property
    def pending(self) -> bool:
        return self.origin is not None

    # -- gesture ---------------------------------------------------------------------------
    def begin(self, name: str, pos: QPointF, selected: list[str]) -> None:
        self.origin = name
        self.sources = list(selected) if name in selected else [name]
        self.press_pos = QPointF(pos)
        self.started = False
        self.target = None

    def move(self, pos: QPointF) -> None:
        if self.origin is None:
            return
        if not self.started:
            if (pos - self.press_pos).manhattanLength() < QApplication.startDragDistance():
                return
            self.started = True
            self._make_items()
        self._last = QPointF(pos)
        vp = self.view.viewport().rect()
        near = (pos.x() < EDGE_MARGIN or pos.y() < EDGE_MARGIN or pos.x() > vp.width() - EDGE_MARGIN
                or pos.y() > vp.height() - EDGE_MARGIN)
        if near and not self._scroll.isActive():
            self._scroll.start()
        elif not near:
            self._scroll.stop()
        sc = self.view.scene()
        sp = self.view.mapToScene(pos.toPoint())
        item = sc.node_at(sp)
        target = item.name if item is not None and item.name not in self.sources else None
        if target != self.target:
            self.target = target
            self._mark_target(item if target else None)
        src = sc.nodes.get(self.origin)
        if src is not None and self._line is not None:
            self._line.setLine(QLineF(src.pos(), sp))
            pen = self._line.pen()
            pen.setColor(DROP_OK if target else DROP_NONE)
            self._line.setPen(pen)
        self.view.viewport().setCursor(Qt.DragLinkCursor if target else Qt.ForbiddenCursor)

    def finish(self) -> tuple[list[str], str] | None:
        """End the gesture; (sources, target) when it was a drag that ended on another node."""
        out = (list(self.sources), self.target) if self.started and self.target else None
        self.cancel()
        return out

    def _autoscroll(self) -> None:
        if not self.started:
            self._scroll.stop()
            return
        vp = self.view.viewport().rect()
        p = self._last

        def step(v, hi):
            if v < EDGE_MARGIN:
                return -int((EDGE_MARGIN - v) / 2) - 2
            if v > hi - EDGE_MARGIN:
                return int((v - hi + EDGE_MARGIN) / 2) + 2
            return 0

        h, v = self.view.horizontalScrollBar(), self.view.verticalScrollBar()
        h.setValue(h.value() + step(p.x(), vp.width()))
        v.setValue(v.value() + step(p.y(), vp.height()))
        self.move(p)  # the line and the target follow the scrolled canvas

    def cancel(self) -> None:
        self._scroll.stop()
        if self.started:
            self.view.viewport().unsetCursor()
        for it in (self._line, self._mark):
            try:
                if it is not None and it.scene() is not None:
                    it.scene().removeItem(it)
            except RuntimeError:  # the scene was cleared under us (a model opened)
                pass
        self._line = self._mark = None
        self.origin = None
        self.sources = []
        self.started = False
        self.target = None

    # -- feedback items -----------------------------------------------------------------------
    def _make_items(self) -> None:
        sc = self.view.scene()
        pen = QPen(DROP_NONE, 2.5, Qt.DashLine)
        pen.setCosmetic(True)
        self._line = QGraphicsLineItem()
        self._line.setPen(pen)
        self._line.setZValue(3)
        self._line.setAcceptedMouseButtons(Qt.NoButton)
        sc.addItem(self._line)

    def _mark_target(self, item) -> None:
        sc = self.view.scene()
        if self._mark is not None:
            try:
                sc.removeItem(self._mark)
            except RuntimeError:
                pass
            self._mark = None
        if item is None:
            return
        r = item.sceneBoundingRect().adjusted(-3, -3, 3, 3)
        path = QPainterPath()
        path.addRoundedRect(r, 10, 10)
        self._mark = QGraphicsPathItem(path)
        pen = QPen(DROP_OK, 3.5)
        pen.setCosmetic(True)
        self._mark.setPen(pen)
        fill = QColor(DROP_OK)
        fill.setAlpha(40)
        self._mark.setBrush(fill)
        self._mark.setZValue(2.5)
        self._mark.setAcceptedMouseButtons(Qt.NoButton)
        sc.addItem(self._mark)
