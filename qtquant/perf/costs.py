"""Per-op cost functions, one per :class:`~qtquant.base.vocab.CostClass`; the op registry says which
class each op is in (``qtquant.model.ops``).

A cost function is ``fn(node, ctx) -> LayerCost``.  ``ctx`` (:class:`~qtquant.perf.context.CostContext`)
holds the graph, the march profile and what the whole-graph passes decided: which activations
are fused into their producing Conv, and which tensors live in DDR rather than on chip.

The model (DESIGN §4): compute ops take MACs ÷ (peak MAC/s × utilization × alignment
efficiency); everything else moves bytes (DDR bytes ÷ DDR bandwidth + on-chip bytes ÷
on-chip bandwidth) or streams elements through the vector unit; a layer costs the larger
of its compute and memory time plus a fixed per-op overhead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..base.vocab import CostClass, TensorKind
from ..model.ops import handler_for
from .context import ACT_BYTES, vector_class
from .macs import conv_dims, macs_of, numel, shape_of

__all__ = ["LayerCost", "node_cost", "copy_cost", "rescale_cost", "zero_cost", "alignment_efficiency",
           "tensor_passes"]

WEIGHT_BYTES = 1  # int8 weights
BIAS_BYTES = 4  # int32 bias
WEIGHTS = "weights"  # a move's place: constants streamed from DDR (truthy: DDR), at march.weight_bytes_per_s


@dataclass(frozen=True)
class LayerCost:
    name: str
    op_type: str
    macs: int
    bytes: int  # bytes moved (DDR and on chip)
    compute_us: float
    memory_us: float
    overhead_us: float
    total_us: float
    bound: str  # "compute" | "memory" | "overhead": the largest of the three terms
    is_rescale: bool = False
    concat: str | None = None  # for rescale layers: the Concat they feed
    ddr_bytes: int = 0
    note: str = ""
    weight_bytes: int = 0  # of ddr_bytes: constants (weights, biases) streamed from DDR
    # What the layer is made of and how it was priced (the report, --explain, the GUI overlay).
    fused: tuple = ()  # graph nodes merged into this layer (its own node excluded)
    fused_into: str | None = None  # for a merged node: the layer that carries its cost
    op_class: str = ""  # "conv", "depthwise", "matmul", "attention" or a vector class (vector_class)
    efficiency: float = 1.0  # the utilization factor applied (alignment x class efficiency)
    elems: int = 0  # elements streamed through the vector unit
    fused_ops: str = ""  # what it merges: "BatchNormalization+Relu" after a conv, all pieces of a LUT "Sigmoid+Mul"

    @property
    def onchip_bytes(self) -> int:
        return self.bytes - self.ddr_bytes

    def to_dict(self) -> dict:
        return asdict(self)


def alignment_efficiency(channels: int, align: int) -> float:
    """Share of MAC lanes doing useful work when ``channels`` is padded to a multiple of ``align``."""
    if channels <= 0 or align <= 1:
        return 1.0
    return channels / (-(-channels // align) * align)




def _finish(name, op_type, moves, compute_us, overhead_us, ctx, macs=0, note="", is_rescale=False,
            concat=None, **extra) -> LayerCost:
    """``moves``: list of (bytes, in_ddr) pairs.  Memory time sums DDR and on-chip traffic.

    ``bound`` names the largest term of ``max(compute, memory) + overhead``: a layer whose fixed
    per-op cost exceeds both its compute and its memory time is overhead-bound."""
    m = ctx.march
    ddr = sum(b for b, d in moves if d)
    weights = sum(b for b, d in moves if d == WEIGHTS)
    onchip = sum(b for b, d in moves if not d)
    memory_us = ((ddr - weights) / m.ddr_bytes_per_s + weights / m.weight_bytes_per_s + onchip / m.sram_bytes_per_s) \
        * 1e6
    total = max(compute_us, memory_us) + overhead_us
    if overhead_us > max(compute_us, memory_us):
        bound = "overhead"
    else:
        bound = "compute" if compute_us >= memory_us and compute_us > 0 else "memory"
    host = name if not is_rescale else None
    fused = ctx.chain_nodes.get(host, ()) if host else ()
    return LayerCost(name, op_type, int(macs), int(ddr + onchip), compute_us, memory_us, overhead_us, total,
                     bound, is_rescale, concat, int(ddr), note, weight_bytes=int(weights), fused=fused,
                     fused_ops=ctx.chain_ops.get(host, "") if fused else "", **extra)


def zero_cost(node, note: str, fused_into: str | None = None) -> LayerCost:
    return LayerCost(node.name, node.op_type, 0, 0, 0.0, 0.0, 0.0, 0.0, "memory", note=note, fused_into=fused_into)


def _act_move(ctx, tensor, times=1):
    b = ctx.act_bytes(tensor) * times
    return (b, ctx.in_ddr(tensor, ctx.act_bytes(tensor)))


def _input_moves(node, ctx, *, skip_internal: bool, weight_bytes=lambda k: WEIGHT_BYTES) -> list:
    """Byte moves for reading a node's inputs: activations, and constants streamed from DDR."""
    g = ctx.graph
    moves = []
    for k, i in enumerate(node.inputs):
        if not i or (skip_internal and i in ctx.internal):
            continue
        t = g.tensors.get(i)
        if t is None:
            continue
        if ctx.is_activation(i):
            moves.append(_act_move(ctx, i))
        elif t.kind == TensorKind.WEIGHT:
            moves.append((numel(shape_of(g, i)) * weight_bytes(k), WEIGHTS))
    return moves


def _reads_writes(node, ctx, skip_internal=True):
    """Byte moves for reading a node's inputs (activations and constants) and writing its outputs."""
    moves = _input_moves(node, ctx, skip_internal=skip_internal)
    for o in node.outputs:
        if o and o not in ctx.internal and ctx.is_activation(o):
            moves.append(_act_move(ctx, o))
    return moves


def compute_cost(node, ctx) -> LayerCost:
    g, m = ctx.graph, ctx.march
    macs = macs_of(node, g)
    eff, op_class, note = _mac_efficiency(node, ctx)
    compute_us = macs / (m.macs_per_s * m.utilization * eff) * 1e6 if macs else 0.0
    wi = handler_for(node.op_type).weight_inputs
    moves = _input_moves(node, ctx, skip_internal=False,
                         weight_bytes=lambda k: WEIGHT_BYTES if (k in wi or k < 2) else BIAS_BYTES)
    for i in ctx.chain_inputs.get(node.name, ()):
        if ctx.is_activation(i):
            moves.append(_act_move(ctx, i))  # residual read by the fused Add
        # constants of a fused BN/Clip are folded into the conv's weights and bias at compile time
    outs = [ctx.chain_out[node.name]] if node.name in ctx.chain_out else node.outputs
    for o in outs:
        if o and ctx.is_activation(o):
            moves.append(_act_move(ctx, o))
    if macs == 0:
        note = "MACs unknown (shape not resolved)"
    elif node.name in ctx.chain_out:
        note += "; fused " + ctx.chain_ops[node.name]
    return _finish(node.name, node.op_type, moves, compute_us, m.op_overhead_us, ctx, macs=macs, note=note,
                   op_class=op_class, efficiency=eff)


def _mac_efficiency(node, ctx) -> tuple[float, str, str]:
    """(utilization factor, op class, note): channel alignment of the input channels per group
    and the output channels, times the march's efficiency for depthwise/grouped convs and for
    MatMuls of two activations (attention)."""
    graph, m = ctx.graph, ctx.march
    align = m.channel_align
    if node.op_type in ("Conv", "ConvTranspose"):
        d = conv_dims(node, graph)
        if d is None:
            return 1.0, "conv", ""
        _, cin, cout, group, *_ = d
        cin_g = cin // group if group else cin
        eff = alignment_efficiency(cin_g, align) * alignment_efficiency(cout, align)
        kind = "depthwise" if group > 1 and group == cin else ("grouped" if group > 1 else "")
        if kind:
            eff *= m.depthwise_efficiency
        return eff, ("depthwise" if kind else "conv"), (f"{kind} conv; " if kind else "") + f"efficiency {eff:.2f}"
    if node.op_type in ("MatMul", "Gemm"):
        a, b = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
        if a is None or b is None or not a or not b:
            return 1.0, "matmul", ""
        if node.op_type == "Gemm":
            k = a[0] if int(node.attrs.get("transA", 0) or 0) else a[-1]
            n = b[0] if int(node.attrs.get("transB", 0) or 0) else b[-1]
        else:
            k, n = a[-1], b[-1]
        eff = alignment_efficiency(k, align) * alignment_efficiency(n, align)
        attention = node.op_type == "MatMul" and all(ctx.is_activation(i) for i in node.inputs[:2])
        if attention:
            eff *= m.matmul_efficiency
        return eff, ("attention" if attention else "matmul"), f"efficiency {eff:.2f}"
    return 1.0, "matmul", ""


def tensor_passes(node, rule) -> tuple[int, int, int]:
    """(reads, writes, reads of the input itself) of the layer the compiler makes of ``node``: one of
    each, but for a Softmax lowered in ``rule.softmax_passes`` passes (as the X5 compiler does:
    ReduceMax, Sub, Exp, ReduceSum, Mul by the reciprocal), each of which streams a tensor of the
    input's size: the two reductions only read, the other three also write.  Only the first two passes
    read the input itself; the others read what an earlier pass wrote, at the layer's own precision."""
    passes = rule.softmax_passes
    if node.op_type == "Softmax" and passes > 1:
        return passes, passes - 2, min(2, passes)
    return 1, 1, 1


def memory_cost(node, ctx, op_class: str | None = None) -> LayerCost:
    """Elementwise, activation, pooling, resize and copy ops: bytes moved vs vector throughput.

    A lookup-table layer merged from several ops (SiLU, HardSwish) reads its one input and
    writes its result: the pieces' intermediate tensors never leave the vector unit."""
    g, m = ctx.graph, ctx.march
    src = ctx.lut_in.get(node.name)
    region = ctx.region_in.get(node.name)
    ops = 1  # ops the layer is scheduled as, each paying the per-op overhead
    if region is not None:  # one pass over its one input: its pieces' elements through the vector unit
        cls = "region"
        moves = [_act_move(ctx, region)] + [_act_move(ctx, o) for o in node.outputs if o and ctx.is_activation(o)]
        elems = ctx.region_elems[node.name]
        ops = len(ctx.chain_nodes[node.name]) + 1  # its pieces run one after another, each an op of its own
        note = "element-wise region: " + ctx.chain_ops[node.name]
    elif src is not None:
        cls = "lut"
        moves = [_act_move(ctx, src)] + [_act_move(ctx, o) for o in node.outputs if o and ctx.is_activation(o)]
        elems = numel(shape_of(g, src))
        note = "lookup table: " + ctx.chain_ops[node.name]
    else:
        cls = op_class or vector_class(node.op_type)
        moves = _reads_writes(node, ctx)
        elems = max([numel(shape_of(g, t)) for t in (*node.inputs, *node.outputs) if t and ctx.is_activation(t)],
                    default=0)
        note = ""
        passes, writes, _ = tensor_passes(node, ctx.rule)  # a lowered Softmax reads once per pass
        if passes > 1:
            moves = [(b * passes, d) for b, d in _input_moves(node, ctx, skip_internal=True)] + \
                [(b * writes, d) for b, d in (_act_move(ctx, o) for o in node.outputs
                                              if o and o not in ctx.internal and ctx.is_activation(o))]
            elems *= passes
            ops = passes + 1
            note = f"Softmax as {passes} passes (max, subtract, exp, sum, scale) and the reciprocal: {ops} ops"
    eff = m.vector_efficiency(cls)
    compute_us = elems / (m.vector_elems_per_s * eff) * 1e6
    return _finish(node.name, node.op_type, moves, compute_us, m.op_overhead_us * ops, ctx, note=note,
                   op_class=cls, efficiency=eff, elems=int(elems))


def view_cost(node, ctx) -> LayerCost:
    """A Reshape that only adds or drops dimensions of size 1 keeps the element order of every
    layout: a view.  One that splits or merges real dimensions (the heads of an attention out of
    its channels, a feature map into tokens) is a copy on a march with ``relayout_reshape``: the
    BPU stores a feature map in its native layout, channels padded to ``channel_align``, so the
    new shape's elements sit elsewhere (the X5 compile logs keep such Reshapes as nodes of their own)."""
    if node.op_type in ("Reshape", "Flatten") and ctx.march.relayout_reshape and node.inputs and node.outputs \
            and ctx.is_activation(node.inputs[0]):
        a, b = shape_of(ctx.graph, node.inputs[0]), shape_of(ctx.graph, node.outputs[0])
        if a is not None and b is not None and [d for d in a if d != 1] != [d for d in b if d != 1]:
            lc = memory_cost(node, ctx, "copy")
            return replace(lc, note="relayout: the new shape moves elements across the native layout")
    return zero_cost(node, "view: no data moved")


def split_cost(node, ctx) -> LayerCost:
    x = shape_of(ctx.graph, node.inputs[0]) if node.inputs else None
    axis = int(node.attrs.get("axis", 0) or 0)
    if x is not None and axis < 0:
        axis += len(x)
    if x is not None and len(x) >= 2 and axis == 1:
        # A channel split is a view: consumers read their slice of the producer's buffer.
        return zero_cost(node, "channel split: view")
    return memory_cost(node, ctx, "copy")


def copy_cost(name, op_type, in_tensors, out_tensors, ctx, note="") -> LayerCost:
    """A copy through the DMA: read the inputs, write the outputs (used by non-free Concats)."""
    m = ctx.march
    moves = [_act_move(ctx, t) for t in in_tensors if t and ctx.is_activation(t)]
    moves += [_act_move(ctx, t) for t in out_tensors if t and ctx.is_activation(t)]
    elems = sum(ctx.act_bytes(t) for t in out_tensors if t) // ACT_BYTES
    eff = m.vector_efficiency("copy")
    return _finish(name, op_type, moves, elems / (m.vector_elems_per_s * eff) * 1e6, m.op_overhead_us, ctx,
                   note=note, op_class="copy", efficiency=eff, elems=int(elems))


def rescale_cost(name, tensor, concat, ctx) -> LayerCost:
    """A virtual requantize node: one elementwise int8 pass over the Concat input."""
    m = ctx.march
    b = ctx.act_bytes(tensor)
    ddr = ctx.in_ddr(tensor, b)
    eff = m.vector_efficiency("eltwise")
    compute_us = b // ACT_BYTES / (m.vector_elems_per_s * eff) * 1e6
    return _finish(name, "Rescale", [(b, ddr), (b, ddr)], compute_us, m.op_overhead_us, ctx, is_rescale=True,
                   concat=concat, note=f"requantize {tensor} to the output scale of {concat}", op_class="eltwise",
                   efficiency=eff, elems=int(b // ACT_BYTES))


def concat_default_cost(node, ctx) -> LayerCost:
    """A Concat the simulator was not told about (for example one on unquantized data): a copy."""
    return copy_cost(node.name, node.op_type, node.inputs, node.outputs, ctx)


def node_cost(node, ctx) -> LayerCost:
    """Cost of one graph node: fused and constant-folded nodes first, then the registry's function."""
    host = ctx.fused.get(node.name)
    if host is not None:  # its traffic is charged to the host (see CostContext._find_fusions)
        how = ("merged into the lookup-table layer" if host in ctx.lut_in else
               "merged into the element-wise region" if host in ctx.region_in else "fused into")
        return zero_cost(node, f"{how} {host}", fused_into=host)
    if not any(o and ctx.is_activation(o) for o in node.outputs):
        return zero_cost(node, "constant-folded or shape math (not run on the BPU)")
    return COST_FUNCTIONS[handler_for(node.op_type).cost_class](node, ctx)


COST_FUNCTIONS = {CostClass.COMPUTE: compute_cost, CostClass.MEMORY: memory_cost, CostClass.VIEW: view_cost,
                  CostClass.SPLIT: split_cost, CostClass.CONCAT: concat_default_cost}
