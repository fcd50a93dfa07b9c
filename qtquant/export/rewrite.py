"""Editing the ONNX graph a QDQ export is built in: fresh names, rewired inputs, the nodes and
initializers the export adds, and the float originals it leaves unread."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import onnx
from onnx import numpy_helper

from ..model.nodetable import nested_nodes, node_parts
from .records import Made

__all__ = ["Rewrite", "BaseFacts", "ValueMemo", "prune", "names_in", "raw_value_key"]

RAW_TYPES = {np.dtype(t): e for t, e in ((np.float32, onnx.TensorProto.FLOAT), (np.int8, onnx.TensorProto.INT8),
                                           (np.uint8, onnx.TensorProto.UINT8), (np.int32, onnx.TensorProto.INT32),
                                           (np.int16, onnx.TensorProto.INT16), (np.uint16, onnx.TensorProto.UINT16),
                                           (np.int64, onnx.TensorProto.INT64))}


def raw_value_key(data_type: int, dims, body: bytes) -> bytes:
    """:func:`qtquant.runs.fingerprints.value_key` of an initializer of ``data_type`` and ``dims`` whose
    raw data (or, without any, its serialization with the name left empty) is ``body``."""
    return f"{data_type}:{tuple(dims)}:".encode() + body


class ValueMemo:
    """What recording builds (:attr:`Rewrite.made`) keep from one to the next: the
    :func:`raw_value_key` of base initializers by name, and for big arrays, by identity, their key
    and the initializer protos made of them (the quantized weights are cached, the same objects in
    every build: copying them out into bytes, a key and a proto at each build was 1.5 of
    yolov8n_320's ~10 ms), the least recently used dropped past :data:`MEMO_BYTES`.  An array is
    held while it is here, so its id is not reused meanwhile; arrays given to a build are never
    changed in place, and nothing changes an initializer proto a build made (the model gets copies)."""

    def __init__(self, budget: int | None = None):
        self.base: dict[str, bytes] = {}
        self.budget = MEMO_BYTES if budget is None else budget
        self._arrays: "OrderedDict[int, tuple]" = OrderedDict()  # id -> (array, elem, key, {name: proto})
        self.bytes = 0

    def init(self, array: np.ndarray, elem: int, name: str) -> tuple[onnx.TensorProto, bytes]:
        """(the initializer ``name`` of ``array``'s raw bytes as type ``elem``, its :func:`raw_value_key`)."""
        if array.nbytes < MEMO_MIN_BYTES:
            raw = array.tobytes()
            return (onnx.TensorProto(name=name, data_type=elem, dims=array.shape, raw_data=raw),
                    raw_value_key(elem, array.shape, raw))
        got = self._arrays.get(id(array))
        if got is None or got[0] is not array or got[1] != elem:
            raw = array.tobytes()
            got = (array, elem, raw_value_key(elem, array.shape, raw), {})
            old = self._arrays.pop(id(array), None)
            if old is not None:
                self.bytes -= self._size(old)
            self._arrays[id(array)] = got
            self.bytes += len(got[2])
        else:
            self._arrays.move_to_end(id(array))
        proto = got[3].get(name)
        if proto is None:
            proto = got[3][name] = onnx.TensorProto(name=name, data_type=elem, dims=array.shape,
                                                    raw_data=got[2][-array.nbytes:] if array.nbytes else b"")
            self.bytes += array.nbytes
        while self.bytes > self.budget and self._arrays:
            _, old = self._arrays.popitem(last=False)
            self.bytes -= self._size(old)
        return proto, got[2]

    @staticmethod
    def _size(entry) -> int:
        return len(entry[2]) + entry[0].nbytes * len(entry[3])


MEMO_MIN_BYTES = 4096  # smaller arrays are copied out at each build (cheap, and most are new each time)
MEMO_BYTES = 64 << 20  # ValueMemo's keys and protos of big arrays, together


def names_in(model, inits=()) -> set[str]:
    """Every name ``model`` (and ``inits``, initializers kept apart from it) uses: tensors and nodes."""
    g = model.graph
    used = {t.name for t in g.initializer} | {t.name for t in inits} | {i.name for i in g.input} | \
        {o.name for o in g.output}
    for n in g.node:
        used.update(n.input)
        used.update(n.output)
        used.add(n.name)
    return used


def _node(op: str, inputs, out: str, name: str, axis: int | None = None) -> onnx.NodeProto:
    """What ``helper.make_node(op, inputs, [out], name=name[, axis=axis])`` makes (the same bytes),
    without its checks and attribute sorting: 1.6 against 3.0 us a node, 2.2 against 9.5 with the
    axis (46,664 nodes in the 20,000-node CNN's export)."""
    node = onnx.NodeProto()  # (field by field: half the time of the keyword constructor under upb)
    node.op_type = op
    node.input.extend(inputs)
    node.output.append(out)
    node.name = name
    if axis is not None:
        a = node.attribute.add()
        a.name, a.i, a.type = "axis", axis, onnx.AttributeProto.INT
    return node


class _Names:
    def __init__(self, model, inits=(), used=None):
        # ``used``: names_in(model, inits) computed already (a build's base is the same each time)
        self.used = set(used) if used is not None else names_in(model, inits)
        self.next: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        # Suffixes resume where the last name of this base stopped: one DQ per consumer asks for
        # thousands of names of one base on a big graph (a shared weight), which counting from 1
        # each time made quadratic.
        name, k = base, self.next.get(base, 1)
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.next[base] = k
        self.used.add(name)
        return name


def _subgraph_inputs(node) -> set[str]:
    return {i for n in nested_nodes([node]) for i in n.input}


def prune(model, pending=(), used=None, consts=None) -> None:
    """Drop initializers and Constant nodes nothing reads any more (the float originals).
    ``pending``: initializers not in the model yet, appended after its own where read.
    ``used`` and ``consts``: every name a node reads (the graph's outputs included) and the outputs of
    each Constant node, when the caller knows them (:meth:`Rewrite.assemble`): the model's nodes
    are then not read at all."""
    g = model.graph
    if used is None:
        used = {o.name for o in g.output}
        consts = []
        for n in g.node:  # one pass: each access of a node proto makes a Python object (66,662 on the 20k CNN)
            used.update(n.input)
            if n.attribute:
                used |= _subgraph_inputs(n)
                if n.op_type == "Constant":
                    consts.append(n.output[:])
    if any(not any(o in used for o in outs) for outs in consts):
        keep_nodes = [n for n in g.node if n.op_type != "Constant" or any(o in used for o in n.output)]
        del g.node[:]
        g.node.extend(keep_nodes)
    keep = [t for t in g.initializer if t.name in used]
    dropped = ({t.name for t in g.initializer} - {t.name for t in keep}) | \
        {t.name for t in pending if t.name not in used}
    if len(keep) < len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(keep)
    g.initializer.extend(t for t in pending if t.name in used)
    if dropped:
        # Old-style models also list initializers as graph inputs: drop the pruned ones.
        ins = [i for i in g.input if i.name not in dropped]
        del g.input[:]
        g.input.extend(ins)


class BaseFacts:
    """What :meth:`Rewrite.assemble` needs of a build's base nodes, read once per base: each node's
    inputs, the names its subgraphs read and each Constant node's outputs (reading the built model's
    ~900 nodes back for them was a fifth of a build of yolov8n_320); and for :attr:`Rewrite.made`,
    the nodes in order with their domain, op, serialized attributes, outputs and whether an
    attribute is a subgraph (None when two nodes share a name: then nothing is recorded)."""

    __slots__ = ("inputs", "sub_used", "consts", "order", "parts", "outputs")

    def __init__(self, model: onnx.ModelProto):
        self.inputs: dict[str, list[str]] = {}
        self.sub_used: set[str] = set()
        self.consts: list[list[str]] = []
        self.order: list[str] | None = []
        self.parts: dict[str, tuple] = {}  # name -> (domain, op_type, serialized attributes, a subgraph?)
        self.outputs: dict[str, list[str]] = {}
        for n in model.graph.node:
            self.inputs[n.name] = n.input[:]
            self.order.append(n.name)
            self.outputs[n.name] = n.output[:]
            if n.attribute:
                self.sub_used |= _subgraph_inputs(n)
                if n.op_type == "Constant":
                    self.consts.append(n.output[:])
            self.parts[n.name] = node_parts(n)
        if len(self.parts) != len(self.order):
            self.order = None


_AXIS_BYTES: dict[int, bytes] = {}


def _axis_bytes(axis: int) -> bytes:
    """The serialized ``axis`` attribute of :func:`_node` (what a walk of the model reads back)."""
    b = _AXIS_BYTES.get(axis)
    if b is None:
        b = _AXIS_BYTES[axis] = _node("DequantizeLinear", (), "", "", axis).attribute[0].SerializeToString()
    return b


class Rewrite:
    """The model a build rewrites, and the nodes and initializers it adds."""

    def __init__(self, model: onnx.ModelProto, base_inits=(), names=None, facts: BaseFacts | None = None,
                 record: bool = False, memo: ValueMemo | None = None):
        """``base_inits``: the original initializers, left out of ``model``; :meth:`assemble`
        adds back those still read (the float weights the build replaces are never copied).
        ``names``: :func:`names_in` of the two, if known; ``facts``: :class:`BaseFacts` of ``model``,
        if known.  ``record``: set :attr:`made` (``memo``: the caller's :class:`ValueMemo`, kept from
        one build to the next)."""
        self.model = model
        self.facts = facts if facts is not None else BaseFacts(model)
        self._read: set[str] = set()  # what the nodes the build adds read
        self.base_inits = list(base_inits)
        self.names = _Names(model, self.base_inits, names)
        self.nodes = {n.name: n for n in model.graph.node}
        self.inits: list[onnx.TensorProto] = []
        self.head: list[onnx.NodeProto] = []  # DQ of weights/constants and Q/DQ of model inputs
        self.after: dict[str, list[onnx.NodeProto]] = {}  # producer -> the Q/DQ that follow it
        self._dq: dict[str, onnx.NodeProto] = {}  # output -> a DequantizeLinear the build added
        self._copies: dict[str, list[onnx.NodeProto]] = {}  # a DQ's output -> its copies (placed after it)
        # node name -> its inputs as a list, kept in step with the proto by rewire: reading a
        # proto's repeated field item by item was a tenth of a 20,000-node CNN's build.
        self._inputs: dict[str, list[str]] = {}
        self._outputs: dict[str, list[str]] = {}  # base node name -> its outputs, where set_output changed them
        self._added: dict[int, tuple] = {}  # id(a node the build added) -> (op, serialized attributes, inputs, outputs)
        # What the build made, for a walk of the model without reading it back (programs.Walk.of_build):
        # per node in order (domain, op_type, serialized attributes, a subgraph?, inputs, outputs), the
        # initializers by name (the protos the model got copies of), and the :func:`raw_value_key` of
        # those whose value the build knows.  Set by assemble; None when unknown (not asked for, nodes
        # sharing a name, Constant nodes pruned, a model that came with initializers).
        self.made: Made | None = None
        self._keys: dict[str, bytes] | None = {} if record else None  # None: not recording
        self._memo = memo if memo is not None else ValueMemo()

    def _ins(self, name: str) -> list[str]:
        ins = self._inputs.get(name)
        if ins is None:
            ins = self._inputs[name] = list(self.facts.inputs[name])
        return ins

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def rewire(self, consumer: str, old: str, new: str, index: int | None = None) -> None:
        pn, ins = self.nodes[consumer], self._ins(consumer)
        for k, i in enumerate(ins):
            if i == old and (index is None or k == index):
                pn.input[k] = ins[k] = new

    def add_q(self, inputs, out: str, name: str, where: list) -> onnx.NodeProto:
        """A QuantizeLinear writing ``out``, appended to ``where``."""
        node = _node("QuantizeLinear", inputs, out, name)
        self._read.update(inputs)
        where.append(node)
        self._added[id(node)] = ("QuantizeLinear", (), list(inputs), [out])
        return node

    def set_input(self, node: onnx.NodeProto, index: int, name: str) -> None:
        """Input ``index`` of ``node`` (one the build added) reads ``name`` instead."""
        node.input[index] = name
        self._added[id(node)][2][index] = name
        self._read.add(name)

    def set_output(self, node_name: str, old: str, new: str) -> None:
        """The base node ``node_name`` writes ``new`` where it wrote ``old``."""
        pn = self.nodes[node_name]
        outs = self._outputs.get(node_name)
        if outs is None:
            outs = self._outputs[node_name] = list(self.facts.outputs[node_name])
        for k, o in enumerate(outs):
            if o == old:
                pn.output[k] = outs[k] = new

    def add_dq(self, inputs, out: str, name: str, where: list, axis: int | None = None) -> onnx.NodeProto:
        """A DequantizeLinear writing ``out``, appended to ``where`` (:attr:`head` or an :attr:`after` list)."""
        node = _node("DequantizeLinear", inputs, out, name, axis)
        self._read.update(inputs)
        where.append(node)
        self._dq[out] = node
        self._added[id(node)] = ("DequantizeLinear", () if axis is None else [_axis_bytes(axis)], list(inputs), [out])
        return node

    def read_by(self, out: str) -> list[str]:
        """The inputs of the DequantizeLinear the build added writing ``out``."""
        return self._added[id(self._dq[out])][2]

    def dq_copy(self, out: str) -> str:
        """One more DequantizeLinear reading what the one writing ``out`` reads, right after it; the
        float name it writes.

        Every DQ of the export feeds one input of one node (none also writes a model output):
        onnxruntime fuses a DQ into a single consumer and, at session creation, copies every DQ
        that feeds more (``EnsureUniqueDQForNodeUnit``, which runs at every optimisation level and
        costs seconds on a 20,000-node model, its node naming scanning the whole graph per copy).
        The copies read the same initializers: the file grows by the nodes only, and computes
        the same values."""
        node = self._dq[out]
        new = self.fresh(out)
        copy = _node("DequantizeLinear", node.input, new, self.fresh(node.name))
        copy.attribute.extend(node.attribute)
        op, sa, ins, _ = self._added[id(node)]
        self._added[id(copy)] = (op, sa, list(ins), [new])
        self._copies.setdefault(node.output[0], []).append(copy)
        self._dq[new] = node
        return new

    def feed_each(self, out: str, uses) -> None:
        """Rewire each ``(consumer, input index)`` of ``uses`` to a DequantizeLinear of its own
        (the first to the one writing ``out``); see :meth:`dq_copy`."""
        for k, (consumer, index) in enumerate(uses):
            self.rewire(consumer, self._ins(consumer)[index], out if k == 0 else self.dq_copy(out), index)

    def uses(self, tensor: str, consumers) -> list[tuple[str, int]]:
        """Every ``(consumer, input index)`` reading ``tensor`` among ``consumers`` (node names), in order."""
        return [(c, k) for c in dict.fromkeys(consumers) for k, i in enumerate(self._ins(c)) if i == tensor]

    def add_init(self, array, name: str) -> str:
        elem = RAW_TYPES.get(array.dtype) if isinstance(array, np.ndarray) else None
        if elem is None or array.dtype.byteorder == ">":
            self.inits.append(numpy_helper.from_array(array, name))
        else:
            # What numpy_helper.from_array writes for these types (raw little-endian bytes), without
            # its dtype checks: 13,340 initializers on the 20k CNN, 0.3 s of the build
            if self._keys is None:
                self.inits.append(onnx.TensorProto(name=name, data_type=elem, dims=array.shape,
                                                   raw_data=array.tobytes()))
            else:
                proto, key = self._memo.init(array, elem, name)
                if array.nbytes:
                    self._keys[name] = key
                self.inits.append(proto)
        return name

    def dequantized(self, base: str, q, scale, zero_point, axis: int | None = None) -> str:
        """``q`` with a scale and zero point of its own behind a DequantizeLinear; the float name it makes."""
        qn, sn, zn = self.fresh(f"{base}_quantized"), self.fresh(f"{base}_scale"), self.fresh(f"{base}_zero_point")
        out = self.fresh(f"{base}_dequantized")
        for arr, name in ((q, qn), (scale, sn), (zero_point, zn)):
            self.add_init(arr, name)
        self.add_dq([qn, sn, zn], out, self.fresh(f"{base}_DequantizeLinear"), self.head, axis)
        return out

    def assemble(self) -> None:
        """New heads first, each Q/DQ right after its producer; then drop what nothing reads."""
        g = self.model.graph
        order = list(g.node)
        del g.node[:]
        facts, made_added = self.facts, self._added
        # (Empty stand-ins when not recording: `record` guards every use.)
        names = facts.order if facts.order is not None else []
        keys = self._keys if self._keys is not None else {}
        record = (self._keys is not None and facts.order is not None and len(order) == len(names)
                  and not len(g.initializer))
        made: list[tuple] = []

        def added(nodes):
            for n in nodes:
                g.node.append(n)
                op, sa, ins, outs = made_added[id(n)]
                copies = self._copies.get(outs[0], ()) if op == "DequantizeLinear" else ()
                g.node.extend(copies)
                if record:
                    made.append(("", op, sa, False, ins, outs))
                    for m in copies:
                        op, sa, ins, outs = made_added[id(m)]
                        made.append(("", op, sa, False, ins, outs))

        added(self.head)
        outs = self._outputs
        inputs = self._inputs
        for k, n in enumerate(order):
            g.node.append(n)
            if record:
                name = names[k]
                domain, op, sa, sub = facts.parts[name]
                made.append((domain, op, sa, sub, inputs.get(name, facts.inputs[name]),
                             outs.get(name, facts.outputs[name])))
            added(self.after.get(n.name, ()))
        # (A DQ's copies read what it reads.)
        used = {o.name for o in g.output} | self.facts.sub_used | self._read
        for name, base in self.facts.inputs.items():
            used.update(inputs.get(name, base))
        pending = self.base_inits + self.inits
        if record and all(any(o in used for o in c) for c in facts.consts):  # no Constant node pruned
            kept = {t.name: t for t in pending if t.name in used}
            base_keys = self._memo.base
            for t in self.base_inits:
                name = t.name
                if name in kept:
                    key = base_keys.get(name)
                    if key is None:
                        raw = t.raw_data
                        key = base_keys[name] = raw_value_key(t.data_type, t.dims, raw) if raw else b""
                    if key:
                        keys[name] = key
            self.made = (made, kept, keys)
        prune(self.model, pending, used, self.facts.consts)
