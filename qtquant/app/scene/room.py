"""Giving back the room of a block that collapses, without letting two boxes overlap.

When a block collapses, the boxes beside its area (in the rows it spans) move towards it and
the boxes below it move up.  When the block was expanded on its own, that area is exactly the
room its expansion made, and moving back by the whole room is the inverse of the expansion.
When it was laid out together with its surroundings (a graph that opened flat, Expand all, a
block expanded with everything inside it), other boxes share its rows -- a parallel branch
beside it -- and moving everything below up by the block's height would pile them onto those.
So every shift is the largest one, up to the room, that keeps each moving box a gap away from
every box that stays (:func:`shifts`).  Nothing here imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from .layout import Point

__all__ = ["Room", "shifts", "place", "GAP_X", "GAP_Y"]

GAP_X = 12.0  # the least room left between two boxes side by side (the layout keeps 28)
GAP_Y = 20.0  # and between two rows (the layout keeps 64)
_EPS = 1e-6

Boxes: TypeAlias = "npt.NDArray[np.float64]"  # one (x0, y0, x1, y1) row per box
Centres: TypeAlias = "Mapping[str, Point]"  # box name -> its centre
Sizes: TypeAlias = "Callable[[str], tuple[float, float]]"  # box name -> (width, height)


@dataclass
class Room:
    """The area ``[x0, x1] x [y0, y1]`` closing; what beside it moves in by ``left`` / ``right``,
    what below it moves up by ``up``."""

    x0: float
    y0: float
    x1: float
    y1: float
    left: float = 0.0  # boxes left of the area move right by this
    right: float = 0.0  # boxes right of the area move left by this
    up: float = 0.0

    def moves(self, x: float, y: float) -> tuple[float, float]:
        """Where a point (a box's centre, a route's bend) goes."""
        if y > self.y1:
            return (x, y - self.up)
        if self.y0 <= y and not self.x0 <= x <= self.x1:
            return (x + self.left, y) if x < self.x0 else (x - self.right, y)
        return (x, y)


def _boxes(pos: Centres, size: Sizes, names: list[str]) -> Boxes:
    out = np.empty((len(names), 4))
    for i, u in enumerate(names):
        (x, y), (w, h) = pos[u], size(u)
        out[i] = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
    return out


def _limit(moving: Boxes, still: Boxes, axis: int, sign: int, want: float, gap: float) -> float:
    """The largest shift <= ``want`` of every ``moving`` box along ``axis`` (0: x, 1: y) in
    direction ``sign`` (-1: towards smaller coordinates) that leaves ``gap`` to each ``still`` box
    it would pass (one that overlaps it across the axis and lies ahead of it)."""
    if want <= 0 or not len(moving) or not len(still):
        return max(want, 0.0)
    lo, hi = axis, axis + 2  # along the axis
    clo, chi = 1 - axis, 3 - axis  # across it
    best = want
    for k in range(0, len(moving), 512):  # chunks: bounded memory on a big flat graph
        m = moving[k:k + 512]
        across = (m[:, None, clo] < still[None, :, chi] - _EPS) & (still[None, :, clo] < m[:, None, chi] - _EPS)
        if sign < 0:  # moving towards smaller coordinates: the still boxes before them
            ahead = still[None, :, hi] <= m[:, None, lo] + _EPS
            room = m[:, None, lo] - still[None, :, hi] - gap
        else:
            ahead = still[None, :, lo] >= m[:, None, hi] - _EPS
            room = still[None, :, lo] - m[:, None, hi] - gap
        hit = across & ahead
        if hit.any():
            best = min(best, float(room[hit].min()))
    return max(best, 0.0)


def shifts(pos: Centres, size: Sizes, room: Room, box: tuple[float, float, float, float] | None, gone: Collection[str],
           want_x: float, want_y: float) -> Room:
    """``room`` with its shifts set: each side by up to ``want_x``, up by up to ``want_y``.

    ``pos``/``size``: every box that stays (those in ``gone`` vanish with the block); ``box``:
    the collapsed block's box ``(x0, y0, x1, y1)`` (None: placed later, by an outer collapse).
    """
    names = [u for u in pos if u not in gone]
    if not names:
        return room
    b = _boxes(pos, size, names)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    band = (cy >= room.y0) & (cy <= room.y1)
    left = band & (cx < room.x0)
    right = band & (cx > room.x1)
    extra = np.array([box]) if box is not None else np.empty((0, 4))
    # Sideways first (what moves up afterwards must clear the boxes where they end up).
    still = np.vstack([b[~right], extra])
    room.right = _limit(b[right], still, 0, -1, want_x, GAP_X)
    still = np.vstack([b[~left], extra])
    room.left = _limit(b[left], still, 0, +1, want_x, GAP_X)
    b[left, 0::2] += room.left
    b[right, 0::2] -= room.right
    below = cy > room.y1
    room.up = _limit(b[below], np.vstack([b[~below], extra]), 1, -1, want_y, GAP_Y)
    return room


def place(pos: Centres, size: Sizes, gone: Collection[str], candidates: list[Point], w: float, h: float) -> Point:
    """The first of ``candidates`` (box centres) where a ``w`` x ``h`` box overlaps no box that
    stays (those not in ``gone``); the first one when none is free.  A block laid out with its
    surroundings can share its rows and columns with other boxes: the middle of its area may be
    taken."""
    names = [u for u in pos if u not in gone]
    if not names or len(candidates) == 1:
        return candidates[0]
    b = _boxes(pos, size, names)
    for x, y in candidates:
        if not ((b[:, 0] < x + w / 2 + GAP_X / 2) & (x - w / 2 - GAP_X / 2 < b[:, 2])
                & (b[:, 1] < y + h / 2 + GAP_X / 2) & (y - h / 2 - GAP_X / 2 < b[:, 3])).any():
            return (x, y)
    return candidates[0]
