"""Editing the ONNX graph a QDQ export is built in: fresh names, rewired inputs, the nodes and
initializers the export adds, and the float originals it leaves unread."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["Rewrite", "BaseFacts", "prune", "names_in"]

_RAW_TYPES = {np.dtype(t): e for t, e in ((np.float32, onnx.TensorProto.FLOAT), (np.int8, onnx.TensorProto.INT8),
                                           (np.uint8, onnx.TensorProto.UINT8), (np.int32, onnx.TensorProto.INT32),
                                           (np.int16, onnx.TensorProto.INT16), (np.uint16, onnx.TensorProto.UINT16),
                                           (np.int64, onnx.TensorProto.INT64))}


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
    names = set()
    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                   list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            for n in sg.node:
                names.update(n.input)
                names |= _subgraph_inputs(n)
    return names


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
    ~900 nodes back for them was a fifth of a build of yolov8n_320)."""

    __slots__ = ("inputs", "sub_used", "consts")

    def __init__(self, model: onnx.ModelProto):
        self.inputs: dict[str, list[str]] = {}
        self.sub_used: set[str] = set()
        self.consts: list[list[str]] = []
        for n in model.graph.node:
            self.inputs[n.name] = n.input[:]
            if n.attribute:
                self.sub_used |= _subgraph_inputs(n)
                if n.op_type == "Constant":
                    self.consts.append(n.output[:])


class Rewrite:
    """The model a build rewrites, and the nodes and initializers it adds."""

    def __init__(self, model: onnx.ModelProto, base_inits=(), names=None, facts: BaseFacts | None = None):
        """``base_inits``: the original initializers, left out of ``model``; :meth:`assemble`
        adds back those still read (the float weights the build replaces are never copied).
        ``names``: :func:`names_in` of the two, if known; ``facts``: :class:`BaseFacts` of ``model``,
        if known."""
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
        return node

    def set_input(self, node: onnx.NodeProto, index: int, name: str) -> None:
        """Input ``index`` of ``node`` (one the build added) reads ``name`` instead."""
        node.input[index] = name
        self._read.add(name)

    def add_dq(self, inputs, out: str, name: str, where: list, axis: int | None = None) -> onnx.NodeProto:
        """A DequantizeLinear writing ``out``, appended to ``where`` (:attr:`head` or an :attr:`after` list)."""
        node = _node("DequantizeLinear", inputs, out, name, axis)
        self._read.update(inputs)
        where.append(node)
        self._dq[out] = node
        return node

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
        elem = _RAW_TYPES.get(array.dtype) if isinstance(array, np.ndarray) else None
        if elem is None or array.dtype.byteorder == ">":
            self.inits.append(numpy_helper.from_array(array, name))
        else:
            # What numpy_helper.from_array writes for these types (raw little-endian bytes), without
            # its dtype checks: 13,340 initializers on the 20k CNN, 0.3 s of the build
            self.inits.append(onnx.TensorProto(name=name, data_type=elem, dims=array.shape,
                                               raw_data=array.tobytes()))
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
        def added(nodes):
            for n in nodes:
                g.node.append(n)
                g.node.extend(self._copies.get(n.output[0], ()) if n.op_type == "DequantizeLinear" else ())

        added(self.head)
        for n in order:
            g.node.append(n)
            added(self.after.get(n.name, ()))
        # (A DQ's copies read what it reads.)
        used = {o.name for o in g.output} | self.facts.sub_used | self._read
        inputs = self._inputs
        for name, base in self.facts.inputs.items():
            used.update(inputs.get(name, base))
        prune(self.model, self.base_inits + self.inits, used, self.facts.consts)
