"""Read ``hrt_model_exec model_info``: the compiled ``.bin``'s inputs and outputs on the board.

Each tensor block reads::

    output[1]:
    name: 326
    valid shape: (1,80,80,64,)
    aligned shape: (1,80,80,64,)
    aligned byte size: 1638400
    tensor type: HB_DNN_TENSOR_TYPE_F32
    tensor layout: HB_DNN_LAYOUT_NHWC
    quanti type: NONE
    stride: (1638400,20480,256,4,)

(inputs add ``input source``).  In the reference logs every output is ``F32`` with quanti type
``NONE``: the runtime dequantizes on the CPU, and an ``NHWC`` layout there is a transpose the
board does after the BPU -- what a board-latency estimate has to count.  Unreadable input is a
one-line :class:`~qtquant.base.errors.CompileLogError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from qtquant.base.errors import CompileLogError
from qtquant.horizon.log import decode_log, read_log_bytes

__all__ = ["BoardTensor", "ModelInfo", "read_model_info", "parse_model_info"]

_BLOCK = re.compile(r"^(input|output)\[(\d+)\]:\s*$")
_FIELD = re.compile(r"^([a-z][a-z ]*[a-z]):\s*(.*?)\s*$")
_TUPLE = re.compile(r"^\(\s*((?:\d{1,12}\s*,\s*)*\d{0,12})\s*,?\s*\)$")
_MODEL_NAME = re.compile(r"^\[model name\]:\s*(\S.*?)\s*$")
_REQUIRED = ("name", "valid shape", "aligned shape", "aligned byte size", "tensor type", "tensor layout",
             "quanti type", "stride")


@dataclass(frozen=True)
class BoardTensor:
    """One input or output of the compiled model, as the runtime sees it."""

    kind: str
    """``input`` or ``output``."""
    index: int
    name: str
    valid_shape: tuple[int, ...]
    aligned_shape: tuple[int, ...]
    aligned_bytes: int
    tensor_type: str
    """``HB_DNN_TENSOR_TYPE_F32``, ``HB_DNN_IMG_TYPE_NV12``..."""
    layout: str
    """``HB_DNN_LAYOUT_NHWC`` or ``HB_DNN_LAYOUT_NCHW``."""
    quanti_type: str
    """``NONE`` when the runtime hands out float (dequantized on the CPU), else ``SCALE``..."""
    stride: tuple[int, ...]
    source: str | None
    """An input's source (``HB_DNN_INPUT_FROM_PYRAMID``...), None for outputs."""


@dataclass(frozen=True)
class ModelInfo:
    path: str
    model_name: str
    inputs: tuple[BoardTensor, ...]
    outputs: tuple[BoardTensor, ...]


def read_model_info(path: str | Path) -> ModelInfo:
    return parse_model_info(read_log_bytes(path, "hrt_model_exec model_info log"), str(path))


def parse_model_info(data: bytes, name: str = "<log>") -> ModelInfo:
    label = Path(name).name
    lines = decode_log(data, name).splitlines()
    model = next((m.group(1) for line in lines if (m := _MODEL_NAME.match(line.strip()))), None)
    if model is None:
        raise CompileLogError(f"{label}: no '[model name]:' line; not an hrt_model_exec model_info log")
    blocks: list[tuple[str, int, int, dict[str, str]]] = []
    for ln, line in enumerate(lines, 1):
        s = line.strip()
        if m := _BLOCK.match(s):
            blocks.append((m.group(1), int(m.group(2)), ln, {}))
        elif blocks and (f := _FIELD.match(s)):
            fields = blocks[-1][3]
            if f.group(1) in fields:
                raise CompileLogError(f"{label}: line {ln}: {f.group(1)!r} given twice for one tensor")
            fields[f.group(1)] = f.group(2)
    tensors = [_tensor(kind, idx, ln, fields, label) for kind, idx, ln, fields in blocks]
    inputs = tuple(t for t in tensors if t.kind == "input")
    outputs = tuple(t for t in tensors if t.kind == "output")
    for kind, group in (("input", inputs), ("output", outputs)):
        if not group or [t.index for t in group] != list(range(len(group))):
            raise CompileLogError(f"{label}: the {kind}s are missing or not numbered 0, 1, 2...")
    return ModelInfo(name, model, inputs, outputs)


def _tensor(kind: str, index: int, ln: int, f: dict[str, str], label: str) -> BoardTensor:
    missing = [k for k in _REQUIRED if k not in f]
    if missing:
        raise CompileLogError(f"{label}: {kind}[{index}] (line {ln}) lacks {', '.join(missing)} (truncated?)")
    if not f["name"]:
        raise CompileLogError(f"{label}: {kind}[{index}] (line {ln}) has no name")
    if not re.fullmatch(r"[0-9]{1,15}", f["aligned byte size"]):
        raise CompileLogError(f"{label}: {kind}[{index}]: aligned byte size {f['aligned byte size'][:20]!r}")
    words = {k: f[k] for k in ("tensor type", "tensor layout", "quanti type")}
    for k, v in words.items():
        if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", v):
            raise CompileLogError(f"{label}: {kind}[{index}]: {k} {v[:30]!r} is not a name")
    return BoardTensor(kind, index, f["name"], _tuple(f["valid shape"], label, kind, index),
                       _tuple(f["aligned shape"], label, kind, index), int(f["aligned byte size"]),
                       words["tensor type"], words["tensor layout"], words["quanti type"],
                       _tuple(f["stride"], label, kind, index), f.get("input source") if kind == "input" else None)


def _tuple(s: str, label: str, kind: str, index: int) -> tuple[int, ...]:
    m = _TUPLE.match(s)
    if not m:
        raise CompileLogError(f"{label}: {kind}[{index}]: {s[:40]!r} is not a tuple of sizes")
    return tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
