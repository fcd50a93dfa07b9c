"""A :class:`~qtquant.model.graph.Graph`'s items made in two passes: the structure, which needs only the
model's nodes, and the types, which need shape inference.

The structure (the nodes, the values and who reads them) is read before shape inference returns:
where the app infers big graphs in its child process (:mod:`qtquant.model.shape_child`), this process
makes it meanwhile instead of waiting (a 10,000-node graph: some 10 ms of the ~25 the inference
takes).  The typing pass then gives each value its element type, shape and kind, and finds the
quantized ones.
"""

from __future__ import annotations

import onnx

from ..base.errors import ModelError
from .graphitems import Node, NodeProtos, Tensor
from .modelcheck import FLOAT_TYPES
from .nodetable import NOT_TENSOR, UNTYPED, NodeTable, TypedValue, dims_of, node_names
from .ops import Role, handler_for
from ..base.vocab import TensorKind

__all__ = ["Structure", "NotInOrder", "read_structure", "type_structure"]


class NotInOrder(ModelError):
    """A graph whose nodes are not in topological order, or that makes a value twice: the file's
    order is sorted (:func:`~qtquant.model.modelcheck.topo_order`, which names what is wrong) and the
    graph built again."""

    def __init__(self) -> None:
        super().__init__("the graph's nodes are not in topological order, or a value is made twice")


class Structure:
    """What :func:`read_structure` read: the nodes and values of a graph, not yet typed."""

    __slots__ = ("table", "names", "nodes", "tensors", "inputs", "by_op", "per_op", "protos", "static")

    def __init__(self, table: NodeTable):
        self.table = table
        self.names: list[str] = []  # the nodes' names (node_names: the file's, or made up where missing)
        self.nodes: dict[str, Node] = {}
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []  # the graph's inputs that are not initializers
        self.by_op: dict[str, list[Node]] = {}
        # op type -> (its nodes in by_op, it is a source of nothing quantized (role NONE), it is a
        # Constant): one lookup a node for what each node of the type needs
        self.per_op: dict[str, tuple[list[Node], bool, bool]] = {}
        self.protos = NodeProtos()  # the node protos: the model's read, then the one the graph keeps (type_structure)
        self.static: set[str] = set()  # the initializers and inputs that are weights or shape values


def read_structure(model: onnx.ModelProto, table: NodeTable, check_order: bool = False) -> Structure:
    """The nodes, values and edges of ``model`` (its nodes read into ``table``, in order).  A node
    that reads a value no node before it makes is a :class:`NotInOrder`; with ``check_order`` (no
    node leaves an optional output out), so is a value made twice, or made that is also an
    initializer or input.  Inputs are read as declared: input shapes are applied already."""
    st = Structure(table)
    g = model.graph
    tensors = st.tensors
    WEIGHT, SHAPE, INPUT = TensorKind.WEIGHT, TensorKind.SHAPE, TensorKind.INPUT
    for t in g.initializer:
        kind = WEIGHT if t.data_type in FLOAT_TYPES else SHAPE
        tensors[t.name] = Tensor(t.name, tuple(t.dims[:]), t.data_type, kind)
    for i in g.input:
        if i.name in tensors:
            continue  # old-style models list initializers as inputs
        et = i.type.tensor_type.elem_type
        kind = INPUT if et in FLOAT_TYPES else SHAPE
        tensors[i.name] = Tensor(i.name, dims_of(i.type), et, kind)
        st.inputs.append(i.name)
    sources = len(tensors)  # initializers and inputs
    st.static = {n for n, t in tensors.items() if t.kind is WEIGHT or t.kind is SHAPE}
    st.names = names = node_names(table.names, table.ops)
    nodes, by_op, per_op = st.nodes, st.by_op, st.per_op
    protos = st.protos
    protos.nodes = g.node  # the same nodes as the inferred model's, until that one is known
    NONE = Role.NONE
    # Nodes and tensors are filled in here slot by slot, past their __init__: a call of a
    # Python __init__ costs more than the whole of what it sets (10,000s of each).
    new = object.__new__
    try:
        for idx, (name, op, node_ins, node_outs, domain) in enumerate(
                zip(names, table.ops, table.inputs, table.outputs, table.domains)):
            node = new(Node)  # Node(name, op, node_ins, node_outs, None, domain, idx, (), protos)
            node.name = name
            node.op_type = op
            node.inputs = node_ins
            node.outputs = node_outs
            node.domain = domain
            node.index = idx
            node._attrs = None
            node._attr_protos = ()
            node._src = protos
            nodes[name] = node
            kept = per_op.get(op)
            if kept is None:
                kept = per_op[op] = (by_op.setdefault(op, []), handler_for(op).role is NONE, op == "Constant")
            kept[0].append(node)
            for i in node_ins:
                if i:
                    tensors[i].consumers.append(name)
            for o in node_outs:
                if o:
                    t = tensors[o] = new(Tensor)  # Tensor(o, None, 0, ..., name): typed by type_structure
                    t.name = o
                    t.producer = name
                    t.consumers = []
    except KeyError:  # a node read a value no node before it made
        raise NotInOrder() from None
    if check_order and len(tensors) != sources + sum(map(len, table.outputs)):
        raise NotInOrder()  # a value made twice, or an initializer or input made again
    return st


def type_structure(st: Structure, model: onnx.ModelProto, type_keys: dict[str, bytes],
                   decoded_types: dict[bytes, TypedValue]) -> tuple[dict[str, None], list[str]]:
    """Give ``st``'s values their element types, shapes and kinds from shape inference
    (``type_keys``, ``decoded_types``: :func:`~qtquant.model.nodetable.value_type_keys` of ``model``, the
    inferred model, whose nodes are ``st``'s in the same order).  Returns (the quantized values,
    insertion-ordered, in graph order; the activations whose shapes stay unknown in part or whole)."""
    protos = model.graph.node
    st.protos.nodes = protos
    table = st.table
    if st.names != table.names:
        for idx, (name, given) in enumerate(zip(st.names, table.names)):
            if name != given:
                protos[idx].name = name  # the file's node had no name (or a taken one)
    tensors, per_op = st.tensors, st.per_op
    WEIGHT, SHAPE, ACTIVATION, INPUT = TensorKind.WEIGHT, TensorKind.SHAPE, TensorKind.ACTIVATION, TensorKind.INPUT
    # Insertion-ordered (a dict of None): the quantized tensors in graph order, with no pass over
    # every tensor to find them (inputs first, then node outputs, as ``tensors`` holds them).
    quantized = dict.fromkeys(n for n in st.inputs if tensors[n].kind is INPUT)
    unshaped: list[str] = []
    type_key = type_keys.get
    floats = FLOAT_TYPES
    # The weights and shape values so far (and "", an absent optional input): a node reading
    # nothing else is constant-folded, which one C-level issuperset asks, not a test per input.
    static_names = st.static
    static_names.add("")
    add_static = static_names.add
    for op, node_ins, node_outs in zip(table.ops, table.inputs, table.outputs):
        _, inert, constant = per_op[op]
        # Folded: a Constant, or every input a weight or a shape value (static) with at least
        # one given, or no input at all and a source of nothing quantized.  Most nodes read an
        # activation, and one C-level issuperset settles them.
        if static_names.issuperset(node_ins):  # "" is static: no given input passes too
            folded = constant or inert or any(node_ins)
        else:
            folded = constant
        for o in node_outs:
            if not o:
                continue
            key = type_key(o)
            et, shape, unknown = UNTYPED if key is None else decoded_types[key]
            if et and et not in floats:
                kind = SHAPE
            elif folded:
                kind = WEIGHT if (et in floats or not et) else SHAPE
            elif not et and (inert or not any(tensors[i].is_float for i in node_ins if i)):
                kind = SHAPE
            else:
                kind = ACTIVATION
            t = tensors[o]
            t.shape = shape
            t.elem_type = et
            t.kind = kind
            if kind is ACTIVATION:
                if unknown:
                    unshaped.append(o)
                if not inert:
                    quantized[o] = None
            elif folded or et != NOT_TENSOR:
                # (a sequence of activations is not quantized, and not known before run time either:
                # what reads it is not folded)
                add_static(o)
    return quantized, unshaped
