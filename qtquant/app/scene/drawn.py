"""What the scene reads of a graph: the loaded :class:`~qtquant.model.graphmodel.Graph` and the
:class:`~.protograph.ProtoGraph` read from the file before it (the first view drawn while the model
loads) both meet :class:`DrawnGraph`.  Read-only properties: drawing never changes a graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import onnx

    from ...base.vocab import TensorKind
    from ...model.ops import OpHandler

__all__ = ["DrawnNode", "DrawnTensor", "DrawnGraph"]


class DrawnNode(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def op_type(self) -> str: ...

    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...

    @property
    def index(self) -> int: ...  # its position in node_protos

    @property
    def handler(self) -> OpHandler: ...  # its category colours the box


class DrawnTensor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> TensorKind: ...

    @property
    def producer(self) -> str | None: ...

    @property
    def consumers(self) -> Sequence[str]: ...

    @property
    def shape(self) -> tuple[int | None, ...] | None: ...  # None: unknown (the edge's label says "?")


class DrawnGraph(Protocol):
    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...

    @property
    def nodes(self) -> Mapping[str, DrawnNode]: ...

    @property
    def tensors(self) -> Mapping[str, DrawnTensor]: ...

    @property
    def node_protos(self) -> Sequence[onnx.NodeProto]: ...  # in the order of DrawnNode.index (their metadata)
