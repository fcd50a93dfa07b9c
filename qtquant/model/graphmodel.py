"""The graph model: a shape-resolved ONNX graph with topological views (:class:`Graph`).

How a file becomes one (reading, raising old opsets, widening float16, shape inference, the
build) is :mod:`qtquant.model.graph`; this module is what the rest of qtquant reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, KeysView, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import numpy_helper

from ..base.errors import ModelError
from .graphbuild import Structure, read_structure, type_structure
from .derived import DerivedState
from .graphitems import Node, Tensor
from .nodetable import NodeTable, value_type_keys
from .ops import PASS_OPS, fused_into_producer, passes_through
from .opsets import default_opset as _default_opset
from .shapes import format_shape

if TYPE_CHECKING:
    from .qdq import QdqInfo

__all__ = ["Graph", "KEEP_MODEL_BYTES", "strict_int_attr"]

KEEP_MODEL_BYTES = 64 << 20  # Graph.model_bytes keeps serialized models up to this size
_PARSE_LOCK = threading.Lock()  # Graph.model parsed from bytes on first use, from any thread


class Graph:
    """A loaded, shape-resolved ONNX graph.  Plain data plus topological views."""

    # The opset of the file, where it was older than MIN_OPSET and raised on open (graph_from_model)
    source_opset: int | None = None
    # "float16" where the file computed in float16 and was widened to float32 on open (qtquant.model.widen)
    source_dtype: str | None = None
    # What the QDQ file this graph is the float view of said (its per-channel scales): set by
    # qtquant.model.qdq.attach_qdq; None for a float model.
    qdq_info: QdqInfo | None = None

    def __init__(self, model: onnx.ModelProto, path: Path | None, input_shapes: Mapping[str, Sequence[int]],
                 sha256: str, cut: Iterable[str] = (), table: NodeTable | None = None,
                 value_types: dict[str, bytes] | None = None, check_order: bool = False,
                 structure: Structure | None = None):
        """``table``: ``model.graph.node`` read already (:class:`NodeTable`, in the same order);
        ``value_types``: ``model.graph.value_info`` read already, as name -> serialized type
        (:func:`~qtquant.model.nodetable.value_type_bytes`).  A node that reads a value no node before it
        makes is a :class:`NotInOrder`; with ``check_order`` (no node leaves an optional output
        out), so is a value made twice, or made that is also an initializer or input.
        ``structure``: :func:`~qtquant.model.graphbuild.read_structure` of ``table``, read already
        (before shape inference gave ``model``, whose nodes are the same)."""
        if structure is None:
            structure = read_structure(model, table if table is not None else NodeTable(model.graph), check_order)
        self._start(model, path, input_shapes, cut, structure)
        self.typed(model, sha256, value_types)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def untyped(cls, model: onnx.ModelProto, path: Path | None, input_shapes: Mapping[str, Sequence[int]],
                cut: Iterable[str],
                structure: Structure) -> Graph:
        """The graph of ``structure`` (read from ``model``) before shape inference: the views of
        its nodes and edges work, nothing is typed or quantized until :meth:`typed`.  What needs
        no types is worked out here (the fused layers), while the app's child infers the shapes."""
        graph = cls.__new__(cls)
        graph._start(model, path, input_shapes, cut, structure)
        return graph

    def _start(self, model: onnx.ModelProto, path: Path | None, input_shapes: Mapping[str, Sequence[int]],
               cut: Iterable[str], st: Structure) -> None:
        self._model = model  # until typed(): the model the structure was read from
        self._pending: bytes | None = None  # the kept model, serialized, until first asked (typed())
        self._protos = st.protos  # the node protos the nodes read their attributes from
        self.cut = tuple(cut)  # the tensors the file's graph was cut at (its outputs now); () = whole file
        self.path = path
        self.base_dir = path.parent if path else Path.cwd()
        self.input_shapes = dict(input_shapes)
        self.sha256 = ""
        self.opset = _default_opset(model)
        self.nodes: dict[str, Node] = st.nodes
        self.tensors: dict[str, Tensor] = st.tensors
        self.inputs: list[str] = st.inputs
        self.outputs: list[str] = [o.name for o in model.graph.output]
        self._init_protos = {t.name: t for t in model.graph.initializer}
        self._init_cache: dict[str, npt.NDArray[Any]] = {}
        # what the exporter and the fidelity check work out from this graph (see .derived)
        self.derived = DerivedState()
        self._concat_nodes: list[Node] | None = None
        self._by_op: dict[str, list[Node]] = st.by_op  # op type -> its nodes, in graph order
        self._unshaped: list[str] = []  # activations shape inference left (partly) unknown
        self._model_bytes: bytes | None = None
        self._structure: Structure | None = st
        self._quantized: dict[str, None] = {}
        # What the nodes, edges and constants alone say, worked out before the types are known: the
        # tensors inside fused layers, the pass-through nodes, each Concat's axis.
        self._fused = fused_into_producer(self)
        self.passing_nodes  # noqa: B018 - the cached property, made now
        self._concat_axes = {n.name: strict_int_attr(n, "axis", 0) for n in st.by_op.get("Concat", ())}

    def typed(self, model: onnx.ModelProto, sha256: str, value_types: dict[str, bytes] | None = None,
              pending: bytes | None = None) -> None:
        """Type the graph from ``model``, the inferred model whose nodes are the structure's (in
        the same order), and keep it; ``value_types``: its ``graph.value_info`` read already, as
        name -> serialized type (:func:`~qtquant.model.nodetable.value_type_bytes`).

        ``pending``: the inferred model, serialized, where ``model`` is the model it was inferred
        from (the same nodes and weights, not its types), and ``value_types`` are all its types
        (:func:`~qtquant.model.nodetable.graph_value_types`): kept as :attr:`model` once first asked for.
        Analysis needs only the types (a 10,000-node graph: 2 ms of parsing, and the freeing, saved
        or put off)."""
        st, self._structure = self._structure, None
        if st is None:
            raise RuntimeError("the graph is typed already")
        self._renamed = st.names != st.table.names  # type_structure names the file's unnamed nodes
        all_types = pending is not None
        if pending is not None and self._renamed:  # the names go into the kept model's node protos: parse it now
            model, pending = onnx.load_model_from_string(pending), None
        self._keep(model, pending)
        self.sha256 = sha256
        type_keys, decoded_types = value_type_keys(model.graph, value_types, ends=not all_types)
        quantized, self._unshaped = type_structure(st, model, type_keys, decoded_types)
        for t in self._fused:
            quantized.pop(t, None)
        self._quantized = quantized

    # -- the model ------------------------------------------------------------------------
    @property
    def model(self) -> onnx.ModelProto:
        """The inferred model the graph was typed from (parsed on first use where it came as bytes)."""
        if self._pending is not None:
            with _PARSE_LOCK:  # two threads asking at once: one parse, one model
                if self._pending is not None:
                    self._keep(onnx.load_model_from_string(self._pending))
        return self._model

    def _keep(self, model: onnx.ModelProto, pending: bytes | None = None) -> None:
        """Keep ``model`` (its nodes and weights the ones the graph has read: the same values) and
        read the node attributes and weights from it from now on; ``pending``: see :meth:`typed`."""
        if model is not self._model:
            self._init_protos = {t.name: t for t in model.graph.initializer}
            self._protos.nodes = model.graph.node
        self._model, self._pending = model, pending

    @property
    def node_protos(self) -> Sequence[onnx.NodeProto]:
        """The node protos, in the order of :attr:`Node.index` (without parsing a model still pending)."""
        return self._protos.nodes if self._protos.nodes is not None else ()

    # -- views ----------------------------------------------------------------------------
    @property
    def order(self) -> list[Node]:
        return list(self.nodes.values())

    def producer(self, tensor: str) -> Node | None:
        t = self.tensors.get(tensor)
        return self.nodes[t.producer] if t is not None and t.producer else None

    def consumers(self, tensor: str) -> list[Node]:
        return [self.nodes[c] for c in self.consumer_names(tensor)]

    def consumer_names(self, tensor: str) -> Sequence[str]:
        """The names of the nodes reading ``tensor`` (no Node list made: asked per Conv and gate
        of a big graph)."""
        t = self.tensors.get(tensor)
        return t.consumers if t is not None else ()

    @property
    def quantized(self) -> KeysView[str]:
        """The quantized tensors (:meth:`is_quantized`) as a read-only set view, in graph order: a
        membership test without a call, for loops that ask it of every tensor."""
        return self._quantized.keys()

    def is_quantized(self, tensor: str) -> bool:
        """Activations (and float model inputs) that carry int8 quantization."""
        return tensor in self._quantized

    @cached_property
    def quantized_tensors(self) -> list[str]:
        return list(self._quantized)

    def nodes_of(self, op_types: str | Iterable[str]) -> list[Node]:
        """The nodes whose op type is in ``op_types`` (one op type or a collection), in graph order:
        analyses that read a few op types (Concat, Conv, the pass-through ops) skip the others unseen."""
        if isinstance(op_types, str):
            return list(self._by_op.get(op_types, ()))
        lists = [self._by_op[op] for op in op_types if op in self._by_op]
        if len(lists) == 1:
            return list(lists[0])
        return sorted((n for lst in lists for n in lst), key=_index)

    def observed(self, tensor: str) -> bool:
        """True when the tensor gets an observer of its own (not inherited through a pass-through op)."""
        if not self.is_quantized(tensor):
            return False
        p = self.producer(tensor)
        return p is None or not passes_through(p, self)

    @cached_property
    def passing_nodes(self) -> list[Node]:
        """The nodes whose outputs keep their first input's scale (:func:`~qtquant.model.ops.passes_through`),
        in graph order: the observers' and the scale domains' one question to the pass-through ops,
        asked once (the graph does not change after it is built)."""
        return [node for node in self.nodes_of(PASS_OPS) if passes_through(node, self)]

    @cached_property
    def observed_tensors(self) -> list[str]:
        # observed(n) for every quantized n, spelt out: a big graph asks it 10,000 times.  Only an
        # output of a pass-through node inherits its observer, so only those nodes are asked.
        quantized = self._quantized
        inherited = set()
        for node in self.passing_nodes:
            outs = node.outputs
            for x in outs:
                if x in quantized:
                    inherited.update(outs)
                    break
        if not inherited:
            return list(self.quantized_tensors)
        return [n for n in self.quantized_tensors if n not in inherited]

    def concat_axis(self, node: Node) -> int:
        """The axis of the Concat ``node`` (read once, when the graph was built: every analysis of
        the Concats asks it of each)."""
        return self._concat_axes[node.name]

    def concat_nodes(self) -> list[Node]:
        # Asked on every overlay refresh; the graph does not change after _build.
        if self._concat_nodes is None:
            quantized = self._quantized
            self._concat_nodes = [n for n in self._by_op.get("Concat", ()) if n.outputs and n.outputs[0] in quantized]
        return list(self._concat_nodes)

    def model_bytes(self) -> bytes:
        """``model.SerializeToString()``, made once: the encoder holds the GIL for its whole run
        (20,000 nodes: 6-23 ms alone, over 45 ms next to other work), and each child process
        (calibration, fidelity) needs the bytes.
        The app makes them in the load job, before a window is there to freeze."""
        if self._model_bytes is not None:
            return self._model_bytes
        data: bytes = self.model.SerializeToString()
        if len(data) <= KEEP_MODEL_BYTES:  # weights inline beyond that: a copy is not worth keeping
            self._model_bytes = data
        return data

    def keep_model_bytes(self, data: bytes) -> None:
        """``data`` is the model as shape inference returned it, serialized: kept as
        :meth:`model_bytes` if small enough, and unless the graph since named nodes the file left
        unnamed (or named twice), which the bytes do not hold."""
        if not self._renamed and len(data) <= KEEP_MODEL_BYTES:
            self._model_bytes = data

    def prepare_model_bytes(self) -> None:
        """Make :meth:`model_bytes` now if they will be kept (``ByteSize`` copies nothing): a
        model with more inline weights would be encoded here only to be thrown away."""
        if self._model_bytes is None and self.model.ByteSize() <= KEEP_MODEL_BYTES:
            self.model_bytes()

    def initializer(self, name: str) -> npt.NDArray[Any]:
        if name not in self._init_cache:
            proto = self._init_protos[name]
            try:
                arr = numpy_helper.to_array(proto, base_dir=str(self.base_dir))
            except Exception as e:  # missing or short external data file
                raise ModelError(f"cannot read weight {name!r}: {e}") from None
            self._init_cache[name] = arr
        return self._init_cache[name]

    def constant_value(self, name: str) -> npt.NDArray[Any] | None:
        if name in self._init_protos:
            return self.initializer(name)
        p = self.producer(name)
        value = p.attrs.get("value") if p is not None and p.op_type == "Constant" else None
        return value if isinstance(value, np.ndarray) else None

    def describe_tensor(self, name: str) -> str:
        t = self.tensors[name]
        return f"{name} [{t.dtype_name} {format_shape(t.shape)}]"

    def __repr__(self) -> str:
        return f"<Graph {self.path.name if self.path else '?'}: {len(self.nodes)} nodes>"


def _index(node: Node) -> int:
    return node.index


def strict_int_attr(node: Node, name: str, default: int) -> int:
    """An attribute that must be an integer (a Concat's axis, a Conv's group); one line where a
    file gives it another kind of value (the byte fuzzer's Concat with a malformed axis: TypeError)."""
    v = node.int_attr(name, default)
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        raise ModelError(f"{node.op_type} {node.name!r} has a {name!r} attribute that is not an integer") from None
