"""Fidelity: how far the fake-quantized model is from the float one (DESIGN §3).

The float model and the QDQ model (built by :mod:`qtquant.export.qdq`, in memory) run
through onnxruntime on the calibration's held-back samples.  For each float output we
report SQNR in dB and cosine similarity, before (no user groups) and after (the
session's groups), and for each group member the quantization SQNR of that tensor
alone with its own scale versus the shared one.

The GUI re-runs this after every edit, so results are cached per session: float outputs
once per calibration, the "before" run once per baseline domain map, and only the
"after" model is rebuilt when the groups change.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from .errors import BadInputError, Cancelled, ModelError
from .quant import bits_lost
from .runtime import make_session, with_outputs

__all__ = ["Fidelity", "MemberFidelity", "measure_session", "sqnr_db", "cosine", "fake_quant"]


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """10·log10(Σref² / Σ(ref−test)²); +inf when identical."""
    ref = np.asarray(ref, dtype=np.float64).ravel()
    test = np.asarray(test, dtype=np.float64).ravel()
    noise = float(np.sum((ref - test) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def fake_quant(x: np.ndarray, qp) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear in numpy (round half to even, saturate)."""
    # float32 throughout, as the file stores the scale and onnxruntime computes.
    s = np.float32(qp.scale)
    q = np.clip(np.rint(np.asarray(x, dtype=np.float32) / s) + np.float32(qp.zero_point), qp.qmin, qp.qmax)
    return ((q - np.float32(qp.zero_point)) * s).astype(np.float32)


@dataclass
class MemberFidelity:
    tensor: str
    group: int | None
    bits_lost: float
    before_sqnr_db: float
    sqnr_db: float


@dataclass
class Fidelity:
    outputs: list[str]
    sqnr_db: dict[str, float]
    cosine: dict[str, float]
    before_sqnr_db: dict[str, float]
    before_cosine: dict[str, float]
    members: list[MemberFidelity] = field(default_factory=list)
    samples: int = 0
    revision: int = 0  # the session revision it was measured at (the GUI drops stale results)

    def delta_db(self, output: str) -> float:
        return self.sqnr_db[output] - self.before_sqnr_db[output]

    def to_dict(self) -> dict:
        def num(x):
            return x if x is not None and math.isfinite(x) else None

        return {
            "samples": self.samples,
            "outputs": {o: {"sqnr_db": num(self.sqnr_db[o]), "cosine": num(self.cosine[o]),
                            "before_sqnr_db": num(self.before_sqnr_db[o]),
                            "before_cosine": num(self.before_cosine[o])} for o in self.outputs},
            "members": [{"tensor": m.tensor, "group": m.group, "bits_lost": num(m.bits_lost),
                         "before_sqnr_db": num(m.before_sqnr_db), "sqnr_db": num(m.sqnr_db)}
                        for m in self.members],
        }

    def text(self) -> str:
        w = max([len(o) for o in self.outputs] + [6])
        lines = [f"fidelity on {self.samples} held-back sample(s): SQNR dB / cosine vs the float model",
                 f"{'output'.ljust(w)}  {'before':>17}  {'after':>17}  {'change':>8}"]
        for o in self.outputs:
            d = self.delta_db(o)
            lines.append(f"{o.ljust(w)}  {_f(self.before_sqnr_db[o]):>7} / {self.before_cosine[o]:.5f}"
                         f"  {_f(self.sqnr_db[o]):>7} / {self.cosine[o]:.5f}  {_f(d, signed=True):>8}")
        if self.members:
            lines.append("group members: quantization SQNR dB, own scale -> shared scale")
            for m in self.members:
                lines.append(f"  g{m.group} {m.tensor}: {_f(m.before_sqnr_db)} -> {_f(m.sqnr_db)} "
                             f"({m.bits_lost:.2f} bits lost)")
        return "\n".join(lines)


def _f(x: float, signed: bool = False) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


class _Cache:
    def __init__(self):
        self.calib_id = None
        self.float_out: list[dict] | None = None  # per sample: output -> array
        self.tensors: dict[str, list[np.ndarray]] = {}  # member tensor -> per-sample float values
        self.runs: dict[int, tuple] = {}  # id(dm) -> (dm, per-sample output dicts)


_caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _float_outputs(graph):
    import onnx

    return [o for o in graph.outputs if graph.tensors.get(o) is not None
            and graph.tensors[o].elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                               onnx.TensorProto.DOUBLE, 0)]


def _run(model, base_dir, names, feeds, cancel):
    sess = make_session(model, base_dir, spinning=False)  # spinning threads starve the GUI
    res = []
    for feed in feeds:
        if cancel is not None and cancel():
            raise Cancelled("fidelity check cancelled")
        try:
            out = sess.run(names, feed)
        except Exception as e:  # onnxruntime's errors are not ours: make them a one-line message
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"fidelity check failed in onnxruntime: {first[:300]}") from None
        res.append(dict(zip(names, out)))
    return res


def _qdq_outputs(session, dm, cache, outs, feeds, cancel, quantize_outputs):
    key = (id(dm), quantize_outputs)
    hit = cache.runs.get(key)
    if hit is not None and hit[0] is dm:
        return hit[1]
    from .export import qdq

    model = qdq.build_qdq_model(session, dm, quantize_outputs=quantize_outputs).model
    res = _run(model, session.graph.base_dir, outs, feeds, cancel)
    # Keep the baseline and the latest domain map only.
    keep = {(id(session.baseline_domains), quantize_outputs)}
    cache.runs = {k: v for k, v in cache.runs.items() if k in keep}
    cache.runs[key] = (dm, res)
    return res


PREFETCH_BYTES = 256 << 20


def _prefetchable(graph, samples: int) -> list[str]:
    names, total = [], 0
    for t in graph.quantized_tensors:
        shape = graph.tensors[t].shape
        if not shape or any(d is None for d in shape):
            return []  # unknown sizes: fetch members on demand instead
        total += int(np.prod(shape, dtype=np.int64)) * 4 * samples
        if total > PREFETCH_BYTES:
            return []
        names.append(t)
    return names


def _agg(per_sample_ref, per_sample_test, name):
    ref = np.concatenate([np.asarray(r[name], dtype=np.float64).ravel() for r in per_sample_ref])
    test = np.concatenate([np.asarray(r[name], dtype=np.float64).ravel() for r in per_sample_test])
    return sqnr_db(ref, test), cosine(ref, test)


def measure_session(session, *, cancel=None, quantize_outputs: bool = True) -> Fidelity:
    """Per-output SQNR/cosine before and after the session's groups, on held-back samples.

    ``quantize_outputs=False`` measures the model exported with ``--float-outputs``.
    """
    cal = session.calibration
    feeds = list(cal.holdout) if cal is not None else []
    if not feeds:
        raise BadInputError("the fidelity check needs held-back calibration samples; calibrate first")
    graph = session.graph
    cache = _caches.get(session)
    if cache is None:
        cache = _caches[session] = _Cache()
    if cache.calib_id is not cal:
        cache.calib_id, cache.float_out, cache.tensors, cache.runs = cal, None, {}, {}
    outs = _float_outputs(graph)
    revision = session.revision
    after_dm = session.domains
    before_dm = session.baseline_domains

    # Float run: outputs, plus the group members we have not fetched yet.
    members = [(g.id, t) for g in session.groups for t in g.members
               if t in after_dm.member_range and graph.tensors[t].kind != "weight"]
    need = [t for _, t in members if t not in cache.tensors]
    need = list(dict.fromkeys(need))
    if cache.float_out is None:
        # Fetch every shareable activation in the first float run when they fit in memory:
        # later edits then cost no float run at all (the GUI re-measures after each edit).
        need = list(dict.fromkeys(need + _prefetchable(graph, len(feeds))))
    if cache.float_out is None or need:
        names = outs + [t for t in need if t not in outs]
        res = _run(with_outputs(graph.model, names), graph.base_dir, names, feeds, cancel)
        if cache.float_out is None:
            cache.float_out = [{o: r[o] for o in outs} for r in res]
        for t in need:
            cache.tensors[t] = [r[t] for r in res]

    before = _qdq_outputs(session, before_dm, cache, outs, feeds, cancel, quantize_outputs)
    after = _qdq_outputs(session, after_dm, cache, outs, feeds, cancel, quantize_outputs)
    fid = Fidelity(outs, {}, {}, {}, {}, samples=len(feeds), revision=revision)
    for o in outs:
        fid.before_sqnr_db[o], fid.before_cosine[o] = _agg(cache.float_out, before, o)
        fid.sqnr_db[o], fid.cosine[o] = _agg(cache.float_out, after, o)

    for gid, t in members:
        vals = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in cache.tensors[t]])
        qa, qb = after_dm.qparams_of(t), before_dm.qparams_of(t)
        if qa is None or qb is None:
            continue
        d = after_dm.domain_of(t)
        fid.members.append(MemberFidelity(
            t, gid, bits_lost(after_dm.member_range[t], (d.lo, d.hi), after_dm.scheme),
            sqnr_db(vals, fake_quant(vals, qb)), sqnr_db(vals, fake_quant(vals, qa))))
    return fid
