"""onnxruntime's optimised program of one exported structure, and where an edit's values go in it.

onnxruntime's own optimised program (``SessionOptions.optimized_model_filepath`` at default
options) is kept for the model's *structure*: the exported graph with its initializer values left
out (:class:`Walk`'s key).  An edit changes scales, zero points and int32 biases, not the
structure, so the new model's program is the kept one with the new values in the same places (the
exporter builds the same nodes in the same order; the values are matched slot by slot,
:meth:`Program.program_for`).

onnxruntime's optimiser decides some fusions on values, so a structure is only kept when its
program does not move when every scale and bias moves (:attr:`Program.reusable`: checked once per
structure, with a second optimisation of the model with all of them scaled, :func:`moved_domains`).
:mod:`qtquant.runs.incremental` runs the programs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np
import onnx

from .fingerprints import Fingerprinter
from .fingerprints import value_key as _value_key
from ..model.nodetable import node_parts
from ..model.runtime import ort_session, quiet_options
from .shipped import layout_passes_off

__all__ = ["moved_domains"]


class Walk:
    """One pass over a model's nodes: its structure key (:func:`_skeleton`), each node's inputs,
    and whether the runner can follow it.  Reading a node proto is the cost (a Python object per
    field under upb): the key, the followable check and the edit's slots each walked the 900
    nodes of yolov8n_320's export on their own, some 10 ms an edit.  :meth:`of_build` takes the
    same facts from the exporter's own lists instead of the model's protos."""

    __slots__ = ("key", "inputs", "followable", "inits", "keys")

    def __init__(self, model, nodes=None, inits=None, keys=None, structure=None):
        """``nodes``: per node of ``model`` in order, ``(domain, op_type, its attributes serialized,
        whether one is a subgraph, inputs, outputs)``, ``inits`` its initializers by name and ``keys``
        the :func:`~qtquant.runs.fingerprints.value_key` of some of them, when known without reading the
        model (:meth:`of_build`); else read from ``model``.  ``structure``: a build's
        :class:`~qtquant.export.records.StructureKey` (:attr:`~qtquant.export.QdqBuild.structure`),
        read and filled here."""
        g = model.graph
        if nodes is None:
            inits = {t.name: t for t in g.initializer}
            nodes = [(*node_parts(n), n.input[:], n.output[:]) for n in g.node]
        external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in inits.values())
        self.inits = inits  # name -> initializer proto (the model's, or the one the build copied into it)
        self.keys = keys or {}  # name -> value_key, where known
        known = structure.key if structure is not None else None
        key, inputs, sub = [], [], False
        if known is not None:  # (a build patched from one walked before: the same nodes, the same key)
            inputs = [n[4] for n in nodes]
            sub = any(n[3] for n in nodes)
        else:
            # Each initializer input is a marker and each inner tensor its order of appearance (the
            # exporter names some tensors after a domain's number, which an edit renumbers).
            pre: dict[str, object] = {n: None for n in inits}
            pre.update({i.name: i.name for i in g.input})
            pre.update({o.name: o.name for o in g.output})
            pre[""] = ""
            ids: dict[str, int] = {}
            for domain, op, sa, has_sub, ins, outs in nodes:
                inputs.append(ins)
                sub = sub or has_sub
                key.append((domain, op, sa,
                            [pre[x] if x in pre else ids.setdefault(x, len(ids)) for x in ins],
                            [pre[x] if x in pre else ids.setdefault(x, len(ids)) for x in outs]))
            io = (tuple(i.SerializeToString() for i in g.input if i.name not in inits),
                  tuple(o.name for o in g.output), tuple(sorted((o.domain, o.version) for o in model.opset_import)))
            known = hashlib.sha1(repr((key, io)).encode()).digest()
            if structure is not None:
                structure.key = known
        self.key = known
        self.inputs = inputs
        # Models with external data, subgraphs, or whose default program leaves out a layout pass
        # (it would not be the check's) run in a fresh default session (and so do big ones: the
        # runner's MAX_NODES).
        self.followable = not (sub or layout_passes_off(model) or external)

    @classmethod
    def of_build(cls, build) -> "Walk":
        """The walk of ``build.model`` (a :class:`~qtquant.export.QdqBuild`) from what the exporter
        recorded as it made it (:attr:`~qtquant.export.QdqBuild.made`), the same as a walk of the
        model (tests check it); without that record, of the model."""
        if build.made is None:
            return cls(build.model)
        nodes, inits, keys = build.made
        return cls(build.model, nodes, inits, keys, structure=build.structure)


def _skeleton(model):
    """The graph without initializer values: per node its op, attributes and wiring (see :class:`Walk`)."""
    return Walk(model).key


def _slot_values(base_model, model) -> dict[str, onnx.TensorProto] | None:
    """Base initializer name -> ``model``'s initializer in the same slots; None when one base
    initializer would need two values (the base shares one where the model has two)."""
    bi = {t.name for t in base_model.graph.initializer}
    mi = {t.name: t for t in model.graph.initializer}
    out: dict[str, onnx.TensorProto] = {}
    for bn, mn in zip(base_model.graph.node, model.graph.node):
        for a, b in zip(bn.input, mn.input):
            if a in bi:
                t = mi[b]
                prev = out.get(a)
                if prev is None:
                    out[a] = t
                elif prev is not t and _value_key(prev) != _value_key(t):
                    return None
    return out


SHARED_BYTES = 4096  # initializers up to this size used in several slots get one copy per slot


def _unshared(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each small initializer used in several slots copied once per slot.

    The exporter shares one zero-point initializer between every domain with that zero point,
    and one scale between every tensor of a domain; an edit that moves one domain's zero point, or
    splits a domain (an ungroup), gives those slots different values, which one initializer of
    the kept program cannot hold.  Apart, every slot can take its own value (what ``program_for``
    fills in).  The computation is the same: sharing an initializer changes no result."""
    g = model.graph
    small = {t.name: t for t in g.initializer if _nbytes(t) <= SHARED_BYTES}
    uses: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            if i in small:
                uses[i] = uses.get(i, 0) + 1
    shared = {n for n, k in uses.items() if k > 1}
    if not shared:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    seen: dict[str, int] = {}
    extra = []
    for n in out.graph.node:
        for j, i in enumerate(n.input):
            if i in shared:
                k = seen[i] = seen.get(i, 0) + 1
                if k > 1:  # the first use keeps the name
                    c = onnx.TensorProto()
                    c.CopyFrom(small[i])
                    c.name = n.input[j] = f"{i}__qtq_slot{k}"
                    extra.append(c)
    out.graph.initializer.extend(extra)
    return out


def _nbytes(t: onnx.TensorProto) -> int:
    if t.raw_data:
        return len(t.raw_data)
    return int(np.prod(t.dims, dtype=np.int64)) * 8 if t.dims else 8


def _optimise(model: onnx.ModelProto, keep_apart: bool = False) -> onnx.ModelProto:
    """onnxruntime's optimised program of ``model`` at default options (what a user's session runs).

    ``keep_apart``: without onnxruntime's ConstantSharing, which merges initializers of equal
    value (the program then keeps one per slot of :func:`_unshared`; whether the kernels are the
    default program's is checked in :attr:`Program.reusable`)."""
    with tempfile.TemporaryDirectory(prefix="qtquant-ort-") as tmp:
        path = os.path.join(tmp, "optimised.onnx")
        so = quiet_options()
        so.optimized_model_filepath = path
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ort_session(model, so, **({"disabled_optimizers": ["ConstantSharing"]} if keep_apart else {}))
        # onnxruntime writes the program with its initializers inline (no external-data entry is set),
        # so onnx's walk of every tensor and attribute looking for external files finds nothing:
        # ~7 of ~8 ms for a 960-node program, 155M of 166M instructions for a 10k-node one.
        return onnx.load(path, load_external_data=False)


# onnxruntime's precision mode (session.x64quantprecision, qtquant.int8path) gives an s8 weight or zero
# point of an int8 kernel a u8 copy of this name, its values shifted by 128, for its u8u8 kernels.
S8_TO_U8 = "_s8_2_u8"


def _s8_to_u8(t: onnx.TensorProto, name: str) -> onnx.TensorProto:
    """The u8 copy precision mode makes of the s8 tensor ``t`` (an edit's new values of a converted slot).
    onnxruntime converts only tensors holding a value outside [-64, 64]; a slot it converted keeps its
    u8 copy whatever values an edit brings, and its u8u8 kernel is exact for any values, as the s8
    kernel a fresh session would pick for small ones is: the same integers either way."""
    from onnx import numpy_helper

    u = (numpy_helper.to_array(t).astype(np.int16) + 128).astype(np.uint8)
    return numpy_helper.from_array(u, name)


def moved_domains(dm):
    """``dm`` with every domain's range scaled by its own factor between 1/4 and 4 (and, for the
    asymmetric scheme, its zero point moved by one): what edits move, each far, consistently
    (biases follow their input and weight scales when the exporter builds from it)."""
    from dataclasses import replace

    doms = {}
    for i, d in dm.domains.items():
        qp = d.qparams
        if qp is None:
            doms[i] = d
            continue
        f = 4.0 ** (((i * 7919) % 17) / 8.0 - 1.0)
        zp = qp.zero_point
        if zp != 0 or qp.qmin == 0:  # an asymmetric grid
            zp = zp + 1 if zp < qp.qmax else zp - 1
        doms[i] = replace(d, lo=d.lo * f, hi=d.hi * f, qparams=replace(qp, scale=qp.scale * f, zero_point=zp))
    return replace(dm, domains=doms)


class Program:
    """onnxruntime's optimised program of one structure, and where an edit's values go in it."""

    def __init__(self, model: onnx.ModelProto, moved):
        self.exported = model  # the QDQ model as the exporter builds it
        self.model = _unshared(model)  # the same, one initializer per slot: the program's values
        self._reusable: bool | None = None
        self.moved: frozenset[str] = frozenset()  # the program's initializers an edit can change (once reusable)
        self._moved = moved  # () -> the same structure's model with every value moved
        # (A new structure's three optimisations -- this program, a default session's, the moved
        # model's -- on two threads side by side took longer than one after another on yolov8n_320:
        # 554-705 against 452-526 ms, 2 busy cores.)
        self.optimised = _optimise(self.model, keep_apart=True)
        self.inits = {t.name: t for t in self.optimised.graph.initializer}
        self.values = {t.name: _value_key(t) for t in self.model.graph.initializer}
        self.itemsize: dict[str, int] = {}  # tensor -> bytes per element, once a run has shown it
        self._fp: Fingerprinter | None = None
        self._prod: dict[str, onnx.NodeProto] | None = None
        self._slots: list[tuple[int, int, str]] | None = None
        self._consts: frozenset[str] | None = None
        # qtquant.runs.incremental's serialized nodes and initializers of `optimised` (its type
        # is incremental's, which imports this module)
        self.pieces: object = None

    @property
    def reusable(self) -> bool:
        """Whether the program holds when the values move (no value-dependent fusion, no
        initializer of the program derived from a value that moves): checked once, when the
        program is made, by optimising the model the exporter builds with every domain's range moved."""
        if self._reusable is None:
            pert = self._moved() if self._moved is not None else None
            pert = _unshared(pert) if pert is not None else None
            slots = _slot_values(self.model, pert) if pert is not None and _skeleton(pert) == _skeleton(self.model) \
                else None
            if pert is None or slots is None:
                self._reusable = False
                return False
            moved = {n for n, t in slots.items() if _value_key(t) != self.values[n]}
            # Precision mode's u8 copies of moved s8 tensors (S8_TO_U8) move with them, by a rule known here.
            derived = {n + S8_TO_U8: n for n in moved if n + S8_TO_U8 in self.inits}
            other = _optimise(pert, keep_apart=True)
            # The kernels and wiring of a default session of the exported file (its initializers
            # shared or not changes no result, see _unshared): otherwise this program is not what ships.
            if _skeleton(_optimise(self.exported)) != _skeleton(self.optimised):
                self._reusable = False
                return False
            oi = {t.name: t for t in other.graph.initializer}
            # The same program, and every value of it either moved from the model (in place) or
            # the same as here (not derived from anything that moved).  The moved program may keep
            # apart initializers this one merged: onnxruntime's ConstantSharing joins equal
            # values, and two domains' scales can be equal (a SiLU's output range ends where its
            # conv output's does).
            extra = set(oi) - set(self.inits)
            self._reusable = (_skeleton(other) == _skeleton(self.optimised) and set(self.inits) <= set(oi)
                              and extra <= moved
                              and all(_value_key(oi[d]) == _value_key(_s8_to_u8(slots[n], d))
                                      for d, n in derived.items())
                              and all(n in moved or n in derived or _value_key(oi[n]) == _value_key(t)
                                      for n, t in self.inits.items()))
            if self._reusable:
                self.moved = frozenset(moved | set(derived))
            if self._reusable and extra:
                self._take_apart(other, moved)
        return self._reusable

    def _take_apart(self, other: onnx.ModelProto, moved: set[str]) -> None:
        """Use ``other`` (the moved model's program, where no two slots share an initializer) with
        this model's values in its slots: an edit can then give the merged ones different values.
        Sharing an initializer between equal values changes no result."""
        own = {t.name: t for t in self.model.graph.initializer}
        for t in other.graph.initializer:
            if t.name in moved:
                name = t.name
                t.CopyFrom(own[name])
                t.name = name
        self.optimised = other
        self.inits = {t.name: t for t in other.graph.initializer}
        self._fp = self._prod = self._consts = self.pieces = None

    def program_for(self, model, inputs=None, inits=None, keys=None) -> dict[str, onnx.TensorProto] | None:
        """The optimised program of ``model`` (same structure) as the values that differ from
        :attr:`optimised`'s (program initializer name -> tensor of that name), or None if it
        cannot be had here.  ``inputs``, ``inits`` and ``keys``: each node's inputs, the initializers by
        name and some of their value keys (:attr:`Walk.inputs`, :attr:`Walk.inits`, :attr:`Walk.keys`),
        if known already."""
        changed = self._changed(model, inputs, inits, keys)
        if changed is None:
            return None
        if not changed:
            return {}
        if not self.reusable or any(n not in self.inits and n + S8_TO_U8 not in self.inits for n in changed):
            return None  # only onnxruntime's optimiser can make this program
        out = {}
        for name, t in changed.items():
            if name + S8_TO_U8 in self.inits:
                out[name + S8_TO_U8] = _s8_to_u8(t, name + S8_TO_U8)
            if name in self.inits:
                c = onnx.TensorProto()
                c.CopyFrom(t)
                c.name = name
                out[name] = c
        return out

    def _changed(self, model, inputs=None, inits=None, keys=None) -> dict[str, onnx.TensorProto] | None:
        """:func:`_slot_values` of ``model`` (same structure) where the value differs from the
        program's, or None when one program initializer would need two values.  The slots are
        listed once per program and each of ``model``'s initializers keyed once (it fills several
        slots): this runs at every edit."""
        if self._slots is None:
            bi = {t.name for t in self.model.graph.initializer}
            self._slots = [(k, j, name) for k, n in enumerate(self.model.graph.node)
                           for j, name in enumerate(n.input) if name in bi]
        mi = {t.name: t for t in model.graph.initializer} if inits is None else inits
        if inputs is None:
            inputs = [n.input[:] for n in model.graph.node]
        keys = dict(keys) if keys else {}
        took: dict[str, str] = {}  # program initializer -> model initializer in its first slot
        out = {}
        try:
            for k, j, a in self._slots:
                b = inputs[k][j]
                first = took.setdefault(a, b)
                kb = keys.get(b)
                if kb is None:
                    kb = keys[b] = _value_key(mi[b])
                if first != b and keys[first] != kb:
                    return None  # (a shared initializer above SHARED_BYTES)
                if kb != self.values[a]:
                    out[a] = mi[b]
        except (IndexError, KeyError):
            return None  # not the same structure after all
        return out

    @property
    def producers(self) -> dict[str, onnx.NodeProto]:
        """Tensor -> the program's node producing it."""
        if self._prod is None:
            self._prod = {o: n for n in self.optimised.graph.node for o in n.output if o}
        return self._prod

    @property
    def consts(self) -> frozenset[str]:
        """The program's tensors computed from initializers no edit moves (:attr:`moved`): in
        onnxruntime's program of an export, the DequantizeLinear of each weight that does not fuse
        into an int8 kernel.  Every sample computes them again otherwise (yolov8n_320: 5 of 43 ms
        a sample).  A bias moves with its input's scale, so its DequantizeLinear stays in the re-run
        (as constants, an edit's new ones cost a session of their own)."""
        if self._reusable is None:
            return frozenset()  # what moves is not known yet
        if self._consts is None:
            inits, c = self.inits.keys() - self.moved, set[str]()
            for n in self.optimised.graph.node:
                ins = [i for i in n.input if i]
                if ins and all(i in inits or i in c for i in ins):
                    c.update(o for o in n.output if o)
            self._consts = frozenset(c)
        return self._consts

    @property
    def fingerprinter(self) -> "Fingerprinter":
        if self._fp is None:
            self._fp = Fingerprinter(self.optimised)
        return self._fp
