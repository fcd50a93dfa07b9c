"""The graph model: ONNX in, a shape-resolved graph with topological views out.

The model is loaded *without* its external data; weights are read lazily, so a
multi-gigabyte model costs no more to open than its structure.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import ModelError, ShapeError
from .ops import Role, handler_for, passes_through
from .shapes import format_shape, parse_input_shapes

__all__ = ["Node", "Tensor", "Graph", "load_graph", "graph_from_model", "MIN_OPSET", "MAX_OPSET"]

MIN_OPSET = 11
MAX_OPSET = 23
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.DOUBLE}


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

    def __init__(self, name, shape=_UNSET, elem_type=0, kind="activation", producer=None, consumers=None, *,
                 type_proto=None):
        self.name = name
        self._shape = shape
        self._type = type_proto
        self.elem_type = elem_type  # onnx.TensorProto enum, 0 when unknown
        self.kind = kind  # "input" | "weight" | "activation" | "shape"
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


class Graph:
    """A loaded, shape-resolved ONNX graph.  Plain data plus topological views."""

    def __init__(self, model: onnx.ModelProto, path: Path | None, input_shapes: dict, sha256: str):
        self.model = model
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
        self._build()

    # -- construction -------------------------------------------------------------------
    def _build(self) -> None:
        g = self.model.graph
        vi = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
        for t in g.initializer:
            self.tensors[t.name] = Tensor(t.name, tuple(t.dims), t.data_type,
                                          "weight" if t.data_type in FLOAT_TYPES else "shape")
        for i in g.input:
            if i.name in self.tensors:
                continue  # old-style models list initializers as inputs
            et = i.type.tensor_type.elem_type
            self.tensors[i.name] = Tensor(i.name, _dims(i.type), et, "input" if et in FLOAT_TYPES else "shape")
            self.inputs.append(i.name)

        tensors = self.tensors
        self._quantized = {n for n, t in tensors.items() if t.kind == "input"}
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
            static = all(t.kind in ("weight", "shape") for t in ins)
            role = handler_for(op).role
            quant_out = role is not Role.NONE
            for o in node.outputs:
                if not o:
                    continue
                v = vi.get(o)
                vt = v.type if v is not None else None
                et = vt.tensor_type.elem_type if vt is not None else 0
                if et and et not in FLOAT_TYPES:
                    kind = "shape"
                elif op == "Constant" or (static and ins) or (not ins and role is Role.NONE):
                    kind = "weight" if (et in FLOAT_TYPES or not et) else "shape"
                elif not et and (role is Role.NONE or not any(t.is_float for t in ins)):
                    kind = "shape"
                else:
                    kind = "activation"
                tensors[o] = Tensor(o, _UNSET if vt is not None else None, et, kind, producer=name,
                                    type_proto=vt)
                if kind == "activation" and quant_out:
                    self._quantized.add(o)
            for t in ins:
                t.consumers.append(name)

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
        return [n for n in self.nodes.values() if n.op_type == "Concat"
                and n.outputs and self.is_quantized(n.outputs[0])]

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


def _toposort(g) -> list:
    """Kahn's algorithm over the node protos; detects cycles and dangling inputs."""
    available = {t.name for t in g.initializer} | {i.name for i in g.input}
    nodes = list(g.node)
    ins = [list(n.input) for n in nodes]
    outs = [list(n.output) for n in nodes]
    # Fast path: most files are already in topological order.
    seen = set(available)
    seen.add("")
    ok = True
    for i_list, o_list in zip(ins, outs):
        if not seen.issuperset(i_list) or seen.intersection(o_list):
            ok = False
            break
        seen.update(o_list)
    if ok:
        return nodes
    producer_of: dict[str, int] = {}
    for idx, n in enumerate(nodes):
        for o in outs[idx]:
            if o:
                if o in producer_of or o in available:
                    raise ModelError(f"tensor {o!r} is produced twice (node {n.name or n.op_type!r})")
                producer_of[o] = idx
    indeg = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for idx, n in enumerate(nodes):
        deps = set()
        for i in ins[idx]:
            if not i or i in available:
                continue
            if i not in producer_of:
                raise ModelError(f"node {n.name or n.op_type!r} reads {i!r}, which nothing produces")
            deps.add(producer_of[i])
        indeg[idx] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(idx)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    ready.reverse()
    out = []
    while ready:
        i = ready.pop()
        out.append(nodes[i])
        for u in reversed(users.get(i, ())):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(out) != len(nodes):
        stuck = next(n for i, n in enumerate(nodes) if indeg[i] > 0)
        raise ModelError(f"graph has a cycle through node {stuck.name or stuck.op_type!r}")
    return out


def _all_tensors(graph):
    """Every TensorProto of a graph: initializers, Constant-like attributes, subgraphs."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for sub in a.graphs:
                yield from _all_tensors(sub)


def _check_external_data(model, base_dir: Path) -> None:
    """Refuse external data outside the model folder (or missing) before anything reads it."""
    base = base_dir.resolve()
    for t in _all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        outside = ModelError(f"weight {t.name!r} points outside the model folder ({loc!r}); refusing to read it")
        if not loc or not isinstance(loc, str) or "\0" in loc or os.path.isabs(loc) or loc.startswith(("/", "\\")):
            raise outside
        target = (base / loc).resolve()
        if base not in target.parents:
            raise outside
        if not target.is_file():
            raise ModelError(f"external data file {loc!r} for weight {t.name!r} is missing next to the model")


def _check_text(model) -> None:
    """protobuf hands back strings that are not valid UTF-8 as bytes; refuse them once here."""
    def bad(v) -> bool:
        return not isinstance(v, str)

    g = model.graph
    names = [o.domain for o in model.opset_import]
    for n in g.node:
        names += (n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute))
    for t in g.initializer:
        names += (t.name, *(e.key for e in t.external_data), *(e.value for e in t.external_data))
    names += [v.name for v in (*g.input, *g.output, *g.value_info)]
    if any(map(bad, names)):
        raise ModelError("the model has a name that is not valid UTF-8 text (corrupt file?)")


def _apply_input_shapes(model, shapes: dict[str, tuple]) -> dict[str, tuple]:
    g = model.graph
    inits = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in inits]
    names = [i.name for i in real_inputs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise ShapeError(f"unknown input name {unknown[0]!r}; the model's inputs are: {', '.join(names)}")
    resolved: dict[str, tuple] = {}
    for i in real_inputs:
        if not i.type.HasField("tensor_type"):
            raise ModelError(f"input {i.name!r} is not a tensor; only tensor inputs are supported")
        dims = i.type.tensor_type.shape.dim
        want = shapes.get(i.name)
        if want is not None:
            if i.type.tensor_type.HasField("shape") and len(dims) != len(want):
                raise ShapeError(f"input {i.name!r} has rank {len(dims)} but the given shape "
                                 f"{format_shape(want)} has rank {len(want)}")
            if not i.type.tensor_type.HasField("shape"):
                for _ in want:
                    i.type.tensor_type.shape.dim.add()
            for d, w in zip(dims, want):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != w:
                    have = format_shape(tuple(x.dim_value if x.HasField("dim_value") else None for x in dims))
                    raise ShapeError(f"input {i.name!r} expects shape {have} but got {format_shape(want)}")
                d.Clear()
                d.dim_value = w
            resolved[i.name] = tuple(want)
            continue
        free = []
        for k, d in enumerate(dims):
            if not (d.HasField("dim_value") and d.dim_value > 0):
                if k == 0:  # batch: one frame, the deployment case
                    d.Clear()
                    d.dim_value = 1
                else:
                    free.append(d.dim_param or "?")
        if free:
            example = "x".join(str(d.dim_value) if d.dim_value > 0 else "N" for d in dims)
            raise ShapeError(f"input {i.name!r} has dynamic dimensions ({', '.join(free)}); give them with "
                             f"--input-shape {i.name}={example.replace('N', '640')}")
        resolved[i.name] = tuple(d.dim_value for d in dims)
    return resolved


MAX_SHAPE_HINT = 4096  # longest plausible shape tensor (its length is a rank)


def _drop_huge_shape_hints(model) -> None:
    """Forget declared shapes that could be shape tensors longer than MAX_SHAPE_HINT.

    onnx's data propagation walks the declared length of a shape tensor (the output of
    Shape, Gather on a shape, ...) element by element and allocates for it: 2**24 takes
    seconds, 2**40 eats all memory.  A real shape tensor is never that long, whatever
    type the file declares for it, so declared integer tensors with such a dimension and
    declared 1-D tensors of any type lose their shape.  They are only hints: inference
    recomputes them.
    """
    def huge(v) -> bool:
        if not v.type.HasField("tensor_type"):
            return False
        tt = v.type.tensor_type
        dims = tt.shape.dim
        return any(d.dim_value > MAX_SHAPE_HINT for d in dims) and (len(dims) == 1 or tt.elem_type not in FLOAT_TYPES)

    g = model.graph
    keep = [v for v in g.value_info if not huge(v)]
    if len(keep) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(keep)
    for o in g.output:
        if huge(o):
            o.type.tensor_type.ClearField("shape")


MAX_INPUT_BYTES = 4 << 30  # one sample of one input; calibration holds a few of them at once


def _check_input_sizes(model, shapes: dict[str, tuple]) -> None:
    """Refuse inputs no sample could fill, before calibration tries to allocate one."""
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    for name, shape in shapes.items():
        try:
            item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(types.get(name) or onnx.TensorProto.FLOAT)).itemsize
        except Exception:  # unknown or non-numeric element type: count bytes as one per element
            item = 1
        size = item
        for d in shape:
            size *= max(int(d), 0)
        if size > MAX_INPUT_BYTES:
            raise ShapeError(f"input {name!r} of shape {format_shape(shape)} needs {size / 2**30:,.1f} GiB per "
                             f"sample; qtquant handles inputs up to {MAX_INPUT_BYTES >> 30} GiB")


_SKELETON_MIN_BYTES = 1 << 20


def _skeleton(model) -> onnx.ModelProto | None:
    """The model without the data of its big float weights, or None when nothing is big.

    Shape inference needs only their dims; leaving the bytes out keeps models whose
    weights are in memory (a dequantized QDQ file) under protobuf's 2 GB limit, and saves a copy."""
    big = [t for t in model.graph.initializer
           if t.data_type in FLOAT_TYPES and t.data_location != onnx.TensorProto.EXTERNAL
           and t.ByteSize() > _SKELETON_MIN_BYTES]
    if not big:
        return None
    names = {t.name for t in big}
    sk = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "domain", "model_version"):
        setattr(sk, f, getattr(model, f))
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    g = sk.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    for t in model.graph.initializer:
        if t.name in names:
            g.initializer.append(onnx.TensorProto(name=t.name, dims=t.dims, data_type=t.data_type))
        else:
            g.initializer.append(t)
    return sk


def _infer(model) -> onnx.ModelProto:
    _drop_huge_shape_hints(model)
    sk = _skeleton(model)
    if sk is None:
        return _infer_proto(model)
    inferred = _infer_proto(sk)
    # Graft the inferred types back onto the real model (which keeps the weights).
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for dst, src in zip(model.graph.output, inferred.graph.output):
        dst.CopyFrom(src)
    return model


def _infer_proto(model) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else "shape inference failed"
        if "No Op registered" in msg or "not registered" in msg or "Unsupported" in msg:
            try:
                return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
            except Exception as e2:  # pragma: no cover - onnx internals
                raise ModelError(f"shape inference failed: {e2}") from None
        raise ShapeError(f"the input shapes do not fit the model: {msg}") from None
    except Exception as e:
        raise ModelError(f"shape inference failed: {str(e).strip().splitlines()[0] if str(e).strip() else e}") from None


def _ort_fill_shapes(graph: "Graph") -> None:
    """Where onnx shape inference left activation shapes unknown, run onnxruntime once."""
    missing = [n for n, t in graph.tensors.items()
               if t.kind == "activation" and (t.shape is None or any(d is None for d in t.shape))]
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
                t.kind = "shape"
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


def _inline_small_external(model, base_dir: Path, limit: int = 1 << 16) -> None:
    """Shape inference needs the values of small integer tensors (Reshape shapes, axes);
    pull those in from external data.  Weights stay on disk."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for t in model.graph.initializer:
        if not uses_external_data(t) or t.data_type in FLOAT_TYPES:
            continue
        n = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        if n * 8 > limit:
            continue
        try:
            load_external_data_for_tensor(t, str(base_dir))
        except Exception:
            raise ModelError(f"cannot read external data for {t.name!r}") from None
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_graph(path, input_shapes=None, *, ort_fallback: bool = True) -> Graph:
    """Load an ONNX file, resolve dynamic dims from ``input_shapes`` and infer shapes."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelError(f"{p} is a folder, not an ONNX model file")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception:
        raise ModelError(f"{p.name} is not a readable ONNX model (corrupt or wrong format)") from None
    if not model.graph.node:
        raise ModelError(f"{p.name} is not a readable ONNX model (it has no graph nodes)")
    _check_external_data(model, p.parent)
    return graph_from_model(model, input_shapes, path=p, sha256=file_sha256(p), ort_fallback=ort_fallback)


def graph_from_model(model: onnx.ModelProto, input_shapes=None, *, path: Path | None = None,
                     sha256: str = "", ort_fallback: bool = True) -> Graph:
    _check_text(model)
    if not model.graph.output:
        raise ModelError("the model declares no outputs; nothing it computes can be checked or run")
    opset = _default_opset(model)
    if not (MIN_OPSET <= opset <= MAX_OPSET):
        raise ModelError(f"opset {opset} is not supported (qtquant reads opsets {MIN_OPSET} to {MAX_OPSET})")
    model = onnx.ModelProto.FromString(model.SerializeToString()) if path is None else model
    order = _toposort(model.graph)  # shape inference needs topological order, and cycles fail here
    del model.graph.node[:]
    model.graph.node.extend(order)
    shapes = _apply_input_shapes(model, parse_input_shapes(input_shapes.items() if isinstance(input_shapes, dict) else input_shapes))
    _check_input_sizes(model, shapes)
    if path is not None:
        _inline_small_external(model, path.parent)
    inferred = _infer(model)
    if not sha256:
        sha256 = hashlib.sha256(model.SerializeToString()).hexdigest()
    graph = Graph(inferred, path, shapes, sha256)
    _check_channels(graph)
    if ort_fallback:
        _ort_fill_shapes(graph)
    return graph
