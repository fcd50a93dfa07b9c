"""The graph model: ONNX in, a shape-resolved graph with topological views out.

The model is loaded *without* its external data; weights are read lazily, so a
multi-gigabyte model costs no more to open than its structure.
"""

from __future__ import annotations

import difflib
import hashlib
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import ModelError, ShapeError
from .fileio.paths import existing_file
from .modelcheck import (FLOAT_TYPES, apply_input_shapes, check_external_data, check_input_sizes, check_text,
                         file_sha256, infer_shapes, inline_small_external, toposort)
from .ops import Role, fused_into_producer, handler_for, passes_through
from .qdq import is_qdq_model
from .shapes import format_shape, parse_input_shapes
from .vocab import TensorKind

__all__ = ["Node", "Tensor", "Graph", "load_graph", "read_model_file", "graph_from_model", "MIN_OPSET",
           "MAX_OPSET", "parse_cut", "cut_model"]

MIN_OPSET = 11
MAX_OPSET = 23



class Node:
    """One op.  Attributes are decoded on first access: most analyses never look at them."""

    __slots__ = ("name", "op_type", "inputs", "outputs", "domain", "index", "_attrs", "_attr_protos")

    def __init__(self, name, op_type, inputs, outputs, attrs=None, domain="", index=0, attr_protos=()):
        self.name = name
        self.op_type = op_type
        self.inputs = inputs
        self.outputs = outputs
        self.domain = domain
        self.index = index  # position in topological order
        self._attrs = attrs
        self._attr_protos = attr_protos

    @property
    def attrs(self) -> dict:
        if self._attrs is None:
            self._attrs = {a.name: _attr_value(a) for a in self._attr_protos}
        return self._attrs

    @property
    def handler(self):
        return handler_for(self.op_type)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_type})"


_UNSET = object()


class Tensor:
    """One value of the graph.  The shape is decoded from its ValueInfo on first access:
    analyses that never look at shapes do not pay for decoding thousands of them."""

    __slots__ = ("name", "_shape", "_type", "elem_type", "kind", "producer", "consumers")

    def __init__(self, name, shape=_UNSET, elem_type=0, kind=TensorKind.ACTIVATION, producer=None, consumers=None, *,
                 type_proto=None):
        self.name = name
        self._shape = shape
        self._type = type_proto
        self.elem_type = elem_type  # onnx.TensorProto enum, 0 when unknown
        self.kind = kind
        self.producer = producer
        self.consumers = [] if consumers is None else consumers

    @property
    def shape(self) -> tuple | None:
        if self._shape is _UNSET:
            self._shape = _dims(self._type) if self._type is not None else None
            self._type = None
        return self._shape

    @shape.setter
    def shape(self, value) -> None:
        self._shape = value
        self._type = None

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.kind}, {self.shape})"

    @property
    def is_float(self) -> bool:
        return self.elem_type in FLOAT_TYPES

    @property
    def dtype_name(self) -> str:
        return onnx.TensorProto.DataType.Name(self.elem_type).lower() if self.elem_type else "unknown"

    @property
    def size(self) -> int:
        if not self.shape or any(d is None for d in self.shape):
            return 0 if self.shape is None else 0
        return int(np.prod(self.shape, dtype=np.int64))


def _attr_value(a: onnx.AttributeProto):
    if a.type == onnx.AttributeProto.GRAPH:
        return "<graph>"
    if a.type == onnx.AttributeProto.GRAPHS:
        return "<graphs>"
    if a.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t) if a.t.data_location != onnx.TensorProto.EXTERNAL else "<tensor>"
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def _dim(d):
    v = d.dim_value
    if v:
        return v
    return 0 if d.HasField("dim_value") else None  # a literal zero-sized dim vs an unknown one


def _dims(type_proto) -> tuple | None:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(map(_dim, tt.shape.dim))


KEEP_MODEL_BYTES = 64 << 20  # Graph.model_bytes keeps serialized models up to this size


class Graph:
    """A loaded, shape-resolved ONNX graph.  Plain data plus topological views."""

    def __init__(self, model: onnx.ModelProto, path: Path | None, input_shapes: dict, sha256: str,
                 cut: tuple[str, ...] = ()):
        self.model = model
        self.cut = tuple(cut)  # the tensors the file's graph was cut at (its outputs now); () = whole file
        self.path = path
        self.base_dir = path.parent if path else Path.cwd()
        self.input_shapes = dict(input_shapes)
        self.sha256 = sha256
        self.opset = _default_opset(model)
        self.nodes: dict[str, Node] = {}
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = [o.name for o in model.graph.output]
        self._init_protos = {t.name: t for t in model.graph.initializer}
        self._init_cache: dict[str, np.ndarray] = {}
        self._concat_nodes: list[Node] | None = None
        self._model_bytes: bytes | None = None
        self._build()

    # -- construction -------------------------------------------------------------------
    def _build(self) -> None:
        g = self.model.graph
        vi = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
        for t in g.initializer:
            self.tensors[t.name] = Tensor(t.name, tuple(t.dims), t.data_type,
                                          TensorKind.WEIGHT if t.data_type in FLOAT_TYPES else TensorKind.SHAPE)
        for i in g.input:
            if i.name in self.tensors:
                continue  # old-style models list initializers as inputs
            et = i.type.tensor_type.elem_type
            kind = TensorKind.INPUT if et in FLOAT_TYPES else TensorKind.SHAPE
            self.tensors[i.name] = Tensor(i.name, _dims(i.type), et, kind)
            self.inputs.append(i.name)

        tensors = self.tensors
        self._quantized = {n for n, t in tensors.items() if t.kind == TensorKind.INPUT}
        order = list(g.node)  # already sorted by graph_from_model
        seen_names: set[str] = set()
        for idx, pnode in enumerate(order):
            name = pnode.name
            if not name or name in seen_names:
                name = f"{pnode.op_type}_{idx}"
                while name in seen_names:
                    name += "_"
                pnode.name = name
            seen_names.add(name)
            op = pnode.op_type
            node = Node(name, op, list(pnode.input), list(pnode.output), None, pnode.domain, idx,
                        pnode.attribute)
            self.nodes[name] = node
            ins = [tensors[i] for i in node.inputs if i]
            static = all(t.kind in (TensorKind.WEIGHT, TensorKind.SHAPE) for t in ins)
            role = handler_for(op).role
            quant_out = role is not Role.NONE
            for o in node.outputs:
                if not o:
                    continue
                v = vi.get(o)
                vt = v.type if v is not None else None
                et = vt.tensor_type.elem_type if vt is not None else 0
                if et and et not in FLOAT_TYPES:
                    kind = TensorKind.SHAPE
                elif op == "Constant" or (static and ins) or (not ins and role is Role.NONE):
                    kind = TensorKind.WEIGHT if (et in FLOAT_TYPES or not et) else TensorKind.SHAPE
                elif not et and (role is Role.NONE or not any(t.is_float for t in ins)):
                    kind = TensorKind.SHAPE
                else:
                    kind = TensorKind.ACTIVATION
                tensors[o] = Tensor(o, _UNSET if vt is not None else None, et, kind, producer=name,
                                    type_proto=vt)
                if kind is TensorKind.ACTIVATION and quant_out:
                    self._quantized.add(o)
            for t in ins:
                t.consumers.append(name)
        self._quantized -= fused_into_producer(self)

    # -- views ----------------------------------------------------------------------------
    @property
    def order(self) -> list[Node]:
        return list(self.nodes.values())

    def producer(self, tensor: str) -> Node | None:
        t = self.tensors.get(tensor)
        return self.nodes[t.producer] if t is not None and t.producer else None

    def consumers(self, tensor: str) -> list[Node]:
        t = self.tensors.get(tensor)
        return [self.nodes[c] for c in t.consumers] if t else []

    def is_quantized(self, tensor: str) -> bool:
        """Activations (and float model inputs) that carry int8 quantization."""
        return tensor in self._quantized

    @cached_property
    def quantized_tensors(self) -> list[str]:
        return [n for n in self.tensors if n in self._quantized]

    def observed(self, tensor: str) -> bool:
        """True when the tensor gets an observer of its own (not inherited through a pass-through op)."""
        if not self.is_quantized(tensor):
            return False
        p = self.producer(tensor)
        return p is None or not passes_through(p, self)

    @cached_property
    def observed_tensors(self) -> list[str]:
        return [n for n in self.quantized_tensors if self.observed(n)]

    def concat_nodes(self) -> list[Node]:
        # Asked on every overlay refresh; the graph does not change after _build.
        if self._concat_nodes is None:
            self._concat_nodes = [n for n in self.nodes.values() if n.op_type == "Concat"
                                  and n.outputs and self.is_quantized(n.outputs[0])]
        return list(self._concat_nodes)

    def model_bytes(self) -> bytes:
        """``model.SerializeToString()``, made once: the encoder holds the GIL for its whole run
        (20,000 nodes: 6-23 ms alone, over 45 ms next to other work), and each child process
        (calibration, fidelity) needs the bytes.
        The app makes them in the load job, before a window is there to freeze."""
        if self._model_bytes is not None:
            return self._model_bytes
        data = self.model.SerializeToString()
        if len(data) <= KEEP_MODEL_BYTES:  # weights inline beyond that: a copy is not worth keeping
            self._model_bytes = data
        return data

    def prepare_model_bytes(self) -> None:
        """Make :meth:`model_bytes` now if they will be kept (``ByteSize`` copies nothing): a
        model with more inline weights would be encoded here only to be thrown away."""
        if self._model_bytes is None and self.model.ByteSize() <= KEEP_MODEL_BYTES:
            self.model_bytes()

    def initializer(self, name: str) -> np.ndarray:
        if name not in self._init_cache:
            proto = self._init_protos[name]
            try:
                arr = numpy_helper.to_array(proto, base_dir=str(self.base_dir))
            except Exception as e:  # missing or short external data file
                raise ModelError(f"cannot read weight {name!r}: {e}") from None
            self._init_cache[name] = arr
        return self._init_cache[name]

    def constant_value(self, name: str) -> np.ndarray | None:
        if name in self._init_protos:
            return self.initializer(name)
        p = self.producer(name)
        if p is not None and p.op_type == "Constant" and isinstance(p.attrs.get("value"), np.ndarray):
            return p.attrs["value"]
        return None

    @cached_property
    def nx(self):
        """Node-level DiGraph (networkx) with the tensor name on each edge."""
        import networkx as nx

        dg = nx.DiGraph()
        dg.add_nodes_from(self.nodes)
        for t in self.tensors.values():
            if t.producer:
                for c in t.consumers:
                    dg.add_edge(t.producer, c, tensor=t.name)
        return dg

    def describe_tensor(self, name: str) -> str:
        t = self.tensors[name]
        return f"{name} [{t.dtype_name} {format_shape(t.shape)}]"

    def __repr__(self) -> str:
        return f"<Graph {self.path.name if self.path else '?'}: {len(self.nodes)} nodes>"


def _default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def _ort_fill_shapes(graph: "Graph") -> None:
    """Where onnx shape inference left activation shapes unknown, run onnxruntime once."""
    missing = [n for n, t in graph.tensors.items()
               if t.kind == TensorKind.ACTIVATION and (t.shape is None or any(d is None for d in t.shape))]
    if not missing:
        return
    from .runtime import run_with_outputs, zeros_feed

    try:
        values = run_with_outputs(graph, missing, zeros_feed(graph))
    except Exception:
        return  # shapes stay unknown; analysis still works, costs are then estimates
    for n, v in values.items():
        t = graph.tensors[n]
        t.shape = tuple(int(d) for d in v.shape)
        if not t.elem_type:
            t.elem_type = onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
            if t.elem_type not in FLOAT_TYPES:
                t.kind = TensorKind.SHAPE
                graph._quantized.discard(n)


def _check_channels(graph: "Graph") -> None:
    """Shape inference does not compare Conv input channels with the weights; do it here."""
    for node in graph.nodes.values():
        if node.op_type != "Conv" or len(node.inputs) < 2:
            continue
        x, w = graph.tensors.get(node.inputs[0]), graph.tensors.get(node.inputs[1])
        if not x or not w or not x.shape or not w.shape or len(x.shape) < 2 or x.shape[1] is None:
            continue
        if len(w.shape) != len(x.shape):
            raise ShapeError(f"Conv {node.name!r} has a weight of rank {len(w.shape)} for an input of "
                             f"rank {len(x.shape)}")
        want = w.shape[1] * int(node.attrs.get("group", 1))
        if want and x.shape[1] != want:
            src = next((n for n in graph.inputs), "?")
            raise ShapeError(f"the input shapes do not fit the model: Conv {node.name!r} expects {want} input "
                             f"channels but gets {x.shape[1]} (from input {src!r} "
                             f"{format_shape(graph.tensors[src].shape) if src in graph.tensors else ''})")


def read_model_file(path) -> tuple[onnx.ModelProto, Path]:
    """The model in ``path``, without its external data, or a one-line :class:`ModelError`."""
    p = existing_file(path, ModelError, noun="model", folder_noun="ONNX model")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception:
        raise ModelError(f"{p.name} is not a readable ONNX model (corrupt or wrong format)") from None
    if not model.graph.node:
        raise ModelError(f"{p.name} is not a readable ONNX model (it has no graph nodes)")
    return model, p


def parse_cut(cut) -> tuple[str, ...]:
    """``--cut`` text (``a,b``), or a list of names, as a tuple of tensor names (order kept, no repeats)."""
    if not cut:
        return ()
    parts = cut.split(",") if isinstance(cut, str) else [p for c in cut for p in str(c).split(",")]
    return tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))


def _subgraph_names(node) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read: outer-scope values it needs too."""
    names: set[str] = set()
    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                   list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            for n in sg.node:
                names.update(i for i in n.input if i)
                names |= _subgraph_names(n)
    return names


def cut_model(model: onnx.ModelProto, cut) -> None:
    """Cut ``model`` in place to the subgraph that ends at the tensors ``cut``, as
    ``onnx.utils.extract_model`` does: the outputs become ``cut``, the inputs stay, nodes
    (and initializers) nothing in ``cut`` needs are dropped.  A name that is not a tensor the
    graph computes or reads is a one-line :class:`ModelError`, naming a close match if any."""
    cut = parse_cut(cut)
    if not cut:
        return
    g = model.graph
    producer = {o: n for n in g.node for o in n.output if o}
    inputs = {i.name for i in g.input}
    known = set(producer) | inputs
    weights = {t.name for t in g.initializer}
    for t in cut:
        if t in known and t not in weights:
            continue
        if t in weights:
            raise ModelError(f"cannot cut at {t!r}: it is a weight of the model, not a tensor it computes")
        close = difflib.get_close_matches(t, sorted(known - weights), n=1, cutoff=0.6)
        raise ModelError(f"cannot cut at {t!r}: the model has no tensor of that name"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    needed = set(cut)
    kept: set[int] = set()
    stack = list(cut)
    while stack:
        n = producer.get(stack.pop())
        if n is None or id(n) in kept:
            continue
        kept.add(id(n))
        for i in [*n.input, *_subgraph_names(n)]:
            if i and i not in needed:
                needed.add(i)
                stack.append(i)
    vi = {v.name: v for v in [*g.value_info, *g.input, *g.output]}
    outs = []
    for t in cut:
        o = onnx.ValueInfoProto()
        if t in vi:
            o.CopyFrom(vi[t])
        else:
            o.name = t  # typed by shape inference
        outs.append(o)
    nodes = [n for n in g.node if id(n) in kept]
    # Initializers listed as inputs (old-style models) stay: the inputs are unchanged.
    inits = [t for t in g.initializer if t.name in needed or t.name in inputs]
    infos = [v for v in g.value_info if v.name in needed and v.name not in set(cut)]
    del g.node[:], g.initializer[:], g.value_info[:], g.output[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    g.value_info.extend(infos)
    g.output.extend(outs)


def load_graph(path, input_shapes=None, *, ort_fallback: bool = True) -> Graph:
    """Load a float ONNX file, resolve dynamic dims from ``input_shapes`` and infer shapes.

    A QDQ-quantized file is refused: its graph is only right once its Q/DQ pairs are read into
    scales, which :func:`qtquant.open_model` (the one way to open any model) does.
    """
    model, p = read_model_file(path)
    if is_qdq_model(model):
        raise ModelError(f"{p.name} is QDQ-quantized; open it with qtquant.open_model, which reads its scales")
    check_external_data(model, p.parent)
    return graph_from_model(model, input_shapes, path=p, sha256=file_sha256(p), ort_fallback=ort_fallback)


def graph_from_model(model: onnx.ModelProto, input_shapes=None, *, path: Path | None = None,
                     sha256: str = "", ort_fallback: bool = True, cut=(), text_checked: bool = False) -> Graph:
    """``cut``: tensor names the graph is cut at (:func:`cut_model`); ``sha256`` stays the file's.
    ``text_checked``: the caller ran :func:`check_text` on ``model`` already (a 20,000-node model: ~0.4 s)."""
    if not text_checked:
        check_text(model)
    cut = parse_cut(cut)
    if not model.graph.output:
        raise ModelError("the model declares no outputs; nothing it computes can be checked or run")
    opset = _default_opset(model)
    if not (MIN_OPSET <= opset <= MAX_OPSET):
        raise ModelError(f"opset {opset} is not supported (qtquant reads opsets {MIN_OPSET} to {MAX_OPSET})")
    model = onnx.ModelProto.FromString(model.SerializeToString()) if path is None else model
    if model.functions:  # calls of local functions become their bodies (named by call, see .functions)
        from .functions import inline_local_functions

        inline_local_functions(model)
    order = toposort(model.graph)  # shape inference needs topological order, and cycles fail here
    del model.graph.node[:]
    model.graph.node.extend(order)
    if cut:
        cut_model(model, cut)  # before shape inference: the cut graph is all it needs to type
    given = input_shapes.items() if isinstance(input_shapes, dict) else input_shapes
    shapes = apply_input_shapes(model, parse_input_shapes(given))
    check_input_sizes(model, shapes)
    if path is not None:
        inline_small_external(model, path.parent)
    inferred = infer_shapes(model)
    if not sha256:
        sha256 = hashlib.sha256(model.SerializeToString()).hexdigest()
    graph = Graph(inferred, path, shapes, sha256, cut)
    _check_channels(graph)
    if ort_fallback:
        _ort_fill_shapes(graph)
    return graph
