"""What the open dialog shows about a model's inputs, without Qt.

* The shapes the model itself records: a dynamic ``images`` input exported at 320 says so in
  its metadata (Ultralytics' ``imgsz``) or in a ``value_info`` with the same name; offering
  1x3x640x640 for it calibrated the wrong size.
* Dynamic dimensions by role, not by the exporter's internal name: ``batch x 3 x height x
  width`` instead of ``p2o.DynamicDimension.0 x 3 x p2o.DynamicDimension.1 x ...``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import onnx

if TYPE_CHECKING:
    from ..base.fileio.paths import StrPath

__all__ = ["Dim", "model_inputs", "recorded_shapes", "default_shape", "readable_dims", "needs_shapes"]

Dim: TypeAlias = "int | str"  # a fixed size, or the name of a dynamic dimension ("?" when unnamed)

# Names a person gave a dimension are kept; generated ones are replaced by the dimension's role.
_GENERATED = re.compile(r"(^|\.)(DynamicDimension|dynamic_axes|unk__|Dim_?)\d*|^\d+$|^[?_]*$|^unk", re.I)
DEFAULT_IMAGE_SIDE = 640


def _dims(t: onnx.ValueInfoProto) -> list[Dim]:
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
            for d in t.type.tensor_type.shape.dim]


def model_inputs(model: onnx.ModelProto | StrPath) -> list[tuple[str, list[Dim]]]:
    """(name, dims) of the real inputs of ``model`` (a ModelProto or a path); a dim is an int or
    the name of a dynamic dim.  An unreadable file has none."""
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model), load_external_data=False)
        except Exception:
            return []
    inits = {t.name for t in model.graph.initializer}
    return [(i.name, _dims(i)) for i in model.graph.input
            if i.name not in inits and i.type.HasField("tensor_type")]


def recorded_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Input name -> a full shape the model records for it (metadata or value_info), where its
    declared shape is dynamic."""
    inputs = model_inputs(model)
    out: dict[str, list[int]] = {}
    infos = {v.name: _dims(v) for v in model.graph.value_info if v.type.HasField("tensor_type")}
    meta = {p.key: p.value for p in model.metadata_props}
    imgsz: list[int] | None = None
    try:
        v = ast.literal_eval(meta.get("imgsz", "")) if meta.get("imgsz") else None
        if isinstance(v, int):
            imgsz = [v, v]
        elif isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and x > 0 for x in v):
            imgsz = list(v)
    except (ValueError, SyntaxError):
        imgsz = None
    for name, dims in inputs:
        if all(isinstance(d, int) for d in dims):
            continue
        vi = infos.get(name)
        fixed = [d for d in vi if isinstance(d, int)] if vi else []
        if vi and len(vi) == len(dims) and len(fixed) == len(vi):
            out[name] = fixed
        elif imgsz and len(dims) == 4:
            n, c, h, w = (d if isinstance(d, int) else None for d in dims)
            if c is not None:  # the channels are what no recorded image size gives
                out[name] = [n or 1, c, h or imgsz[0], w or imgsz[1]]
    return out


def default_shape(dims: Sequence[Dim], recorded: Sequence[int] | None = None) -> str:
    """The shape to offer: the recorded one, else batch 1 and other dynamic dims 640 (the
    spatial dims of a 4-D input) or 1."""
    if recorded:
        return "x".join(str(v) for v in recorded)
    vals: list[int] = []
    for k, d in enumerate(dims):
        if isinstance(d, int):
            vals.append(d)
        elif k == 0:
            vals.append(1)
        else:
            vals.append(DEFAULT_IMAGE_SIDE if len(dims) == 4 and k >= 2 else 1)
    return "x".join(str(v) for v in vals)


def readable_dims(dims: Sequence[Dim]) -> str:
    """``batch x 3 x height x width`` for generated dynamic-dimension names; names a person chose
    (``N``, ``seq_len``) stay."""
    roles = (["batch", "channels", "height", "width"] if len(dims) == 4 else
             ["batch"] + [f"dim{k}" for k in range(1, len(dims))])
    return " x ".join(str(d) if isinstance(d, int) else (roles[k] if _GENERATED.search(str(d)) else str(d))
                      for k, d in enumerate(dims))


def needs_shapes(inputs: Iterable[tuple[str, Sequence[Dim]]]) -> bool:
    """True when some non-batch dim is dynamic (the loader defaults batch to 1)."""
    return any(not isinstance(d, int) for _, dims in inputs for d in dims[1:])
