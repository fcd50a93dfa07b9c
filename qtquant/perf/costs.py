"""Per-op cost functions, one per :class:`~qtquant.base.vocab.CostClass`; the op registry says which
class each op is in (``qtquant.model.ops``).

A cost function is ``fn(node, ctx) -> LayerCost``.  ``ctx`` (:class:`CostContext`) holds
the graph, the march profile and what the whole-graph passes decided: which activations
are fused into their producing Conv, and which tensors live in DDR rather than on chip.

The model (DESIGN §4): compute ops take MACs ÷ (peak MAC/s × utilization × alignment
efficiency); everything else moves bytes (DDR bytes ÷ DDR bandwidth + on-chip bytes ÷
on-chip bandwidth) or streams elements through the vector unit; a layer costs the larger
of its compute and memory time plus a fixed per-op overhead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cached_property

from ..model.ops import constant_operand, handler_for, identity_next
from ..base.vocab import CostClass, TensorKind
from .board import is_image
from .macs import conv_dims, macs_of, numel, shape_of

__all__ = ["LayerCost", "CostContext", "node_cost", "copy_cost", "rescale_cost", "alignment_efficiency",
           "vector_class", "VECTOR_CLASSES"]

ACT_BYTES = 1  # int8 activations
WEIGHT_BYTES = 1  # int8 weights
BIAS_BYTES = 4  # int32 bias
WEIGHTS = "weights"  # a move's place: constants streamed from DDR (truthy: DDR), at march.weight_bytes_per_s
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


# Vector-unit op classes, each with its own efficiency in the march profile.
VECTOR_CLASSES = ("eltwise", "lut", "resize", "pool", "reduce", "copy", "region")
_POOL = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"})
_PLAIN_ELTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "PRelu", "Abs", "Neg", "Floor", "Ceil", "Round", "Sign"})
_REDUCE = frozenset({"Softmax", "LogSoftmax"})


def vector_class(op_type: str) -> str:
    """Which vector-unit class prices an op that is not on the MAC array."""
    if op_type in ("Resize", "Upsample"):
        return "resize"
    if op_type in _POOL:
        return "pool"
    cat = handler_for(op_type).category
    if op_type in _REDUCE or cat == "reduce":
        return "reduce"
    if cat == "layout" or op_type in ("Concat", "Split"):
        return "copy"
    if cat == "activation" and op_type not in _PLAIN_ELTWISE:
        return "lut"
    return "eltwise"


class CostContext:
    """Whole-graph facts the per-op cost functions need, computed once per (graph, march)."""

    def __init__(self, graph, march):
        self.graph = graph
        self.march = march
        self.rule = march.fusion
        self._onchip_limit = march.onchip_tensor_bytes
        self._io = set(graph.inputs) | set(graph.outputs)
        self._bytes: dict[str, int] = {}
        self.fused: dict[str, str] = {}  # node -> host node it is folded into
        self.internal: set[str] = set()  # tensors inside a fused chain: never written out
        self.chain_out: dict[str, str] = {}  # host -> the fused chain's last tensor (what the host writes)
        self.chain_ops: dict[str, str] = {}  # host -> "BatchNormalization+Relu" (for the layer note)
        self.chain_nodes: dict[str, tuple] = {}  # host -> the node names merged into it
        self.chain_inputs: dict[str, list] = {}  # host -> extra inputs of its chain (residuals)
        self.lut_in: dict[str, str] = {}  # LUT host -> the one tensor its pieces read
        self.region_in: dict[str, str] = {}  # vector-region host -> the one activation its pieces read
        self.region_elems: dict[str, int] = {}  # vector-region host -> elements its pieces stream, summed
        self._find_fusions()
        self._find_luts()
        if self.rule.vector_regions:
            self._find_vector_regions()

    # -- tensors ----------------------------------------------------------------------------
    def is_activation(self, tensor: str) -> bool:
        t = self.graph.tensors.get(tensor) if tensor else None
        return t is not None and t.kind in _RUNTIME

    def act_bytes(self, tensor: str) -> int:
        b = self._bytes.get(tensor)
        if b is None:
            shape = shape_of(self.graph, tensor)
            b = numel(shape) * ACT_BYTES
            if self.march.image_input_nv12 and tensor in self.graph.inputs and is_image(shape):
                b //= 2  # NV12: 1.5 bytes per pixel where RGB takes 3; the conversion is the BPU's
            self._bytes[tensor] = b
        return b

    def in_ddr(self, tensor: str, nbytes: int) -> bool:
        """Model inputs/outputs and tensors too big for the on-chip buffer go through DDR.

        With ``march.stream_tiles``: a tensor whose one reader is a vector-unit pass (a lookup table,
        an element-wise op or region) is consumed tile by tile in the order it is written, so it never
        needs to be whole on chip and stays there whatever its size; an attention matrix (the product
        of two activations and what the Softmax, scaling and Transpose make of it before the next
        MatMul) cannot be: the Transpose and the second MatMul need all of it at once, with the
        matrices the Softmax's passes make beside it, so it goes to DDR when over
        ``march.attention_onchip_share`` of the limit (:meth:`attention_matrices`)."""
        if tensor in self._io:
            return True
        if not self.march.stream_tiles:
            return nbytes > self._onchip_limit
        if tensor in self.attention_matrices:
            return nbytes > self._onchip_limit * self.march.attention_onchip_share
        return nbytes > self._onchip_limit and not self._streamed(tensor)

    def _streamed(self, tensor: str) -> bool:
        hosts = {self.fused.get(c.name, c.name) for c in self._consumers(tensor)}
        if len(hosts) != 1:
            return False
        host = self.graph.nodes[next(iter(hosts))]
        return handler_for(host.op_type).cost_class is CostClass.MEMORY and vector_class(host.op_type) != "copy"

    @cached_property
    def attention_matrices(self) -> frozenset:
        """The outputs of MatMuls of two activations and the tensors of the same size made from
        them (Softmax, scaling, Transpose) up to the MatMul that reads them."""
        g, out = self.graph, set()
        for n in g.nodes.values():
            if n.op_type != "MatMul" or not all(self.is_activation(i) for i in n.inputs[:2]) or not n.outputs:
                continue
            size, todo = numel(shape_of(g, n.outputs[0])), [n.outputs[0]]
            while todo:
                t = todo.pop()
                if t in out:
                    continue
                out.add(t)
                todo.extend(o for c in self._consumers(t) if c.op_type != "MatMul" for o in c.outputs
                            if o and self.is_activation(o) and numel(shape_of(g, o)) == size)
        return frozenset(out)

    def _consumers(self, t):
        return [self.graph.nodes[c] for c in self.graph.tensors[t].consumers] if t in self.graph.tensors else []

    def _free(self, node) -> bool:
        return node.name not in self.fused and node.name not in self.chain_nodes

    # -- fusion into the producer (the march's write-back rule) --------------------------------
    def _find_fusions(self) -> None:
        """Fold BN/constant-affine steps, write-back activations and one residual Add into the
        MAC-array layer that feeds them (``march.fusion``, :class:`qtquant.model.ops.FusionRule`).

        The host then reads the chain's extra inputs (a residual) and writes the chain's last
        tensor; the intermediate tensors never leave the MAC pipeline.
        """
        g, rule = self.graph, self.rule
        outputs = set(g.outputs)
        for node in g.nodes.values():
            if node.op_type not in rule.producers or not node.outputs or not self.is_activation(node.outputs[0]) \
                    or handler_for(node.op_type).cost_class is not CostClass.COMPUTE:
                continue
            # A MatMul of two activations has no weights to fold a constant scale into: the X5 logs keep
            # the attention's scale after it as a pass of its own (YOLO11n /model.10/m/m.0/attn/Mul,
            # YOLO12n's /attn/Mul nodes, each with its own threshold).
            affine_ok = not (node.op_type == "MatMul" and all(self.is_activation(i) for i in node.inputs[:2]))
            cur, used_add, chain = node.outputs[0], False, []
            while cur not in outputs:
                cons = self._consumers(cur)
                c = cons[0] if len(cons) == 1 else None
                if c is not None and not self._free(c):
                    break
                if c is not None and identity_next(g, [c.name]):
                    step = [c]  # dropped by the compiler: the chain goes on (ops.identity_next)
                elif c is not None and affine_ok and c.op_type in rule.folded and constant_operand(c, cur, g):
                    step = [c]  # folded into the weights and bias at compile time
                elif c is not None and c.op_type in rule.write_back and c.inputs[0] == cur and self._rest_static(c):
                    step, affine_ok = [c], False
                elif (c is not None and c.op_type == "Add" and rule.residual_add and not used_add
                      and len(c.inputs) == 2 and c.inputs[0] != c.inputs[1]
                      and all(self.is_activation(i) for i in c.inputs)):
                    step, used_add, affine_ok = [c], True, False  # residual add in the write-back
                else:
                    step = self._composite(cur, cons, rule.write_back)
                    if not step:
                        break
                    affine_ok = False
                self.internal.add(cur)
                chain.extend(step)
                for s in step:
                    self.fused[s.name] = node.name
                for s in step[:-1]:
                    self.internal.update(o for o in s.outputs if o)
                cur = step[-1].outputs[0]
                if not cur or not self.is_activation(cur):
                    break
            if chain:
                self.chain_out[node.name] = cur
                self.chain_ops[node.name] = "+".join(c.op_type for c in chain if c.op_type != "Identity")
                self.chain_nodes[node.name] = tuple(c.name for c in chain)
                inside = {node.outputs[0], *(o for c in chain for o in c.outputs)}
                self.chain_inputs[node.name] = [i for c in chain for i in c.inputs if i and i not in inside]

    def _composite(self, t, cons, names) -> list:
        """The nodes of a SiLU or HardSwish spelled as several ops on ``t``, when ``names``
        (a rule list) contains it; [] otherwise.  The last node writes the result."""
        if len(cons) == 1 and cons[0].op_type == "HardSwish" and "HardSwish" in names:
            return list(cons)
        if len(cons) != 2 or any(not self._free(c) for c in cons):
            return []
        by = {c.op_type: c for c in cons}
        for gate, name in (("Sigmoid", "SiLU"), ("HardSigmoid", "HardSwish")):
            if name in names and set(by) == {gate, "Mul"}:
                s, m = by[gate], by["Mul"]
                if sorted(m.inputs) == sorted([t, s.outputs[0]]) and len(self._consumers(s.outputs[0])) == 1:
                    return [s, m]
        if "HardSwish" in names and set(by) == {"Add", "Mul"}:
            return self._hardswish_pieces(t, by["Add"], by["Mul"])
        return []

    def _hardswish_pieces(self, t, add, mul) -> list:
        """x·Clip(x+3, 0, 6)/6 as Add, Clip, then Mul by x and Div (or Mul) by 6, in either order."""
        g = self.graph

        def only(tensor, ops):
            cs = self._consumers(tensor)
            return cs[0] if len(cs) == 1 and cs[0].op_type in ops and self._free(cs[0]) else None

        def by_const(n, x):
            return n is not None and constant_operand(n, x, g)

        if not by_const(add, t):
            return []
        clip = only(add.outputs[0], ("Clip",))
        if clip is None:
            return []
        nxt = only(clip.outputs[0], ("Mul", "Div"))
        if nxt is mul and sorted(mul.inputs) == sorted([t, clip.outputs[0]]):
            last = only(mul.outputs[0], ("Div", "Mul"))
            return [add, clip, mul, last] if by_const(last, mul.outputs[0]) else []
        if nxt is not None and nxt is not mul and by_const(nxt, clip.outputs[0]) \
                and sorted(mul.inputs) == sorted([t, nxt.outputs[0]]) and len(self._consumers(nxt.outputs[0])) == 1:
            return [add, clip, nxt, mul]
        return []

    # -- lookup-table passes ------------------------------------------------------------------
    def _find_luts(self) -> None:
        """Merge the pieces of a SiLU/HardSwish the march evaluates by one table lookup
        (``fusion.lut``) into one layer, hosted by the last piece (as the X5 log names its
        HzLut after the SiLU's Mul): one read of the input, one write of the result."""
        lut = self.rule.lut
        if not (lut & {"SiLU", "HardSwish"}):
            return
        for name in self.graph.tensors:
            if name in self.internal or not self.is_activation(name):
                continue
            cons = self._consumers(name)
            step = self._composite(name, cons, lut) if len(cons) > 1 else []
            if len(step) < 2:
                continue
            host = step[-1]
            self.lut_in[host.name] = name
            self.chain_nodes[host.name] = tuple(s.name for s in step[:-1])
            self.chain_ops[host.name] = "+".join(s.op_type for s in step)
            for s in step[:-1]:
                self.fused[s.name] = host.name
                self.internal.update(o for o in s.outputs if o)

    def _find_vector_regions(self) -> None:
        """Merge each region of element-wise ops that reads one activation (besides constants) and
        leaves one result into one vector-unit layer hosted by the node writing that result: an
        exported GELU (Div, Erf, Add, Mul, Mul) or LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add,
        Sqrt, Div, Mul, Add) reads its input once and writes its result once; its pieces' elements
        still stream through the vector unit one after another (``fusion.vector_regions``)."""
        g = self.graph

        def free(n):
            return (n.name not in self.fused and n.name not in self.chain_nodes and n.name not in claimed
                    and n.op_type not in _REDUCE  # a Softmax is lowered on its own (softmax_passes)
                    and handler_for(n.op_type).cost_class is CostClass.MEMORY
                    and vector_class(n.op_type) in ("eltwise", "lut", "reduce"))

        claimed: set[str] = set()
        for x in list(g.tensors):
            if x in self.internal or not self.is_activation(x):
                continue
            region, made, todo = [], {x}, list(self._consumers(x))
            while todo:
                c = todo.pop(0)
                if c in region or not free(c):
                    continue
                if all(i in made for i in c.inputs if i and self.is_activation(i)):
                    region.append(c)
                    for o in c.outputs:
                        if o:
                            made.add(o)
                            todo.extend(self._consumers(o))
            if len(region) < 2:
                continue
            inside = {n.name for n in region}
            exits = [t for t in made - {x} if t in self._io or any(c.name not in inside for c in self._consumers(t))]
            if len(exits) != 1:
                continue
            host = g.producer(exits[0])
            if host is None or host.name not in inside:
                continue
            others = [n for n in region if n is not host]
            self.region_in[host.name] = x
            self.region_elems[host.name] = sum(
                max([numel(shape_of(g, t)) for t in (*n.inputs, *n.outputs) if t and self.is_activation(t)],
                    default=0) for n in region)
            self.chain_nodes[host.name] = tuple(n.name for n in others)
            self.chain_ops[host.name] = "+".join(n.op_type for n in region)
            for n in others:
                self.fused[n.name] = host.name
                self.internal.update(o for o in n.outputs if o)
            claimed |= inside

    def _rest_static(self, node) -> bool:
        """True when every input but the first is a constant (Clip bounds, PRelu slope)."""
        return all(not i or not self.is_activation(i) for i in node.inputs[1:])


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
        if t.kind in _RUNTIME:
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
        passes = ctx.rule.softmax_passes
        if node.op_type == "Softmax" and passes > 1:
            # As the X5 compiler lowers it (ReduceMax, Sub, Exp, ReduceSum, Mul by the reciprocal): each
            # pass streams the whole input; the two reductions read it, the other three also write it.
            moves = [(b * passes, d) for b, d in _input_moves(node, ctx, skip_internal=True)] + \
                [(b * (passes - 2), d) for b, d in (_act_move(ctx, o) for o in node.outputs
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
