"""What the per-op cost functions (:mod:`qtquant.perf.costs`) need to know about the whole graph,
worked out once per (graph, march): which activations fold into the Conv that produces them (the
fusion chains), which ops one lookup-table pass or one vector-unit region computes, and which
tensors live in DDR rather than on chip (the residency rule, checked against the compile logs' DDR
lines: docs/perf-model.md)."""

from __future__ import annotations

from functools import cached_property

from ..model.ops import constant_operand, handler_for, identity_next
from ..base.vocab import CostClass, TensorKind
from .board import is_image
from .macs import conv_dims, numel, shape_of

__all__ = ["CostContext", "ACT_BYTES", "vector_class", "is_activation"]

ACT_BYTES = 1  # int8 activations
_RUNTIME = (TensorKind.INPUT, TensorKind.ACTIVATION)  # what the BPU reads and writes per inference


# Vector-unit op classes, each with its own efficiency in the march profile.
_POOL = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"})
_PLAIN_ELTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "PRelu", "Abs", "Neg", "Floor", "Ceil", "Round", "Sign"})
_REDUCE = frozenset({"Softmax", "LogSoftmax"})


def is_activation(graph, tensor: str) -> bool:
    """Whether the BPU reads or writes ``tensor`` per inference (a model input or an activation), not a
    constant or shape arithmetic."""
    t = graph.tensors.get(tensor) if tensor else None
    return t is not None and t.kind in _RUNTIME


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
        return is_activation(self.graph, tensor)

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
        an element-wise op or region) or a pointwise layer (a 1x1 stride-1 Conv, a MatMul by
        constant weights: each output position needs only the same position of its input) is consumed
        tile by tile in the order it is written, so it never needs to be whole on chip and stays there
        whatever its size, unless a Concat writes it (its parts arrive from several layers, one after
        another, not in one order of tiles); an attention matrix (the product
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
        if len(hosts) != 1 or self._written_by_concat(tensor):
            return False
        host = self.graph.nodes[next(iter(hosts))]
        if handler_for(host.op_type).cost_class is CostClass.MEMORY:
            return vector_class(host.op_type) != "copy"
        return self._pointwise(host)

    def _pointwise(self, node) -> bool:
        """A MAC-array layer whose output at a position needs its input at that position only."""
        if node.op_type == "Conv":
            d = conv_dims(node, self.graph)
            strides = node.attrs.get("strides") or ()
            pads = node.attrs.get("pads") or ()
            return d is not None and all(k == 1 for k in d[4]) and all(s == 1 for s in strides) \
                and not any(pads)
        if node.op_type == "MatMul" and len(node.inputs) == 2:
            return not self.is_activation(node.inputs[1])
        return False

    def _written_by_concat(self, tensor: str) -> bool:
        producer = self.graph.producer(tensor)
        return producer is not None and producer.op_type == "Concat"

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
