"""The items of a :class:`~qtquant.model.graph.Graph`: its ops (:class:`Node`) and its values
(:class:`Tensor`), plain slotted objects (a big graph has 10,000s of each)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from .modelcheck import FLOAT_TYPES
from .nodetable import NOT_TENSOR, attr_value, int_attribute
from .ops import OpHandler, handler_for
from ..base.vocab import TensorKind

__all__ = ["Node", "Tensor", "NodeProtos"]


class NodeProtos:
    """The node protos of a graph's model, in topological order, shared by its nodes: their
    attributes are read from here on first use.  Set once that model is known (the structure is
    read before shape inference hands back the model the graph keeps)."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: Sequence[onnx.NodeProto] | None = None):
        self.nodes = nodes


class Node:
    """One op.  Attributes are decoded on first access: most analyses never look at them."""

    __slots__ = ("name", "op_type", "inputs", "outputs", "domain", "index", "_attrs", "_attr_protos", "_src")

    def __init__(self, name: str, op_type: str, inputs: list[str], outputs: list[str],
                 attrs: dict[str, Any] | None = None, domain: str = "", index: int = 0,
                 attr_protos: Sequence[onnx.AttributeProto] = (), src: NodeProtos | None = None):
        self.name = name
        self.op_type = op_type
        self.inputs = inputs
        self.outputs = outputs
        self.domain = domain
        self.index = index  # position in topological order
        self._attrs = attrs
        self._attr_protos = attr_protos
        # The graph's node protos (:class:`NodeProtos`): when given, the attributes are taken
        # from ``src.nodes[index]`` on first use, so nodes whose attributes nobody asks for cost nothing.
        self._src = src

    @property
    def attrs(self) -> dict[str, Any]:
        if self._attrs is None:
            protos = self._attr_protos if self._src is None or self._src.nodes is None \
                else self._src.nodes[self.index].attribute
            # [:]: a plain list to iterate (see modelcheck._all_tensors)
            self._attrs = {a.name: attr_value(a) for a in protos[:]} if protos else {}
        return self._attrs

    def int_attr(self, name: str, default: int) -> Any:
        """``self.attrs.get(name, default)`` for an attribute that is a plain INT, read without
        decoding the node's other attributes (a Concat's axis, a Conv's group: thousands a graph)."""
        if self._attrs is None and self._src is not None and self._src.nodes is not None:
            v = int_attribute(self._src.nodes[self.index].attribute, name, default)
            if v is not None:
                return v
        return self.attrs.get(name, default)

    @property
    def handler(self) -> OpHandler:
        return handler_for(self.op_type)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_type})"


class Tensor:
    """One value of the graph: name, shape (None when unknown), element type, kind, edges."""

    __slots__ = ("name", "shape", "elem_type", "kind", "producer", "consumers")

    def __init__(self, name: str, shape: tuple[int | None, ...] | None = None, elem_type: int = 0,
                 kind: TensorKind = TensorKind.ACTIVATION, producer: str | None = None,
                 consumers: list[str] | None = None):
        self.name = name
        self.shape = shape
        self.elem_type = elem_type  # onnx.TensorProto enum, 0 when unknown, NOT_TENSOR for a sequence or map
        self.kind = kind
        self.producer = producer
        self.consumers = [] if consumers is None else consumers

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.kind}, {self.shape})"

    @property
    def is_float(self) -> bool:
        return self.elem_type in FLOAT_TYPES

    @property
    def dtype_name(self) -> str:
        if self.elem_type == NOT_TENSOR:
            return "not a tensor"
        return onnx.TensorProto.DataType.Name(self.elem_type).lower() if self.elem_type else "unknown"

    @property
    def size(self) -> int:
        if not self.shape or any(d is None for d in self.shape):
            return 0 if self.shape is None else 0
        return int(np.prod([d for d in self.shape if d is not None], dtype=np.int64))  # (none is None here)
