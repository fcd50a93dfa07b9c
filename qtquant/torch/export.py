"""Export a torch.ao (FX, eager) or PT2E prepared or converted model to a QDQ ONNX file that qtquant reads.

What works with torch 2.13 (CPU), found by trying:
- ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter; torch 2.13 marks it
  deprecated, and the notice is silenced here).  The default dynamo exporter needs onnxscript
  (not a dependency of qtquant) and does not handle torch.ao's quantized tensors; it does export
  a converted PT2E model (onnxscript 0.7.2), but with aten-level node names.
- PT2E graphs go through the same exporter after :mod:`._pt2e_export` turns their decomposed
  quantize/dequantize ops into frozen fake-quants (see there).
- A *prepared* model exports only if every fake-quant is the plain ``FakeQuantize``: the
  default QAT qconfig's ``FusedMovingAvgObsFakeQuantize`` has no ONNX symbolic, and plain
  observers (PTQ ``prepare_fx``) export as nothing.  So each observer/fake-quant is swapped
  for a frozen fake-quant with its current scale and zero point, which exports as a
  QuantizeLinear/DequantizeLinear pair.
- A *converted* model (``convert_fx``) exports, but as Q -> Cast -> DQ chains with scales
  behind Identity nodes and zero points built by ConstantOfShape; :func:`tidy_qdq` folds
  those so every pair has constant qparams.  ``convert_to_reference_fx`` models do not
  export at all (their state dict holds qscheme objects the tracer rejects).
- ONNX names scope levels by the unqualified module name, and an FX GraphModule calls its
  leaves directly, so names lose their paths (``/conv_1/Conv``).  For FX models the
  producer of every observed tensor is renamed after its FX node (``/k_branches.0.conv/Conv``,
  ``/cat/Concat``), which is what :func:`apply_plan` maps back.
"""

from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from ..base.errors import BadInputError, first_line
from ._fakequant import INT8_DTYPES, FrozenFakeQuant as _FrozenFakeQuant, onnx_range
from ._pt2e_export import producer_label, qdq_to_fake_quant, split_shared_calls, to_eval
from ._resolve import Resolver, is_observer, is_pt2e

__all__ = ["export_onnx", "tidy_qdq"]


def _frozen(obs) -> torch.nn.Module:
    """A frozen stand-in for one observer or fake-quant, or Identity when it does not quantize."""
    en = getattr(obs, "fake_quant_enabled", None)
    if en is not None and torch.is_tensor(en) and int(en.reshape(-1)[0]) == 0:
        return torch.nn.Identity()
    dtype = getattr(obs, "dtype", None)
    if dtype not in INT8_DTYPES:
        return torch.nn.Identity()  # float16 / placeholder observers do not quantize
    if isinstance(getattr(obs, "scale", None), torch.Tensor) and hasattr(obs, "zero_point"):
        scale, zp = obs.scale, obs.zero_point
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an uncalibrated observer warns and returns scale 1
            scale, zp = obs.calculate_qparams()
    qmin = getattr(obs, "quant_min", None)
    qmax = getattr(obs, "quant_max", None)
    if qmin is None or qmax is None:
        qmin, qmax = (0, 255) if dtype in (torch.quint8, torch.uint8) else (-128, 127)
    qmin, qmax = onnx_range(qmin, qmax)
    qs = getattr(obs, "qscheme", torch.per_tensor_affine)
    axis = getattr(obs, "ch_axis", 0) if qs in (torch.per_channel_affine, torch.per_channel_symmetric) else None
    return _FrozenFakeQuant(torch.as_tensor(scale), torch.as_tensor(zp), qmin, qmax, axis)


def _freeze(m: torch.nn.Module) -> torch.nn.Module:
    """Every observer/fake-quant of ``m`` (a copy) frozen in place, one stand-in per attribute path.

    One stand-in per path (not per shared instance) keeps the ONNX scopes unique, so each
    QuantizeLinear is named after the FX observer node that produced it.
    """
    done: list[str] = []
    for path, mod in list(m.named_modules(remove_duplicate=False)):
        if not path or not is_observer(mod) or any(path.startswith(d + ".") for d in done):
            continue
        parent, _, name = path.rpartition(".")
        setattr(m.get_submodule(parent) if parent else m, name, _frozen(mod))
        done.append(path)
    return m


def _fx_observed_nodes(model) -> dict:
    """FX observer attribute -> the FX node whose output it observes."""
    if not isinstance(model, torch.fx.GraphModule):
        return {}
    mods = dict(model.named_modules(remove_duplicate=False))
    out = {}
    for n in model.graph.nodes:
        if n.op != "call_module" or not is_observer(mods.get(n.target)) or not n.args:
            continue
        src = n.args[0]
        if not isinstance(src, torch.fx.Node) or src.op in ("placeholder", "get_attr"):
            continue
        if src.op == "call_module" and is_observer(mods.get(src.target)):
            continue
        out[n.target] = src
    return out


def _fx_label(src) -> str:
    return src.target if src.op == "call_module" else src.name


# -- ONNX clean-up ------------------------------------------------------------------------
def _const_value(name, inits, consts):
    if name in inits:
        return inits[name]
    return consts.get(name)


def _fold_constants(model: onnx.ModelProto) -> None:
    """Evaluate nodes whose inputs are all constant (Identity, Cast, ConstantOfShape, the
    QuantizeLinear of a weight...) into initializers.  DequantizeLinear is kept: it is the
    QDQ marker qtquant reads."""
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consts = {}
    outputs = {o.name for o in g.output}
    keep, new_inits = [], []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    for n in g.node:
        if n.op_type == "Constant":
            val = next((a.t for a in n.attribute if a.name == "value"), None)
            if val is None or n.output[0] in outputs:
                keep.append(n)
                continue
            # one uniform form: constants as initializers, which every QDQ reader looks up
            consts[n.output[0]] = numpy_helper.to_array(val)
            new_inits.append(numpy_helper.from_array(consts[n.output[0]], n.output[0]))
            continue
        ins = [i for i in n.input if i]
        foldable = (n.op_type != "DequantizeLinear" and n.domain in ("", "ai.onnx") and ins
                    and all(_const_value(i, inits, consts) is not None for i in ins)
                    and not any(o in outputs for o in n.output))
        if not foldable:
            keep.append(n)
            continue
        try:
            vin = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(
                np.asarray(_const_value(i, inits, consts)).dtype), None) for i in ins]
            node = helper.make_node(n.op_type, list(n.input), list(n.output), **{
                a.name: helper.get_attribute_value(a) for a in n.attribute})
            sub = helper.make_model(helper.make_graph([node], "fold", vin, [
                helper.make_value_info(o, onnx.TypeProto()) for o in n.output]),
                opset_imports=[helper.make_opsetid("", opset)])
            res = ReferenceEvaluator(sub).run(None, {i: _const_value(i, inits, consts) for i in ins})
        except Exception:
            keep.append(n)
            continue
        for o, v in zip(n.output, res):
            inits[o] = np.asarray(v)
            new_inits.append(numpy_helper.from_array(np.asarray(v), o))
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)


def _drop_noops(model: onnx.ModelProto) -> None:
    """Remove Identity nodes and Casts to the type their input already has."""
    g = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    etype = {v.name: v.type.tensor_type.elem_type for v in
             (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    etype.update({t.name: t.data_type for t in g.initializer})
    outputs = {o.name for o in g.output}
    rename: dict[str, str] = {}
    keep = []
    for n in g.node:
        src = rename.get(n.input[0], n.input[0]) if n.input else None
        noop = n.op_type == "Identity" or (
            n.op_type == "Cast" and etype.get(n.input[0]) and
            etype.get(n.input[0]) == next((a.i for a in n.attribute if a.name == "to"), None))
        if noop and n.output[0] not in outputs and src:
            rename[n.output[0]] = src
            continue
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
        keep.append(n)
    del g.node[:]
    g.node.extend(keep)


def _prune(model: onnx.ModelProto) -> None:
    g = model.graph
    needed = {o.name for o in g.output}
    keep = []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output):
            keep.append(n)
            needed.update(i for i in n.input if i)
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    vi = [v for v in g.value_info if v.name in needed]
    del g.value_info[:]
    g.value_info.extend(vi)


def tidy_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fold constant subgraphs (weight QuantizeLinear, Identity scales, ConstantOfShape zero
    points) and drop no-op Identity/Cast nodes so every Q/DQ pair has constant qparams."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    _fold_constants(m)
    _drop_noops(m)
    _prune(m)
    return m


def _rename_producers(model: onnx.ModelProto, label_of) -> int:
    """Name the producer of each observed tensor after its FX node / module (see module doc).

    ``label_of(scope, onnx_op)``: the name for the producer of the tensor the QuantizeLinear in
    ``scope`` (an observer attribute) quantizes, or None to leave it."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    taken = {n.name for n in g.node}
    outputs = {o.name for o in g.output}
    tensor_rename: dict[str, str] = {}
    done = 0
    for q in g.node:
        if q.op_type != "QuantizeLinear" or not q.name.startswith("/"):
            continue
        scope = q.name.strip("/").split("/")[0]
        p = producer.get(q.input[0])
        if p is None or p.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        label = label_of(scope, p.op_type)
        if label is None:
            continue
        new = f"/{label}/{p.op_type}"
        if new in taken and p.name != new:
            continue
        taken.discard(p.name)
        p.name = new
        taken.add(new)
        out = p.output[0]
        if out not in outputs and out not in tensor_rename:
            tensor_rename[out] = f"{new}_output_0"
        done += 1
    if tensor_rename:
        for n in g.node:
            for k, i in enumerate(n.input):
                if i in tensor_rename:
                    n.input[k] = tensor_rename[i]
            for k, o in enumerate(n.output):
                if o in tensor_rename:
                    n.output[k] = tensor_rename[o]
        for v in g.value_info:
            if v.name in tensor_rename:
                v.name = tensor_rename[v.name]
    return done


def _prepare_copy(model: torch.nn.Module):
    """(exportable copy of ``model``, label_of for :func:`_rename_producers` or None)."""
    prepared = Resolver(model).has_observers
    pt2e = is_pt2e(model)
    if not prepared and not pt2e:
        return model, None  # a converted FX / eager model exports as is
    with warnings.catch_warnings():
        # torch 2.13's own pytree code warns (LeafSpec, from copyreg) while copying a torch.export
        # graph; nothing the caller can change
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        m = copy.deepcopy(model)
    gm = m if isinstance(m, torch.fx.GraphModule) and pt2e else None  # (a PT2E model is a GraphModule)
    if gm is not None:
        to_eval(gm)
        if prepared:
            split_shared_calls(gm)
    if prepared:
        observed = _fx_observed_nodes(m)
        _freeze(m)
    else:
        assert gm is not None  # (a model neither prepared nor PT2E returned above)
        observed = {k: v for k, v in qdq_to_fake_quant(gm).items() if v.op not in ("placeholder", "get_attr")}
    if not observed:
        return m, None
    if not pt2e:
        return m, lambda scope, op: _fx_label(observed[scope]) if scope in observed else None
    res = Resolver(m)
    return m, lambda scope, op: producer_label(res, observed[scope], op) if scope in observed else None


def export_onnx(model: torch.nn.Module, example_inputs, path=None, *, opset_version: int = 13,
                input_names=None, output_names=None, dynamic_axes=None) -> onnx.ModelProto:
    """Export a prepared (observers/fake-quant) or converted torch.ao model as QDQ ONNX.

    Works for FX / eager torch.ao models and for PT2E ones (``prepare_pt2e``,
    ``prepare_qat_pt2e``, ``convert_pt2e``).  Returns the ModelProto and writes it to ``path``
    when given.  The model itself is not changed: a prepared model is deep-copied and its
    fake-quants frozen at their current scales (calibrate first); a converted PT2E model is
    deep-copied and its quantize/dequantize ops turned into fake-quants with the same qparams.
    """
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    m, label_of = _prepare_copy(model)
    was_training = m.training
    if not is_pt2e(m):  # a PT2E graph refuses .eval(); _prepare_copy switched it with torchao's call
        m.eval()
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings and the exporter's deprecation notice
            # (the TorchScript exporter writes to a file object too; its stubs name paths only)
            torch.onnx.export(m, example_inputs, buf,  # type: ignore[arg-type]
                              dynamo=False, opset_version=opset_version, input_names=input_names,
                              output_names=output_names, dynamic_axes=dynamic_axes, do_constant_folding=True)
    except Exception as e:  # the exporter's errors are long; keep the first line
        raise BadInputError(f"torch.onnx.export failed: {first_line(e)}") from None
    finally:
        if m is model and was_training:
            model.train()
    onx = tidy_qdq(onnx.load_from_string(buf.getvalue()))
    if label_of is not None:
        _rename_producers(onx, label_of)
    if path is not None:
        onnx.save(onx, str(path))
    return onx
