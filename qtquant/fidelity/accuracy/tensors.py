"""Per-tensor error: cumulative and local SQNR of every quantized activation (docs/accuracy.md).

- **Cumulative SQNR** of tensor ``t``: the float model's ``t`` against the exported QDQ model's
  dequantized ``t`` (the DequantizeLinear output that replaces it), on the check samples: the
  error of everything upstream plus ``t``'s own rounding.  The QDQ model runs with Q/DQ evaluated
  in float (onnxruntime's basic optimisations), because exposing an intermediate tensor is
  exactly what stops the default options from fusing around it; the model outputs' figures
  (:mod:`qtquant.fidelity.accuracy.check`) are the shipped, fused ones.
- **Local SQNR** of ``t``: ``t`` alone quantized, the rest float: the float model's ``t`` against
  QuantizeLinear+DequantizeLinear of that same float ``t`` at its domain's scale (int16 over the
  same range for a tensor set to int16).  Its producer's
  weights stay float here: local SQNR is that tensor's own rounding and clipping alone (weight
  rounding shows in the cumulative figure of the node's output).

Both are accumulated per sample as sums of squares (signal, noise) while the runs go: no
activation is kept past the sample it came from.  The tensors are fetched in chunks of at most
:data:`CHUNK_BYTES` per sample, so memory stays flat in the model size too (a larger model costs
more runs, not more memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from ...base.errors import Cancelled, ModelError, first_line
from ..measure import fake_quant
from ...model.runtime import make_session, with_outputs
from ...base.vocab import Precision

__all__ = ["TensorError", "tensor_errors", "dequantized_names", "CHUNK_BYTES"]

CHUNK_BYTES = 96 << 20  # per sample and per model: float and QDQ outputs fetched at once


@dataclass
class TensorError:
    tensor: str
    node: str | None  # producer (None for a model input)
    precision: Precision
    sqnr_db: float  # cumulative
    local_sqnr_db: float | None  # None when the tensor is not quantized (kept in float)
    local_nsr: float = 0.0  # noise power / signal power of its own rounding (the ranking's estimate)
    nsr: float = 0.0  # the same, cumulative

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "node": self.node, "precision": self.precision.value,
                "sqnr_db": _num(self.sqnr_db), "local_sqnr_db": _num(self.local_sqnr_db)}


def _num(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return round(float(x), 4)


class _Sums:
    """Σref² and Σ(ref−test)² only, in float32 BLAS dots: the per-tensor check touches every
    activation of every sample, and :class:`~qtquant.fidelity.metrics.ErrorSums`' float64 copies, cosine
    and extremes made it several times slower than the model runs themselves."""

    __slots__ = ("ref2", "err2")

    def __init__(self):
        self.ref2 = self.err2 = 0.0

    def add(self, ref, test) -> None:
        r = np.asarray(ref, dtype=np.float32).ravel()
        e = r - np.asarray(test, dtype=np.float32).ravel()
        self.ref2 += float(np.dot(r, r))
        self.err2 += float(np.dot(e, e))

    @property
    def sqnr(self) -> float:
        if self.err2 == 0.0:
            return math.inf
        return -math.inf if self.ref2 == 0.0 else 10.0 * math.log10(self.ref2 / self.err2)

    @property
    def nsr(self) -> float:
        return self.err2 / self.ref2 if self.ref2 > 0 else 0.0


def dequantized_names(model: onnx.ModelProto) -> dict[str, str]:
    """Per quantized activation of the source graph: the name of its dequantized value in the
    QDQ model (``t_dequantized``, or ``t`` itself for a model output, whose producer writes
    ``t_prequant``)."""
    q_in = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    outputs = {o.name for o in model.graph.output}
    found = {}
    for n in model.graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in q_in:
            continue
        src, dq = q_in[n.input[0]], n.output[0]
        found[dq if dq in outputs else src] = dq
    return found


def _qparams(dm, t, precision):
    """What the export quantizes ``t`` with: its domain's int8 parameters, or the int16 ones over
    the same range."""
    return dm.qparams_of(t) if precision is Precision.FLOAT else dm.qparams_at(t, precision)


def _bytes(graph, t) -> int | None:
    shape = graph.tensors[t].shape
    if not shape or any(not isinstance(d, int) or d <= 0 for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) * 4


def _chunks(graph, names, limit):
    chunk, size = [], 0
    for t in names:
        b = _bytes(graph, t)
        b = limit // 64 if b is None else b  # unknown size: assume a 64th of a chunk
        if chunk and size + b > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(t)
        size += b
    if chunk:
        yield chunk


def tensor_errors(bench, dm=None, *, chunk_bytes: int = CHUNK_BYTES, progress=None) -> list[TensorError]:
    """Cumulative and local SQNR of every quantized float activation, in graph order."""
    session, graph = bench.session, bench.graph
    dm = session.domains if dm is None else dm
    build = bench.build(dm)
    dq = dequantized_names(build.model)
    names = [t for t in graph.quantized_tensors if t in dm.of and graph.tensors[t].kind != "weight"
             and graph.tensors[t].elem_type == onnx.TensorProto.FLOAT and dm.qparams_of(t) is not None]
    prec = bench.precision
    cum = {t: _Sums() for t in names}
    loc = {t: _Sums() for t in names if t in dq}
    qp_of = {t: _qparams(dm, t, prec.of(t)) for t in loc}
    chunks = list(_chunks(graph, names, chunk_bytes))
    for k, chunk in enumerate(chunks):
        qnames = [dq.get(t, t) for t in chunk]
        fs = make_session(with_outputs(graph.model, chunk), graph.base_dir, spinning=False, level="basic")
        qs = make_session(with_outputs(build.model, qnames), graph.base_dir, spinning=False, level="basic")
        for feed in bench.feeds:
            if bench.cancel is not None and bench.cancel():
                raise Cancelled("accuracy check cancelled")
            try:
                fo, qo = fs.run(chunk, feed), qs.run(qnames, feed)
            except Exception as e:  # onnxruntime's errors are not ours: one line
                raise ModelError(f"accuracy check failed in onnxruntime: {first_line(e)}") from None
            for t, f, q in zip(chunk, fo, qo):
                cum[t].add(f, q)
                if t in loc:
                    loc[t].add(f, fake_quant(f, qp_of[t]))
            del fo, qo
        if progress is not None:
            progress(k + 1, len(chunks))
    out = []
    for t in names:
        p = graph.producer(t)
        lo = loc.get(t)
        out.append(TensorError(t, p.name if p is not None else None,
                               prec.of(t) if lo is not None else Precision.FLOAT, cum[t].sqnr,
                               lo.sqnr if lo is not None else None,
                               lo.nsr if lo is not None else 0.0, cum[t].nsr))
    return out
