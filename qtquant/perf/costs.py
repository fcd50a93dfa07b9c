"""Per-op cost functions, one per :class:`~qtquant.vocab.CostClass`; the op registry says which
class each op is in (``qtquant.ops``).

A cost function is ``fn(node, ctx) -> LayerCost``.  ``ctx`` (:class:`CostContext`) holds
the graph, the march profile and what the whole-graph passes decided: which activations
are fused into their producing Conv, and which tensors live in DDR rather than on chip.

The model (DESIGN §4): compute ops take MACs ÷ (peak MAC/s × utilization × alignment
efficiency); everything else moves bytes (DDR bytes ÷ DDR bandwidth + on-chip bytes ÷
on-chip bandwidth) or streams elements through the vector unit; a layer costs the larger
of its compute and memory time plus a fixed per-op overhead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..ops import handler_for
from ..vocab import CostClass, TensorKind
from .macs import conv_dims, macs_of, numel, shape_of

__all__ = ["LayerCost", "CostContext", "node_cost", "copy_cost", "rescale_cost", "alignment_efficiency"]

ACT_BYTES = 1  # int8 activations
WEIGHT_BYTES = 1  # int8 weights
BIAS_BYTES = 4  # int32 bias
_RUNTIME = (TensorKind.INPUT, TensorKind.ACTIVATION)  # what the BPU reads and writes per inference


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
    bound: str  # "compute" | "memory"
    is_rescale: bool = False
    concat: str | None = None  # for rescale layers: the Concat they feed
    ddr_bytes: int = 0
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def alignment_efficiency(channels: int, align: int) -> float:
    """Share of MAC lanes doing useful work when ``channels`` is padded to a multiple of ``align``."""
    if channels <= 0 or align <= 1:
        return 1.0
    return channels / (-(-channels // align) * align)


class CostContext:
    """Whole-graph facts the per-op cost functions need, computed once per (graph, march)."""

    def __init__(self, graph, march):
        self.graph = graph
        self.march = march
        self._onchip_limit = march.onchip_tensor_bytes
        self._io = set(graph.inputs) | set(graph.outputs)
        self._bytes: dict[str, int] = {}
        self.fused: dict[str, str] = {}  # node -> host node it is folded into
        self.internal: set[str] = set()  # tensors inside a fused chain: never written out
        self.chain_out: dict[str, str] = {}  # host -> the fused chain's last tensor (what the host writes)
        self.chain_ops: dict[str, str] = {}  # host -> "Sigmoid+Mul" (for the layer note)
        self.chain_inputs: dict[str, list] = {}  # host -> extra inputs of its chain (residuals, BN params)
        self._find_fusions()

    # -- tensors ----------------------------------------------------------------------------
    def is_activation(self, tensor: str) -> bool:
        t = self.graph.tensors.get(tensor) if tensor else None
        return t is not None and t.kind in _RUNTIME

    def act_bytes(self, tensor: str) -> int:
        b = self._bytes.get(tensor)
        if b is None:
            b = self._bytes[tensor] = numel(shape_of(self.graph, tensor)) * ACT_BYTES
        return b

    def in_ddr(self, tensor: str, nbytes: int) -> bool:
        """Model inputs/outputs and tensors too big for the on-chip buffer go through DDR."""
        return tensor in self._io or nbytes > self._onchip_limit

    # -- fusion -----------------------------------------------------------------------------
    def _find_fusions(self) -> None:
        """Fold BN/activation/residual-Add chains into the Conv/Gemm that feeds them.

        The host then reads the chain's extra inputs (a residual) and writes the chain's
        last tensor; the intermediate tensors never leave the MAC pipeline.
        """
        g, fuse = self.graph, self.march.fused_activations
        outputs = set(g.outputs)
        for node in g.nodes.values():
            if handler_for(node.op_type).cost_class is not CostClass.COMPUTE or not node.outputs \
                    or not self.is_activation(node.outputs[0]):
                continue
            cur, used_add, chain = node.outputs[0], False, []
            while cur not in outputs:
                cons = [g.nodes[c] for c in g.tensors[cur].consumers]
                ops = sorted(c.op_type for c in cons)
                if len(cons) == 1 and cons[0].op_type in fuse and cons[0].op_type not in ("Add", "Sigmoid") \
                        and cons[0].inputs[0] == cur and self._rest_static(cons[0]):
                    step = cons
                elif len(cons) == 1 and cons[0].op_type == "Sigmoid" and "Sigmoid" in fuse:
                    step = cons
                elif (len(cons) == 1 and cons[0].op_type == "Add" and "Add" in fuse and not used_add
                      and len(cons[0].inputs) == 2 and cons[0].inputs[0] != cons[0].inputs[1]):
                    step, used_add = cons, True  # residual add folded into the conv's write-back
                elif ops == ["Mul", "Sigmoid"] and "SiLU" in fuse:
                    sig = next(c for c in cons if c.op_type == "Sigmoid")
                    mul = next(c for c in cons if c.op_type == "Mul")
                    s_out = sig.outputs[0]
                    if set(mul.inputs) != {cur, s_out} or g.tensors[s_out].consumers != [mul.name]:
                        break
                    self.internal.add(s_out)
                    step = [sig, mul]
                else:
                    break
                self.internal.add(cur)
                chain.extend(step)
                for c in step:
                    self.fused[c.name] = node.name
                cur = step[-1].outputs[0]
                if not cur or not self.is_activation(cur):
                    break
            if chain:
                self.chain_out[node.name] = cur
                self.chain_ops[node.name] = "+".join(c.op_type for c in chain)
                inside = {node.outputs[0], *(o for c in chain for o in c.outputs)}
                self.chain_inputs[node.name] = [i for c in chain for i in c.inputs if i and i not in inside]

    def _rest_static(self, node) -> bool:
        """True when every input but the first is a constant (BN statistics, Clip bounds, PRelu slope)."""
        return all(not i or not self.is_activation(i) for i in node.inputs[1:])


def _finish(name, op_type, moves, compute_us, overhead_us, ctx, macs=0, note="", is_rescale=False,
            concat=None) -> LayerCost:
    """``moves``: list of (bytes, in_ddr) pairs.  Memory time sums DDR and on-chip traffic."""
    m = ctx.march
    ddr = sum(b for b, d in moves if d)
    onchip = sum(b for b, d in moves if not d)
    memory_us = (ddr / m.ddr_bytes_per_s + onchip / m.sram_bytes_per_s) * 1e6
    total = max(compute_us, memory_us) + overhead_us
    bound = "compute" if compute_us >= memory_us and compute_us > 0 else "memory"
    return LayerCost(name, op_type, int(macs), int(ddr + onchip), compute_us, memory_us, overhead_us, total,
                     bound, is_rescale, concat, int(ddr), note)


def zero_cost(node, note: str) -> LayerCost:
    return LayerCost(node.name, node.op_type, 0, 0, 0.0, 0.0, 0.0, 0.0, "memory", note=note)


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
        if t.kind in _RUNTIME:
            moves.append(_act_move(ctx, i))
        elif t.kind == TensorKind.WEIGHT:
            moves.append((numel(shape_of(g, i)) * weight_bytes(k), True))
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
    eff, note = _mac_efficiency(node, g, m.channel_align)
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
    return _finish(node.name, node.op_type, moves, compute_us, m.op_overhead_us, ctx, macs=macs, note=note)


def _mac_efficiency(node, graph, align) -> tuple[float, str]:
    """Utilization factor from channel alignment: input channels per group × output channels."""
    if node.op_type in ("Conv", "ConvTranspose"):
        d = conv_dims(node, graph)
        if d is None:
            return 1.0, ""
        _, cin, cout, group, *_ = d
        cin_g = cin // group if group else cin
        eff = alignment_efficiency(cin_g, align) * alignment_efficiency(cout, align)
        kind = "depthwise" if group > 1 and group == cin else ("grouped" if group > 1 else "")
        return eff, (f"{kind} conv; " if kind else "") + f"alignment efficiency {eff:.2f}"
    if node.op_type in ("MatMul", "Gemm"):
        a, b = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
        if a is None or b is None or not a or not b:
            return 1.0, ""
        if node.op_type == "Gemm":
            k = a[0] if int(node.attrs.get("transA", 0) or 0) else a[-1]
            n = b[0] if int(node.attrs.get("transB", 0) or 0) else b[-1]
        else:
            k, n = a[-1], b[-1]
        eff = alignment_efficiency(k, align) * alignment_efficiency(n, align)
        return eff, f"alignment efficiency {eff:.2f}"
    return 1.0, ""


def memory_cost(node, ctx) -> LayerCost:
    """Elementwise, activation, pooling, resize and copy ops: bytes moved vs vector throughput."""
    g, m = ctx.graph, ctx.march
    moves = _reads_writes(node, ctx)
    elems = max([numel(shape_of(g, t)) for t in (*node.inputs, *node.outputs) if t and ctx.is_activation(t)],
                default=0)
    compute_us = elems / m.vector_elems_per_s * 1e6
    return _finish(node.name, node.op_type, moves, compute_us, m.op_overhead_us, ctx)


def view_cost(node, ctx) -> LayerCost:
    return zero_cost(node, "view: no data moved")


def split_cost(node, ctx) -> LayerCost:
    x = shape_of(ctx.graph, node.inputs[0]) if node.inputs else None
    axis = int(node.attrs.get("axis", 0) or 0)
    if x is not None and axis < 0:
        axis += len(x)
    if x is not None and len(x) >= 2 and axis == 1:
        # A channel split is a view: consumers read their slice of the producer's buffer.
        return zero_cost(node, "channel split: view")
    return memory_cost(node, ctx)


def copy_cost(name, op_type, in_tensors, out_tensors, ctx, note="") -> LayerCost:
    """A copy through the DMA: read the inputs, write the outputs (used by non-free Concats)."""
    m = ctx.march
    moves = [_act_move(ctx, t) for t in in_tensors if t and ctx.is_activation(t)]
    moves += [_act_move(ctx, t) for t in out_tensors if t and ctx.is_activation(t)]
    elems = sum(ctx.act_bytes(t) for t in out_tensors if t) // ACT_BYTES
    return _finish(name, op_type, moves, elems / m.vector_elems_per_s * 1e6, m.op_overhead_us, ctx, note=note)


def rescale_cost(name, tensor, concat, ctx) -> LayerCost:
    """A virtual requantize node: one elementwise int8 pass over the Concat input."""
    m = ctx.march
    b = ctx.act_bytes(tensor)
    ddr = ctx.in_ddr(tensor, b)
    compute_us = b // ACT_BYTES / m.vector_elems_per_s * 1e6
    return _finish(name, "Rescale", [(b, ddr), (b, ddr)], compute_us, m.op_overhead_us, ctx, is_rescale=True,
                   concat=concat, note=f"requantize {tensor} to the output scale of {concat}")


def concat_default_cost(node, ctx) -> LayerCost:
    """A Concat the simulator was not told about (for example one on unquantized data): a copy."""
    return copy_cost(node.name, node.op_type, node.inputs, node.outputs, ctx)


def node_cost(node, ctx) -> LayerCost:
    """Cost of one graph node: fused and constant-folded nodes first, then the registry's function."""
    host = ctx.fused.get(node.name)
    if host is not None:  # its traffic is charged to the host (see CostContext._find_fusions)
        return zero_cost(node, f"fused into {host}")
    if not any(o and ctx.is_activation(o) for o in node.outputs):
        return zero_cost(node, "constant-folded or shape math (not run on the BPU)")
    return COST_FUNCTIONS[handler_for(node.op_type).cost_class](node, ctx)


COST_FUNCTIONS = {CostClass.COMPUTE: compute_cost, CostClass.MEMORY: memory_cost, CostClass.VIEW: view_cost,
                  CostClass.SPLIT: split_cost, CostClass.CONCAT: concat_default_cost}
