"""The layered layout in a child process, for big graphs.

python-igraph holds the GIL while its C code ranks and orders the layers (20,000 nodes:
130-190 ms), so the window would freeze that long while a model opens.  The child gets the
:class:`~qtquant.gui.layout.LayoutInput` and sends back the :class:`~qtquant.gui.layout.Layout`
(pickled between this process and its own child only).  Nothing here imports Qt.
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np

from ..errors import QtQuantError
from .layout import EdgeRoute, Layout, LayoutInput, layered_layout

__all__ = ["layered_layout_isolated"]

_POLL_S = 0.02


def _pack(lay: Layout) -> dict:
    """Arrays instead of 100,000 small objects: unpickling those held the parent's GIL 0.2 s."""
    counts = np.array([len(r.points) for r in lay.routes], np.int64)
    pts = np.array([p for r in lay.routes for p in r.points], np.float64).reshape(-1, 2)
    ends = np.array([(r.src, r.dst) for r in lay.routes], np.int64).reshape(-1, 2)
    return {"pos": np.array(lay.pos, np.float64).reshape(-1, 2), "layers": np.array(lay.layers, np.int64),
            "counts": counts, "points": pts, "ends": ends, "width": lay.width, "height": lay.height,
            "crossings": lay.crossings, "seconds": lay.seconds, "timings": dict(lay.timings)}


def _unpack(d: dict) -> Layout:
    """Rebuilt in plain Python, which hands the GIL over every few ms."""
    pts = d["points"].tolist()
    routes, k = [], 0
    for (src, dst), n in zip(d["ends"].tolist(), d["counts"].tolist()):
        routes.append(EdgeRoute(src, dst, [tuple(p) for p in pts[k:k + n]]))
        k += n
    return Layout([tuple(p) for p in d["pos"].tolist()], d["layers"].tolist(), routes, d["width"], d["height"],
                  d["crossings"], d["seconds"], d["timings"])


def _child(inp: LayoutInput, conn) -> None:
    try:
        conn.send(("ok", _pack(layered_layout(inp))))
    except BaseException as e:  # noqa: BLE001 - report, never leave the parent waiting
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def layered_layout_isolated(inp: LayoutInput) -> Layout:
    """:func:`layered_layout` run in a child process (spawned: safe next to Qt's threads)."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(inp, send), daemon=True, name="qtquant-layout")
    try:
        proc.start()
    except OSError:  # no child processes here: lay out in this process
        return layered_layout(inp)
    send.close()
    try:
        while not recv.poll(_POLL_S):
            if not proc.is_alive():
                break
        try:
            reply = recv.recv()
        except (EOFError, OSError):
            proc.join(timeout=2)
            raise QtQuantError(f"the layout process stopped unexpectedly (exit code {proc.exitcode})") from None
    finally:
        recv.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    if reply[0] != "ok":
        raise QtQuantError(f"layout failed: {reply[1]}")
    return _unpack(reply[1])
