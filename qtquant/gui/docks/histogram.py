"""The activation histogram the inspector shows: log counts, the quantization clipping thresholds marked."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from ..style import paint_ended

__all__ = ["HistogramWidget"]


class HistogramWidget(QWidget):
    """Activation histogram (log counts) with the quantization clipping thresholds marked."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMinimumHeight(170)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.tensor = ""
        self.counts: np.ndarray | None = None
        self.edges: np.ndarray | None = None
        self.clip: tuple[float, float] | None = None
        self.message = "Select a node to see its activation histogram."

    def set_data(self, tensor: str, counts, edges, clip=None, message: str = "") -> None:
        self.tensor = tensor
        self.counts = None if counts is None else np.asarray(counts, dtype=float)
        self.edges = None if edges is None else np.asarray(edges, dtype=float)
        self.clip = clip
        self.message = message
        self.update()

    def clear(self, message: str = "") -> None:
        self.set_data("", None, None, None, message)

    @property
    def has_data(self) -> bool:
        return self.counts is not None and self.edges is not None and len(self.counts) > 0

    def paintEvent(self, ev):
        paint_ended(self, ev, self._paint)

    def _paint(self, p, ev):
        p.setRenderHint(QPainter.Antialiasing)
        r = QRectF(self.rect()).adjusted(6, 20, -8, -22)
        p.fillRect(self.rect(), QColor("#ffffff"))
        f = p.font()
        f.setPixelSize(11)
        p.setFont(f)
        p.setPen(QColor("#333"))
        p.drawText(QRectF(6, 2, self.width() - 12, 16), Qt.AlignLeft | Qt.AlignVCenter,
                   f"Histogram: {self.tensor}" if self.tensor else "Histogram")
        if not self.has_data:
            p.setPen(QColor("#777"))
            p.drawText(r, Qt.AlignCenter | Qt.TextWordWrap, self.message or "no histogram")
            return
        counts, edges = self.counts, self.edges
        nz = np.flatnonzero(counts > 0)
        if nz.size:  # the engine's bins are symmetric about zero: show where the data is
            counts, edges = counts[nz[0]:nz[-1] + 1], edges[nz[0]:nz[-1] + 2]
        lo, hi = float(edges[0]), float(edges[-1])
        if self.clip is not None:
            lo, hi = min(lo, self.clip[0]), max(hi, self.clip[1])
        span = (hi - lo) or 1.0
        shown = (lo, hi)
        lo, hi = lo - span * 0.03, hi + span * 0.03
        span = hi - lo

        def X(v):
            return r.left() + (v - lo) / span * r.width()

        ymax = math.log1p(float(counts.max())) or 1.0
        p.setPen(QPen(QColor("#c9d1d9"), 1))
        p.drawLine(r.bottomLeft(), r.bottomRight())
        if self.clip is not None:  # values outside the quantization range are clipped
            shade = QColor(229, 57, 53, 28)
            p.fillRect(QRectF(r.left(), r.top(), X(self.clip[0]) - r.left(), r.height()), shade)
            p.fillRect(QRectF(X(self.clip[1]), r.top(), r.right() - X(self.clip[1]), r.height()), shade)
        p.setPen(Qt.NoPen)
        p.setBrush(QColor("#4a7fb5"))
        for c, a, b in zip(counts, edges[:-1], edges[1:]):
            if c <= 0:
                continue
            h = math.log1p(float(c)) / ymax * r.height()
            x0, x1 = X(a), X(b)
            p.drawRect(QRectF(x0, r.bottom() - h, max(x1 - x0, 0.8), h))
        if self.clip is not None:
            pen = QPen(QColor("#d32f2f"), 1.5, Qt.DashLine)
            p.setPen(pen)
            for v in self.clip:
                p.drawLine(X(v), r.top(), X(v), r.bottom())
            p.setPen(QColor("#d32f2f"))
            p.drawText(QRectF(X(self.clip[0]) + 3, r.top(), 120, 14), Qt.AlignLeft, f"clip {self.clip[0]:.3g}")
            p.drawText(QRectF(X(self.clip[1]) - 123, r.top(), 120, 14), Qt.AlignRight, f"clip {self.clip[1]:.3g}")
        p.setPen(QColor("#555"))
        p.drawText(QRectF(r.left(), r.bottom() + 3, 120, 16), Qt.AlignLeft, f"{shown[0]:.3g}")
        p.drawText(QRectF(r.right() - 120, r.bottom() + 3, 120, 16), Qt.AlignRight, f"{shown[1]:.3g}")
        if lo < 0 < hi:
            p.setPen(QPen(QColor("#888"), 1, Qt.DotLine))
            p.drawLine(X(0.0), r.top() + 16, X(0.0), r.bottom())
        p.setPen(QColor("#777"))
        p.drawText(QRectF(r.left(), r.bottom() + 3, r.width(), 16), Qt.AlignCenter, "log count")
