"""Checks and shape resolution that run before a :class:`~qtquant.model.graph.Graph` is built.

Everything here treats the file as hostile: external-data paths, names, declared shapes
and input sizes are validated before onnx's C++ code or onnxruntime sees them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..base.errors import ModelError, ShapeError
from .nodetable import NodeTable
from .ops import SUBGRAPH_OPS
from .inference import infer_here
from .shapes import format_shape

if TYPE_CHECKING:
    from .shape_child import Early

__all__ = ["FLOAT_TYPES", "toposort", "topo_order", "check_external_data", "check_text", "apply_input_shapes",
           "check_input_shapes",
           "INTEGER_TYPES", "check_input_sizes", "infer_shapes", "needs_data_propagation", "inline_small_external",
           "file_sha256", "FileDigest"]

FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                         onnx.TensorProto.DOUBLE})
# Integer and bool element types: never quantized; a model output of one (an ArgMax's class) is
# compared by agreement in the accuracy check.
INTEGER_TYPES = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
                           onnx.TensorProto.UINT16, onnx.TensorProto.INT32, onnx.TensorProto.UINT32,
                           onnx.TensorProto.INT64, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})
MAX_SHAPE_HINT = 4096  # longest plausible shape tensor (its length is a rank)
MAX_INPUT_BYTES = 4 << 30  # one sample of one input; calibration holds a few of them at once


def toposort(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Kahn's algorithm over the node protos; detects cycles and dangling inputs."""
    nodes = list(g.node)
    order = topo_order(g, NodeTable(g))
    return nodes if order is None else [nodes[i] for i in order]


def topo_order(g: onnx.GraphProto, table: NodeTable) -> list[int] | None:
    """The positions of ``g``'s nodes (read into ``table``) in topological order, or None when
    the file's order is one already (most files); cycles and dangling inputs are a ModelError."""
    available = {t.name for t in g.initializer} | {i.name for i in g.input}
    ins, outs = table.inputs, table.outputs
    # Fast path: most files are already in topological order.
    seen = set(available)
    seen.add("")
    issuperset, update = seen.issuperset, seen.update
    for i_list, o_list in zip(ins, outs):
        if not issuperset(i_list) or not seen.isdisjoint(o_list):
            break
        update(o_list)
    else:
        return None

    def label(idx: int) -> str:
        return table.names[idx] or table.ops[idx]

    producer_of: dict[str, int] = {}
    for idx, o_list in enumerate(outs):
        for o in o_list:
            if o:
                if o in producer_of or o in available:
                    raise ModelError(f"tensor {o!r} is produced twice (node {label(idx)!r})")
                producer_of[o] = idx
    n_nodes = len(ins)
    indeg = [0] * n_nodes
    users: dict[int, list[int]] = {}
    for idx in range(n_nodes):
        deps: set[int] = set()
        for name in ins[idx]:
            if not name or name in available:
                continue
            if name not in producer_of:
                raise ModelError(f"node {label(idx)!r} reads {name!r}, which nothing produces")
            deps.add(producer_of[name])
        indeg[idx] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(idx)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    ready.reverse()
    out = []
    while ready:
        i = ready.pop()
        out.append(i)
        for u in reversed(users.get(i, ())):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(out) != n_nodes:
        stuck = next(i for i in range(n_nodes) if indeg[i] > 0)
        raise ModelError(f"graph has a cycle through node {label(stuck)!r}")
    return out


def _all_tensors(graph: onnx.GraphProto, attributes: Iterable[Any] | None = None) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of a graph: initializers, Constant-like attributes, subgraphs.
    ``attributes``: the graph's nodes' attribute containers, read already (NodeTable).

    upb's repeated containers are iterated by index until an IndexError, whose message costs
    more than the rest of the step: the loops here run over full slices (plain lists), and
    empty containers are not iterated at all (10,000 nodes: ~15,000 exceptions fewer)."""
    yield from graph.initializer[:]
    for sp in graph.sparse_initializer[:]:
        yield sp.values
        yield sp.indices
    for attrs in (attributes if attributes is not None else (n.attribute for n in graph.node[:])):
        if not attrs:
            continue
        for a in attrs[:]:
            if a.HasField("t"):
                yield a.t
            if a.tensors:
                yield from a.tensors[:]
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            if a.graphs:
                for sub in a.graphs[:]:
                    yield from _all_tensors(sub)


def check_external_data(model: onnx.ModelProto, base_dir: Path, table: NodeTable | None = None) -> None:
    """Refuse external data outside the model folder (or missing) before anything reads it.
    ``table``: the model's nodes read already (:class:`NodeTable`)."""
    base = base_dir.resolve()
    # a table's attributes None: none holds a tensor or a graph (NodeTable)
    attributes = None if table is None else table.attributes if table.attributes is not None else ()
    for t in _all_tensors(model.graph, attributes):
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


def check_text(model: onnx.ModelProto, table: NodeTable | None = None) -> None:
    """protobuf hands back strings that are not valid UTF-8 as bytes; refuse them once here.
    ``table``: the model's nodes read already (:class:`NodeTable`), so they are not read twice.
    ``str.join`` refuses anything but str: one C-level pass over each list finds a bytes name."""
    g = model.graph
    table = table if table is not None else NodeTable(g)
    join = "".join
    try:
        join([o.domain for o in model.opset_import])
        join(table.names)
        join(table.ops)
        join(table.domains)
        join(map(join, table.inputs))
        join(map(join, table.outputs))
        join(table.attribute_names())
        join([t.name for t in g.initializer])
        for t in g.initializer:
            if t.external_data:
                join([*(e.key for e in t.external_data), *(e.value for e in t.external_data)])
        join([v.name for v in (*g.input, *g.output, *g.value_info)])
    except TypeError:
        raise ModelError("the model has a name that is not valid UTF-8 text (corrupt file?)") from None


def check_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """What :func:`apply_input_shapes` would resolve, or its one-line error, with ``model`` left
    as it is (the open dialog checks its fields so before anything is remembered or loaded)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    probe = onnx.ModelProto()
    probe.graph.input.extend(i for i in g.input if i.name not in inits)  # copies: a few bytes each
    return apply_input_shapes(probe, shapes)


def apply_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    g = model.graph
    inits = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in inits]
    names = [i.name for i in real_inputs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise ShapeError(f"unknown input name {unknown[0]!r}; the model's inputs are: {', '.join(names)}")
    resolved: dict[str, tuple[int, ...]] = {}
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


def _drop_huge_shape_hints(model: onnx.ModelProto) -> bool:
    """Forget declared shapes that could be shape tensors longer than MAX_SHAPE_HINT, and those
    with a negative dimension.

    onnx's data propagation walks the declared length of a shape tensor (the output of
    Shape, Gather on a shape, ...) element by element and allocates for it: 2**24 takes
    seconds, 2**40 eats all memory.  A real shape tensor is never that long, whatever
    type the file declares for it, so declared integer tensors with such a dimension and
    declared 1-D tensors of any type lose their shape.  paddle2onnx writes a dynamic dimension
    as -1 (PP-OCRv3's detector and recognizer from rapidocr-openvino 1.2.3), which inference
    takes for a size and then refuses the model at any fixed input shape ("Inferred shape and
    existing shape differ in dimension 0: (1) vs (-1)").  They are only hints: inference
    recomputes them.
    """
    def bad(v: onnx.ValueInfoProto) -> bool:
        if not v.type.HasField("tensor_type"):
            return False
        tt = v.type.tensor_type
        dims = tt.shape.dim[:]
        return any(d.dim_value < 0 for d in dims) or \
            ((len(dims) == 1 or tt.elem_type not in FLOAT_TYPES) and any(d.dim_value > MAX_SHAPE_HINT for d in dims))

    g = model.graph
    keep = [v for v in g.value_info if not bad(v)]
    changed = len(keep) != len(g.value_info)
    if changed:
        del g.value_info[:]
        g.value_info.extend(keep)
    for o in g.output:
        if bad(o):
            o.type.tensor_type.ClearField("shape")
            changed = True
    return changed  # True: the model is no longer its file's


def check_input_sizes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
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


_SKELETON_MIN_BYTES = 1 << 20  # a weight this big is left out of the skeleton
# In this process the skeleton pays only once the big weights are this big in all: copying the
# rest of the model into it costs more than serializing a few MB of weights (yolov8n, 12 MB:
# 5 ms against 4).  A child process (shape_child) gets it from the first big weight: the bytes
# cross a pipe twice.
_SKELETON_MIN_TOTAL = 64 << 20
_ITEM_BYTES: dict[int, int] = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
               onnx.TensorProto.DOUBLE: 8}


def _data_bytes(t: onnx.TensorProto) -> int:
    """The size of a float tensor's data by its dims (no serializing, unlike ByteSize)."""
    n = _ITEM_BYTES.get(t.data_type, 4)
    for d in t.dims[:]:  # [:]: see _all_tensors
        n *= int(d)
    return n


def _skeleton(model: onnx.ModelProto, min_total: int = _SKELETON_MIN_TOTAL) -> onnx.ModelProto | None:
    """The model without the data of its big float weights, or None when they hold fewer than
    ``min_total`` bytes (none big: 0).

    Shape inference needs only their dims; leaving the bytes out keeps models whose
    weights are in memory (a dequantized QDQ file) under protobuf's 2 GB limit, and saves a copy."""
    sizes = [(t, _data_bytes(t)) for t in model.graph.initializer
             if t.data_type in FLOAT_TYPES and t.data_location != onnx.TensorProto.EXTERNAL]
    big = [t for t, n in sizes if n > _SKELETON_MIN_BYTES]
    if not big or sum(n for _, n in sizes if n > _SKELETON_MIN_BYTES) < min_total:
        return None
    names = {t.name for t in big}
    sk = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "domain", "model_version"):
        setattr(sk, f, getattr(model, f))  # the header fields, by name
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


def infer_shapes(model: onnx.ModelProto, table: NodeTable, opset: int, early: Early | None = None,
                 as_file: bool = False) -> tuple[onnx.ModelProto | None, bytes, bool]:
    """(the inferred model, the serialized model its types were read from, whether those bytes are
    the inferred model's own serialization).  The inferred model is ``model`` with the types shape
    inference gives its values, or None where it is those bytes, not parsed here: the nodes and
    weights are ``model``'s, and the caller reads the types from the bytes
    (:func:`~qtquant.model.nodetable.graph_value_types`) and parses them only if it needs the model.
    Where big weights were left out of the bytes, ``model`` has the types grafted on instead.
    ``table``, ``opset``: ``model``'s nodes read already and its default-domain opset, for
    :func:`needs_data_propagation` (onnx's data propagation, which only a graph that computes
    shape values needs), asked only where inference runs in this process: the app's child always
    propagates (the same types).

    ``early``: the inference of the file ``model`` was read from, started in the app's child
    (:class:`~qtquant.model.shape_child.Early`), read here if ``as_file`` (the caller changed nothing in
    ``model`` since it was parsed) and nothing needs changing before inference; else dropped."""
    from . import shape_child

    changed = _drop_huge_shape_hints(model)
    if early is not None and early.open:
        if as_file and not changed:
            return None, early.result(), True
        early.discard()
    data_prop = True if shape_child.may_want(model) else needs_data_propagation(model, table, opset)
    sk = _skeleton(model, 1 if shape_child.may_want(model) else _SKELETON_MIN_TOTAL)
    if sk is None:
        return None, _infer_proto(model, data_prop), True
    data = _infer_proto(sk, data_prop)
    inferred = onnx.load_model_from_string(data)
    # Graft the inferred types back onto the real model (which keeps the weights).
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    for dst, src in zip(model.graph.output, inferred.graph.output):
        dst.CopyFrom(src)
    return model, data, False


def _infer_proto(model: onnx.ModelProto, data_prop: bool = True) -> bytes:
    """``model`` inferred, serialized."""
    from . import shape_child

    # (The app's child for big graphs always propagates: the same types, see needs_data_propagation.)
    return shape_child.infer_in_child(model) if shape_child.wanted(model) else infer_here(model, data_prop)


# The ops whose data propagation forwards or combines their inputs' values (onnx 1.10-1.23): it
# yields nothing unless an input has a value (an int initializer of rank <= 1, a Constant, or a
# value propagated before).  Any other op with data propagation (Shape, Size, or one a later onnx
# adds) is taken to make values of its own.
_VALUE_PROPAGATING = frozenset({"Add", "Sub", "Mul", "Cast", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze"})
_SHAPE_INTS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})
_INERT, _CARRIES, _SOURCE = 0, 1, 2


@functools.cache
def _propagation_role(op: str, version: int) -> int:
    """What onnx's data propagation does at a node of this default-domain op (its schema at this opset): nothing,
    carry its inputs' values on, or make values (reads input shapes, or is inferred through its
    function body, inside which propagation runs).  The first lookup of a process initialises
    onnx's schema registry, which shape inference would do anyway (net cost measured: none)."""
    try:
        s = onnx.defs.get_schema(op, version, "")
    except onnx.defs.SchemaError:
        return _INERT  # no schema at this opset: inference does not run on it
    if s.has_data_propagation_function:
        return _CARRIES if op in _VALUE_PROPAGATING else _SOURCE
    # (onnx's stub of OpSchema lacks these two properties, which the class has)
    if not s.has_type_and_shape_inference_function and (s.has_function  # type: ignore[attr-defined]
                                                        or s.has_context_dependent_function):  # type: ignore[attr-defined]
        return _SOURCE
    return _INERT


def needs_data_propagation(model: onnx.ModelProto, table: NodeTable, opset: int) -> bool:
    """Whether onnx's data propagation (``data_prop=True``) can change what shape inference gives
    ``model`` (its nodes read into ``table``; ``opset``: its default-domain opset).  Propagation
    computes the values of shape tensors, starting from the ops that read input shapes (Shape,
    Size) and from the values onnx holds: int32/int64 initializers of rank 0 or 1 and Constant
    outputs; the value-propagating ops carry them on.  Where no node makes values and no
    value-propagating op reads one onnx holds, it computes nothing, and inference without it gives
    the same model byte for byte (tests/model/test_data_prop.py) at less cost (synthetic 10k graph:
    inference 23.1 -> 21.6 ms).  Subgraphs (If, Loop, Scan), local functions and ops of other
    domains are not read: a graph with one keeps propagation on."""
    present = set(table.ops)
    domains = set(table.domains)
    if model.functions or not present.isdisjoint(SUBGRAPH_OPS) or not domains <= {"", "ai.onnx"}:
        return True
    roles = {op: _propagation_role(op, opset) for op in present}
    if _SOURCE in roles.values():
        return True
    carriers = {op for op, r in roles.items() if r == _CARRIES}
    if not carriers:
        return False
    valued = {t.name for t in model.graph.initializer if t.data_type in _SHAPE_INTS and len(t.dims) <= 1}
    if "Constant" in present:
        valued.update(chain.from_iterable(compress(table.outputs, map("Constant".__eq__, table.ops))))
    if not valued:
        return False
    reads = chain.from_iterable(compress(table.inputs, map(carriers.__contains__, table.ops)))
    return not valued.isdisjoint(reads)


def inline_small_external(model: onnx.ModelProto, base_dir: Path, limit: int = 1 << 16) -> None:
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
    # Big reads: hashlib and the read release the GIL for each call, so few calls let another
    # thread run meanwhile (see FileDigest).
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


_HASH_CHUNK = 16 << 20
INLINE_DIGEST_BYTES = 4 << 20  # FileDigest hashes bytes up to this size at once (~2.3 ms), not on a thread


class FileDigest:
    """:func:`file_sha256` of ``path``, computed while the caller goes on.

    ``data``: the file's bytes, read already: hashed in memory, so the digest is that of the bytes
    the model was parsed from (a file rewritten meanwhile cannot give another), with no second read.
    Up to :data:`INLINE_DIGEST_BYTES` they are hashed here and now (517 kB: 0.3 ms), where a thread
    would need a free core, which the app's shape child takes while it infers beside the load.
    Bigger files are hashed on a thread of their own (yolov8n, 12 MB: ~7 ms in memory); the read
    and the hash release the GIL, so the load does not wait for it.  :meth:`result` waits, and
    raises what the hash raised."""

    def __init__(self, path: Path, data: bytes | None = None):
        self._value: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if data is not None and len(data) <= INLINE_DIGEST_BYTES:
            self._value = hashlib.sha256(data).hexdigest()
            return
        self._thread = threading.Thread(target=self._run, args=(path, data), name="qtquant-sha256", daemon=True)
        self._thread.start()

    def _run(self, path: Path, data: bytes | None) -> None:
        try:
            self._value = hashlib.sha256(data).hexdigest() if data is not None else file_sha256(path)
        except BaseException as e:  # handed to the caller by result()
            self._error = e

    def result(self) -> str:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None  # (hashed, or the error raised)
        return self._value
