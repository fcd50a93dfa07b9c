"""Mixed precision: which quantized tensors are int16 or kept in float instead of int8.

The assignment is keyed by *tensor* name (a tensor is what gets a Q/DQ pair in the export and
a scale on the target).  Users may name a node instead: it stands for its quantized output
tensor(s) (:func:`resolve_name`).  Every tensor not in the map is int8, the default, so the map
only ever holds int16 and float entries (:class:`PrecisionMap` drops int8 ones).

Meaning on the target (and in the export, :mod:`qtquant.export.qdq`, and the simulator,
:mod:`qtquant.perf.precision`):

- ``int16``: the tensor is quantized to int16 (symmetric: scale = absmax / 32767 over the same
  range its scale domain has; asymmetric: uint16).  The node producing it runs on the BPU at
  int16 cost; its weights stay int8 (int8 weights x int16 activations is the BPU's int16 mode).
- ``float``: no Q/DQ on the tensor; the node producing it runs on the CPU in float, its weights
  stay float.  Its inputs are still quantized by their producers: the BPU hands them over.

Pure data and rules, no Qt, no session: the app layer, the CLI, plans, projects, export and the
simulator all read these.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from ..base.errors import BadInputError
from ..base.vocab import Precision

if TYPE_CHECKING:
    from ..model.graphitems import Node
    from ..model.graphmodel import Graph

__all__ = ["PrecisionMap", "resolve_name", "resolve_names", "assignments_from_names",
           "node_precision", "chain_nodes", "float_nodes", "RANK", "summary_text"]

# Higher wins when one node has outputs of different precision.
RANK = {Precision.INT8: 0, Precision.INT16: 1, Precision.FLOAT: 2}
_CHAIN_HOPS = 4  # how far a node name follows a fused chain (Conv -> Sigmoid -> Mul) to its quantized output


def _precision(value: object) -> Precision:
    """A precision from any spelling (a Precision, its value, another enum of the same values);
    ValueError for anything else."""
    return Precision(getattr(value, "value", value))  # an enum's value, else the text itself


class PrecisionMap(Mapping[str, Precision]):
    """An immutable, hashable ``tensor -> Precision`` map without int8 entries (int8 is the default).

    Built from a dict, pairs, or another map; values may be spelled as text (``"int16"``).
    Compares equal to a dict with the same non-int8 entries.
    """

    __slots__ = ("_items", "_d")

    def __init__(self, items: Mapping[str, object] | Iterable[tuple[str, object]] | None = ()):
        pairs = items.items() if isinstance(items, Mapping) else (items or ())
        d: dict[str, Precision] = {}
        for t, given in pairs:
            try:
                p = _precision(given)
            except ValueError:
                raise BadInputError(f"precision of {t!r} must be one of int8, int16, float, got {given!r}") from None
            if p is not Precision.INT8:
                d[str(t)] = p
            else:
                d.pop(str(t), None)
        self._d = dict(sorted(d.items()))
        self._items = tuple(self._d.items())

    def __getitem__(self, k: str) -> Precision:
        return self._d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"PrecisionMap({self._d!r})"

    def of(self, tensor: str) -> Precision:
        return self._d.get(tensor, Precision.INT8)

    def with_(self, tensors: Iterable[str], precision: Precision | str) -> "PrecisionMap":
        """A copy with ``tensors`` set to ``precision`` (int8 removes them)."""
        d = dict(self._d)
        p = _precision(precision)
        for t in tensors:
            d[t] = p
        return PrecisionMap(d)

    def tensors(self, precision: Precision | str) -> list[str]:
        p = _precision(precision)
        return [t for t, q in self._d.items() if q is p]

    def to_dict(self) -> dict[str, str]:
        return {t: p.value for t, p in self._d.items()}


# -- names --------------------------------------------------------------------------------------

def _chain_output(graph: Graph, tensor: str) -> str | None:
    """The quantized tensor a fused chain starting at ``tensor`` ends in (Conv -> Sigmoid -> Mul:
    the Conv output has no Q/DQ of its own, the Mul's has)."""
    t = tensor
    for _ in range(_CHAIN_HOPS):
        if graph.is_quantized(t):
            return t
        if graph.tensors[t].kind != "activation":
            return None  # shape math (an int64 Shape output) is no chain into a quantized tensor
        cons = graph.consumers(t)
        if not cons:
            return None
        # A SiLU reads the Conv output twice (Sigmoid and Mul): follow the consumer that reads the other.
        last = [c for c in cons if not any(graph.producer(i) in cons for i in c.inputs if i)]
        nxt = cons[0] if len(cons) == 1 else (last[0] if len(last) == 1 else None)
        if nxt is None or not nxt.outputs:
            return None
        t = nxt.outputs[0]
    return t if graph.is_quantized(t) else None


def resolve_name(graph: Graph, name: str) -> list[str]:
    """The quantized tensor(s) ``name`` stands for: itself when it is a quantized tensor, else the
    node of that name's quantized outputs (through a fused chain).  BadInputError otherwise."""
    if name in graph.tensors:
        if graph.is_quantized(name):
            return [name]
        if name not in graph.nodes:
            raise BadInputError(f"tensor {name!r} is not quantized: it has no precision to set")
    node = graph.nodes.get(name)
    if node is None:
        raise BadInputError(f"the model has no node or tensor named {name!r}")
    outs = list(dict.fromkeys(o for o in (_chain_output(graph, t) for t in node.outputs if t) if o))
    if not outs:
        raise BadInputError(f"node {name!r} has no quantized output: it has no precision to set")
    return outs


def resolve_names(graph: Graph, names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        out += resolve_name(graph, n)
    return list(dict.fromkeys(out))


def assignments_from_names(graph: Graph, int16: Iterable[str] = (), keep_float: Iterable[str] = (),
                           base: Mapping[str, object] | None = None) -> PrecisionMap:
    """``base`` (default: empty) with the ``--int16`` and ``--keep-float`` names applied; a name in
    both is refused."""
    i16, fl = resolve_names(graph, int16), resolve_names(graph, keep_float)
    both = sorted(set(i16) & set(fl))
    if both:
        raise BadInputError(f"{both[0]!r} is given both --int16 and --keep-float")
    return PrecisionMap(base or {}).with_(i16, Precision.INT16).with_(fl, Precision.FLOAT)


# -- nodes ---------------------------------------------------------------------------------------

def node_precision(graph: Graph, precision: Mapping[str, Precision], node: Node) -> Precision:
    """A node's precision: the highest of its outputs' (float > int16 > int8), following a fused
    chain the way :func:`resolve_name` does."""
    if not precision:
        return Precision.INT8
    best = Precision.INT8
    for t in node.outputs:
        if not t:
            continue
        q = t if graph.is_quantized(t) else _chain_output(graph, t)
        p = precision.get(q, Precision.INT8) if q else Precision.INT8
        if RANK[p] > RANK[best]:
            best = p
    return best


def chain_nodes(graph: Graph, tensor: str) -> list[str]:
    """The node producing ``tensor`` and the fused chain behind it (a Conv -> Sigmoid -> Mul whose
    inner tensors have no Q/DQ): the nodes whose precision ``tensor``'s is."""
    p = graph.producer(tensor)
    if p is None:
        return []
    out, stack = [p.name], [p]
    while stack:
        n = stack.pop()
        for i in n.inputs:
            q = graph.producer(i) if i else None
            if q is not None and q.name not in out and not graph.is_quantized(i) \
                    and graph.tensors[i].kind == "activation":
                out.append(q.name)
                stack.append(q)
    return out


def float_nodes(graph: Graph, precision: Mapping[str, Precision]) -> set[str]:
    """Nodes that run on the CPU: the producers of float tensors with their fused chains."""
    out: set[str] = set()
    for t, p in precision.items():
        if p is Precision.FLOAT and t in graph.tensors:
            out.update(chain_nodes(graph, t))
    return out


def summary_text(graph: Graph, precision: Mapping[str, object]) -> str:
    """One line per non-default assignment ("int16: a, b"), for the CLI reports; "" when all int8."""
    if not precision:
        return ""
    pm = PrecisionMap(precision)
    lines = []
    for p in (Precision.INT16, Precision.FLOAT):
        ts = pm.tensors(p)
        if ts:
            shown = ", ".join(ts[:8]) + (f" (+{len(ts) - 8} more)" if len(ts) > 8 else "")
            lines.append(f"precision {p.label}: {len(ts)} tensor(s): {shown}")
    return "\n".join(lines)
