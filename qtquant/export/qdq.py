"""Build and write the fixed QDQ ONNX model (DESIGN §2.6).

- Every quantized activation gets a QuantizeLinear/DequantizeLinear pair.  All tensors of
  one scale domain point at the *same* scale initializer, so a shared group is visibly one
  observer in the file; zero points are one initializer per value, shared by all domains.
- Each DequantizeLinear feeds one input of one node (a tensor read by three nodes gets one Q
  and three DQs reading the same initializers), the layout onnxruntime needs to fuse Q/DQ
  into int8 kernels: it would otherwise copy them itself at session creation (see
  :meth:`Rewrite.dq_copy`).
- Weights of Conv/ConvTranspose/Gemm/MatMul are int8, symmetric, per output channel
  (this needs opset 13; older models are converted).  Their bias becomes int32 with
  scale = input scale x weight scale, as onnxruntime's quantizer does.  Where a bias would
  not fit int32 at that scale (a nearly dead ReLU in front of a Gemm has a scale of 1e-9),
  the weight scale of that output channel is raised until it does, and the build records it
  (:class:`BiasAdjustment`).  Whatever is still clipped is recorded too (:class:`ClipRecord`):
  nothing is clipped silently (DESIGN §3).
- Constants that join a domain (or feed a Concat) are cloned and quantized with the
  domain's scale; the original initializer is never changed in place.  Other float
  constants (Add/Mul operands, anchors) stay float.
- A Concat output whose scale the target's rule took from an input (widest-input) points at that
  input's scale initializers; an input the rule has written at its Concat's scale (producers-write,
  RDK X5) points at the output's.
- Model outputs keep their names: the producer writes ``<name>_prequant`` and the
  DequantizeLinear writes ``<name>``.
- Activations named in ``float_tensors`` get no Q/DQ pair; a bias whose node reads a float
  input stays float.
- Mixed precision (``session.options.precision``, :mod:`qtquant.quant.precision`): a float tensor gets
  no Q/DQ and the node producing it keeps float weights (it runs on the CPU); an int16 tensor gets
  an int16 Q/DQ pair (uint16 for the asymmetric scheme) over its domain's range.  The weights of
  an int16 node stay int8: int8 weights x int16 activations is the BPU's int16 mode, and it is
  what the simulator prices.  int16 Q/DQ needs opset 21, so the model is converted when an
  int16 tensor is exported (and only then).

:func:`build_qdq_model` returns the in-memory model (fidelity runs it);
:func:`export_qdq` writes it atomically, with external data when it is large.  This module is the
activation and constant rewrite and the writing; ``weights.py`` holds the weights, biases and the
bias fit, ``records.py`` what a build reports, ``rewrite.py`` the graph editing they share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import secrets
from pathlib import Path

import numpy as np
import onnx

from ..base.errors import BadInputError, ModelError, first_line
from ..base.fileio.atomic import atomic_dir, check_output_path, commit
from ..model.derived import Slot
from ..model.ops import handler_for
from ..quant.precision import PrecisionMap, float_nodes
from ..model.scales import qparams_for_range
from ..base.vocab import Precision
from . import rescale
from .opset import convert_opset
from .records import BiasAdjustment, ClipRecord, ExportResult, QdqBuild, clip_record
from .rewrite import BaseFacts, Rewrite, ValueMemo, names_in
from .weights import INT32_MAX, INT32_MIN, quantize_weights

if TYPE_CHECKING:
    from ..quant.domains import DomainMap
    from ..quant.state import QuantState

__all__ = ["QdqBuild", "ExportResult", "BiasAdjustment", "ClipRecord", "build_qdq_model", "export_qdq",
           "PER_CHANNEL_OPSET", "INT16_OPSET", "INT32_MIN", "INT32_MAX"]

PER_CHANNEL_OPSET = 13  # DequantizeLinear gained the 'axis' attribute in opset 13
INT16_OPSET = 21  # QuantizeLinear/DequantizeLinear accept int16/uint16 from opset 21
EXTERNAL_THRESHOLD = 1_800_000_000  # bytes: stay clear of protobuf's 2 GiB limit

# Per graph: the opset-converted base model by target opset, reused across builds (fidelity builds
# one model per domain map), and beside it ("shell", id(base)) -> the base's shell (_shell).
BASES: Slot[dict[object, tuple]] = Slot("export bases", dict)


def _base(graph, per_channel_needed: bool, int16_needed: bool = False):
    """(model, opset, per_channel, notes): graph.model, raised to opset 13 when per-channel needs it
    and to opset 21 when an int16 Q/DQ needs it."""
    target = INT16_OPSET if int16_needed and graph.opset < INT16_OPSET else \
        PER_CHANNEL_OPSET if per_channel_needed and graph.opset < PER_CHANNEL_OPSET else None
    cache = graph.derived.get(BASES)
    if target not in cache:
        notes = []
        model, opset, per_channel = graph.model, graph.opset, graph.opset >= PER_CHANNEL_OPSET
        if target is not None:
            why = "int16 Q/DQ" if target == INT16_OPSET else "per-channel weights"
            try:
                model = convert_opset(graph, target)
                opset, per_channel = target, True
                notes.append(f"opset raised from {graph.opset} to {target} for {why}")
            except Exception as e:  # no adapter for some op, or one that rewires (opset.Rewired)
                first = first_line(e, 200)
                if target == INT16_OPSET:
                    raise ModelError(f"cannot export int16: raising opset {graph.opset} to {target} "
                                     f"failed ({first})") from None
                notes.append(f"could not raise opset {graph.opset} to {PER_CHANNEL_OPSET} ({first}); "
                             "weights are quantized per tensor")
        cache[target] = (model, opset, per_channel, notes)
    return cache[target]


def _shell(graph, base):
    """(``base`` without initializers and value_info, its initializers, the names they use, its
    nodes' :class:`~.rewrite.BaseFacts`, and the :class:`~.rewrite.ValueMemo` of its recording builds):
    once per base of ``graph`` (kept beside it in :data:`BASES`)."""
    cache = graph.derived.get(BASES)
    got = cache.get(("shell", id(base)))
    if got is None or got[0] is not base:
        shell = onnx.ModelProto()
        shell.CopyFrom(base)
        del shell.graph.initializer[:]
        del shell.graph.value_info[:]  # recomputed by any consumer; stale shapes would only mislead
        inits = list(base.graph.initializer)
        got = cache[("shell", id(base))] = (base, shell, inits, frozenset(names_in(shell, inits)), BaseFacts(shell),
                                            ValueMemo())
    return got[1:]


def _quantize_values(v: np.ndarray, qp) -> np.ndarray:
    q = np.rint(np.asarray(v, dtype=np.float64) / qp.scale) + qp.zero_point
    return np.clip(q, qp.qmin, qp.qmax).astype(qp.dtype)


def build_qdq_model(session: QuantState, dm: DomainMap | None = None, *, quantize_outputs: bool = True,
                    float_tensors: frozenset[str] = frozenset(), precision=None, record: bool = False) -> QdqBuild:
    """The QDQ model for ``dm`` (default: the session's current domains), in memory.

    ``quantize_outputs=False`` leaves the model outputs in float (no Q/DQ pair on them),
    as deployments do when the last op runs on the CPU: a detection head that concatenates
    pixel boxes with [0, 1] scores cannot keep the scores at one int8 scale.
    ``float_tensors`` names further activations left in float (a model-output Concat and the
    pass-through tensors after it) while their inputs keep their own scales;
    ``quantize_outputs=False`` is the same as naming every model output there.
    ``precision``: tensor -> int16 / float (default: ``session.options.precision``; pass ``{}``
    for all int8).
    ``record``: keep what the build made in :attr:`QdqBuild.made` (the fidelity check walks the model
    from it; it holds the initializers the model has copies of, so an export does not keep it).
    """
    graph = session.graph
    dm = session.domains if dm is None else dm
    if precision is None:
        precision = session.options.precision
    precision = PrecisionMap(precision)
    unknown = sorted(t for t in float_tensors if t not in graph.tensors)
    if unknown:
        raise BadInputError(f"cannot leave {unknown[0]!r} in float: the model has no tensor of that name")
    outputs = set(graph.outputs)
    float_tensors = frozenset(float_tensors) | (frozenset() if quantize_outputs else frozenset(outputs))
    float_tensors |= frozenset(precision.tensors(Precision.FLOAT))
    int16_tensors = frozenset(t for t in precision.tensors(Precision.INT16) if t not in float_tensors)
    cpu_nodes = float_nodes(graph, precision)  # they keep float weights
    scheme = dm.scheme
    extra_float = float_tensors - (frozenset(outputs) if not quantize_outputs else frozenset())

    def meta_of(domains, build=None):
        meta = {"version": 1, "scheme": scheme.value, "policy": session.options.policy.value,
                "groups": len(session.groups), "domains": domains, "float_outputs": not quantize_outputs}
        if extra_float:
            meta["float_tensors"] = len(extra_float)
        for k, n in (("int16_tensors", build and build.int16), ("bias_adjusted", build and len(build.bias_adjusted)),
                     ("clipped", build and len(build.clipped))):
            if n:
                meta[k] = n
        return json.dumps(meta, sort_keys=True)

    # An edit that moves scales only: the last full build with its scales and biases made again.
    key = (float_tensors, precision, quantize_outputs, scheme)
    if record and not int16_tensors:
        got = rescale.patched(graph, key, dm, meta_of)
        if got is not None:
            return got

    # Which weights exist decides whether the opset must be raised.
    weight_uses = []  # (node, input index, weight name)
    for node in graph.nodes.values():
        if node.name in cpu_nodes:
            continue
        for idx in handler_for(node.op_type).weight_inputs:
            if idx < len(node.inputs) and node.inputs[idx]:
                w = node.inputs[idx]
                wt = graph.tensors.get(w)
                if wt is not None and wt.kind == "weight" and wt.elem_type == onnx.TensorProto.FLOAT \
                        and graph.constant_value(w) is not None:
                    weight_uses.append((node, idx, w))
    int16_used = any(dm.of.get(t) is not None and dm.domains[dm.of[t]].qparams is not None for t in int16_tensors)
    base, opset, per_channel, base_notes = _base(graph, bool(weight_uses), int16_used)
    # The base without its initializers, which the build adds back when still read: copying the
    # float weights in and pruning them out again was a third of a build on yolov8n_320 (12 MB).
    shell, base_inits, names, facts, memo = _shell(graph, base)
    model = onnx.ModelProto()
    model.CopyFrom(shell)
    build = QdqBuild(model, opset, notes=list(base_notes), cut=graph.cut)
    rw = Rewrite(model, base_inits, names, facts, record, memo)
    missing = [n for n in graph.nodes if n not in rw.nodes]
    if missing:
        raise ModelError(f"cannot export: node {missing[0]!r} is missing from the model after opset conversion")

    # -- shared scale initializers, one per domain ---------------------------------------
    domain_inits: dict[int, tuple[str, str]] = {}
    wide_inits: dict[int, tuple[str, str, object]] = {}  # int16 versions, over the same range

    zp_inits: dict[tuple, str] = {}

    def zero_point(value, dtype) -> str:
        # One initializer per zero-point value and type, shared by every domain (the scale names
        # the domain): onnxruntime merges equal scalar initializers at session creation anyway
        # (ConstantSharing), at a cost that grows with their number.
        key, name = rescale.zero_point_name(value, dtype)
        if key not in zp_inits:
            zp_inits[key] = rw.add_init(np.array(value, dtype=dtype), rw.fresh(name))
        return zp_inits[key]

    def domain_qp(did):
        # A Concat output that took an input's scale by the target's rule uses that input's
        # initializers (an input written at its Concat's scale, the output's): the file shows the
        # compiler's one threshold.
        did = dm.scale_from.get(did, did)
        d = dm.domains[did]
        if did not in domain_inits:
            s = rw.add_init(np.array(d.qparams.scale, dtype=np.float32), rw.fresh(f"qtq_d{did}_scale"))
            domain_inits[did] = (s, zero_point(d.qparams.zero_point, d.qparams.dtype))
        return domain_inits[did]

    def wide_qp(did):
        if did not in wide_inits:
            d = dm.domains[did]
            # the domain's range, as its int8 scale: int8 and int16 members of one domain cover
            # the same values, the int16 ones in 256x finer steps
            qp = qparams_for_range(d.lo, d.hi, scheme, bits=16)
            s = rw.add_init(np.array(qp.scale, dtype=np.float32), rw.fresh(f"qtq_d{did}_int16_scale"))
            wide_inits[did] = (s, zero_point(qp.zero_point, qp.dtype), qp)
        return wide_inits[did]

    # -- activations ------------------------------------------------------------------------
    act_qp: dict[str, object] = {}
    acts, skipped_dtype, left = rescale.quantized_activations(graph, dm, float_tensors, outputs)
    build.float_kept = sum(precision.of(t) is Precision.FLOAT for t in left)  # (kept in float, or an input passed out)
    names_of, q_of = {}, {}  # (for rescale.Basis)
    for t, did in acts:
        tt = graph.tensors[t]
        if t in int16_tensors:
            s, z, qp = wide_qp(did)
            build.int16 += 1
        else:
            (s, z), qp = domain_qp(did), dm.domains[did].qparams
        q_out = rw.fresh(f"{t}_quantized")
        uses = rw.uses(t, tt.consumers)
        where = rw.head if tt.producer is None else rw.after.setdefault(tt.producer, [])
        rw.add_q([t, s, z], q_out, rw.fresh(f"{t}_QuantizeLinear"), where)
        if t in outputs:
            # The output keeps its name: the producer writes <t>_prequant, a DQ of its own writes t
            # and each consumer inside the graph reads another DQ (one DQ per use, Rewrite.dq_copy).
            src = rw.fresh(f"{t}_prequant")
            assert tt.producer is not None  # (quantized_activations leaves an input passed out in float)
            rw.set_output(tt.producer, t, src)
            rw.set_input(where[-1], 0, src)
            rw.add_dq([q_out, s, z], t, rw.fresh(f"{t}_DequantizeLinear"), where)
            if uses:
                first = rw.dq_copy(t)
                rw.feed_each(first, uses)
        else:
            dq_out = rw.fresh(f"{t}_dequantized")
            rw.add_dq([q_out, s, z], dq_out, rw.fresh(f"{t}_DequantizeLinear"), where)
            rw.feed_each(dq_out, uses)
        build.scale_of[t] = s
        act_qp[t] = qp
        build.activations += 1
        names_of[t], q_of[t] = (s, z), q_out
    if skipped_dtype:
        build.notes.append(f"{skipped_dtype} non-float32 activations left unquantized")
    act_inits = [i.name for i in rw.inits]

    # -- weights, per output channel, and their int32 biases --------------------------------
    biases: list[tuple[int, str, str]] | None = [] if record else None
    quantize_weights(rw, build, graph, weight_uses, per_channel, act_qp, biases)

    # -- constants: cloned into their domain, or to the output scale of the Concat they feed --
    cdone: dict[tuple, str] = {}

    def clone(c: str, did: int) -> str:
        if (c, did) not in cdone:
            s, z = domain_qp(did)
            qn = rw.fresh(f"{c}_quantized_d{did}")
            qp = dm.domains[did].qparams
            v = graph.constant_value(c)
            assert qp is not None and v is not None  # (the loop below clones constants into such domains only)
            rec = clip_record(v, np.rint(np.asarray(v, dtype=np.float64) / qp.scale) + qp.zero_point,
                               qp.qmin, qp.qmax, qp.scale, qp.zero_point, tensor=c, kind="constant", domain=did)
            if rec is not None:
                build.clipped.append(rec)
            rw.add_init(_quantize_values(v, qp), qn)
            out = rw.fresh(f"{c}_dequantized_d{did}")
            rw.add_dq([qn, s, z], out, rw.fresh(f"{c}_DequantizeLinear_d{did}"), rw.head)
            cdone[(c, did)] = out
            build.constants += 1
            return out
        return rw.dq_copy(cdone[(c, did)])  # one DQ per use (Rewrite.dq_copy)

    weight_slots = {(n.name, i) for n, i, _ in weight_uses}
    for c, ct in graph.tensors.items():
        if ct.kind != "weight" or ct.elem_type != onnx.TensorProto.FLOAT or graph.constant_value(c) is None:
            continue
        own = dm.of.get(c)
        for cons in graph.consumers(c):
            for i, name in enumerate(cons.inputs):
                if name != c or (cons.name, i) in weight_slots:
                    continue
                into = own
                # A Concat left in float has no scale to bring its constant input to.
                if into is None and cons.op_type == "Concat" and cons.outputs[0] in dm.of \
                        and cons.outputs[0] not in float_tensors:
                    into = dm.of[cons.outputs[0]]
                if into is None or dm.domains[into].qparams is None:
                    continue
                rw.rewire(cons.name, c, clone(c, into), i)

    rw.assemble()
    build.made = rw.made
    build.domains = len(domain_inits)
    keep = [p for p in model.metadata_props if p.key != "qtquant"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    model.metadata_props.add(key="qtquant", value=meta_of(build.domains, build))
    if record and rescale.patchable(build):
        rescale.remember(graph, rescale.Basis(key, build, [t for t, _ in acts], names_of, q_of, act_inits,
                                              weight_uses, per_channel, biases), rw.names.used)
    elif record:
        rescale.forget(graph, key)
    return build


def _external_size(model) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def export_qdq(session, out_path, *, dm=None, quantize_outputs: bool = True,
               float_tensors: frozenset[str] = frozenset(), precision=None) -> ExportResult:
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
    build = build_qdq_model(session, dm, quantize_outputs=quantize_outputs, float_tensors=float_tensors,
                            precision=precision)
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
