"""The layered layout in a child process, for big graphs.

python-igraph holds the GIL while its C code ranks and orders the layers (20,000 nodes:
130-190 ms), so the window would freeze that long while a model opens.  The child gets the
:class:`~qtquant.app.scene.layout.LayoutInput` and sends back the :class:`~qtquant.app.scene.layout.Layout`
(through :mod:`qtquant.base.childproc`, pickled between this process and its own child only).
Nothing here imports Qt.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import numpy.typing as npt

from ...base import childproc
from .layout import EdgeRoute, Layout, LayoutInput, layered_layout

__all__ = ["layered_layout_isolated"]



class Packed(TypedDict):
    """A :class:`Layout` as arrays and numbers, for the pipe."""

    pos: npt.NDArray[np.float64]  # (n, 2)
    layers: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]  # points per route
    points: npt.NDArray[np.float64]  # every route's points, one after the other: (sum of counts, 2)
    ends: npt.NDArray[np.int64]  # (src, dst) per route
    width: float
    height: float
    crossings: int
    seconds: float
    timings: dict[str, float]


def _pack(lay: Layout) -> Packed:
    """Arrays instead of 100,000 small objects: unpickling those held the parent's GIL 0.2 s."""
    counts = np.array([len(r.points) for r in lay.routes], np.int64)
    pts = np.array([p for r in lay.routes for p in r.points], np.float64).reshape(-1, 2)
    ends = np.array([(r.src, r.dst) for r in lay.routes], np.int64).reshape(-1, 2)
    return {"pos": np.array(lay.pos, np.float64).reshape(-1, 2), "layers": np.array(lay.layers, np.int64),
            "counts": counts, "points": pts, "ends": ends, "width": lay.width, "height": lay.height,
            "crossings": lay.crossings, "seconds": lay.seconds, "timings": dict(lay.timings)}


def _unpack(d: Packed) -> Layout:
    """Rebuilt in plain Python, which hands the GIL over every few ms."""
    pts = d["points"].tolist()
    routes: list[EdgeRoute] = []
    k = 0
    for (src, dst), n in zip(d["ends"].tolist(), d["counts"].tolist()):
        routes.append(EdgeRoute(src, dst, [(x, y) for x, y in pts[k:k + n]]))
        k += n
    return Layout([(x, y) for x, y in d["pos"].tolist()], d["layers"].tolist(), routes, d["width"], d["height"],
                  d["crossings"], d["seconds"], d["timings"])


def _lay_out(inp: LayoutInput, link: childproc.Link) -> Packed:
    return _pack(layered_layout(inp))


def layered_layout_isolated(inp: LayoutInput) -> Layout:
    """:func:`layered_layout` run in a child process."""
    try:
        packed: Packed = childproc.run(_lay_out, inp, name="qtquant-layout", what="the layout process",
                               failed="layout failed: {message}")
    except OSError:  # no child processes here: lay out in this process
        return layered_layout(inp)
    return _unpack(packed)
