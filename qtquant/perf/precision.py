"""What mixed precision costs on the target: int16 on the BPU, float nodes on the CPU.

The simulator prices every node as int8 on the BPU; :func:`apply_precision` re-prices the nodes
the session's precision map (:mod:`qtquant.quant.precision`) changes:

- **int16** (a node on the BPU that reads or writes an int16 tensor): every int16 tensor it moves
  is 2 bytes per element instead of 1, each time it moves it (a Softmax lowered in passes reads its
  input in the first two and moves intermediates at its output's precision in the others; its memory
  time and DDR traffic grow by those bytes), and a
  node that *reads* an int16 activation runs its MACs ``int16_compute_factor`` times (int16
  activations x int8 weights: the 8-bit MAC array takes two passes; an estimate, see the profile).
  Writing int16 from int8 inputs costs only the bytes: the accumulator is 32-bit either way.
- **float** (a node whose output is kept in float, and the fused chain ending in it): the node
  runs on the board's CPU.  Its cost is the CPU time (2 FLOP per MAC, ``cpu_softmax_flops`` per
  element of a Softmax, ``cpu_elementwise_flops`` per element of the other ops (of their largest
  activation: a reduction works on every element it reads), at the
  documented per-core FP32 rate x threads x an efficiency, plus each element crossing the BPU<->CPU
  boundary (de)quantised at the runtime's ``board_ns_per_element``), or, when larger, moving its
  inputs and outputs through DDR (float32 out, inputs at the width they arrive in), plus
  ``handoff_us`` per BPU<->CPU boundary: each input produced on the BPU and each output read by a BPU
  node.  Its BPU cost leaves the static estimate; its CPU time is on the board estimate.

The numbers come from the march profile's optional ``"precision"`` section (each with its source
or marked as an estimate, like every profile number); a profile without one uses
:data:`DEFAULTS`, RDK X5's figures, and says so in every note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError

from ..base.errors import MarchError
from ..base.fileio.schema import FileModel, one_line
from ..quant.precision import RANK, float_nodes
from ..base.vocab import Precision, TensorKind
from .board import board_layer_us
from .costs import tensor_passes
from .placement import cpu_placed, placement_map
from .macs import macs_of, numel, shape_of
from .march import Count, Fraction, NonNegative, Param, Positive

__all__ = ["PrecisionParams", "PrecisionCost", "NodePrice", "DEFAULTS", "precision_params", "apply_precision",
           "precision_rows", "precision_table_text", "report_text"]

_RUNTIME = (TensorKind.INPUT, TensorKind.ACTIVATION)
FLOAT_BYTES = 4


class PrecisionParams(FileModel):
    """The ``"precision"`` section of a march profile."""

    int16_compute_factor: Param[Positive]  # MAC time of a node reading int16 activations, x int8's
    cpu_ghz: Param[Positive]
    cpu_cores: Param[Count]
    cpu_threads: Param[Count]  # cores one CPU op runs on
    cpu_fp32_flops_per_cycle: Param[Positive]  # per core, peak
    cpu_efficiency: Param[Fraction]  # share of the peak a real conv/elementwise kernel reaches
    cpu_elementwise_flops: Param[Positive]  # FLOP per element (largest activation) of a non-MAC op (Softmax: below)
    # FLOP per element of a Softmax on the CPU (max, subtract, exp, sum, divide; absent: cpu_elementwise_flops)
    cpu_softmax_flops: Param[Positive] | None = None
    handoff_us: Param[NonNegative]  # one BPU<->CPU boundary: sync, cache maintenance, (de)quantize
    # Vector-unit time (no MACs) of a BPU node reading or writing int16, x int8's (absent: 1).
    int16_vector_factor: Param[Positive] | None = None


# RDK X5 (bayes-e): used for a profile without a "precision" section, and written into bayes-e.json.
DEFAULTS = {
    "int16_compute_factor": {"value": 2.0, "estimate": (
        "int16 activations x int8 weights on an 8-bit MAC array take two passes; no int16 throughput figure "
        "for X5 was found in D-Robotics' public docs")},
    "cpu_ghz": {"value": 1.8, "source": (
        "D-Robotics rdk_model_zoo READMEs: the board figures were measured with the CPU boosted to 8 x A55 at "
        "1.8 GHz (echo 1 > /sys/devices/system/cpu/cpufreq/boost, performance governor)")},
    "cpu_cores": {"value": 8, "source": "RDK X5 board facts: 8x Cortex-A55 (as given in qtquant issue 17)"},
    "cpu_threads": {"value": 1, "estimate": (
        "a CPU op of a BPU model runs on one core (the runtime's CPU ops are not assumed multithreaded)")},
    "cpu_fp32_flops_per_cycle": {"value": 8, "source": (
        "Cortex-A55: two 64-bit FP/NEON pipes, a 128-bit FMLA uses both, so 4 fp32 FMA = 8 FLOP per cycle "
        "(Arm Cortex-A55 Software Optimization Guide; LLVM AArch64SchedA55.td: CortexA55UnitFPMAC x2, "
        "Q-form ops take both)")},
    "cpu_efficiency": {"value": 0.3, "estimate": (
        "XNNPACK's Cortex-A55 f32 GEMM kernels run MobileNetV2 (0.30 GMAC) in 140 ms on one core "
        "(XNNPACK commit 'GEMM microkernels for Cortex A55'): ~2.1 GMAC/s, about 0.3 of the peak")},
    "cpu_elementwise_flops": {"value": 4, "estimate": (
        "the op per element; Sigmoid/exp-like ops cost more, Relu less (the (de)quantisation of what crosses "
        "the BPU<->CPU boundary is priced apart, at board_ns_per_element)")},
    "cpu_softmax_flops": {"value": 40, "estimate": (
        "a max, a subtract, an exp (about 20 FLOP as a polynomial), a sum and a divide per element")},
    "handoff_us": {"value": 50.0, "estimate": (
        "one BPU<->CPU boundary: finishing a BPU function call, cache flush/invalidate of the tensor, and "
        "the CPU thread's wake-up; D-Robotics publishes no figure")},
}

PARAMS = tuple(PrecisionParams.model_fields)


@dataclass(frozen=True)
class _Rates:
    int16_compute_factor: float
    int16_vector_factor: float
    cpu_flops_per_s: float
    cpu_elementwise_flops: float
    cpu_softmax_flops: float
    handoff_us: float
    provenance: dict
    fallback: bool  # the profile had no precision section: DEFAULTS used


_CACHE: dict = {}


def precision_params(march) -> _Rates:
    """The precision numbers of ``march`` (a MarchProfile): its file's section, or DEFAULTS."""
    section = getattr(march, "precision_section", None)
    key = json.dumps(section, sort_keys=True, default=str)  # the section's content: an edited file re-reads
    if key not in _CACHE:
        try:
            p = PrecisionParams.model_validate(section if section is not None else DEFAULTS)
        except ValidationError as e:
            name = Path(getattr(march, "path", "") or "").name or getattr(march, "name", "")
            raise MarchError(one_line(e, f"march profile {name} precision", "precision section")) from None
        fallback = section is None
        v = {k: getattr(p, k).value for k in PARAMS if getattr(p, k) is not None}
        _CACHE[key] = _Rates(
            int16_compute_factor=v["int16_compute_factor"], int16_vector_factor=v.get("int16_vector_factor", 1.0),
            cpu_flops_per_s=v["cpu_ghz"] * 1e9 * v["cpu_fp32_flops_per_cycle"] * min(v["cpu_threads"],
                                                                                   v["cpu_cores"])
            * v["cpu_efficiency"],
            cpu_elementwise_flops=v["cpu_elementwise_flops"],
            cpu_softmax_flops=v.get("cpu_softmax_flops", v["cpu_elementwise_flops"]), handoff_us=v["handoff_us"],
            provenance={k: getattr(p, k).provenance for k in PARAMS if getattr(p, k) is not None},
            fallback=fallback)
    return _CACHE[key]


# -- the result -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodePrice:
    node: str
    op_type: str
    precision: Precision
    device: str  # "bpu" | "cpu"
    int8_us: float  # what the simulator priced it at (int8 on the BPU)
    total_us: float  # now
    handoffs: int = 0
    note: str = ""
    placed: str = ""  # why the compiler runs it on the CPU whatever the map (perf/placement.py); "": a choice

    @property
    def delta_us(self) -> float:
        return self.total_us - self.int8_us

    def to_dict(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "precision": self.precision.value, "device": self.device,
                "int8_us": self.int8_us, "total_us": self.total_us, "delta_us": self.delta_us,
                "handoffs": self.handoffs, "note": self.note, "placed": self.placed}


@dataclass
class PrecisionCost:
    """What the precision map adds to a simulation; ``PerfResult.precision``."""

    nodes: list[NodePrice] = field(default_factory=list)
    int16_tensors: int = 0
    float_tensors: int = 0
    assumptions: str = ""
    board_us: float = 0.0  # what the map adds to the board latency (its BPU nodes at the board's clock)

    @property
    def delta_us(self) -> float:
        """µs the re-priced nodes add, each at its own device's clock (the static estimate's for the BPU)."""
        return sum(n.delta_us for n in self.nodes)

    @property
    def placed_nodes(self) -> dict[str, NodePrice]:
        """The nodes the compiler runs on the CPU whatever the map (perf/placement.py), by name."""
        return {n.node: n for n in self.nodes if n.placed}

    @property
    def placed(self) -> int:
        return len(self.placed_nodes)

    @property
    def cpu_us(self) -> float:
        return sum(n.total_us for n in self.nodes if n.device == "cpu")

    @property
    def handoffs(self) -> int:
        return sum(n.handoffs for n in self.nodes)

    def by_node(self) -> dict[str, NodePrice]:
        return {n.node: n for n in self.nodes}

    def to_dict(self) -> dict:
        return {"int16_tensors": self.int16_tensors, "float_tensors": self.float_tensors, "placed_nodes": self.placed,
                "delta_us": self.delta_us, "board_delta_us": self.board_us, "cpu_us": self.cpu_us,
                "handoffs": self.handoffs,
                "assumptions": self.assumptions, "nodes": [n.to_dict() for n in self.nodes]}


# -- pricing ----------------------------------------------------------------------------------------

def _is_act(graph, t) -> bool:
    tt = graph.tensors.get(t) if t else None
    return tt is not None and tt.kind in _RUNTIME


def _elems(graph, t) -> int:
    return numel(shape_of(graph, t))


def _int16_price(node, lc, graph, prec, chain_io, rates, rule):
    """(new LayerCost, note) for a BPU node touching int16 tensors, or None when it touches none."""
    ins = [t for t in node.inputs if _is_act(graph, t)]
    outs = [t for t in node.outputs if _is_act(graph, t)]
    extra_in, extra_out = chain_io.get(node.name, ((), ()))
    ins += [t for t in extra_in if _is_act(graph, t)]
    outs = list(extra_out) or outs
    wide_in = [t for t in ins if prec.get(t) is Precision.INT16]
    wide_out = [t for t in outs if prec.get(t) is Precision.INT16]
    if not (wide_in or wide_out) or lc.total_us <= 0:
        return None
    # One more byte per element each time the layer moves it.  A lowered Softmax reads its input in
    # its first passes; its later passes move intermediates at the node's own precision, its outputs'.
    reads, writes, input_reads = tensor_passes(node, rule)
    extra = input_reads * sum(_elems(graph, t) for t in wide_in) \
        + (reads - input_reads + writes) * sum(_elems(graph, t) for t in wide_out)
    scale = (lc.bytes + extra) / lc.bytes if lc.bytes else 1.0
    memory_us = lc.memory_us * scale
    ddr = int(lc.ddr_bytes * scale)
    if lc.macs:
        compute_us = lc.compute_us * (rates.int16_compute_factor if wide_in else 1.0)
    else:  # a vector-unit pass (a Softmax's max, exp, sum, reciprocal) on int16 data
        compute_us = lc.compute_us * rates.int16_vector_factor
    total = max(compute_us, memory_us) + lc.overhead_us
    bits = []
    if wide_in:
        bits.append(f"reads {len(wide_in)} int16 tensor(s)" +
                    (f": MACs x{rates.int16_compute_factor:g}" if lc.macs else ""))
    if not lc.macs and rates.int16_vector_factor != 1.0:
        bits.append(f"vector time x{rates.int16_vector_factor:g}")
    if wide_out:
        bits.append(f"writes {len(wide_out)} int16 tensor(s)")
    note = "int16: " + ", ".join(bits) + f", +{extra} bytes"
    new = replace(lc, compute_us=compute_us, memory_us=memory_us, total_us=total, bytes=lc.bytes + extra,
                  ddr_bytes=ddr, bound="compute" if compute_us >= memory_us and compute_us > 0 else "memory",
                  note=(lc.note + "; " if lc.note else "") + note)
    return new, note


def _cpu_price(node, lc, graph, prec, cpu, march, rates):
    """(new LayerCost, handoffs, note) for a node run on the CPU in float."""
    macs = macs_of(node, graph) if lc.macs or node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") else 0
    outs = [t for t in node.outputs if _is_act(graph, t)]
    # per element of its largest activation: a reduction (ReduceL2) works on every element it reads
    elems = max([_elems(graph, t) for t in (*node.inputs, *outs) if _is_act(graph, t)], default=0)
    per_elem = rates.cpu_softmax_flops if node.op_type == "Softmax" else rates.cpu_elementwise_flops
    flops = 2 * macs if macs else per_elem * elems
    compute_us = flops / rates.cpu_flops_per_s * 1e6
    moved, handoffs, converted = 0, 0, 0
    for t in node.inputs:
        if not t:
            continue
        tt = graph.tensors.get(t)
        if tt is None:
            continue
        p = graph.producer(t)
        if tt.kind in _RUNTIME:
            on_bpu = p is not None and p.name not in cpu
            if on_bpu:
                handoffs += 1
                moved += _elems(graph, t) * (2 if prec.get(t) is Precision.INT16 else 1)
                converted += _elems(graph, t)  # dequantised from the BPU's layout
            else:
                moved += _elems(graph, t) * FLOAT_BYTES
        elif tt.kind == TensorKind.WEIGHT:
            moved += _elems(graph, t) * FLOAT_BYTES  # float weights: the node keeps them float
    for t in outs:
        moved += _elems(graph, t) * FLOAT_BYTES
        if any(c.name not in cpu for c in graph.consumers(t)):
            handoffs += 1
            converted += _elems(graph, t)  # quantised into the BPU's layout
    # The runtime's conversions at a boundary run on the same core, at the rate it converts a model's
    # outputs (the board estimate's board_ns_per_element), before and after the op itself.
    compute_us += converted * march.board_ns_per_element / 1000.0
    memory_us = moved / march.ddr_bytes_per_s * 1e6
    overhead = handoffs * rates.handoff_us
    total = max(compute_us, memory_us) + overhead
    src = " (X5 defaults: this profile has no precision section)" if rates.fallback else ""
    note = (f"float on the CPU: {flops / 1e6:.1f} MFLOP at {rates.cpu_flops_per_s / 1e9:.1f} GFLOP/s, "
            f"{converted} elements (de)quantised at {march.board_ns_per_element:g} ns, "
            f"{moved} bytes through DDR, {handoffs} BPU<->CPU hand-off(s) x {rates.handoff_us:g} µs{src}")
    new = replace(lc, macs=int(macs), bytes=int(moved), ddr_bytes=int(moved), compute_us=compute_us,
                  memory_us=memory_us, overhead_us=overhead, total_us=total,
                  bound="compute" if compute_us >= memory_us and compute_us > 0 else "memory", note=note)
    return new, handoffs, note


def _chain_io(graph, ctx):
    """host -> (extra chain inputs, the chain's written outputs), from the simulator's fusion pass."""
    if ctx is None:
        return {}
    return {h: (tuple(ctx.chain_inputs.get(h, ())), (ctx.chain_out[h],)) for h in ctx.chain_out}


def apply_precision(result, graph, march, precision, ctx=None):
    """``result`` (a PerfResult, int8 everywhere) re-priced for ``precision`` (tensor -> Precision):
    a new PerfResult whose layers, totals and ``precision`` (:class:`PrecisionCost`) say what it costs.
    The nodes the march's compiler runs on its CPU (perf/placement.py) are priced in float whatever
    ``precision`` says of them.  ``ctx``: the simulator's CostContext (fused chains), when the caller
    has it."""
    placed = cpu_placed(graph, march)
    placed_tensors = placement_map(graph, march)
    chosen = {t: Precision(getattr(p, "value", p)) for t, p in dict(precision or {}).items()}
    prec = {**chosen, **placed_tensors}  # a node the BPU does not run is on the CPU whatever its choice
    prec = {t: p for t, p in prec.items() if p is not Precision.INT8 and graph.is_quantized(t)}
    if not prec:
        return result
    rates = precision_params(march)
    cpu = float_nodes(graph, prec)
    chain_io = _chain_io(graph, ctx)
    fused = getattr(ctx, "fused", {}) if ctx is not None else {}
    base = dict(result._base)
    concats = dict(result._concats)
    prices: list[NodePrice] = []
    d_total, d_board, d_cpu, d_ddr = 0.0, 0.0, 0.0, 0

    def reprice(name, lc):
        nonlocal d_total, d_board, d_cpu, d_ddr
        node = graph.nodes[name]
        if name in cpu:
            new, handoffs, note = _cpu_price(node, lc, graph, prec, cpu, march, rates)
            p = Precision.FLOAT
            device = "cpu"
            if name in placed:  # not the user's choice: the compiler's (perf/placement.py)
                note = f"placed on the CPU by the compiler: {placed[name]}; {note}"
            # Off the BPU: out of the static estimate (what the compiler prints is the BPU part), into
            # the board's CPU time.
            d_total -= lc.total_us
            d_board -= board_layer_us(lc, march)
            d_cpu += new.total_us
        elif name in fused:
            return lc  # its traffic is the host's
        else:
            got = _int16_price(node, lc, graph, prec, chain_io, rates, march.fusion)
            if got is None:
                return lc
            (new, note), handoffs, p, device = got, 0, Precision.INT16, "bpu"
            d_total += new.total_us - lc.total_us
            d_board += board_layer_us(new, march) - board_layer_us(lc, march)
        d_ddr += new.ddr_bytes - lc.ddr_bytes
        prices.append(NodePrice(name, node.op_type, p, device, lc.total_us, new.total_us, handoffs, note,
                                placed=placed.get(name, "")))
        return new

    for name in result._order:
        if name in base and name not in concats:
            base[name] = reprice(name, base[name])
        elif name in concats:
            cc = concats[name]
            concats[name] = replace(cc, layer=reprice(name, cc.layer))
    # A model output a float node computes is float32 on the CPU already: the runtime has nothing to
    # dequantise for it (its float32 write is in the node's price).
    ios = tuple(replace(io, on_cpu=False, app_dequantises=False, what=FLOAT_OUTPUT)
                if io.output and (p := graph.producer(io.tensor)) is not None and p.name in cpu else io
                for io in result.board_io)
    d_cpu -= sum(a.elems for a, b in zip(result.board_io, ios) if a.on_cpu and not b.on_cpu) \
        * march.board_ns_per_element / 1000.0
    cost = PrecisionCost(prices, sum(p is Precision.INT16 for t, p in prec.items() if t not in placed_tensors),
                         sum(p is Precision.FLOAT for t, p in prec.items() if t not in placed_tensors),
                         _assumptions(rates), board_us=d_board + d_cpu)
    board_bpu = result.total_us if result.board_bpu_us is None else result.board_bpu_us
    return replace(result, total_us=result.total_us + d_total, ddr_bytes=int(result.ddr_bytes + d_ddr),
                   board_bpu_us=board_bpu + d_board, board_cpu_us=result.board_cpu_us + d_cpu,
                   board_io=ios, _base=base, _concats=concats, precision=cost)


FLOAT_OUTPUT = "float32 output of a node kept in float, computed on the CPU: nothing to dequantise"


def _assumptions(rates) -> str:
    src = "X5 defaults (the profile has no precision section)" if rates.fallback else "the march profile"
    return (f"int16 MACs x{rates.int16_compute_factor:g}, 2 bytes per int16 element; CPU "
            f"{rates.cpu_flops_per_s / 1e9:.1f} GFLOP/s effective, {rates.handoff_us:g} µs per BPU<->CPU "
            f"hand-off (from {src}; estimates are marked in it)")


# -- reports ----------------------------------------------------------------------------------------

def precision_rows(result) -> list[tuple[str, str, str, str, str, str]]:
    """(node, op, precision, device, int8 µs, now µs (+delta)) per re-priced node, costliest change first."""
    cost = getattr(result, "precision", None)
    if cost is None:
        return []
    rows = []
    for n in sorted(cost.nodes, key=lambda n: (-n.delta_us, RANK[n.precision])):
        rows.append((n.node, n.op_type, n.precision.value, n.device.upper(), f"{n.int8_us:.1f}",
                     f"{n.total_us:.1f} ({n.delta_us:+.1f})"))
    return rows


def precision_table_text(result) -> str:
    """The precision section of ``qtquant perf`` / ``analyze``: "" when everything is int8 on the BPU.  The
    nodes the compiler runs on the CPU of itself are one line each when there is no choice to show."""
    cost = getattr(result, "precision", None)
    if cost is None or not cost.nodes:
        return ""
    from ..base.tables import text_table

    parts = []
    if cost.int16_tensors or cost.float_tensors:
        parts.append(f"mixed precision: {cost.int16_tensors} int16 tensor(s), {cost.float_tensors} kept in float")
    if cost.placed:
        parts.append(f"{cost.placed} node(s) the compiler runs on the CPU (by {result.march}'s operator list)")
    head = "; ".join(parts) + (f"; {cost.delta_us:+.1f} µs over int8 ({cost.cpu_us:.1f} µs on the CPU, "
                               f"{cost.handoffs} hand-off(s))")
    if len(parts) == 1 and cost.placed:
        return "\n".join([head, *_placed_lines(cost)])
    table = text_table(precision_rows(result), ("node", "op", "precision", "runs on", "int8 µs", "now µs"),
                       "llllrr", rule=True, max_width=60)
    return "\n".join([head, table, f"assumptions: {cost.assumptions}"])


def _placed_lines(cost) -> list[str]:
    """One line per reason the compiler gives (nodes of one op placed for one reason together), the
    costliest first."""
    by: dict[tuple[str, str], list] = {}
    for n in cost.placed_nodes.values():
        by.setdefault((n.op_type, n.placed), []).append(n)
    lines = []
    for (op, why), nodes in sorted(by.items(), key=lambda kv: -sum(n.delta_us for n in kv[1])):
        d = sum(n.delta_us for n in nodes)
        if len(nodes) == 1:
            lines.append(f"  {nodes[0].node} ({op}): {why}; {d:+.1f} µs")
        else:
            first = max(nodes, key=lambda n: n.delta_us).node
            lines.append(f"  {len(nodes)} {op} ({first}, …): {why.replace('this one is', 'each is')}; "
                         f"{d:+.1f} µs in all")
    return lines


def report_text(graph, precision, result=None) -> str:
    """What ``analyze`` and ``fix`` print: the assignments, and their price when simulated."""
    from ..quant.precision import summary_text

    return "\n".join(x for x in (summary_text(graph, precision),
                                 precision_table_text(result) if result is not None else "") if x)
