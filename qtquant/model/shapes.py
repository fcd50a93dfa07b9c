"""Parsing of ``--input-shape NAME=1x3x640x640`` specifications."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypeAlias

from ..base.errors import ShapeError

__all__ = ["parse_input_shape", "parse_input_shapes", "format_shape"]


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = spec.rpartition("=")
    if not sep or not name or not dims:
        raise ShapeError(f"bad input shape {spec!r}: expected NAME=1x3x640x640")
    try:
        shape = tuple(int(d) for d in dims.lower().replace(",", "x").split("x"))
    except ValueError:
        raise ShapeError(f"bad input shape {spec!r}: dimensions must be integers like 1x3x640x640") from None
    if any(d <= 0 for d in shape):
        raise ShapeError(f"bad input shape {spec!r}: dimensions must be positive")
    return name.strip(), shape


# A comma that starts another NAME=: "input=1x512,state=2x1x128" is two specs (a comma between
# dimensions, "x=1,3,8,8", is not followed by one).
_NEXT_SPEC = re.compile(r",(?=[^,=]+=)")


ShapeSpec: TypeAlias = "str | tuple[str, Iterable[int]]"
"""``NAME=1x3x640x640`` (several, comma-separated), or a ``(name, shape)`` pair."""
InputShapes: TypeAlias = "dict[str, Iterable[int]] | Iterable[ShapeSpec] | None"
"""Input shapes as callers give them: name -> shape, or specs."""


def parse_input_shapes(specs: Iterable[ShapeSpec] | None) -> dict[str, tuple[int, ...]]:
    """``specs``: ``NAME=1x3x640x640`` strings (each may hold several, comma-separated) or
    ``(name, shape)`` pairs."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        if isinstance(spec, tuple):
            out[spec[0]] = tuple(spec[1])
            continue
        for one in _NEXT_SPEC.split(spec):
            name, shape = parse_input_shape(one)
            if name in out and out[name] != shape:  # refused: silently keeping the last would hide a typo
                raise ShapeError(f"input {name!r} is given two shapes: {format_shape(out[name])} and "
                                 f"{format_shape(shape)}")
            out[name] = shape
    return out


def format_shape(shape: Iterable[int | None] | None) -> str:
    if shape is None:
        return "?"
    return "x".join("?" if d is None else str(d) for d in shape)
