"""Build and write the fixed QDQ ONNX model (DESIGN §2.6).

- Every quantized activation gets a QuantizeLinear/DequantizeLinear pair.  All tensors of
  one scale domain point at the *same* scale and zero-point initializers, so a shared
  group is visibly one observer in the file.
- Weights of Conv/ConvTranspose/Gemm/MatMul are int8, symmetric, per output channel
  (this needs opset 13; older models are converted).  Their bias becomes int32 with
  scale = input scale x weight scale, as onnxruntime's quantizer does.
- Constants that join a domain (or feed a Concat) are cloned and quantized with the
  domain's scale; the original initializer is never changed in place.  Other float
  constants (Add/Mul operands, anchors) stay float.
- Model outputs keep their names: the producer writes ``<name>_prequant`` and the
  DequantizeLinear writes ``<name>``.

:func:`build_qdq_model` returns the in-memory model (fidelity runs it);
:func:`export_qdq` writes it atomically, with external data when it is large.
"""

from __future__ import annotations

import json
import secrets
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import BadInputError, ModelError
from ..ops import handler_for
from ..quant import Scheme
from .atomic import atomic_dir, check_output_path, commit

__all__ = ["QdqBuild", "ExportResult", "build_qdq_model", "export_qdq", "PER_CHANNEL_OPSET"]

PER_CHANNEL_OPSET = 13  # DequantizeLinear gained the 'axis' attribute in opset 13
EXTERNAL_THRESHOLD = 1_800_000_000  # bytes: stay clear of protobuf's 2 GiB limit
_BIAS_OPS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}

# Per graph: quantized weights and the opset-converted base model, reused across builds
# (fidelity builds one model per domain map; the weights do not depend on the groups).
_weights_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_base_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class QdqBuild:
    model: onnx.ModelProto
    opset: int
    activations: int = 0  # Q/DQ pairs on activations
    domains: int = 0  # shared scale initializers
    weights: int = 0  # per-channel (or per-tensor) quantized weights
    biases: int = 0
    constants: int = 0  # cloned constants
    notes: list[str] = field(default_factory=list)
    scale_of: dict[str, str] = field(default_factory=dict)  # tensor -> name of its scale initializer


@dataclass
class ExportResult:
    path: Path
    data_path: Path | None
    build: QdqBuild

    def text(self) -> str:
        b = self.build
        s = (f"wrote {self.path} (opset {b.opset}): {b.activations} Q/DQ pairs over {b.domains} scale domains, "
             f"{b.weights} weights per channel, {b.biases} int32 biases, {b.constants} cloned constants")
        if self.data_path:
            s += f"; weights in {self.data_path.name}"
        return s


def _base(graph, per_channel_needed: bool):
    """(model, opset, per_channel, notes): graph.model, raised to opset 13 when per-channel needs it."""
    key = bool(per_channel_needed and graph.opset < PER_CHANNEL_OPSET)
    cache = _base_cache.setdefault(graph, {})
    if key not in cache:
        notes = []
        model, opset, per_channel = graph.model, graph.opset, graph.opset >= PER_CHANNEL_OPSET
        if key:
            try:
                from onnx import version_converter

                model = version_converter.convert_version(graph.model, PER_CHANNEL_OPSET)
                opset, per_channel = PER_CHANNEL_OPSET, True
                notes.append(f"opset raised from {graph.opset} to {PER_CHANNEL_OPSET} for per-channel weights")
            except Exception as e:  # no adapter for some op: fall back to per-tensor weights
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                notes.append(f"could not raise opset {graph.opset} to {PER_CHANNEL_OPSET} ({first}); "
                             "weights are quantized per tensor")
        cache[key] = (model, opset, per_channel, notes)
    return cache[key]


def _weight_axis(node, idx: int, rank: int) -> int:
    axis = handler_for(node.op_type).weight_inputs[idx]
    if node.op_type == "Gemm" and not node.attrs.get("transB", 0):
        axis = 1  # B is K x N without transB: output channels are columns
    return axis % rank if rank else 0


def _quantize_weight(graph, name: str, axis: int | None):
    """int8 symmetric weights in [-127, 127] and their scales (per channel along ``axis``)."""
    cache = _weights_cache.setdefault(graph, {})
    key = (name, axis)
    if key not in cache:
        w = np.asarray(graph.constant_value(name), dtype=np.float32)
        if axis is None:
            absmax = np.array(np.abs(w).max(initial=0.0), dtype=np.float32)
            scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
            q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            absmax = np.abs(w).max(axis=red, initial=0.0) if red else np.abs(w)
            scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
            shp = [1] * w.ndim
            shp[axis] = -1
            q = np.clip(np.rint(w / scale.reshape(shp)), -127, 127).astype(np.int8)
        cache[key] = (q, scale)
    return cache[key]


def _quantize_values(v: np.ndarray, qp) -> np.ndarray:
    dt = np.int8 if qp.scheme is Scheme.SYMMETRIC_INT8 else np.uint8
    q = np.rint(np.asarray(v, dtype=np.float64) / qp.scale) + qp.zero_point
    return np.clip(q, qp.qmin, qp.qmax).astype(dt)


class _Names:
    def __init__(self, model):
        g = model.graph
        self.used = {t.name for t in g.initializer} | {i.name for i in g.input} | {o.name for o in g.output}
        for n in g.node:
            self.used.update(n.input)
            self.used.update(n.output)
            self.used.add(n.name)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _subgraph_inputs(node) -> set[str]:
    names = set()
    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                   list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            for n in sg.node:
                names.update(n.input)
                names |= _subgraph_inputs(n)
    return names


def build_qdq_model(session, dm=None, *, quantize_outputs: bool = True) -> QdqBuild:
    """The QDQ model for ``dm`` (default: the session's current domains), in memory.

    ``quantize_outputs=False`` leaves the model outputs in float (no Q/DQ pair on them),
    as deployments do when the last op runs on the CPU: a detection head that concatenates
    pixel boxes with [0, 1] scores cannot keep the scores at one int8 scale.
    """
    graph = session.graph
    dm = session.domains if dm is None else dm
    scheme = dm.scheme
    zp_dtype = np.int8 if scheme is Scheme.SYMMETRIC_INT8 else np.uint8

    # Which weights exist decides whether the opset must be raised.
    weight_uses = []  # (node, input index, weight name)
    for node in graph.nodes.values():
        for idx in handler_for(node.op_type).weight_inputs:
            if idx < len(node.inputs) and node.inputs[idx]:
                w = node.inputs[idx]
                t = graph.tensors.get(w)
                if t is not None and t.kind == "weight" and t.elem_type == onnx.TensorProto.FLOAT \
                        and graph.constant_value(w) is not None:
                    weight_uses.append((node, idx, w))
    base, opset, per_channel, base_notes = _base(graph, bool(weight_uses))
    model = onnx.ModelProto()
    model.CopyFrom(base)
    g = model.graph
    del g.value_info[:]  # recomputed by any consumer; stale shapes would only mislead
    build = QdqBuild(model, opset, notes=list(base_notes))
    names = _Names(model)
    pnodes = {n.name: n for n in g.node}
    missing = [n for n in graph.nodes if n not in pnodes]
    if missing:
        raise ModelError(f"cannot export: node {missing[0]!r} is missing from the model after opset conversion")
    new_inits: list[onnx.TensorProto] = []
    head: list[onnx.NodeProto] = []  # DQ of weights/constants and Q/DQ of model inputs
    after: dict[str, list[onnx.NodeProto]] = {}

    def rewire(consumer: str, old: str, new: str, index: int | None = None) -> None:
        pn = pnodes[consumer]
        for k, i in enumerate(pn.input):
            if i == old and (index is None or k == index):
                pn.input[k] = new

    # -- shared scale initializers, one per domain ---------------------------------------
    domain_inits: dict[int, tuple[str, str]] = {}

    def domain_qp(did):
        d = dm.domains[did]
        if did not in domain_inits:
            s = names.fresh(f"qtq_d{did}_scale")
            z = names.fresh(f"qtq_d{did}_zero_point")
            new_inits.append(numpy_helper.from_array(np.array(d.qparams.scale, dtype=np.float32), s))
            new_inits.append(numpy_helper.from_array(np.array(d.qparams.zero_point, dtype=zp_dtype), z))
            domain_inits[did] = (s, z)
        return domain_inits[did]

    # -- activations ------------------------------------------------------------------------
    outputs = set(graph.outputs)
    act_scale: dict[str, float] = {}
    skipped_dtype = 0
    for t in graph.quantized_tensors:
        did = dm.of.get(t)
        if did is None or dm.domains[did].qparams is None:
            continue
        tt = graph.tensors[t]
        if tt.elem_type != onnx.TensorProto.FLOAT:
            skipped_dtype += 1
            continue
        if t in outputs and (tt.producer is None or not quantize_outputs):
            continue  # a model input passed straight out, or outputs kept in float
        s, z = domain_qp(did)
        q_out = names.fresh(f"{t}_quantized")
        if t in outputs:
            src = names.fresh(f"{t}_prequant")
            for k, o in enumerate(pnodes[tt.producer].output):
                if o == t:
                    pnodes[tt.producer].output[k] = src
            dq_out = t
        else:
            src, dq_out = t, names.fresh(f"{t}_dequantized")
            for c in set(tt.consumers):
                rewire(c, t, dq_out)
        qn = helper.make_node("QuantizeLinear", [src, s, z], [q_out], name=names.fresh(f"{t}_QuantizeLinear"))
        dqn = helper.make_node("DequantizeLinear", [q_out, s, z], [dq_out], name=names.fresh(f"{t}_DequantizeLinear"))
        (head if tt.producer is None else after.setdefault(tt.producer, [])).extend([qn, dqn])
        build.scale_of[t] = s
        act_scale[t] = dm.domains[did].qparams.scale
        build.activations += 1
    if skipped_dtype:
        build.notes.append(f"{skipped_dtype} non-float32 activations left unquantized")

    # -- weights, per output channel --------------------------------------------------------
    wdone: dict[tuple, tuple[str, np.ndarray]] = {}
    for node, idx, w in weight_uses:
        arr_rank = len(graph.tensors[w].shape or ()) or np.ndim(graph.constant_value(w))
        axis = _weight_axis(node, idx, arr_rank) if per_channel and arr_rank else None
        key = (w, axis)
        if key not in wdone:
            q, scale = _quantize_weight(graph, w, axis)
            qn, sn, zn = names.fresh(f"{w}_quantized"), names.fresh(f"{w}_scale"), names.fresh(f"{w}_zero_point")
            out = names.fresh(f"{w}_dequantized")
            new_inits += [numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                          numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)]
            attrs = {"axis": axis} if axis is not None else {}
            head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                         name=names.fresh(f"{w}_DequantizeLinear"), **attrs))
            wdone[key] = (out, scale)
            build.weights += 1
        rewire(node.name, w, wdone[key][0], idx)
        # int32 bias with scale = input scale x weight scale, when the input is quantized
        bidx = _BIAS_OPS.get(node.op_type)
        x = node.inputs[0] if node.inputs else ""
        if bidx is None or bidx >= len(node.inputs) or not node.inputs[bidx] or x not in act_scale:
            continue
        b = node.inputs[bidx]
        bt = graph.tensors.get(b)
        bv = graph.constant_value(b) if bt is not None and bt.kind == "weight" else None
        wscale = wdone[key][1]
        if bv is None or bt.elem_type != onnx.TensorProto.FLOAT or bv.ndim != 1 or \
                (wscale.ndim == 1 and wscale.size != bv.size):
            continue
        bscale = (np.float32(act_scale[x]) * wscale).astype(np.float32)
        bq = np.clip(np.rint(bv.astype(np.float64) / bscale), -(2 ** 31), 2 ** 31 - 1).astype(np.int32)
        qn, sn, zn = names.fresh(f"{b}_quantized"), names.fresh(f"{b}_scale"), names.fresh(f"{b}_zero_point")
        out = names.fresh(f"{b}_dequantized")
        new_inits += [numpy_helper.from_array(bq, qn), numpy_helper.from_array(bscale, sn),
                      numpy_helper.from_array(np.zeros(bscale.shape, np.int32), zn)]
        attrs = {"axis": 0} if bscale.ndim == 1 and per_channel else {}
        head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                     name=names.fresh(f"{b}_DequantizeLinear"), **attrs))
        rewire(node.name, b, out, bidx)
        build.biases += 1

    # -- constants: cloned into their domain, or to the output scale of the Concat they feed --
    cdone: dict[tuple, str] = {}

    def clone(c: str, did: int) -> str:
        if (c, did) not in cdone:
            s, z = domain_qp(did)
            qn = names.fresh(f"{c}_quantized_d{did}")
            new_inits.append(numpy_helper.from_array(_quantize_values(graph.constant_value(c),
                                                                      dm.domains[did].qparams), qn))
            out = names.fresh(f"{c}_dequantized_d{did}")
            head.append(helper.make_node("DequantizeLinear", [qn, s, z], [out],
                                         name=names.fresh(f"{c}_DequantizeLinear_d{did}")))
            cdone[(c, did)] = out
            build.constants += 1
        return cdone[(c, did)]

    weight_slots = {(n.name, i) for n, i, _ in weight_uses}
    for c, t in graph.tensors.items():
        if t.kind != "weight" or t.elem_type != onnx.TensorProto.FLOAT or graph.constant_value(c) is None:
            continue
        own = dm.of.get(c)
        for cons in graph.consumers(c):
            for i, name in enumerate(cons.inputs):
                if name != c or (cons.name, i) in weight_slots:
                    continue
                did = own
                if did is None and cons.op_type == "Concat" and cons.outputs[0] in dm.of:
                    did = dm.of[cons.outputs[0]]
                if did is None or dm.domains[did].qparams is None:
                    continue
                rewire(cons.name, c, clone(c, did), i)

    # -- assemble: new heads first, Q/DQ right after each producer ------------------------------
    order = list(g.node)
    del g.node[:]
    g.node.extend(head)
    for n in order:
        g.node.append(n)
        g.node.extend(after.get(n.name, ()))
    g.initializer.extend(new_inits)
    _prune(model)
    build.domains = len(domain_inits)
    meta = {"version": 1, "scheme": scheme.value, "policy": session.options.policy.value,
            "groups": len(session.groups), "domains": build.domains, "float_outputs": not quantize_outputs}
    keep = [p for p in model.metadata_props if p.key != "qtquant"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    model.metadata_props.add(key="qtquant", value=json.dumps(meta, sort_keys=True))
    return build


def _prune(model) -> None:
    """Drop initializers and Constant nodes nothing reads any more (the float originals)."""
    g = model.graph
    used = {o.name for o in g.output}
    for n in g.node:
        used.update(n.input)
        used |= _subgraph_inputs(n)
    keep_nodes = [n for n in g.node if not (n.op_type == "Constant" and not any(o in used for o in n.output))]
    if len(keep_nodes) != len(g.node):
        del g.node[:]
        g.node.extend(keep_nodes)
    keep = [t for t in g.initializer if t.name in used]
    dropped = {t.name for t in g.initializer} - {t.name for t in keep}
    if dropped:
        del g.initializer[:]
        g.initializer.extend(keep)
        # Old-style models also list initializers as graph inputs: drop the pruned ones.
        ins = [i for i in g.input if i.name not in dropped]
        del g.input[:]
        g.input.extend(ins)


def _external_size(model) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def export_qdq(session, out_path, *, dm=None, quantize_outputs: bool = True) -> ExportResult:
    """Write the fixed QDQ model to ``out_path`` atomically.

    Refuses to overwrite the input model.  Models whose weights exceed ~1.8 GB, or whose
    input used external data, are written with their weights in ``<out>.data``.
    """
    graph = session.graph
    inputs = [graph.path] if graph.path else []
    out = check_output_path(out_path, inputs=inputs, what="output model")
    if out.suffix.lower() != ".onnx":
        raise BadInputError(f"output model {out.name} should end in .onnx")
    # A fresh weight-file name per export: the new weights never overwrite the file the old
    # model points at, so a crash between the two renames leaves the old pair whole.
    data_name = f"{out.name}.{secrets.token_hex(4)}.data"
    old_data = _external_locations(out) if out.exists() else set()
    build = build_qdq_model(session, dm, quantize_outputs=quantize_outputs)
    model = build.model
    had_external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if had_external:
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(graph.base_dir))
        except Exception as e:
            raise ModelError(f"cannot read the input's external weights: {e}") from None
    external = had_external or _external_size(model) > EXTERNAL_THRESHOLD
    parent = out.parent if str(out.parent) else Path(".")
    with atomic_dir(parent) as tmp:
        tmp_model = tmp / out.name
        try:
            if external:
                onnx.save_model(model, str(tmp_model), save_as_external_data=True, all_tensors_to_one_file=True,
                                location=data_name, size_threshold=1024)
            else:
                onnx.save_model(model, str(tmp_model))
            if external and not (tmp / data_name).exists():
                external = False  # every tensor was under onnx's size threshold: one file after all
            if external:
                commit(tmp / data_name, parent / data_name)
            commit(tmp_model, out)
        except OSError as e:
            raise BadInputError(f"cannot write {out}: {e.strerror or e}") from None
    _remove_stale_data(parent, out, old_data - ({data_name} if external else set()),
                       keep=_input_data_files(graph))
    return ExportResult(out, (parent / data_name) if external else None, build)


def _external_locations(model_path: Path) -> set[str]:
    try:
        m = onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return set()
    return {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}


def _input_data_files(graph) -> set[Path]:
    return {(graph.base_dir / e.value).resolve() for t in graph.model.graph.initializer
            for e in t.external_data if e.key == "location"}


def _remove_stale_data(parent: Path, out: Path, names, keep) -> None:
    """Delete weight files the replaced export used (only ones named after it, never an input's)."""
    for name in names:
        if not (name.startswith(out.name + ".") and name.endswith(".data")) or "/" in name or "\\" in name:
            continue
        p = (parent / name)
        if p.resolve() in keep:
            continue
        try:
            p.unlink()
        except OSError:
            pass
