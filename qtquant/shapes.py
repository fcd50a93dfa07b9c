"""Parsing of ``--input-shape NAME=1x3x640x640`` specifications."""

from __future__ import annotations

from .errors import ShapeError

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


def parse_input_shapes(specs) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        if isinstance(spec, tuple):
            name, shape = spec
        else:
            name, shape = parse_input_shape(spec)
        out[name] = tuple(shape)
    return out


def format_shape(shape) -> str:
    if shape is None:
        return "?"
    return "x".join("?" if d is None else str(d) for d in shape)
