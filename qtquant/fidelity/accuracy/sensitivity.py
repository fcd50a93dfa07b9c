"""Sensitivity ranking: what one node in higher precision buys on the worst output slice, and at
what latency.

The unit is a node producing an observed activation.  Each unit is a candidate twice, side by side:

- **int16** (``--int16 NODE``): its quantized output(s) int16, the node stays on the BPU (some
  bytes and MAC passes more: a few µs);
- **float** (``--keep-float NODE``): no Q/DQ, the node with its fused chain keeps float weights
  and runs on the CPU (hundreds of µs with its BPU<->CPU hand-offs).

A candidate's gain is the worst output slice's SQNR with the unit at that precision minus the
worst slice's SQNR as exported now, both measured in onnxruntime at default options; its latency
price comes from the simulator (:func:`qtquant.perf.simulator.latency_delta_us`).  The ranking is
by gain per µs (:attr:`Sensitivity.gain_per_us`), the measured candidates before the estimates: for an
NPU the int16 fix kept on the BPU usually comes first.  A candidate whose gain is under
:data:`NO_GAIN_DB` goes after the others.

A real export per unit costs a model build and an onnxruntime session each (yolov8n: 96 units,
some 1.5 s each on 2 cores), so the ranking is two passes:

1. **Estimate**, every unit, in one onnxruntime session: the exported model is rewritten once so
   that each Q/DQ pair reads ``Where(g, DQ(Q(x)), x)`` with a boolean gate ``g`` per unit fed as
   an input (:func:`gated_model`); a unit in float is its gate closed.  That is Q/DQ evaluated in float (the
   fake-quant reference, onnxruntime's basic optimisations), one run over at most
   :data:`ESTIMATE_SAMPLES` check samples per unit, and no export or session build per unit.  The
   gates are on activations only: the node's weights stay int8 in the estimate (the measured pass
   has them float, as the export does).
   An int16 candidate's estimate is its unit's float estimate: int16 rounding is 256 times finer
   than int8's, so the gate's unquantized value stands for it.
2. **Measure** the units of the ``top`` best estimates for real, each as int16 and as float: one
   QDQ export each, run like the check at default options (the int8 kernels that ship).  Their
   ``gain`` is measured (``estimate`` false); the others keep the estimate.

A model whose outputs are all integer (a classifier or a segmenter ending in ArgMax) has no
SQNR to rank by: its gains are those of the least-agreeing output's share of elements equal to
the float model's, in percentage points (:class:`~qtquant.base.vocab.RankedBy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...base.vocab import Precision, RankedBy

__all__ = ["Unit", "Sensitivity", "units_of", "estimate", "rank", "ranked_by", "gated_model", "ESTIMATE_TEXT",
           "DEFAULT_TOP", "CANDIDATES", "NO_GAIN_DB", "MIN_PRICE_US", "rank_key"]

# Each measured candidate is one real export and onnxruntime session (~6 s on yolov8n_320 with 16 samples on
# 2 cores), and each measured unit is two of them (int16 and float): 4 units are 8 exports, about what 6
# float-only units were, while the first pass still ranks every unit.
# The first pass is one run per unit and sample: on a heavy model it dominates (PP-OCRv4 det at 640x640:
# 251 units x 4 samples), so each run starts where its unit's gate first acts (.gatedruns): the whole
# command there went from 4:43 / 5:15 to 2:23 / 2:49 (two pairs), the same figures to the digit.
DEFAULT_TOP = 4
ESTIMATE_SAMPLES = 4  # the first pass runs on at most this many check samples (the measured pass on all)
ESTIMATE_TEXT = ("estimate: the unit alone in float with Q/DQ evaluated in float (fake-quant, one gated model, "
                 f"one run over at most {ESTIMATE_SAMPLES} check samples per unit; an int16 candidate has its "
                 "unit's float estimate); measured: a real export with the unit in int16 or float, run in "
                 "onnxruntime at default options (int8 kernels)")
CANDIDATES = (Precision.INT16, Precision.FLOAT)  # per unit, side by side; int16 first on a tie
# A measured gain under this is rounding noise between two exports, not information.
NO_GAIN_DB = 0.05
# A candidate cheaper than this is priced at it in the gain per µs: the simulator's figures are no
# finer, and a free candidate would otherwise rank first whatever it gains.
MIN_PRICE_US = 1.0


@dataclass
class Unit:
    node: str  # the producer of the chain's observed tensor
    tensors: tuple[str, ...]  # the chain: left in float together


@dataclass
class Sensitivity:
    node: str
    precision: Precision
    gain: float  # in ``ranked_by``'s unit: dB, or percentage points of elements equal
    estimate: bool  # True: the first-pass estimate, False: measured by a real export
    tensors: tuple[str, ...] = ()
    worst: float | None = None  # measured worst value with the unit in float (dB, or % equal)
    worst_label: str = ""
    latency_delta_us: float | None = None  # None: not priced (see the report's notes)
    ranked_by: RankedBy = RankedBy.SQNR

    @property
    def worth(self) -> bool:
        """Gains enough to be worth its price: :data:`NO_GAIN_DB` or more (any point of agreement)."""
        if not math.isfinite(self.gain):
            return False
        return self.gain >= (NO_GAIN_DB if self.ranked_by is RankedBy.SQNR else 1e-9)

    @property
    def gain_per_us(self) -> float | None:
        """The gain per µs of latency it adds (at least :data:`MIN_PRICE_US`); None when not priced."""
        if self.latency_delta_us is None or not math.isfinite(self.gain):
            return None
        return self.gain / max(self.latency_delta_us, MIN_PRICE_US)

    def after_text(self) -> str:
        """The measured worst part with the unit in float ("y 31.20", "cls 93.75% equal"); "" for an
        estimate."""
        from ...base.tables import fmt_num

        if self.estimate:
            return ""
        if self.worst is None or not math.isfinite(self.worst):
            return f"{self.worst_label} n/a"
        if self.ranked_by is RankedBy.SQNR:
            return f"{self.worst_label} {fmt_num(self.worst)}"
        return f"{self.worst_label} {self.ranked_by.value_text(self.worst)}"

    def to_dict(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 4)

        sqnr = self.ranked_by is RankedBy.SQNR
        # An estimate's worst part is the fake-quant figure it was ranked on, on another basis than
        # the measured rows' (its gain, too, is that basis's): null, as the text table leaves it blank.
        worst = None if self.estimate else num(self.worst)
        return {"node": self.node, "precision": self.precision.value, "ranked_by": self.ranked_by.value,
                "gain_db": num(self.gain) if sqnr else None, "gain_points": None if sqnr else num(self.gain),
                "latency_delta_us": num(self.latency_delta_us),
                "gain_per_us": num(self.gain_per_us) if self.gain_per_us is not None else None,
                "estimate": self.estimate,
                "tensors": list(self.tensors), "worst_slice": None if self.estimate else self.worst_label or None,
                "worst_sqnr_db": worst if sqnr else None,
                "worst_percent_equal": None if sqnr else worst}


def ranked_by(base) -> RankedBy:
    """What the ranking of ``base`` (a measured :class:`~qtquant.fidelity.accuracy.check.Variant`) counts in:
    SQNR where a float slice is measured, agreement where the outputs are all integer."""
    if not base.worst_label and base.worst_agreement is not None:
        return RankedBy.AGREEMENT
    return RankedBy.SQNR


def ranked_worst(figures, by: RankedBy) -> tuple[float, str]:
    """(value, label) of the worst part of ``figures`` by ``by``."""
    from .check import worst_agreement, worst_of

    if by is RankedBy.AGREEMENT:
        found = worst_agreement(figures)
        return (found[1], found[0]) if found is not None else (math.nan, "")
    label, db = worst_of(figures)
    return db, label


def units_of(graph, dm, errors, export_float) -> list[Unit]:
    """One unit per node producing an observed int8 activation (model inputs excluded: no node owns
    them): the tensors ``--keep-float NODE`` sets to float (:func:`qtquant.quant.precision.resolve_name`)."""
    from ...base.errors import BadInputError
    from ...quant.precision import resolve_name

    quantized = {e.tensor for e in errors if e.precision is Precision.INT8}
    units, seen = [], set()
    for t in graph.quantized_tensors:
        p = graph.producer(t)
        if t not in quantized or p is None or p.name in seen or not graph.observed(t):
            continue
        seen.add(p.name)
        try:
            ts = [x for x in resolve_name(graph, p.name) if x in quantized and x not in export_float]
        except BadInputError:
            continue
        if ts:
            units.append(Unit(p.name, tuple(ts)))
    return units


def _gate(k: int) -> str:
    return f"qtq_gate_{k}"


def gated_model(model, dq_names: dict[str, str], units):
    """A copy of the QDQ ``model`` where each unit's Q/DQ pairs blend with the unquantized value
    by a boolean scalar input gate (true: quantized as exported, false: float)."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    gate_of = {t: _gate(k) for k, u in enumerate(units) for t in u.tensors}
    q_in = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "QuantizeLinear"}
    wanted = {dq: t for t, dq in dq_names.items() if t in gate_of}
    nodes = []
    for n in m.graph.node:
        nodes.append(n)
        if n.op_type != "DequantizeLinear" or n.output[0] not in wanted or n.input[0] not in q_in:
            continue
        dq, src, g = n.output[0], q_in[n.input[0]], gate_of[wanted[n.output[0]]]
        raw = f"{dq}_qtq_raw"
        n.output[0] = raw
        # One Where per pair (not x + g·(q − x)): three elementwise passes cost as much as the model.
        nodes.append(helper.make_node("Where", [g, raw, src], [dq], name=f"{dq}_qtq_gate"))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    for k in range(len(units)):
        m.graph.input.append(helper.make_tensor_value_info(_gate(k), TensorProto.BOOL, []))
    return m


def estimate(bench, units, dm=None, progress=None, by: RankedBy = RankedBy.SQNR
             ) -> tuple[tuple[float, str], dict[str, tuple[float, str]]]:
    """Fake-quant worst (value, label) by ``by``: with every unit quantized, and per unit node with
    that unit alone in float."""
    import numpy as np

    from ...base.errors import Cancelled
    from ..measure import output_figures
    from ...model.runtime import make_session
    from .gatedruns import GatedRunner
    from .tensors import dequantized_names

    dm = bench.session.domains if dm is None else dm
    model = bench.build(dm).model
    feeds = bench.feeds[:ESTIMATE_SAMPLES]
    names = [_gate(k) for k in range(len(units))]
    # Each closed gate's run starts where the gate first acts (see .gatedruns): a heavy model's
    # first pass had run the same prefix once per unit and sample.
    runner = GatedRunner(gated_model(model, dequantized_names(model), units), names, bench.outs, feeds,
                         lambda m: make_session(m, bench.graph.base_dir, spinning=False, level="basic"))
    ones = dict.fromkeys(names, np.array(True))
    ref = bench.float_out()
    found = {}
    for k in range(-1, len(units)):  # -1: every gate open, the start the gains are counted from
        gates = dict(ones)
        if k >= 0:
            gates[_gate(k)] = np.array(False)
        res = []
        for i in range(len(feeds)):
            if bench.cancel is not None and bench.cancel():
                raise Cancelled("accuracy check cancelled")
            res.append(dict(zip(bench.outs, runner.run(i, gates, _gate(k) if k >= 0 else None))))
        found[k] = ranked_worst(output_figures(bench.ranges, dm, bench.slices, ref[:len(feeds)], res, bench.outs), by)
        if progress is not None:
            progress(k + 2, len(units) + 1)
    return found[-1], {u.node: found[k] for k, u in enumerate(units)}


def _gain(after: float, before: float) -> float:
    return after - before if math.isfinite(after) and math.isfinite(before) else math.nan


def _pricer(session, march_file):
    """``(tensors, precision) -> µs``: the simulator's latency change when they go to ``precision``
    (int16 on the BPU, float on the CPU, :mod:`qtquant.perf.precision`); None when the march cannot
    be simulated."""
    from ...base.errors import QtQuantError
    from ...perf.simulator import latency_delta_us

    def price(tensors, precision):
        try:
            return latency_delta_us(session, list(tensors), precision, march_file)
        except QtQuantError:
            return None
    return price


def rank(bench, units, base, *, top: int = DEFAULT_TOP, dm=None, progress=None,
         march_file=None) -> list[Sensitivity]:
    """Estimate every unit, measure the units of the ``top`` best estimates as int16 and as float,
    sort by :func:`rank_key` (gain per µs, highest first).

    ``base`` is the measured :class:`~qtquant.fidelity.accuracy.check.Variant` of the model as exported now.
    """
    tell = (lambda stage: None) if progress is None else (lambda stage: lambda d, n: progress(stage, d, n))
    by = ranked_by(base)
    (start, _), est = estimate(bench, units, dm, progress=tell("estimate"), by=by)
    price = _pricer(bench.session, march_file)
    rows = {}
    for u in units:
        value, label = est[u.node]
        for p in CANDIDATES:
            rows[u.node, p] = Sensitivity(u.node, p, _gain(value, start), True, u.tensors, value, label,
                                          latency_delta_us=price(u.tensors, p), ranked_by=by)
    order = sorted(units, key=lambda u: (-_key(rows[u.node, Precision.FLOAT].gain), u.node))[:max(0, top)]
    base_value, _ = ranked_worst(base.outputs, by)
    todo = [(u, p) for u in order for p in CANDIDATES]
    for k, (u, p) in enumerate(todo):
        r = rows[u.node, p]
        variant = bench.measure(dm, keep_float=u.tensors) if p is Precision.FLOAT else \
            bench.measure(dm, int16=u.tensors)
        value, r.worst_label = ranked_worst(variant.outputs, by)
        r.estimate, r.worst, r.gain = False, value, _gain(value, base_value)
        if progress is not None:
            progress("measure", k + 1, len(todo))
    return sorted(rows.values(), key=rank_key)


def rank_key(r: Sensitivity):
    """The ranking's order: candidates worth their price (:attr:`Sensitivity.worth`) first, the measured
    before the estimates (an int16 estimate is its unit's float one: optimistic, and applying it can
    lose), each by gain per µs (unpriced ones after the priced, by gain); then the rest by gain; int16
    before float on a tie."""
    per = r.gain_per_us
    tie = CANDIDATES.index(r.precision) if r.precision in CANDIDATES else 9
    if r.worth:
        return (0, r.estimate, per is None, -(per if per is not None else _key(r.gain)), -_key(r.gain), r.node, tie)
    return (1, False, False, 0.0, -_key(r.gain), r.node, tie)


def _key(x: float) -> float:
    return x if math.isfinite(x) else -1e9
