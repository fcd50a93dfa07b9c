"""A recording build after an edit that moves scales only, made from the previous full build.

An edit in the app (a share, a join, an ungroup, a policy) changes which scale each quantized
activation reads and what the scales are, and with them the int32 biases (bias scale = input
scale x weight scale); every node, weight and name of the export stays where it was.  A full
build still rewrote the ~900 nodes of yolov8n_320's export each time: 11-17 ms of the check
after an edit, the largest step of it besides onnxruntime's run.

Here the last full recording build of a graph is kept (:class:`Basis`) and the next one is that
build with its activation scale and zero-point initializers made again from the new domain map
(in the order a build makes them: first use), the Q/DQ nodes pointed at them, and the biases
requantized at their new input scale.  The result is the model a full build writes, byte for
byte (``tests/export/test_export_rescale.py`` compares them over a sequence of edits).  Whatever a
patch cannot reproduce without the full build's logic returns None and the caller builds in full:
another set of quantized tensors, other float tensors or precisions, a bias that needs its
weight scale raised or clips, cloned constants, names of the model that could meet the
exporter's ``qtq_`` names.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx

from ..model.derived import Slot
from .records import Made, QdqBuild
from .rewrite import RAW_TYPES, raw_value_key
from .weights import int32_bias, memoized, quantize_weight, scaled_uses

__all__ = ["Basis", "patched", "patchable", "remember", "forget", "basis_of", "quantized_activations",
           "zero_point_name"]

_OURS = ("qtq_d", "qtq_zero_point")  # the prefixes of the names a patch makes anew
KEYS = 4  # bases kept per graph, the least recently used dropped


@functools.lru_cache(maxsize=1024)
def zero_point_name(value, dtype) -> tuple[tuple, str]:
    """(the key a build shares a zero-point initializer by, the name the build gives it)."""
    key = (np.dtype(dtype).str, int(value))
    tag = f"{np.dtype(dtype).name}" + ("" if int(value) == 0 else f"_{int(value)}".replace("-", "m"))
    return key, f"qtq_zero_point_{tag}"


def quantized_activations(graph, dm, float_tensors, outputs) -> tuple[list[tuple[str, int]], int, list[str]]:
    """The activations a build gives a Q/DQ pair, with their domain, in the build's order; how
    many it leaves out for their element type; and those it leaves in float (the build's own loop)."""
    out, skipped, left = [], 0, []
    for t in graph.quantized_tensors:
        did = dm.of.get(t)
        if did is None or dm.domains[did].qparams is None:
            continue
        tt = graph.tensors[t]
        if tt.elem_type != onnx.TensorProto.FLOAT:
            skipped += 1
            continue
        if t in float_tensors or (t in outputs and tt.producer is None):
            left.append(t)
            continue
        out.append((t, did))
    return out, skipped, left


def _proto(name: str, array: np.ndarray) -> tuple[onnx.TensorProto, bytes]:
    """The initializer a recording build makes of ``array`` (raw little-endian bytes), and its key."""
    elem = RAW_TYPES[array.dtype]
    raw = array.tobytes()
    return (onnx.TensorProto(name=name, data_type=elem, dims=array.shape, raw_data=raw),
            raw_value_key(elem, array.shape, raw))


class Basis:
    """A full recording build and what a patch of it needs: which nodes read each activation's
    scale and zero point, where its activation initializers sit, which initializers hold each bias."""

    def __init__(self, key, build: QdqBuild, acts, names_of, q_of, act_inits, weight_uses, per_channel, biases):
        """``acts``: the quantized activations in order; ``names_of``: activation -> (scale, zero
        point) initializer names; ``q_of``: activation -> the int8 tensor its Q writes; ``act_inits``:
        the names of the initializers the activations made, in order; ``biases``: per weight use
        with an int32 bias, (its index among the uses, the int32 and the scale initializer names)."""
        if build.made is None:  # (callers ask patchable() first)
            raise ValueError("a basis is made of a recording build")
        self.key = key
        self.build = build
        self.made: Made = build.made
        self.acts = acts
        self.names_of = names_of
        self.weight_uses = weight_uses
        self.per_channel = per_channel
        self.biases = biases
        m = build.model
        shell = onnx.ModelProto()
        shell.CopyFrom(m)
        del shell.graph.initializer[:]
        props = [p for p in shell.metadata_props if p.key != "qtquant"]
        del shell.metadata_props[:]
        shell.metadata_props.extend(props)
        self.shell = shell
        inits = list(m.graph.initializer)
        names = [t.name for t in inits]
        at = names.index(act_inits[0]) if act_inits and act_inits[0] in names else -1
        self.ok = at >= 0 and names[at:at + len(act_inits)] == list(act_inits)
        self.head, self.tail = inits[:max(at, 0)], inits[at + len(act_inits):]
        self.act_names = frozenset(act_inits)
        by_q = {q: t for t, q in q_of.items()}
        self.act_nodes = []  # (node index, activation): every Q and DQ reading its scale and zero point
        for k, (_, op, _, _, ins, outs) in enumerate(self.made[0]):
            t = by_q.get(outs[0]) if op == "QuantizeLinear" else by_q.get(ins[0]) if op == "DequantizeLinear" \
                else None
            if t is not None:
                self.act_nodes.append((k, t))
                self.ok = self.ok and tuple(ins[1:3]) == names_of[t]


# Per graph: build key -> Basis, one per key, so that a build of another key (an int16 edit, float
# outputs) leaves the int8 one for the edits after its undo.
BASES: Slot[dict[tuple, Basis]] = Slot("rescale bases", dict)


def patchable(build: QdqBuild) -> bool:
    """Whether a patch of ``build`` could give a full build's bytes, by what the build did: recorded
    its nodes, and no cloned constant, raised weight scale, clipped bias or int16 tensor (the
    full build's own logic decides those).  Asked before a :class:`Basis` is made (it copies the model)."""
    return build.made is not None and not (build.constants or build.bias_adjusted or build.clipped or build.int16)


def remember(graph, basis: Basis, used_names) -> None:
    """Keep ``basis`` for the next recording build of ``graph``, if a patch of it can give a
    full build's bytes.  ``used_names``: every name the build's model holds or its base held."""
    if not basis.ok or not patchable(basis.build) \
            or any(n.startswith(_OURS) for n in used_names if n not in basis.act_names):
        forget(graph, basis.key)
        return
    kept = graph.derived.get(BASES)
    kept.pop(basis.key, None)
    kept[basis.key] = basis
    while len(kept) > KEYS:
        kept.pop(next(iter(kept)))


def forget(graph, key) -> None:
    """No basis for builds of ``key`` (their next recording build is a full one)."""
    graph.derived.get(BASES).pop(key, None)


def basis_of(graph, key) -> Basis | None:
    return graph.derived.get(BASES).get(key)


def patched(graph, key, dm, meta_of) -> QdqBuild | None:
    """The recording build for ``dm`` made from the kept basis of ``graph``, or None: build in full.
    ``key``: what besides the domain map the build depends on (the basis must have been built with
    it); ``meta_of(domains)``: the model's qtquant metadata for that many scale initializers."""
    basis = basis_of(graph, key)
    if basis is None:
        return None
    acts, _, _ = quantized_activations(graph, dm, key[0], set(graph.outputs))  # (key[0]: the float tensors)
    if len(acts) != len(basis.acts) or any(t != u for (t, _), u in zip(acts, basis.acts)):
        return None
    inits: list[onnx.TensorProto] = []
    keys: dict[str, bytes] = {}
    dinit: dict[int, tuple[str, str]] = {}  # scale domain -> (scale, zero point) initializer names
    zps: dict[tuple, str] = {}  # zero-point key -> its initializer's name
    names_of: dict[str, tuple[str, str]] = {}
    act_qp = {}
    for t, did in acts:
        sdid = dm.scale_from.get(did, did)
        got = dinit.get(sdid)
        if got is None:
            qp = dm.domains[sdid].qparams
            s = f"qtq_d{sdid}_scale"
            proto, k = _proto(s, np.array(qp.scale, dtype=np.float32))
            inits.append(proto)
            keys[s] = k
            zkey, z = zero_point_name(int(qp.zero_point), qp.dtype)
            if zkey not in zps:
                if z in zps.values():
                    return None  # (two zero points of one name: the build would number them)
                proto, k = _proto(z, np.array(qp.zero_point, dtype=qp.dtype))
                inits.append(proto)
                keys[z] = k
                zps[zkey] = z
            got = dinit[sdid] = (s, zps[zkey])
        names_of[t] = got
        act_qp[t] = dm.domains[did].qparams
    # The biases at their new input scales; a weight scale the fit would raise needs the full build.
    uses = scaled_uses(graph, basis.weight_uses, basis.per_channel, act_qp)
    for _, _, w, axis, _, need in uses:
        if (need > quantize_weight(graph, w, axis)[1]).any():
            return None
    replaced = {}
    for i, qn, sn in basis.biases:
        node, _, _, _, (_, b, bv), scale = uses[i]
        bscale = (np.float32(act_qp[node.inputs[0]].scale) * scale).astype(np.float32)
        bq, rec = memoized(graph, ("bias", b, node.name, bscale.tobytes(), bscale.shape),
                        lambda bv=bv, bscale=bscale, b=b, node=node: int32_bias(bv, bscale, b, node.name))
        if rec is not None:
            return None
        for name, arr in ((qn, bq), (sn, bscale)):
            replaced[name], keys[name] = _proto(name, arr)

    model = onnx.ModelProto()
    model.CopyFrom(basis.shell)
    nodes = model.graph.node
    made = list(basis.made[0])
    old = basis.names_of
    for at, t in basis.act_nodes:
        s, z = names_of[t]
        if (s, z) != old[t]:
            n = nodes[at]
            n.input[1], n.input[2] = s, z
            domain, op, sa, sub, ins, outs = made[at]
            made[at] = (domain, op, sa, sub, [ins[0], s, z, *ins[3:]], outs)
    tail = [replaced.get(t.name, t) for t in basis.tail]
    model.graph.initializer.extend(basis.head + inits + tail)
    model.metadata_props.add(key="qtquant", value=meta_of(len(dinit)))
    b = basis.build
    kept = {n: t for n, t in basis.made[1].items() if n not in basis.act_names}
    kept.update((t.name, t) for t in inits)
    kept.update(replaced)
    old_keys = {n: k for n, k in basis.made[2].items() if n not in basis.act_names}
    old_keys.update(keys)
    out = QdqBuild(model, b.opset, activations=b.activations, domains=len(dinit), weights=b.weights,
                   biases=b.biases, constants=0, int16=0, float_kept=b.float_kept, notes=list(b.notes),
                   scale_of={t: s for t, (s, _) in names_of.items()}, cut=b.cut)
    out.made = (made, kept, old_keys)
    out.structure = b.structure  # the same nodes, bar which initializers they read: the same walk key
    return out
