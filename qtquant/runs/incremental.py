"""The exported model's program, re-run after an edit only where the edit changed it.

The fidelity check measures what ships: the QDQ model the exporter writes, in an onnxruntime
session at default options (Q/DQ fused into onnxruntime's kernels).  After one edit in the GUI
most of that costs the same again for nothing: onnxruntime re-optimises the whole graph,
creates every kernel and runs every sample through layers the edit did not touch.

Here the program onnxruntime makes of the export's structure is kept (:mod:`qtquant.runs.programs`)
and runs with optimisations disabled (it is optimised already: the same kernels a default session
of the exported file runs, see ``tests/runs/test_incremental.py``), and only its nodes whose
computation is new run again: each tensor gets a fingerprint of its node, attributes,
initializer values and inputs' fingerprints, and the int8 tensors of earlier runs (what one
kernel hands the next) are kept per sample by fingerprint.  A model of another structure (a
precision change, float outputs) gets a program of its own.  A structure whose program moves
with the values (:attr:`~qtquant.runs.programs.Program.reusable`), models with external data or
subgraphs, and models of more than :data:`MAX_NODES` nodes (optimising a 20,000-node graph
twice costs more than it saves) run in a fresh default session.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
import onnx
from onnx import helper

from ..base.errors import ModelError
from .programs import Program, Walk
from ..model.runtime import make_session, ort_session, quiet_options
from .sampleruns import run_session, sample_threads
from .shipped import layout_passes_off

__all__ = ["IncrementalRunner", "KEEP_BYTES", "CONST_BYTES", "MAX_NODES", "release_sessions"]

KEEP_BYTES = 256 << 20  # the kept int8 tensors of a runner (all samples); the oldest go first
# The kept constants (dequantized weights, one array for all samples), apart from the int8 tensors: in
# one budget, yolov8n_320's float weights (13 MB a program) pushed out the hand-overs a mid-network
# edit re-runs from, and it ran 498 nodes instead of 256.
CONST_BYTES = 64 << 20
MAX_NODES = 5000
# Structures met in one check after a runner's first, remembered by key: a later check makes the program.
SEEN_MAX = 16
_NEVER = object()


RETIRED_MAX = 1  # re-run sessions waiting for release_sessions(); past it the oldest is destroyed at once
_retired: list = []


def _retire(sess) -> None:
    """Keep a re-run's session for :func:`release_sessions` rather than destroy it as the check
    returns: destroying it was 1.9 ms of a /model.17 join's check on yolov8n_320 (min of 12, 343
    nodes), 2.9-3.9 ms in process.  Without a release (no fidelity worker) the previous one goes here."""
    _retired.append(sess)
    if len(_retired) > RETIRED_MAX:
        del _retired[0]


def release_sessions() -> None:
    """Destroy the retired re-run sessions: the fidelity worker's child does it once its reply
    is sent (:meth:`qtquant.app.fidelity_worker._Server.idle`), so the result does not wait for it."""
    _retired.clear()


class IncrementalRunner:
    """Runs exported QDQ models of one graph on fixed ``feeds``; ``run`` returns what a fresh
    default session of the whole model returns, running only what is new."""

    def __init__(self, feeds, keep_bytes: int = KEEP_BYTES, const_bytes: int = CONST_BYTES):
        self.feeds = list(feeds)
        self.keep_bytes = keep_bytes
        self._programs: "OrderedDict[bytes, Program]" = OrderedDict()  # structure -> program
        self._seen: "OrderedDict[bytes, object]" = OrderedDict()  # structure met, no program yet -> its check
        self._kept = _Kept(keep_bytes, _samples_bytes)  # tensor fingerprint -> its values, per sample
        self._const_kept = _Kept(const_bytes, _array_bytes)  # fingerprint -> one value (see _constants)
        self.last = ("", 0, 0)  # (how, nodes run, nodes of the program) of the latest run
        self.times: dict[str, float] = {}  # ms per step of the latest run (prepare, session, run)

    @property
    def _bytes(self) -> int:
        return self._kept.bytes

    @property
    def _const_bytes(self) -> int:
        return self._const_kept.bytes

    def run(self, model: onnx.ModelProto, names, cancel=None, base_dir=None, moved=None, build=None,
            check=None) -> list[dict]:
        """``moved``: () -> the model the exporter builds from the same domains with every value
        moved (:func:`moved_domains`); without it every edit runs in a fresh default session.
        ``build``: the :class:`~qtquant.export.QdqBuild` that made ``model``, whose record of its nodes
        spares reading them back (:meth:`Walk.of_build`).  ``check``: a token the models of one
        check share (its before and after); None: this run is a check of its own."""
        names = list(names)
        t0 = time.perf_counter()
        self.times = {}
        walk = Walk.of_build(build) if build is not None and build.model is model else Walk(model)
        found = self._program(model, moved, walk, check) if walk.followable and len(walk.inputs) <= MAX_NODES \
            else None
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

    def _program(self, model, moved, walk, check=None) -> tuple[Program, dict[str, onnx.TensorProto]] | None:
        """(program, its optimised model) for ``model``, or None: run it in a fresh default session."""
        key = walk.key
        p = self._programs.get(key)
        if p is None:
            # A structure first met after the runner's first (an int16 or float precision, float
            # outputs) runs in a fresh default session, in every model of the check that meets it
            # (the edit's, and the unedited domains' at the new precision): its program (three
            # onnxruntime optimisations of the whole export) costs more than those sessions and
            # their runs (yolov8n_320's int16 edit: 0.8-1.8 s against ~0.3 s a model), and pays only
            # when the structure is edited again, while trying precisions meets many structures
            # once each.  A later check that meets it again makes it.
            met = self._seen.get(key, _NEVER)
            if self._programs and (met is _NEVER or (check is not None and met is check)):
                self._seen[key] = check
                self._seen.move_to_end(key)
                while len(self._seen) > SEEN_MAX:
                    self._seen.popitem(last=False)
                return None
            self._seen.pop(key, None)
            p = self._programs[key] = Program(model, moved)
            while len(self._programs) > 3:
                self._programs.popitem(last=False)
            p.reusable  # checked now, with the first (cold) check, so that the first edit does not wait on it
        self._programs.move_to_end(key)
        opt = p.program_for(model, walk.inputs, walk.inits, walk.keys)
        return (p, opt) if opt is not None else None

    def _run_program(self, p: Program, values, names, cancel) -> list[dict]:
        """Run the program of ``p`` with ``values`` (initializer name -> tensor) in place of its own."""
        t0 = time.perf_counter()
        prog = p.optimised
        g = prog.graph
        h = p.fingerprinter(values)
        graph_inputs = {i.name: i for i in g.input}
        if h is None or any(n not in h or n in graph_inputs for n in names):
            raise ModelError("fidelity check: onnxruntime's optimised program cannot be followed")
        prod, consts = p.producers, p.consts
        pieces = _pieces(p)
        node_ins = pieces.inputs
        inits = {**p.inits, **values}
        need, seen, stack = set(), set(), list(names)
        front: dict[str, None] = {}  # the sub-model's inputs, in order (an ordered set)
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
                stack.extend(node_ins[id(n)])
        fixed, const_nodes = self._constants(p, inits, values, h, [t for t in front if t in consts])
        nodes = [n for n in pieces.order if id(n) in need]
        sub = pieces.sub_model(nodes, values)
        for f in front:
            if f in graph_inputs:
                sub.input.append(graph_inputs[f])
            else:
                a = fixed[f] if f in fixed else self._kept[h[f]][0]
                sub.input.append(helper.make_tensor_value_info(
                    f, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        outs = {o.name: o for o in g.output}
        # Keep the 1-byte tensors (int8 hand-overs between kernels): small, and where edits cut.
        # (Every tensor of the program is its own kernel's output: asking for it changes nothing.)
        node_outs = pieces.outputs
        keep = [o for n in nodes for o in node_outs[id(n)]
                if o and o not in wanted and o not in front and p.itemsize.get(o, 1) == 1]
        self.last = ("optimised program", len(nodes) + const_nodes, len(g.node))
        feeds = [{x: (f[x] if x in graph_inputs else fixed[x] if x in fixed else self._kept[h[x]][k]) for x in front}
                 for k, f in enumerate(self.feeds)]
        if nodes:
            t1 = time.perf_counter()
            sess, out_names = self._session(sub, outs, names, keep, p)
            t2 = time.perf_counter()
            res = run_session(sess, out_names, feeds, cancel, threads=sample_threads())
            _retire(sess)
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
                    self._kept.put(h[o], vals)
        return [{n: r[n] for n in names} for r in res]

    def _constants(self, p: Program, inits, values, h, names) -> tuple[dict[str, np.ndarray], int]:
        """The values of ``names`` (tensors of :attr:`Program.consts`; ``inits``: the program's
        initializers with ``values``, the edit's, in place) and how many nodes computed
        them: kept by fingerprint (one array for all samples, within :data:`CONST_BYTES`), else
        computed in a session of the nodes computing them, which has no input.  onnxruntime's own
        kernels compute them, so they are its values bit for bit."""
        out, todo = {}, []
        for t in names:
            a = self._const_kept.get(h[t])
            if a is None:
                todo.append(t)
            else:
                self._const_kept.move_to_end(h[t])
                out[t] = a
        if not todo:
            return out, 0
        pieces = _pieces(p)
        node_ins = pieces.inputs
        prod, need, stack = p.producers, set(), list(todo)
        while stack:
            n = prod.get(stack.pop())
            if n is not None and id(n) not in need:
                need.add(id(n))
                stack.extend(i for i in node_ins[id(n)] if i and i not in inits)
        nodes = [n for n in pieces.order if id(n) in need]
        sub = pieces.sub_model(nodes, values)
        sub.output = [onnx.ValueInfoProto(name=t) for t in todo]
        (got,) = run_session(_disabled_session(sub), todo, [{}], None)
        for t in todo:
            out[t] = got[t]
            self._const_kept.put(h[t], got[t])
        return out, len(nodes)

    def _session(self, sub, outs, names, keep, p: Program):
        """The session of ``sub`` with ``names`` and the kept candidates among ``keep`` as outputs.

        A candidate's type is not known before onnxruntime has typed the program, and asking for
        every tensor of a big model keeps them all alive at once (ppocrv4_det at 640x640: 10 GB
        over the check samples).  So the session says the types and, where it can, the sizes; a
        candidate that is not one byte per element, or whose values over the samples would pass
        the budget, is dropped and the session made again without it."""

        def make(extra):
            sub.output = [outs[o] if o in outs else onnx.ValueInfoProto(name=o) for o in names + extra]
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


class _Kept(OrderedDict):
    """Values by fingerprint within a byte budget: the least recently used go first, and a value
    bigger than the whole budget is not kept.  ``size(value)``: its bytes."""

    def __init__(self, budget: int, size):
        super().__init__()
        self.budget = budget
        self.size = size
        self.bytes = 0

    def put(self, key: bytes, value) -> None:
        n = self.size(value)
        if n > self.budget:
            return
        old = self.pop(key, None)
        if old is not None:
            self.bytes -= self.size(old)
        self[key] = value
        self.bytes += n
        while self.bytes > self.budget and self:
            _, v = self.popitem(last=False)
            self.bytes -= self.size(v)


def _samples_bytes(values: list) -> int:
    return sum(int(v.nbytes) for v in values)


def _array_bytes(value: np.ndarray) -> int:
    return int(value.nbytes)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: its key, its length, ``payload``."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


class _SubModel:
    """A model of some nodes of onnxruntime's program and the initializers they read, as serialized
    pieces: the nodes and initializers (each serialized once per program, :class:`_Pieces`) and the
    inputs and outputs the caller sets.  Its bytes are those fields in their field order, what
    ``SerializeToString`` of the same ModelProto writes bar the initializers' order (a set's in
    both).  Copying the nodes and initializers into a ModelProto and serializing it again was
    1.4 + 0.3 ms of a mid-network edit's check on yolov8n_320."""

    __slots__ = ("head", "body", "tail", "input", "output")

    def __init__(self, head: bytes, body: bytes, tail: bytes):
        self.head, self.body, self.tail = head, body, tail
        self.input: list[onnx.ValueInfoProto] = []
        self.output: list[onnx.ValueInfoProto] = []

    def SerializeToString(self) -> bytes:  # (what runtime.ort_session reads)
        g = b"".join([self.body, *(_field(11, v.SerializeToString()) for v in self.input),
                      *(_field(12, v.SerializeToString()) for v in self.output)])
        return b"".join([self.head, _field(7, g), self.tail])


class _Pieces:
    """A program's nodes and initializers serialized as fields of a model's graph, once per program
    (an initializer when a re-run first reads it); and its nodes in order with their inputs and
    outputs, read once (each read of a node proto's fields makes new Python objects)."""

    def __init__(self, p: Program):
        prog = p.optimised
        self.optimised = prog
        self.inits = p.inits
        self.order = list(prog.graph.node)  # (the same wrappers as the program's producers hold)
        self.nodes = {id(n): _field(1, n.SerializeToString()) for n in self.order}
        self.inputs = {id(n): n.input[:] for n in self.order}
        self.outputs = {id(n): n.output[:] for n in self.order}
        self._init_bytes: dict[str, bytes] = {}
        self.head = b"\x08" + _varint(prog.ir_version)  # field 1, a varint
        self.name = _field(2, prog.graph.name.encode())
        self.tail = b"".join(_field(8, o.SerializeToString()) for o in prog.opset_import)

    def sub_model(self, nodes, values) -> _SubModel:
        """The model of ``nodes`` (of the program, in its order) with the initializers they read,
        ``values`` (initializer name -> tensor) in place of the program's own; its inputs and
        outputs are the caller's."""
        ins = self.inputs
        used = {i for n in nodes for i in ins[id(n)]}
        out = [self.nodes[id(n)] for n in nodes]
        out.append(self.name)
        own, done = self.inits, self._init_bytes
        for i in used:
            t = values.get(i)
            if t is not None:
                out.append(_field(5, t.SerializeToString()))
            elif i in own:
                b = done.get(i)
                if b is None:
                    b = done[i] = _field(5, own[i].SerializeToString())
                out.append(b)
        return _SubModel(self.head, b"".join(out), self.tail)


def _pieces(p: Program) -> _Pieces:
    got = p.pieces
    if not isinstance(got, _Pieces) or got.optimised is not p.optimised:
        got = p.pieces = _Pieces(p)
    return got


_ONE_BYTE = frozenset({"tensor(uint8)", "tensor(int8)", "tensor(bool)"})


def _disabled_session(model):
    """An already optimised program, run as it is (its kernels are the default session's).  Its
    intra-op threads stay the default: with one, a kernel of the test models rounds differently
    from a default session (not bit-identical)."""
    import onnxruntime as ort

    so = quiet_options()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort_session(model, so)
