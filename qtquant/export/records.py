"""What an export reports: its counts and notes, and every bias adjustment and clip (DESIGN §3:
nothing is clipped silently)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

__all__ = ["BiasAdjustment", "ClipRecord", "Made", "QdqBuild", "StructureKey", "ExportResult", "clip_record"]


def _num(x) -> float | None:
    """A JSON-safe float (None for inf/nan)."""
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class BiasAdjustment:
    """The weight scale of a node was raised so that its bias fits int32."""

    node: str
    op_type: str
    weight: str
    bias: str
    input: str  # the activation the node reads
    input_scale: float
    channels: int  # output channels whose weight scale was raised (1 for a per-tensor weight)
    of_channels: int  # channels of the weight scale (1 when per tensor)
    max_ratio: float  # new / old weight scale, worst channel
    bits_lost: float  # log2(max_ratio): weight precision the worst channel gives up
    zeroed: int = 0  # raised channels whose int8 weights are now all zero
    per_tensor: bool = False
    shared_with: tuple[str, ...] = ()  # other nodes reading this raised weight (same input scale, say)
    copied: bool = False  # other readers of the weight keep another scale: this node reads its own copy

    def message(self) -> str:
        where = ("the per-tensor weight scale raised" if self.per_tensor else
                 f"weight scale of {self.channels} of {self.of_channels} channel(s) raised")
        s = (f"bias of {self.op_type} {self.node!r} did not fit int32 at input scale {self.input_scale:.2g}: "
             f"{where}, worst channel loses {self.bits_lost:.1f} bits of weight precision")
        if self.zeroed:
            s += f"; {self.zeroed} channel(s) now have all-zero weights (output = bias there)"
        if self.shared_with:
            s += f"; the raised weight {self.weight!r} is also read by {', '.join(map(repr, self.shared_with))}"
        if self.copied:
            s += f"; weight {self.weight!r} is shared: this node reads its own int8 copy, the others keep theirs"
        return s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shared_with"] = list(self.shared_with)
        for k in ("input_scale", "max_ratio", "bits_lost"):
            d[k] = _num(d[k])
        return d


@dataclass(frozen=True)
class ClipRecord:
    """Values the export had to clip to the representable range of their quantized type."""

    tensor: str  # the float tensor (bias, weight or constant) as named in the input model
    kind: str  # "bias" | "weight" | "constant"
    clipped: int  # values outside the range
    total: int
    worst: float  # the clipped value farthest outside the range
    lo: float  # representable range, in float
    hi: float
    node: str = ""  # the consumer (bias, weight)
    domain: int | None = None  # constants: the domain whose scale they were quantized with

    def message(self) -> str:
        by = f"by domain {self.domain}'s scale" if self.domain is not None else \
            f"({'int32' if self.kind == 'bias' else 'int8'} at its scale)"
        of = f" of {self.node!r}" if self.node else ""
        return (f"{self.kind} {self.tensor!r}{of} clipped in {self.clipped} of {self.total} values to "
                f"[{self.lo:.3g}, {self.hi:.3g}] {by}; worst value {self.worst:.3g}")

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("worst", "lo", "hi"):
            d[k] = _num(d[k])
        return d


_CHUNK = 1 << 24  # elements counted at a time: the masks of a 1 GiB weight stay at 16 MiB


def _outside(q: np.ndarray, qmin, qmax) -> int:
    """How many of ``q`` fall outside [qmin, qmax] (nan counts), without float64 copies or
    full-size masks.  float32 compares exactly only with bounds float32 holds exactly."""
    if q.dtype != np.float32 or max(abs(qmin), abs(qmax)) >= 1 << 24:
        q = q.astype(np.float64)
    flat = q.reshape(-1)
    return sum(int(c.size - np.count_nonzero((c >= qmin) & (c <= qmax)))
               for c in (flat[i:i + _CHUNK] for i in range(0, flat.size, _CHUNK)))


def clip_record(values, q, qmin, qmax, scale, zero_point, **kw) -> ClipRecord | None:
    """The record for ``q = rint(values / scale) + zero_point`` (before clipping), if any is outside."""
    q = np.asarray(q)
    n = _outside(q, qmin, qmax)
    if not n:
        return None
    v = np.asarray(values, dtype=np.float64)
    q = q.astype(np.float64)
    bad = ~((q >= qmin) & (q <= qmax))  # nan counts as clipped
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), v.shape) if np.ndim(scale) else \
        np.full(v.shape, float(scale))
    lo_all, hi_all = (qmin - zero_point) * s, (qmax - zero_point) * s
    over = np.where(bad, np.maximum(v - hi_all, lo_all - v), -np.inf)
    over = np.where(np.isnan(over), np.inf, over)
    i = np.unravel_index(int(np.argmax(over)), v.shape) if v.ndim else ()
    lo, hi = float(lo_all[i]), float(hi_all[i])
    return ClipRecord(total=int(v.size), clipped=n, worst=float(v[i]), lo=lo, hi=hi, **kw)


class StructureKey:
    """A build's structure key (:class:`~qtquant.runs.programs.Walk`), None until a walk of it or of a
    build sharing this holder computes it."""

    __slots__ = ("key",)

    def __init__(self):
        self.key: bytes | None = None


# What a recording build made (``Rewrite.made``): its nodes, each (domain, op, attributes, has a
# subgraph, inputs, outputs); the initializers it kept, by name; and their value keys, by name.
Made = tuple[list[tuple], dict[str, onnx.TensorProto], dict[str, bytes]]


@dataclass
class QdqBuild:
    model: onnx.ModelProto
    opset: int
    activations: int = 0  # Q/DQ pairs on activations
    domains: int = 0  # shared scale initializers
    weights: int = 0  # per-channel (or per-tensor) quantized weights
    biases: int = 0
    constants: int = 0  # cloned constants
    int16: int = 0  # activations of those with an int16 (or uint16) Q/DQ pair
    float_kept: int = 0  # activations left in float by their precision
    notes: list[str] = field(default_factory=list)
    scale_of: dict[str, str] = field(default_factory=dict)  # tensor -> name of its scale initializer
    bias_adjusted: list[BiasAdjustment] = field(default_factory=list)
    clipped: list[ClipRecord] = field(default_factory=list)
    cut: tuple[str, ...] = ()  # the graph was cut at these tensors (--cut): the file holds only that part
    # What the build made, as it made it (Rewrite.made): the nodes and initializers of ``model``
    # without reading them back (the fidelity check's walk of the model, programs.Walk.of_build).
    made: Made | None = field(default=None, repr=False, compare=False)
    # The walk's structure key, once a walk computed it: shared by a full build and the builds
    # patched from it (.rescale), whose nodes differ only in the initializers they read.
    structure: StructureKey = field(default_factory=StructureKey, repr=False, compare=False)

    def warnings(self) -> list[str]:
        """One line per weight scale raised for a bias and per tensor still clipped (kept out of
        :attr:`notes` and :meth:`ExportResult.text`: callers print them as warnings)."""
        return [a.message() for a in self.bias_adjusted] + [c.message() for c in self.clipped]

    def to_dict(self) -> dict:
        return {"bias_adjusted": [a.to_dict() for a in self.bias_adjusted],
                "clipped": [c.to_dict() for c in self.clipped],
                "warnings": self.warnings()}


@dataclass
class ExportResult:
    path: Path
    data_path: Path | None
    build: QdqBuild

    def text(self) -> str:
        b = self.build
        s = (f"wrote {self.path} (opset {b.opset}): {b.activations} Q/DQ pairs over {b.domains} scale domains, "
             f"{b.weights} weights per channel, {b.biases} int32 biases, {b.constants} cloned constants")
        if b.int16 or b.float_kept:
            s += f"; precision: {b.int16} int16, {b.float_kept} kept in float"
        if self.data_path:
            s += f"; weights in {self.data_path.name}"
        if b.cut:
            s += (f"; the cut graph (--cut): it ends at {', '.join(b.cut[:6])}{' ...' if len(b.cut) > 6 else ''}, "
                  "the nodes after them are not in the file")
        return s
