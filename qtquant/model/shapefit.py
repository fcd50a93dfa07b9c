"""What input shape would fit, when the one given does not.

A detector's strided stages halve the height and width several times and later concatenate an
upsampled map with an earlier one: a side that is not a multiple of the total stride (32 for
YOLOv8) leaves two maps one pixel apart, and onnx's shape inference fails deep in the graph
("Inferred=19 Declared=20 Dimension=2 ... /model.11/Concat").  :func:`fit_hint` names the
dimensions given and finds the smallest power-of-two multiple the model accepts, by inferring the
shapes again with the spatial sides rounded down and up to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx

from .shapes import format_shape

__all__ = ["fit_hint", "MULTIPLES"]

MULTIPLES = (2, 4, 8, 16, 32, 64, 128)


def _with_shape(model: onnx.ModelProto, name: str, dims: tuple[int, ...]) -> bytes:
    """``model``'s bytes with input ``name`` at ``dims`` and no inferred or declared inner shapes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    for o in m.graph.output:  # declared output shapes would clash with the new sides
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    for i in m.graph.input:
        if i.name == name:
            shape = i.type.tensor_type.shape
            for d, v in zip(shape.dim, dims):
                d.Clear()
                d.dim_value = int(v)
    return bytes(m.SerializeToString())


def _fits(model: onnx.ModelProto, name: str, dims: tuple[int, ...]) -> bool:
    from .inference import infer_here
    from ..base.errors import QtQuantError

    try:
        infer_here(_with_shape(model, name, dims))
    except QtQuantError:
        return False
    return True


def fit_hint(model: onnx.ModelProto, shapes: Mapping[str, Iterable[int]]) -> str:
    """A sentence for the error of input ``shapes`` that do not fit ``model``: the spatial dimensions
    given (index 2 and up) and the nearest shapes that fit, or "" when no rounding helps."""
    for name, given in shapes.items():
        dims = tuple(int(v) for v in given)
        sides = [k for k in range(2, len(dims)) if dims[k] > 1]
        if not sides:
            continue
        for m in MULTIPLES:
            if all(dims[k] % m == 0 for k in sides):
                continue  # a multiple of m already: a coarser one is what it needs
            lo = tuple(max(m, v // m * m) if k in sides else v for k, v in enumerate(dims))
            hi = tuple(-(-v // m) * m if k in sides else v for k, v in enumerate(dims))
            if _fits(model, name, lo) and _fits(model, name, hi):
                which = " and ".join(str(k) for k in sides)
                return (f"input {name!r} {format_shape(dims)}: dimension{'s' if len(sides) > 1 else ''} {which} "
                        f"must be a multiple of {m} ({format_shape(lo)} or {format_shape(hi)} fits)")
    return ""
