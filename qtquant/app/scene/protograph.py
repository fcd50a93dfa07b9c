"""The structure of a model straight from its ONNX protobuf: what the canvas needs to draw a big
graph before the graph is loaded.

Loading a 20,000-node model (shape inference, the :class:`~qtquant.model.graph.Graph` with its
tensors and kinds) takes seconds; node names, op types and the tensors between them are in the
file.  :class:`ProtoGraph` offers the few attributes :class:`~.view.SceneModel` reads
(:class:`~.drawn.DrawnGraph`), so the window can show the module
hierarchy while the rest loads; once the real graph is there, a view with the same boxes and
edges keeps these positions (:meth:`~.view.SceneModel.same_view`).  Shapes are unknown here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx

from ...model.modelcheck import FLOAT_TYPES, toposort
from ...model.nodetable import node_names
from ...model.ops import handler_for
from ...base.vocab import TensorKind

if TYPE_CHECKING:
    from ...base.fileio.paths import StrPath
    from ...model.ops import OpHandler
    from .spec import SceneSpec

__all__ = ["ProtoGraph"]

class _Node:
    __slots__ = ("name", "op_type", "inputs", "outputs", "index")

    def __init__(self, name: str, op_type: str, inputs: list[str], outputs: list[str], index: int) -> None:
        self.name, self.op_type, self.inputs, self.outputs, self.index = name, op_type, inputs, outputs, index

    @property
    def handler(self) -> OpHandler:
        return handler_for(self.op_type)


class _Tensor:
    __slots__ = ("name", "producer", "consumers", "kind", "shape")

    def __init__(self, name: str, kind: TensorKind, producer: str | None = None) -> None:
        self.name, self.kind, self.producer = name, kind, producer
        self.consumers: list[str] = []
        self.shape: tuple[int | None, ...] | None = None  # unknown before shape inference


class ProtoGraph:
    """Nodes and tensors of ``model`` (a parsed ModelProto with its local functions inlined)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        nodes = list(g.node)
        names = [n.name for n in nodes]
        if any(not n for n in names) or len(set(names)) < len(names):
            # Unnamed or duplicate nodes are named by their position in topological order
            # (node_names, as the graph loader does): sort first so that the names come out the same.
            nodes = toposort(g)
        tensors: dict[str, _Tensor] = {}
        for t in g.initializer:
            tensors[t.name] = _Tensor(t.name, TensorKind.WEIGHT if t.data_type in FLOAT_TYPES else TensorKind.SHAPE)
        self.inputs: list[str] = []
        for i in g.input:
            if i.name in tensors:
                continue
            et = i.type.tensor_type.elem_type
            tensors[i.name] = _Tensor(i.name, TensorKind.INPUT if et in FLOAT_TYPES else TensorKind.SHAPE)
            self.inputs.append(i.name)
        self.outputs = [o.name for o in g.output]
        self.nodes: dict[str, _Node] = {}
        for idx, (name, p) in enumerate(zip(node_names([p.name for p in nodes], [p.op_type for p in nodes]), nodes)):
            node = _Node(name, p.op_type, list(p.input), list(p.output), idx)
            self.nodes[name] = node
            kind = TensorKind.WEIGHT if p.op_type == "Constant" else TensorKind.ACTIVATION
            for o in node.outputs:
                if not o:
                    continue
                t = tensors.get(o)
                if t is not None and t.producer is None and t.kind == TensorKind.ACTIVATION:  # a placeholder
                    t.producer, t.kind = name, kind
                else:
                    tensors[o] = _Tensor(o, kind, name)
            for i in node.inputs:
                t = tensors.get(i) if i else None
                if t is None and i:  # read before written (unsorted file) or missing: a placeholder
                    t = tensors[i] = _Tensor(i, TensorKind.ACTIVATION)
                if t is not None:
                    t.consumers.append(name)
        self.tensors = tensors
        self._order = nodes  # protobuf nodes in the order of self.nodes (metadata lookups)

    @property
    def node_protos(self) -> Sequence[onnx.NodeProto]:
        return self._order


def early_structure(path: StrPath, min_nodes: int) -> SceneSpec | None:
    """The laid-out first view of the model at ``path`` from its file alone, or None (fewer than
    ``min_nodes`` nodes: the full load is quick anyway; a QDQ file, whose graph changes when its
    Q/DQ pairs are read; anything unreadable -- the full load reports it)."""
    from ...model.functions import inline_local_functions
    from ...model.graph import read_model_file
    from ...model.modelcheck import check_text
    from ...model.qdq import is_qdq_model
    from .view import SceneModel

    try:
        model, _ = read_model_file(path)
        if len(model.graph.node) < min_nodes or is_qdq_model(model):
            return None
        check_text(model)
        if model.functions:
            inline_local_functions(model)
        view = SceneModel(ProtoGraph(model))
        spec = view.layout_all(isolate=False)
    except Exception:  # the real load says what is wrong, in one line
        return None
    spec.model = view
    return spec
