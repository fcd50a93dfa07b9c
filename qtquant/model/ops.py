"""The op registry: one table that says how each op type treats quantization.

Handlers declare what they need (``PASS`` = "output shares the input's scale"); the
domain builder and the exporter act on those declarations.  Each handler also declares
its :class:`~qtquant.base.vocab.CostClass`, which the perf simulator prices.  The table is
fixed at import: nothing registers or patches handlers at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Protocol

import numpy.typing as npt

from ..base.vocab import CostClass

__all__ = ["Role", "OpHandler", "handler_for", "REGISTRY", "passes_through", "PASS_OPS", "FusionRule", "COMPOSITES",
           "default_fusion_rule", "fusion_rule_from", "fused_into_producer", "constant_operand", "SUBGRAPH_OPS",
           "identity_next", "OpNode", "OpGraph"]


class OpNode(Protocol):
    """What the rules here read of a node (:class:`~qtquant.model.graphitems.Node`, which imports this module)."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]

    @property
    def attrs(self) -> dict[str, Any]: ...


class OpGraph(Protocol):
    """What the rules here read of a graph (:class:`~qtquant.model.graphmodel.Graph`, which imports this module)."""

    @property
    def outputs(self) -> list[str]: ...

    @property
    def nodes(self) -> Mapping[str, OpNode]: ...

    def consumer_names(self, tensor: str) -> Sequence[str]: ...

    def nodes_of(self, op_types: str | Iterable[str]) -> Sequence[OpNode]: ...

    def constant_value(self, name: str) -> npt.NDArray[Any] | None: ...

SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})  # the standard ops with graph attributes


class Role(Enum):
    COMPUTE = "compute"  # output gets its own observer
    PASS = "pass"  # output inherits the input's quantization (moves/selects values)
    CONCAT = "concat"  # own observer on the output; inputs analysed for mismatch
    NONE = "none"  # never quantized (shape math, casts to int, ...)


@dataclass(frozen=True)
class OpHandler:
    role: Role
    category: str = "other"  # for colouring in the GUI: conv, activation, eltwise, ...
    known: bool = True
    # Inputs that carry weights quantized per output channel: {input index: channel axis}.
    weight_inputs: dict[int, int] = field(default_factory=dict)
    # Optional predicate refining PASS for attribute-dependent ops (Resize nearest, Pad 0).
    pass_if: Callable[[OpNode, OpGraph], bool] | None = None
    # Every float op left in a quantized graph runs somewhere; by default it streams its bytes.
    cost_class: CostClass = CostClass.MEMORY


def _resize_nearest(node: OpNode, graph: OpGraph) -> bool:
    return bool(node.attrs.get("mode", "nearest") == "nearest")


def _pad_zero(node: OpNode, graph: OpGraph) -> bool:
    if node.attrs.get("mode", "constant") != "constant":
        return False
    if len(node.inputs) > 2 and node.inputs[2]:
        val = graph.constant_value(node.inputs[2])
        return val is not None and float(abs(val).max(initial=0.0)) == 0.0
    return float(node.attrs.get("value", 0.0)) == 0.0


def _h(role: Role, category: str, **kw: Any) -> OpHandler:
    return OpHandler(role=role, category=category, **kw)


_MACS = CostClass.COMPUTE

_REGISTRY: dict[str, OpHandler] = {
    # compute ops with weights
    "Conv": _h(Role.COMPUTE, "conv", weight_inputs={1: 0}, cost_class=_MACS),
    "ConvTranspose": _h(Role.COMPUTE, "conv", weight_inputs={1: 1}, cost_class=_MACS),
    "MatMul": _h(Role.COMPUTE, "matmul", weight_inputs={1: -1}, cost_class=_MACS),
    "Gemm": _h(Role.COMPUTE, "matmul", weight_inputs={1: 0}, cost_class=_MACS),
    # activations
    **{op: _h(Role.COMPUTE, "activation") for op in (
        "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip",
        "Elu", "Selu", "Gelu", "Softplus", "Softsign", "Mish", "Exp", "Log", "Sqrt", "Erf",
        "Softmax", "LogSoftmax", "Abs", "Neg", "Reciprocal", "Sin", "Cos", "Floor", "Ceil",
        "Round", "Sign", "ThresholdedRelu", "Celu")},
    # elementwise binary / normalisation / reductions
    **{op: _h(Role.COMPUTE, "eltwise") for op in (
        "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where",
        "BatchNormalization", "InstanceNormalization", "LayerNormalization",
        "GroupNormalization", "LpNormalization")},
    **{op: _h(Role.COMPUTE, "reduce") for op in (
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
        "ReduceL1", "ReduceLogSumExp", "ReduceSumSquare", "GlobalAveragePool",
        "AveragePool", "GlobalMaxPool", "LpPool", "CumSum", "TopK")},
    "Einsum": _h(Role.COMPUTE, "reduce", cost_class=_MACS),
    "Concat": _h(Role.CONCAT, "concat", cost_class=CostClass.CONCAT),
    # ops that only move or select values (DESIGN §3); the views among them move no data
    **{op: _h(Role.PASS, "layout", cost_class=CostClass.VIEW) for op in (
        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")},
    **{op: _h(Role.PASS, "layout") for op in (
        "Transpose", "Slice", "Gather", "DepthToSpace", "SpaceToDepth", "Expand", "Tile")},
    "Split": _h(Role.PASS, "layout", cost_class=CostClass.SPLIT),
    "MaxPool": _h(Role.PASS, "pool"),
    "Resize": _h(Role.PASS, "resize", pass_if=_resize_nearest),
    "Upsample": _h(Role.PASS, "resize", pass_if=_resize_nearest),
    "Pad": _h(Role.PASS, "layout", pass_if=_pad_zero),
    # never quantized: shape math and friends
    **{op: _h(Role.NONE, "shape") for op in (
        "Shape", "Size", "Constant", "ConstantOfShape", "Range", "NonZero", "Cast",
        "CastLike", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
        "And", "Or", "Xor", "ArgMax", "ArgMin", "NonMaxSuppression", "QuantizeLinear",
        "DequantizeLinear", "DynamicQuantizeLinear", "EyeLike", "RandomNormal",
        "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
        "IsNaN", "IsInf", "OneHot", "ScatterND", "ScatterElements", "GatherND",
        "GatherElements", "Loop", "If", "Scan", "SequenceConstruct", "Compress")},
    # Not in the quantization table (so still reported as unknown and observed), but an
    # inference runtime drops it: the simulator must not charge it a pass over its data.
    "Dropout": OpHandler(role=Role.COMPUTE, category="unknown", known=False, cost_class=CostClass.VIEW),
}
REGISTRY = MappingProxyType(_REGISTRY)

# Unknown ops get their own observer (the safe choice: never assume they keep scale)
# and are reported as unknown in the analysis.
DEFAULT = OpHandler(role=Role.COMPUTE, category="unknown", known=False)


def handler_for(op_type: str) -> OpHandler:
    return REGISTRY.get(op_type, DEFAULT)


# Op types whose handler is PASS: asked for every node of a graph, so one set lookup first.
_PASS_HANDLERS = {op: h for op, h in _REGISTRY.items() if h.role is Role.PASS}
# The op types passes_through can be true for: a loop over a graph's nodes skips the rest unasked.
PASS_OPS = frozenset(_PASS_HANDLERS)


def passes_through(node: OpNode, graph: OpGraph) -> bool:
    h = _PASS_HANDLERS.get(node.op_type)
    if h is None:
        return False
    return h.pass_if is None or bool(h.pass_if(node, graph))


# What a compiler folds into the layer that computes its input is a property of the compiler,
# so it lives in the march profile (``resources/marches/*.json``, "fusion"; perf/march.py parses
# it into a FusionRule).  A BatchNormalization, or an Add/Sub/Mul/Div by a constant, becomes the
# layer's weights and bias; a write-back activation is applied to the accumulator before
# requantizing.  So the layer's raw output, and every step up to the last folded op, never exists
# in int8 and gets no observer.  TFLite stores RELU/RELU6 as a Conv's fused_activation_function;
# onnxruntime's optimizer folds Conv+BatchNormalization, Conv+Add and Conv+Mul by constants before
# it quantizes.  What else is fused differs: TensorRT and NNCF's CPU patterns fuse x·Sigmoid(x)
# into the conv, but the X5 evaluates it as a lookup table on the conv's int8 output (FusionRule).
_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
_FOLDED_AFFINE = frozenset({"BatchNormalization", "Add", "Sub", "Mul", "Div"})
# Composite activations: names in a rule's lists that stand for several ONNX ops.
# SiLU = x·Sigmoid(x); HardSwish = the HardSwish op, x·HardSigmoid(x) or x·Clip(x+3, 0, 6)/6.
COMPOSITES = frozenset({"SiLU", "HardSwish"})
_GATE_OF = {"SiLU": "Sigmoid", "HardSwish": "HardSigmoid"}


@dataclass(frozen=True)
class FusionRule:
    """What one march's compiler merges into a layer (the profile's ``fusion`` object).

    - ``producers``: the ops that host a fused chain (MAC-array layers);
    - ``folded``: ops folded into the producer's weights and bias when their other operand is
      a constant (BatchNormalization always);
    - ``write_back``: activations applied in the producer's write-back (no pass of their own);
    - ``residual_add``: an Add of the producer's output and another activation is done in the
      write-back too (Conv+Add), followed by at most one ``write_back`` activation;
    - ``lut``: element-wise functions evaluated by one table-lookup pass of their own, however
      many ONNX ops spell them (``SiLU``, ``HardSwish`` merge their pieces into one pass);
    - ``concat_in_place``: a channel Concat is addressing, also when some inputs are
      requantized (the requantize writes into the Concat's buffer);
    - ``vector_regions``: a region of element-wise ops fed by one activation (and constants) with one
      result, such as an exported GELU or LayerNorm, is one vector-unit pass (the perf simulator's
      pricing only: no effect on the quantization points);
    - ``softmax_passes``: full passes over its input a Softmax takes as the compiler lowers it
      (1: one vector pass).
    """

    producers: frozenset[str] = _PRODUCERS
    folded: frozenset[str] = _FOLDED_AFFINE
    write_back: frozenset[str] = frozenset()
    residual_add: bool = False
    lut: frozenset[str] = frozenset()
    concat_in_place: bool = False
    vector_regions: bool = False
    softmax_passes: int = 1

    # A lookup-table pass reads int8: the producer's output is requantized for it and has a
    # threshold of its own.  The X5 compile log of YOLOv8n lists `/model.0/conv/Conv`
    # (HzSQuantizedConv, input threshold 1.12451) and then `/model.0/act/Mul` (HzLut, input
    # threshold 35.5202, the conv's output) - two quantization points, not one.  Only what the
    # write-back applies to the accumulator leaves the layer with one.

    @property
    def activations(self) -> frozenset[str]:
        """Single ops after a producer that leave one quantization point (the export's rule):
        the write-back activations."""
        return frozenset(self.write_back - COMPOSITES)

    @property
    def gates(self) -> frozenset[str]:
        """g of the x·g(x) pairs that leave one quantization point (applied in the write-back)."""
        return frozenset(g for c, g in _GATE_OF.items() if c in self.write_back)


def default_fusion_rule() -> FusionRule:
    """The default march's rule (``vocab.DEFAULT_MARCH``), read from its bundled profile: what
    a graph uses for its quantization points when no march is given."""
    global _DEFAULT_RULE
    if _DEFAULT_RULE is None:
        import json

        from ..base.resources import resource_path
        from ..base.vocab import DEFAULT_MARCH

        doc = json.loads(resource_path("marches", f"{DEFAULT_MARCH}.json").read_text(encoding="utf-8"))
        _DEFAULT_RULE = fusion_rule_from(doc["params"]["fusion"]["value"])
    return _DEFAULT_RULE


_DEFAULT_RULE: FusionRule | None = None


def fusion_rule_from(d: Mapping[str, Any]) -> FusionRule:
    """A FusionRule from a profile's already validated ``fusion`` value (lists of op names)."""
    kw: dict[str, Any] = {k: (frozenset(v) if isinstance(v, (list, tuple, set, frozenset)) else
              v if isinstance(v, int) and not isinstance(v, bool) else bool(v))
          for k, v in d.items() if k in FusionRule.__dataclass_fields__}
    return FusionRule(**kw)


def constant_operand(node: OpNode, t: str, graph: OpGraph) -> bool:
    """``node`` combines ``t`` with constants only (a per-channel scale or shift)."""
    others = [i for i in node.inputs if i and i != t]
    if node.op_type == "BatchNormalization":
        return bool(node.inputs) and node.inputs[0] == t
    if node.op_type in ("Sub", "Div") and node.inputs and node.inputs[0] != t:
        return False  # c - x or c / x is not an affine map of x a layer can absorb
    return len(others) == 1 and graph.constant_value(others[0]) is not None


def fused_into_producer(graph: OpGraph, rule: FusionRule | None = None) -> set[str]:
    """Activation tensors that exist only inside a fused layer: a producer's output read by
    nothing but what the march's compiler folds into it (a constant affine op, then an
    activation, or the gate of x·g(x)), and each folded step but the last.  ``rule``: the
    march's :class:`FusionRule` (default: :func:`default_fusion_rule`)."""
    rule = rule or default_fusion_rule()
    acts, gates, folded = rule.activations, rule.gates, rule.folded
    pair_ops = gates | {"Mul"}
    outputs = set(graph.outputs)
    consumer_names, nodes = graph.consumer_names, graph.nodes
    fused: set[str] = set()
    for node in graph.nodes_of(rule.producers):
        if not node.outputs:
            continue
        t, affine_ok = node.outputs[0], True
        aliases: list[str] = []  # t under the names Identity nodes gave it on the way (see identity_next)
        while t and t not in outputs:
            cons = consumer_names(t)
            nxt = identity_next(graph, cons)
            if nxt:
                aliases.append(t)
                t = nxt
                continue
            if len(cons) == 1:
                c = nodes[cons[0]]
                if affine_ok and c.op_type in folded and constant_operand(c, t, graph):
                    fused.add(t)
                    fused.update(aliases)
                    aliases = []
                    t = c.outputs[0]
                    continue
                if c.op_type in acts:
                    fused.add(t)
                    fused.update(aliases)
                break  # the activation's output is the layer's output
            if len(cons) == 2:
                pair = (nodes[cons[0]], nodes[cons[1]])
                if pair[0].op_type in pair_ops and pair[1].op_type in pair_ops:
                    gate = next((c for c in pair if c.op_type in gates), None)
                    g = _gated(graph, gate, outputs) if gate is not None else None
                    if g is not None:
                        fused.update((t, g))
                        fused.update(aliases)
            break
    # x·g(x) evaluated as one lookup-table pass (SiLU on the X5: one HzLut named after its Mul):
    # its gate's output exists only inside the pass.  Its input stays a quantization point.
    lut_gates = frozenset(g for c, g in _GATE_OF.items() if c in rule.lut)
    for gate in graph.nodes_of(lut_gates) if lut_gates else ():
        g = _gated(graph, gate, outputs)
        if g is not None:
            fused.add(g)
    return fused


def identity_next(graph: OpGraph, consumers: Sequence[str]) -> str:
    """The output of the one node in ``consumers`` (names) when it is an Identity, else "".
    Compilers drop Identity nodes before fusing, so a fused chain runs on through one: paddle2onnx
    puts one after each Conv's bias Add (PP-OCRv6's detector from rapidocr 3.10: Conv, Add, Identity,
    Relu), which priced that file 15% slower than the same network exported without them."""
    if len(consumers) != 1:
        return ""
    c = graph.nodes[consumers[0]]
    out = c.outputs[0] if c.op_type == "Identity" and c.outputs else ""
    return out if out and out not in c.inputs else ""  # (a file that makes a value again stops here)


def _gated(graph: OpGraph, gate: OpNode, outputs: Collection[str]) -> str | None:
    """The output g of ``gate`` when nothing but a Mul of it and the gate's own input reads it
    (x·g(x)) and it is no graph output; else None."""
    if not gate.inputs or not gate.outputs:
        return None
    x, g = gate.inputs[0], gate.outputs[0]
    cons = graph.consumer_names(g)
    if g in outputs or len(cons) != 1:
        return None
    c = graph.nodes[cons[0]]
    if c.op_type != "Mul" or sorted(c.inputs) != sorted([x, g]):
        return None
    return g
