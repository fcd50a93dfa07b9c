"""A model lowered to opset 11, the opset horizon_plugin_pytorch exports QAT models at.

onnx's version converter has no downward adapters for most ops (Shape 15 -> 14 fails), so the
few ops whose later versions changed their form are rewritten here; an op changed in a way this
does not know is refused by name (:class:`LowerError`), never written at a version it is not.

- attributes that became inputs (Split/Squeeze/Unsqueeze ``axes``/``split`` at 13, the Reduce ops'
  ``axes`` at 13/18) go back to attributes; they must be constants;
- Softmax/LogSoftmax/Hardmax (13: one axis; 11: everything from ``axis`` on): an axis other than
  the last is moved last by a Transpose pair;
- Resize (13: optional ``roi``/``scales``): the empty inputs opset 11 requires are added;
- attributes added later at their defaults (Shape ``start``/``end``, Reshape ``allowzero`` 0,
  Cast ``saturate``) are dropped; any other value is refused;
- ops whose later versions only widened their types are kept as they are.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper

from ..base.errors import ModelError
from ..model.opsets import default_opset

__all__ = ["LOAD_OPSET", "LowerError", "lower_to_11"]

LOAD_OPSET = 11

# Ops whose versions after 11 changed types (bfloat16, int4, ...) or added an optional input or
# attribute they are given here at its default, not their meaning.
_TYPES_ONLY = {
    "Abs", "Add", "And", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Ceil", "Clip", "Concat",
    "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "DepthToSpace", "Div", "Equal", "Erf", "Exp",
    "Expand", "Flatten", "Floor", "Gather", "GatherElements", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "Greater", "HardSigmoid", "Identity", "LeakyRelu", "Less", "Log", "MatMul", "Max", "MaxPool", "Min", "Mul",
    "Neg", "Not", "Or", "Pad", "Pow", "PRelu", "Range", "Reciprocal", "Relu", "Sigmoid", "Sign", "Slice", "Sqrt",
    "Sub", "Sum", "Tanh", "Tile", "TopK", "Transpose", "Where", "Shape", "Reshape", "Cast", "Resize", "Split",
    "Squeeze", "Unsqueeze", "Softmax", "LogSoftmax", "Hardmax", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
    "QuantizeLinear", "DequantizeLinear",
}
_AXES_INPUT = {"Squeeze": 1, "Unsqueeze": 1, "ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1,
               "ReduceProd": 1, "ReduceL1": 1, "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1,
               "ReduceSumSquare": 1}
# attribute -> its default: dropped when it has it (added after opset 11)
_LATER_ATTRS: dict[str, dict[str, object]] = {
    "Shape": {"start": 0}, "Reshape": {"allowzero": 0}, "Cast": {"saturate": 1},
    "Resize": {"antialias": 0, "keep_aspect_ratio_policy": "stretch", "cubic_coeff_a": None,
               "exclude_outside": None, "extrapolation_value": None},
    "Split": {}, "BatchNormalization": {"training_mode": 0}, "AveragePool": {}, "Pad": {}}


class LowerError(ModelError):
    """The model holds an op whose form changed after opset 11 in a way this cannot rewrite."""


def _attr(node, name):
    return next((a for a in node.attribute if a.name == name), None)


def _drop_attr(node, name):
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep)


def lower_to_11(model: onnx.ModelProto, ranks: dict[str, int]) -> onnx.ModelProto:
    """A copy of ``model`` at opset 11; ``ranks``: tensor -> rank (for Softmax's axis)."""
    opset = default_opset(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if opset == LOAD_OPSET:
        return m
    if opset < LOAD_OPSET:
        raise LowerError(f"the model is at opset {opset}, below {LOAD_OPSET}; raise it first")
    g = m.graph
    consts = {t.name: t for t in g.initializer}
    consts.update({n.output[0]: _attr(n, "value").t for n in g.node if n.op_type == "Constant" and _attr(n, "value")})
    out_nodes = []
    fresh = iter(range(10**9))

    def const_ints(name, why):
        if name not in consts:
            raise LowerError(f"cannot lower to opset {LOAD_OPSET}: {why} is computed, not a constant")
        return [int(v) for v in numpy_helper.to_array(consts[name]).reshape(-1)]

    for n in g.node:
        if n.domain not in ("", "ai.onnx"):
            out_nodes.append(n)
            continue
        since = defs.get_schema(n.op_type, opset, "").since_version
        if since <= LOAD_OPSET:
            out_nodes.append(n)
            continue
        if n.op_type not in _TYPES_ONLY:
            raise LowerError(f"cannot lower {n.op_type} node {n.name} from opset {opset} to {LOAD_OPSET}")
        for a, default in _LATER_ATTRS.get(n.op_type, {}).items():
            at = _attr(n, a)
            if at is None:
                continue
            v = helper.get_attribute_value(at)
            v = v.decode() if isinstance(v, bytes) else v
            if default is not None and v != default:
                raise LowerError(f"cannot lower {n.op_type} node {n.name} to opset {LOAD_OPSET}: {a}={v!r}")
            if default is not None:
                _drop_attr(n, a)
        if n.op_type == "Shape" and _attr(n, "end") is not None:
            raise LowerError(f"cannot lower Shape node {n.name} to opset {LOAD_OPSET}: it slices (end)")
        if n.op_type in _AXES_INPUT and len(n.input) > 1:
            if n.input[1]:
                n.attribute.append(helper.make_attribute("axes", const_ints(n.input[1], f"{n.name}'s axes")))
            del n.input[1:]
            if _attr(n, "noop_with_empty_axes") is not None:
                raise LowerError(f"cannot lower {n.op_type} node {n.name}: noop_with_empty_axes")
        elif n.op_type == "Split":
            if _attr(n, "num_outputs") is not None:
                _drop_attr(n, "num_outputs")  # (opset 11 splits equally into its outputs)
            if len(n.input) > 1:
                if n.input[1]:
                    n.attribute.append(helper.make_attribute("split", const_ints(n.input[1], f"{n.name}'s split")))
                del n.input[1:]
        elif n.op_type == "Resize":
            ins = list(n.input) + [""] * (4 - len(n.input))
            if _attr(n, "axes") is not None:
                raise LowerError(f"cannot lower Resize node {n.name} to opset {LOAD_OPSET}: axes")
            mode = _attr(n, "coordinate_transformation_mode")
            if mode is not None and helper.get_attribute_value(mode) == b"half_pixel_symmetric":
                raise LowerError(f"cannot lower Resize node {n.name}: half_pixel_symmetric")
            empty = f"qtq_empty_{next(fresh)}"
            g.initializer.append(numpy_helper.from_array(np.zeros(0, np.float32), empty))
            ins[1] = ins[1] or empty
            ins[2] = ins[2] or empty
            del n.input[:]
            n.input.extend(ins[:4] if ins[3] else ins[:3])
        elif n.op_type in ("Softmax", "LogSoftmax", "Hardmax"):
            at = _attr(n, "axis")
            rank = ranks.get(n.input[0])
            axis = helper.get_attribute_value(at) if at is not None else -1
            if rank is None:
                raise LowerError(f"cannot lower {n.op_type} node {n.name}: the rank of its input is unknown")
            axis = axis + rank if axis < 0 else axis
            if axis != rank - 1:
                perm = list(range(rank))
                perm[axis], perm[-1] = perm[-1], perm[axis]
                k = next(fresh)
                moved, done = f"{n.input[0]}_qtq_t{k}", f"{n.output[0]}_qtq_t{k}"
                out_nodes.append(helper.make_node("Transpose", [n.input[0]], [moved], f"{n.name}_qtq_in", perm=perm))
                orig_out = n.output[0]
                n.input[0], n.output[0] = moved, done
                _drop_attr(n, "axis")
                n.attribute.append(helper.make_attribute("axis", rank - 1))
                out_nodes.append(n)
                out_nodes.append(helper.make_node("Transpose", [done], [orig_out], f"{n.name}_qtq_out", perm=perm))
                continue
            _drop_attr(n, "axis")
            n.attribute.append(helper.make_attribute("axis", rank - 1))
        out_nodes.append(n)
    del g.node[:]
    g.node.extend(out_nodes)
    read = {i for n in g.node for i in n.input}
    named = {o.name for o in g.output} | {i.name for i in g.input}
    keep = [t for t in g.initializer if t.name in read or t.name in named]
    del g.initializer[:]  # (the constants that became attributes)
    g.initializer.extend(keep)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = LOAD_OPSET
    m.ir_version = 6  # opset 11's IR version (an older reader refuses a newer IR)
    return m
