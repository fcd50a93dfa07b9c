"""Loading: ONNX in, a shape-resolved :class:`~qtquant.model.graphmodel.Graph` out.

The model is loaded *without* its external data; weights are read lazily, so a
multi-gigabyte model costs no more to open than its structure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .cut import cut_model, parse_cut
from ..base.errors import ModelError, ShapeError
from ..base.fileio.paths import StrPath, existing_file
from ..base.gcpause import gc_paused
from .graphbuild import read_structure
from .graphitems import Node, Tensor
from .graphmodel import Graph, strict_int_attr
from .modelcheck import (FLOAT_TYPES, FileDigest, apply_input_shapes, check_external_data, check_input_sizes,
                         check_text, infer_shapes, inline_small_external, topo_order)
from .nodetable import NOT_TENSOR, NodeTable, graph_value_types, value_type_bytes
from .opsets import MAX_OPSET, MIN_OPSET, OLDEST_OPSET, RAISED_OPSET, raise_old_opset
from .opsets import default_opset as _default_opset
from .qdq import check_quantized_form, is_qdq_model
from .shapes import InputShapes, format_shape, parse_input_shapes
from ..base.vocab import TensorKind
from .widen import as_identities, has_float16, same_type_casts, widen_float16

if TYPE_CHECKING:
    from .shape_child import Early

__all__ = ["Node", "Tensor", "Graph", "load_graph", "read_model_file", "reading_model",
           "graph_from_model", "MIN_OPSET", "MAX_OPSET", "parse_cut", "cut_model"]


def _ort_fill_shapes(graph: "Graph") -> None:
    """Where onnx shape inference left activation shapes unknown, run onnxruntime once."""
    missing = [n for n in graph._unshaped if graph.tensors[n].kind is TensorKind.ACTIVATION]
    if not missing:
        return
    from .runtime import run_with_outputs, zeros_feed

    try:
        values = run_with_outputs(graph, missing, zeros_feed(graph))
    except Exception:
        return  # shapes stay unknown; analysis still works, costs are then estimates
    for n, v in values.items():
        t = graph.tensors[n]
        if not isinstance(v, np.ndarray):  # a sequence or map nothing typed: never a quantized tensor
            t.elem_type, t.kind = NOT_TENSOR, TensorKind.SHAPE
            graph._quantized.pop(n, None)
            continue
        t.shape = tuple(int(d) for d in v.shape)
        if not t.elem_type:
            t.elem_type = onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
            if t.elem_type not in FLOAT_TYPES:
                t.kind = TensorKind.SHAPE
                graph._quantized.pop(n, None)


def _check_channels(graph: "Graph", attr_names: Collection[str] | None = None) -> None:
    """Shape inference does not compare Conv input channels with the weights; do it here.
    ``attr_names``: the name of every attribute of the graph's nodes, when read already
    (:meth:`NodeTable.read_attribute_names`): with no "group" among them every Conv's group is
    the default 1, known without reading each Conv's attributes (~3,500 instructions a Conv)."""
    grouped = attr_names is None or "group" in attr_names
    for node in graph.nodes_of("Conv"):
        if len(node.inputs) < 2:
            continue
        x, w = graph.tensors.get(node.inputs[0]), graph.tensors.get(node.inputs[1])
        if not x or not w or not x.shape or not w.shape or len(x.shape) < 2 or x.shape[1] is None \
                or len(w.shape) > 1 and w.shape[1] is None:
            continue
        if len(w.shape) != len(x.shape):
            raise ShapeError(f"Conv {node.name!r} has a weight of rank {len(w.shape)} for an input of "
                             f"rank {len(x.shape)}")
        want = (w.shape[1] or 0) * (strict_int_attr(node, "group", 1) if grouped else 1)
        if want and x.shape[1] != want:
            src = next((n for n in graph.inputs), "?")
            raise ShapeError(f"the input shapes do not fit the model: Conv {node.name!r} expects {want} input "
                             f"channels but gets {x.shape[1]} (from input {src!r} "
                             f"{format_shape(graph.tensors[src].shape) if src in graph.tensors else ''})")


def _sorted(model: onnx.ModelProto, table: NodeTable) -> NodeTable:
    """``model``'s nodes put in topological order in place (cycles, values nothing makes and values
    made twice are a one-line ModelError), and their table in the same order."""
    order = topo_order(model.graph, table)
    if order is None:
        return table
    protos = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(protos[i] for i in order)
    return table.reordered(order)


def read_model_file(path: StrPath) -> tuple[onnx.ModelProto, Path]:
    """The model in ``path``, without its external data, or a one-line :class:`ModelError`."""
    model, p, _ = _read_model(path)
    return model, p


def _read_model(path: StrPath) -> tuple[onnx.ModelProto, Path, bytes | None]:
    """:func:`read_model_file`, and the file's bytes when it is a serialized protobuf (most are:
    onnx.load picks the format by the file's suffix), for :class:`NodeTable` to read once more."""
    p = existing_file(path, ModelError, noun="model", folder_noun="ONNX model")
    try:
        data = None
        if onnx.serialization.registry.get_format_from_file_extension(p.suffix) in (None, "protobuf"):
            data = p.read_bytes()
            model = onnx.load_model_from_string(data)
        else:
            model = onnx.load(str(p), load_external_data=False)
    except Exception:
        raise ModelError(f"{p.name} is not a readable ONNX model (corrupt or wrong format)") from None
    if not model.graph.node:
        raise ModelError(f"{p.name} is not a readable ONNX model (it has no graph nodes)")
    return model, p, data


@contextmanager
def reading_model(path: StrPath) -> Iterator[tuple[onnx.ModelProto, Path, NodeTable, Early | None, FileDigest]]:
    """:func:`read_model_file` and the model's :class:`NodeTable`, read from the file's bytes where
    it can be (one more parse instead of node by node), with the file's shape inference started in
    the app's child before the table is read (:func:`qtquant.model.shape_child.submit_file`) and its
    digest begun (:class:`~qtquant.model.modelcheck.FileDigest`, from the bytes read): yields
    ``(model, path, table, early, digest)``, ``early`` None where it was not started; the caller
    hands it to :func:`graph_from_model`.  Not read by the end of the block, it is dropped: the
    child is free."""
    from . import shape_child

    model, p, data = _read_model(path)
    early = shape_child.submit_file(model, data) if data is not None else None
    try:
        digest = FileDigest(p, data)
        yield model, p, NodeTable(model.graph, data), early, digest
    finally:
        if early is not None:
            early.discard()


@gc_paused
def load_graph(path: StrPath, input_shapes: InputShapes = None, *, ort_fallback: bool = True) -> Graph:
    """Load a float ONNX file, resolve dynamic dims from ``input_shapes`` and infer shapes.

    A QDQ-quantized file is refused: its graph is only right once its Q/DQ pairs are read into
    scales, which :func:`qtquant.open_model` (the one way to open any model) does.
    """
    with reading_model(path) as (model, p, table, early, sha):
        check_quantized_form(model, table, p.name)
        if is_qdq_model(model, table):
            raise ModelError(f"{p.name} is QDQ-quantized; open it with qtquant.open_model, which reads its scales")
        check_external_data(model, p.parent, table)
        return graph_from_model(model, input_shapes, path=p, sha256=sha, ort_fallback=ort_fallback, table=table,
                                early=early)


@gc_paused
def _raise_with_fit_hint(model: onnx.ModelProto, given: Mapping[str, Iterable[int]],
                         shapes: Mapping[str, Iterable[int]]) -> None:
    """An error of input shapes the user gave: raise it again naming the dimensions and what fits."""
    import sys

    from .shapefit import fit_hint

    e = sys.exc_info()[1]
    if not given or not isinstance(e, ShapeError) or "do not fit the model" not in str(e):
        return
    hint = fit_hint(model, {k: v for k, v in shapes.items() if k in given})
    if hint:
        raw = str(e).split("do not fit the model: ", 1)[-1]
        raise ShapeError(f"the input shapes do not fit the model: {hint} (shape inference: {raw})") from None


def graph_from_model(model: onnx.ModelProto, input_shapes: InputShapes = None, *, path: Path | None = None,
                     sha256: str | FileDigest = "", ort_fallback: bool = True, cut: str | Iterable[str] | None = (),
                     text_checked: bool = False, table: NodeTable | None = None, early: Early | None = None) -> Graph:
    """``cut``: tensor names the graph is cut at (:func:`cut_model`); ``sha256`` stays the file's
    (a :class:`~qtquant.model.modelcheck.FileDigest` still hashing it: waited for once the graph is typed).
    ``text_checked``: the caller ran :func:`check_text` on ``model`` already (a 20,000-node model: ~0.4 s).
    ``table``: ``model.graph.node`` read already (:class:`~qtquant.model.nodetable.NodeTable`).
    ``early``: the shape inference of ``model``'s file, started already (:func:`reading_model`):
    used if nothing here changes ``model`` before inference, else dropped."""
    if table is None:
        table = NodeTable(model.graph)
    if not text_checked:
        check_text(model, table)
    # Still the file's own model, as the early inference read it (see as_file below)
    as_file = early is not None and path is not None and not model.functions
    cut = parse_cut(cut)
    if not model.graph.output:
        raise ModelError("the model declares no outputs; nothing it computes can be checked or run")
    opset = source_opset = _default_opset(model)
    if OLDEST_OPSET <= opset < MIN_OPSET:
        model, opset, as_file = raise_old_opset(model), RAISED_OPSET, False
        table = NodeTable(model.graph)
    if not (MIN_OPSET <= opset <= MAX_OPSET):
        raise ModelError(f"opset {opset} is not supported (qtquant reads opsets {MIN_OPSET} to {MAX_OPSET}, "
                         f"and raises {OLDEST_OPSET} to {MIN_OPSET - 1} to {RAISED_OPSET})")
    model = onnx.ModelProto.FromString(model.SerializeToString()) if path is None else model
    if model.functions:  # calls of local functions become their bodies (named by call, see .functions)
        from .functions import inline_local_functions

        inline_local_functions(model)
        table = NodeTable(model.graph)
    source_dtype = None  # (after inlining: a local function's body may compute in float16 too)
    if has_float16(model, table.ops):
        model, as_file, source_dtype = widen_float16(model, str(path.parent) if path else ""), False, "float16"
        table = NodeTable(model.graph)
    # Shape inference needs topological order, and cycles fail here.  Most files are in order, and
    # building the graph finds out at no cost (every value a node reads is known by then): the
    # sort runs first only where that cannot stand for it (a cut; a node that leaves an optional
    # output out, whose files the sort has always reordered), and else only if the build fails.
    deferred = not cut and "" not in chain.from_iterable(table.outputs)
    if not deferred:
        table = _sorted(model, table)
    if cut:
        cut_model(model, cut)  # before shape inference: the cut graph is all it needs to type
        table = NodeTable(model.graph)
    given = input_shapes.items() if isinstance(input_shapes, dict) else input_shapes
    as_file = as_file and deferred and not cut  # a sort or a cut changed it
    declared = [i.type.SerializeToString() for i in model.graph.input] if as_file else None
    shapes = apply_input_shapes(model, parse_input_shapes(given))
    if as_file:  # the same input shapes (most models are opened at their declared ones)
        as_file = declared == [i.type.SerializeToString() for i in model.graph.input]
    check_input_sizes(model, shapes)
    if path is not None:
        inline_small_external(model, path.parent)
    try:
        # Read before inference: with an early inference running in the child, meanwhile
        untyped = Graph.untyped(model, path, shapes, cut, read_structure(model, table, check_order=deferred))
        inferred, inferred_bytes, exact = infer_shapes(model, table, opset, early, as_file)
        if isinstance(sha256, FileDigest):
            sha256 = sha256.result()
        if not sha256:
            sha256 = hashlib.sha256(model.SerializeToString()).hexdigest()
        # Shape inference adds types and keeps the nodes as they were: the table still reads them.
        pending = None  # the inferred model, serialized, while its nodes and weights are model's
        if inferred is None:
            types = graph_value_types(inferred_bytes, len(table))
            if types is None:  # cannot be read from the bytes alone
                inferred = onnx.load_model_from_string(inferred_bytes)
            else:
                inferred, pending = model, inferred_bytes
        if pending is None:
            types = value_type_bytes(inferred_bytes, len(inferred.graph.value_info)) if inferred_bytes else None
        same = len(table) == len(inferred.graph.node)
        if same:
            graph = untyped
            graph.typed(inferred, sha256, types, pending)
            if exact:
                graph.keep_model_bytes(inferred_bytes)  # what children are sent: no encoding of it again
        else:  # (never with pending: inferred is model then, whose nodes the table read)
            graph = Graph(inferred, path, shapes, sha256, cut, None, types, check_order=deferred)
    except (ModelError, ShapeError):  # NotInOrder among them
        if early is not None:
            early.discard()  # the child is the next inference's (no-op if read)
        ordered = _sorted(model, table) if deferred else table
        if ordered is table:  # in order after all: the error stands (with what would fit, if shapes were given)
            _raise_with_fit_hint(model, dict(parse_input_shapes(given)), shapes)
            raise
        # Out of order: typed and built again in the sorted order (the steps above are idempotent).
        return _sourced(graph_from_model(model, input_shapes, path=path, sha256=sha256, ort_fallback=ort_fallback,
                                         text_checked=True, table=ordered), source_opset, opset, source_dtype)
    _check_channels(graph, table.read_attribute_names() if same else None)
    casts = same_type_casts(graph) if same else ()  # (same: the graph's node indices are model's)
    if casts:  # identities that cut quantized chains: built again with Identity nodes (see qtquant.model.widen)
        as_identities(model, [n.index for n in casts])
        rebuilt = graph_from_model(model, input_shapes, path=path, sha256=sha256, ort_fallback=ort_fallback,
                                   text_checked=True)
        rebuilt.cut = graph.cut
        return _sourced(rebuilt, source_opset, opset, source_dtype)
    if ort_fallback:
        _ort_fill_shapes(graph)
    return _sourced(graph, source_opset, opset, source_dtype)


def _sourced(graph: Graph, source_opset: int, opset: int, source_dtype: str | None) -> Graph:
    """``graph`` with what opening changed of its file recorded: the opset it was raised from, the
    float16 it was widened from (set after a rebuild too, whose model was changed already)."""
    if source_opset != opset:
        graph.source_opset = source_opset
    graph.source_dtype = source_dtype
    return graph

