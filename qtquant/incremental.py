"""The exported model's program, re-run after an edit only where the edit changed it.

The fidelity check measures what ships: the QDQ model the exporter writes, in an onnxruntime
session at default options (Q/DQ fused into onnxruntime's kernels).  After one edit in the GUI
most of that costs the same again for nothing: onnxruntime re-optimises the whole graph,
creates every kernel and runs every sample through layers the edit did not touch.

Here onnxruntime's own optimised program (``SessionOptions.optimized_model_filepath`` at
default options) is kept for the model's *structure*: the exported graph with its initializer
values left out.  An edit changes scales, zero points and int32 biases, not the structure, so
the new model's program is the kept one with the new values in the same places (the exporter
builds the same nodes in the same order; the values are matched slot by slot).  That program
runs with optimisations disabled (it is optimised already: the same kernels a default session
of the exported file runs, see ``tests/test_incremental.py``), and only its nodes whose
computation is new run again: each tensor gets a fingerprint of its node, attributes,
initializer values and inputs' fingerprints, and the int8 tensors of earlier runs (what one
kernel hands the next) are kept per sample by fingerprint.  A model of another structure (a
precision change, float outputs) gets a program of its own.

onnxruntime's optimiser decides some fusions on values, so a structure is only kept when its
program does not move when every scale and bias moves (checked once per structure, with a
second optimisation of the model with all of them scaled): otherwise every model of it runs in
a fresh default session.  Models with external data, subgraphs or more than
:data:`MAX_NODES` nodes always do (optimising a 20,000-node graph twice costs more than it saves).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import OrderedDict

import numpy as np
import onnx
from onnx import helper

from .errors import ModelError, first_line
from .fingerprints import Fingerprinter, fingerprints
from .fingerprints import value_key as _value_key
from .runtime import make_session, ort_session
from .sampleruns import run_session, sample_threads
from .shipped import layout_passes_off

__all__ = ["IncrementalRunner", "fingerprints", "moved_domains", "KEEP_BYTES", "CONST_BYTES", "MAX_NODES"]

KEEP_BYTES = 256 << 20  # the kept int8 tensors of a runner (all samples); the oldest go first
# The kept constants (dequantized weights, one array for all samples), apart from the int8 tensors: in
# one budget, yolov8n_320's float weights (13 MB a program) pushed out the hand-overs a mid-network
# edit re-runs from, and it ran 498 nodes instead of 256.
CONST_BYTES = 64 << 20
MAX_NODES = 5000


_SUBGRAPH = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class _Walk:
    """One pass over a model's nodes: its structure key (:func:`_skeleton`), each node's inputs,
    and whether the runner can follow it.  Reading a node proto is the cost (a Python object per
    field under upb): the key, the followable check and the edit's slots each walked the 900
    nodes of yolov8n_320's export on their own, some 10 ms an edit."""

    __slots__ = ("key", "inputs", "followable")

    def __init__(self, model):
        g = model.graph
        inits = {t.name for t in g.initializer}
        # Each initializer input is a marker and each inner tensor its order of appearance (the
        # exporter names some tensors after a domain's number, which an edit renumbers).
        pre: dict[str, object] = {n: None for n in inits}
        pre.update({i.name: i.name for i in g.input})
        pre.update({o.name: o.name for o in g.output})
        pre[""] = ""
        ids: dict[str, int] = {}
        nodes, inputs, sub = [], [], False
        for n in g.node:
            ins, outs = n.input[:], n.output[:]
            inputs.append(ins)
            attrs = n.attribute
            if len(attrs):
                sa = [a.SerializeToString() for a in attrs]
                sub = sub or any(a.type in _SUBGRAPH for a in attrs)
            else:
                sa = ()
            nodes.append((n.domain, n.op_type, sa,
                          [pre[x] if x in pre else ids.setdefault(x, len(ids)) for x in ins],
                          [pre[x] if x in pre else ids.setdefault(x, len(ids)) for x in outs]))
        io = (tuple(i.SerializeToString() for i in g.input if i.name not in inits),
              tuple(o.name for o in g.output), tuple(sorted((o.domain, o.version) for o in model.opset_import)))
        self.key = hashlib.sha1(repr((nodes, io)).encode()).digest()
        self.inputs = inputs
        # Models with external data, subgraphs, more than MAX_NODES nodes, or whose default program
        # leaves out a layout pass (it would not be the check's) run in a fresh default session.
        self.followable = not (sub or len(inputs) > MAX_NODES or layout_passes_off(model)
                               or any(t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer))


def _skeleton(model):
    """The graph without initializer values: per node its op, attributes and wiring (see :class:`_Walk`)."""
    return _Walk(model).key


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
    default program's is checked in :attr:`_Program.reusable`)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="qtquant-ort-") as tmp:
        path = os.path.join(tmp, "optimised.onnx")
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.optimized_model_filepath = path
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ort_session(model, so, **({"disabled_optimizers": ["ConstantSharing"]} if keep_apart else {}))
        # onnxruntime writes the program with its initializers inline (no external-data entry is set),
        # so onnx's walk of every tensor and attribute looking for external files finds nothing:
        # ~7 of ~8 ms for a 960-node program, 155M of 166M instructions for a 10k-node one.
        return onnx.load(path, load_external_data=False)


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


class _Program:
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
        self._fp = self._prod = self._slots = self._consts = None

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
            if slots is None:
                self._reusable = False
                return False
            moved = {n for n, t in slots.items() if _value_key(t) != self.values[n]}
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
                              and all(n in moved or _value_key(oi[n]) == _value_key(t)
                                      for n, t in self.inits.items()))
            if self._reusable:
                self.moved = frozenset(moved)
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
        self._fp = self._prod = self._consts = None

    def program_for(self, model, inputs=None) -> dict[str, onnx.TensorProto] | None:
        """The optimised program of ``model`` (same structure) as the values that differ from
        :attr:`optimised`'s (program initializer name -> tensor of that name), or None if it
        cannot be had here.  ``inputs``: each node's inputs (:attr:`_Walk.inputs`), if read already."""
        changed = self._changed(model, inputs)
        if changed is None:
            return None
        if not changed:
            return {}
        if not self.reusable or any(n not in self.inits for n in changed):
            return None  # only onnxruntime's optimiser can make this program
        out = {}
        for name, t in changed.items():
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = name
            out[name] = c
        return out

    def _changed(self, model, inputs=None) -> dict[str, onnx.TensorProto] | None:
        """:func:`_slot_values` of ``model`` (same structure) where the value differs from the
        program's, or None when one program initializer would need two values.  The slots are
        listed once per program and each of ``model``'s initializers keyed once (it fills several
        slots): this runs at every edit."""
        if self._slots is None:
            bi = {t.name for t in self.model.graph.initializer}
            self._slots = [(k, j, name) for k, n in enumerate(self.model.graph.node)
                           for j, name in enumerate(n.input) if name in bi]
        mi = {t.name: t for t in model.graph.initializer}
        if inputs is None:
            inputs = [n.input[:] for n in model.graph.node]
        keys: dict[str, bytes] = {}
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
    def producers(self) -> dict:
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
            inits, c = self.inits.keys() - self.moved, set()
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


class IncrementalRunner:
    """Runs exported QDQ models of one graph on fixed ``feeds``; ``run`` returns what a fresh
    default session of the whole model returns, running only what is new."""

    def __init__(self, feeds, keep_bytes: int = KEEP_BYTES, const_bytes: int = CONST_BYTES):
        self.feeds = list(feeds)
        self.keep_bytes = keep_bytes
        self.const_bytes = const_bytes
        self._const_kept: "OrderedDict[bytes, np.ndarray]" = OrderedDict()  # fingerprint -> value (see _constants)
        self._const_bytes = 0
        self._programs: "OrderedDict[bytes, _Program]" = OrderedDict()  # structure -> program
        self._kept: "OrderedDict[bytes, list[np.ndarray]]" = OrderedDict()  # tensor fingerprint -> per sample
        self._bytes = 0
        self.last = ("", 0, 0)  # (how, nodes run, nodes of the program) of the latest run
        self.times: dict[str, float] = {}  # ms per step of the latest run (prepare, session, run)
        self._const_nodes = 0  # nodes of the latest run that computed constants (see _constants)

    def run(self, model: onnx.ModelProto, names, cancel=None, base_dir=None, moved=None) -> list[dict]:
        """``moved``: () -> the model the exporter builds from the same domains with every value
        moved (:func:`moved_domains`); without it every edit runs in a fresh default session."""
        names = list(names)
        t0 = time.perf_counter()
        self.times = {}
        walk = _Walk(model)
        found = self._program(model, moved, walk) if walk.followable else None
        if found is None:
            self.last = ("fresh default session", len(model.graph.node), len(model.graph.node))
            # (above LAYOUT_PASS_NODES without the NhwcTransformer: shipped.layout_passes_off)
            sess = make_session(model, base_dir, spinning=False, level="default", disabled=layout_passes_off(model))
            t1 = time.perf_counter()
            res = run_session(sess, names, self.feeds, cancel)
            self.times = {"session": (t1 - t0) * 1e3, "run": (time.perf_counter() - t1) * 1e3}
            return res
        self.times["program"] = (time.perf_counter() - t0) * 1e3
        return self._run_program(*found, names, cancel)

    def _program(self, model, moved, walk):
        """(program, its optimised model) for ``model``, or None: run it in a fresh default session."""
        key = walk.key
        p = self._programs.get(key)
        if p is None:
            p = self._programs[key] = _Program(model, moved)
            while len(self._programs) > 3:
                self._programs.popitem(last=False)
            p.reusable  # checked now, with the first (cold) check, so that the first edit does not wait on it
        self._programs.move_to_end(key)
        opt = p.program_for(model, walk.inputs)
        return (p, opt) if opt is not None else None

    def _run_program(self, p: _Program, values, names, cancel) -> list[dict]:
        """Run the program of ``p`` with ``values`` (initializer name -> tensor) in place of its own."""
        t0 = time.perf_counter()
        prog = p.optimised
        g = prog.graph
        h = p.fingerprinter(values)
        graph_inputs = {i.name: i for i in g.input}
        if h is None or any(n not in h or n in graph_inputs for n in names):
            raise ModelError("fidelity check: onnxruntime's optimised program cannot be followed")
        prod, consts = p.producers, p.consts
        inits = {**p.inits, **values}
        need, front, seen, stack = set(), {}, set(), list(names)
        wanted = set(names)
        while stack:
            t = stack.pop()
            if not t or t in seen or t in inits:
                continue
            seen.add(t)
            n = prod.get(t)
            if n is None:
                front[t] = None  # a graph input: the check sample
            elif t in consts and t not in wanted:
                front[t] = None  # the same for every sample: computed once (see _constants)
            elif h[t] in self._kept and t not in wanted:
                front[t] = None  # computed the same way by an earlier run
            elif id(n) not in need:
                need.add(id(n))
                stack.extend(n.input)
        fixed = self._constants(p, inits, h, [t for t in front if t in consts])
        nodes = [n for n in g.node if id(n) in need]
        used = {i for n in nodes for i in n.input}
        sub = onnx.ModelProto()
        sub.ir_version = prog.ir_version
        sub.opset_import.extend(prog.opset_import)
        sub.graph.name = g.name
        sub.graph.node.extend(nodes)
        sub.graph.initializer.extend(inits[i] for i in used if i in inits)
        for f in front:
            if f in graph_inputs:
                sub.graph.input.append(graph_inputs[f])
            else:
                a = fixed[f] if f in fixed else self._kept[h[f]][0]
                sub.graph.input.append(helper.make_tensor_value_info(
                    f, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        outs = {o.name: o for o in g.output}
        # Keep the 1-byte tensors (int8 hand-overs between kernels): small, and where edits cut.
        # (Every tensor of the program is its own kernel's output: asking for it changes nothing.)
        keep = [o for n in nodes for o in n.output
                if o and o not in wanted and o not in front and p.itemsize.get(o, 1) == 1]
        self.last = ("optimised program", len(nodes) + self._const_nodes, len(g.node))
        feeds = [{x: (f[x] if x in graph_inputs else fixed[x] if x in fixed else self._kept[h[x]][k]) for x in front}
                 for k, f in enumerate(self.feeds)]
        if nodes:
            t1 = time.perf_counter()
            sess, out_names = self._session(sub, outs, names, keep, p)
            t2 = time.perf_counter()
            res = run_session(sess, out_names, feeds, cancel, threads=sample_threads())
            self.times.update(prepare=(t1 - t0) * 1e3, session=(t2 - t1) * 1e3, run=(time.perf_counter() - t2) * 1e3)
        else:
            res = [{} for _ in self.feeds]
        for x in front:
            if x not in graph_inputs and x not in fixed:
                self._kept.move_to_end(h[x])
        for o in (out_names[len(names):] if nodes else []):
            vals = [r[o] for r in res]
            if vals:
                p.itemsize[o] = vals[0].dtype.itemsize
                if vals[0].dtype.itemsize == 1:
                    self._keep(h[o], vals)
        return [{n: r[n] for n in names} for r in res]

    def _constants(self, p: _Program, inits, h, names) -> dict[str, np.ndarray]:
        """The values of ``names`` (tensors of :attr:`_Program.consts`): kept by fingerprint (one
        array for all samples, within :data:`CONST_BYTES`), else computed in a session of the
        nodes computing them, which has no input.  onnxruntime's own kernels compute them, so they
        are its values bit for bit."""
        self._const_nodes = 0
        out, todo = {}, []
        for t in names:
            a = self._const_kept.get(h[t])
            if a is None:
                todo.append(t)
            else:
                self._const_kept.move_to_end(h[t])
                out[t] = a
        if not todo:
            return out
        names = todo
        prod, need, stack = p.producers, set(), list(names)
        while stack:
            n = prod.get(stack.pop())
            if n is not None and id(n) not in need:
                need.add(id(n))
                stack.extend(i for i in n.input if i and i not in inits)
        g = p.optimised.graph
        nodes = [n for n in g.node if id(n) in need]
        self._const_nodes = len(nodes)
        used = {i for n in nodes for i in n.input}
        sub = onnx.ModelProto()
        sub.ir_version = p.optimised.ir_version
        sub.opset_import.extend(p.optimised.opset_import)
        sub.graph.name = g.name
        sub.graph.node.extend(nodes)
        sub.graph.initializer.extend(inits[i] for i in used if i in inits)
        sub.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names)
        try:
            got = _disabled_session(sub).run(names, {})
        except Exception as e:  # onnxruntime's errors are not ours: make them a one-line message
            raise ModelError(f"fidelity check failed in onnxruntime: {first_line(e)}") from None
        for t, a in zip(names, got):
            out[t] = a
            self._const_kept[h[t]] = a
            self._const_bytes += int(a.nbytes)
        while self._const_bytes > self.const_bytes and self._const_kept:
            _, a = self._const_kept.popitem(last=False)
            self._const_bytes -= int(a.nbytes)
        return out

    def _session(self, sub, outs, names, keep, p: _Program):
        """The session of ``sub`` with ``names`` and the kept candidates among ``keep`` as outputs.

        A candidate's type is not known before onnxruntime has typed the program, and asking for
        every tensor of a big model keeps them all alive at once (ppocrv4_det at 640x640: 10 GB
        over the check samples).  So the session says the types and, where it can, the sizes; a
        candidate that is not one byte per element, or whose values over the samples would pass
        the budget, is dropped and the session made again without it."""

        def make(extra):
            del sub.graph.output[:]
            for o in names + extra:
                sub.graph.output.append(outs[o] if o in outs else onnx.ValueInfoProto(name=o))
            return _disabled_session(sub)

        sess = make(keep)
        if not keep:
            return sess, names
        budget, ok = self.keep_bytes, []
        samples = max(1, len(self.feeds))
        for arg in sess.get_outputs():
            if arg.name not in keep:
                continue
            if arg.type not in _ONE_BYTE:
                p.itemsize[arg.name] = 0  # not a hand-over worth keeping: never asked for again
                continue
            shape = arg.shape
            if not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
                continue  # size unknown: computed again when needed rather than risked
            size = int(np.prod(shape, dtype=np.int64)) * samples
            if size > budget:
                continue
            budget -= size
            ok.append(arg.name)
        if len(ok) == len(keep):
            return sess, names + keep
        return make(ok), names + ok

    def _keep(self, key: bytes, values: list) -> None:
        size = sum(int(v.nbytes) for v in values)
        if size > self.keep_bytes:
            return
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= sum(int(v.nbytes) for v in old)
        self._kept[key] = values
        self._bytes += size
        while self._bytes > self.keep_bytes and self._kept:
            _, v = self._kept.popitem(last=False)
            self._bytes -= sum(int(x.nbytes) for x in v)


_ONE_BYTE = frozenset({"tensor(uint8)", "tensor(int8)", "tensor(bool)"})


def _disabled_session(model):
    """An already optimised program, run as it is (its kernels are the default session's).  Its
    intra-op threads stay the default: with one, a kernel of the test models rounds differently
    from a default session (not bit-identical)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort_session(model, so)
