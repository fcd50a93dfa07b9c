"""The module hierarchy of a graph: nested blocks of nodes, without Qt.

Where a node's block comes from, first match wins:

1. node metadata: ``qtquant.scope`` (written when local functions are inlined, see
   :mod:`qtquant.model.functions`), PyTorch's ``pkg.torch.onnx.name_scopes`` or ``namespace``;
2. the module path in the node's name: the ``/a/b/c/Op`` convention of the PyTorch
   TorchScript exporter and of paddle2onnx with scopes;
3. nothing: the node sits at the top level (a graph of such names is flat).

Blocks of one node are dissolved into their parent and a block whose only content is one
other block is merged with it (``/model.0/conv/Conv`` alone in ``conv`` is no block).

Which nodes are drawn at all (:func:`folded_nodes`): nodes computed from constants only
(Constant nodes and what folds from them) never are -- the consumer's inspector lists them --
and nodes that compute shapes only (``Shape -> Gather -> Concat -> Reshape``'s second input)
are hidden while the View toggle says so.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...base.vocab import TensorKind

if TYPE_CHECKING:
    from .drawn import DrawnGraph

__all__ = ["Block", "Hierarchy", "ViewState", "build_hierarchy", "node_scopes", "folded_nodes", "constant_inputs",
           "BLOCK_PREFIX", "COLLAPSE_MIN_NODES", "SCOPE_KEYS", "block_name", "block_id"]

BLOCK_PREFIX = "block:"  # canvas names of collapsed blocks: "block:/model.22"
COLLAPSE_MIN_NODES = 500  # graphs with more drawn nodes open collapsed to their top levels
OPEN_BUDGET = 16  # opening collapsed: a top level this small (a lone /model block) is opened further
SCOPE_KEYS = ("qtquant.scope", "pkg.torch.onnx.name_scopes", "namespace")
_SHAPE_OPS = frozenset({"Shape", "Size"})


def block_name(block_id: str) -> str:
    return BLOCK_PREFIX + block_id


def block_id(name: str) -> str | None:
    """The block id of a canvas name, or None for a node or terminal."""
    return name[len(BLOCK_PREFIX):] if name.startswith(BLOCK_PREFIX) else None


@dataclass(slots=True)
class Block:
    id: str  # "/model.22/cv2.0": the scope path, also its key
    label: str  # what the box says: "cv2.0" (merged chains: "model.22/m.0")
    parent: str | None  # the enclosing block's id; None at the top level
    depth: int
    blocks: list[str] = field(default_factory=list)  # child block ids, in graph order
    nodes: list[str] = field(default_factory=list)  # member nodes directly inside, in graph order
    size: int = 0  # every node inside, at any depth


@dataclass
class ViewState:
    """What of the hierarchy is open: saved in projects.  ``expanded`` None: the size rule decides."""

    expanded: set[str] | None = None
    hide_shapes: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"expanded": sorted(self.expanded) if self.expanded is not None else None,
                "hide_shape_tensors": self.hide_shapes}

    @classmethod
    def from_dict(cls, d: Mapping[str, object] | None) -> ViewState:
        d = d or {}
        exp = d.get("expanded")
        return cls({b for b in exp if isinstance(b, str)} if isinstance(exp, list) else None,
                   bool(d.get("hide_shape_tensors", True)))


class Hierarchy:
    """Blocks by id, each node's innermost block, and the top level."""

    def __init__(self, blocks: dict[str, Block], parent_of: dict[str, str | None], top_blocks: list[str],
                 top_nodes: list[str], aliases: dict[str, str]):
        self.blocks = blocks
        self.parent_of = parent_of  # node -> innermost block id (None: top level)
        self.top_blocks = top_blocks
        self.top_nodes = top_nodes
        self.aliases = aliases  # ids merged or dissolved -> the block that holds their nodes
        self._members: dict[str, list[str]] = {}  # block -> every node inside it (made on first use)

    @property
    def flat(self) -> bool:
        return not self.blocks

    def resolve(self, bid: str) -> str | None:
        """A block id as given by a user (``/model.22``, ``model.22``, a merged inner id) -> a block id."""
        if bid in self.blocks:
            return bid
        b = bid if bid.startswith("/") else "/" + bid
        b = b.rstrip("/")
        if b in self.blocks:
            return b
        return self.aliases.get(b)

    def path(self, node_or_block: str) -> list[str]:
        """Enclosing block ids, outermost first (a block's own id is not in it)."""
        if node_or_block in self.blocks:
            b = self.blocks[node_or_block].parent
        else:
            b = self.parent_of.get(node_or_block)
        out: list[str] = []
        while b is not None:
            out.append(b)
            b = self.blocks[b].parent
        out.reverse()
        return out

    def members(self, bid: str) -> list[str]:
        """Every node inside ``bid``, at any depth (cached: the hierarchy never changes; do not modify)."""
        cache = self._members
        out = cache.get(bid)
        if out is None:
            out = []
            stack = [bid]
            while stack:
                b = self.blocks[stack.pop()]
                out.extend(b.nodes)
                stack.extend(reversed(b.blocks))
            cache[bid] = out
        return out

    def descendants(self, bid: str) -> list[str]:
        out: list[str] = []
        stack = list(self.blocks[bid].blocks)
        while stack:
            b = stack.pop()
            out.append(b)
            stack.extend(self.blocks[b].blocks)
        return out

    def unit_map(self, nodes: Iterable[str], expanded: set[str]) -> dict[str, str]:
        """node -> what stands for it on the canvas: itself, or the outermost collapsed block around it."""
        unit_of_block: dict[str, str | None] = {}  # block -> its collapsed ancestor's canvas name, or None

        def unit_of(b: str | None) -> str | None:
            if b is None:
                return None
            if b in unit_of_block:
                return unit_of_block[b]
            up = unit_of(self.blocks[b].parent)
            u = up if up is not None else (None if b in expanded else block_name(b))
            unit_of_block[b] = u
            return u

        out: dict[str, str] = {}
        for n in nodes:
            u = unit_of(self.parent_of.get(n))
            out[n] = n if u is None else u
        return out

    def initial_expanded(self, shown: int) -> set[str]:
        """Small graphs open flat; big ones with the top levels open while OPEN_BUDGET units show."""
        if shown <= COLLAPSE_MIN_NODES:
            return set(self.blocks)
        expanded: set[str] = set()
        visible = len(self.top_blocks) + len(self.top_nodes)
        frontier = list(self.top_blocks)
        while frontier:
            # A lone top block (everything under /model) is opened whatever the budget.
            frontier.sort(key=lambda b: -self.blocks[b].size)
            b = frontier[0]
            blk = self.blocks[b]
            grow = len(blk.blocks) + len(blk.nodes) - 1
            if visible > 1 and visible + grow > OPEN_BUDGET:
                break
            expanded.add(b)
            visible += grow
            frontier = frontier[1:] + list(blk.blocks)
        return expanded


def _parse_scope(key: str, value: str) -> list[str]:
    value = value.strip()
    if key == "pkg.torch.onnx.name_scopes" and value.startswith("["):
        try:
            parts = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parts = []
        return [str(p) for p in parts if str(p)]
    if key == "namespace":  # ": __main__.Net/conv1: torch.nn.Conv2d/...": the attribute names
        return [p.split(":")[0].strip() for p in value.split("/")[1:] if p.split(":")[0].strip()]
    return [p for p in value.split("/") if p]


def node_scopes(graph: DrawnGraph, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per node its scope path (outermost first); () for none."""
    protos = graph.node_protos  # in the order of node.index
    out: dict[str, tuple[str, ...]] = {}
    for name in names:
        n = graph.nodes[name]
        parts = None
        if 0 <= n.index < len(protos):
            meta = protos[n.index].metadata_props
            if meta:
                md = {p.key: p.value for p in meta}
                for k in SCOPE_KEYS:
                    if md.get(k):
                        parts = _parse_scope(k, md[k])
                        break
        if parts is None:
            parts = [p for p in name.split("/")[:-1] if p] if "/" in name else []
        out[name] = tuple(parts)
    return out


def build_hierarchy(graph: DrawnGraph, names: Iterable[str] | None = None) -> Hierarchy:
    """The hierarchy of ``names`` (default: every node), in graph order."""
    names = list(graph.nodes) if names is None else list(names)
    scopes = node_scopes(graph, names)
    raw: dict[str, Block] = {}
    top_blocks: list[str] = []
    top_nodes: list[str] = []
    for name in names:
        parent, bid = None, ""
        for part in scopes[name]:
            bid = f"{bid}/{part}"
            b = raw.get(bid)
            if b is None:
                b = raw[bid] = Block(bid, part, parent, 0)
                (raw[parent].blocks if parent is not None else top_blocks).append(bid)
            parent = bid
        (raw[parent].nodes if parent is not None else top_nodes).append(name)
    aliases: dict[str, str | None] = {}
    blocks: dict[str, Block] = {}
    order = {n: i for i, n in enumerate(names)}

    def settle(bid: str) -> tuple[list[str], list[str], int]:
        """Normalise block ``bid`` (children first); what its parent gets in its place:
        (blocks, nodes, size).  A one-node block gives its node; a block holding one block only
        takes that block's content and label."""
        b = raw[bid]
        kids, nodes = [], list(b.nodes)
        for c in b.blocks:
            cb, cn, _ = settle(c)
            kids += cb
            nodes += cn
        size = len(nodes) + sum(blocks[k].size for k in kids)
        if size < 2:
            aliases[bid] = None
            return kids, nodes, size
        if not nodes and len(kids) == 1:  # merged with its only child: one box, one level
            only = blocks.pop(kids[0])
            aliases[only.id] = bid
            b.label = f"{b.label}/{only.label}"
            kids, nodes = only.blocks, only.nodes
        if len(nodes) > 1:
            nodes.sort(key=order.__getitem__)
        b.blocks, b.nodes, b.size = kids, nodes, size
        blocks[bid] = b
        return [bid], [], size

    new_top: list[str] = []
    for bid in top_blocks:
        cb, cn, _ = settle(bid)
        new_top += cb
        top_nodes += cn
    top_nodes.sort(key=order.__getitem__)
    parent_of: dict[str, str | None] = dict.fromkeys(top_nodes)

    def finish(bid: str, parent: str | None, depth: int) -> None:
        b = blocks[bid]
        b.parent, b.depth = parent, depth
        for n in b.nodes:
            parent_of[n] = bid
        for c in b.blocks:
            finish(c, bid, depth + 1)

    for bid in new_top:
        finish(bid, None, 0)
    # A dissolved block's id names where its nodes went: its nearest live ancestor.
    live_aliases: dict[str, str] = {}
    for bid, target in aliases.items():
        if target is None:
            up = raw[bid].parent
            while up is not None and up not in blocks:
                up = raw[up].parent if aliases.get(up) is None else aliases[up]
            target = up
        if target is not None:
            live_aliases[bid] = target
    return Hierarchy(blocks, parent_of, new_top, top_nodes, live_aliases)


def folded_nodes(graph: DrawnGraph, hide_shapes: bool = True) -> set[str]:
    """Nodes not drawn: those computed from constants only, and (``hide_shapes``) computations on shapes
    only (``Shape``/``Size`` and what is computed from their results and constants alone).

    A node producing a graph output is always drawn.
    """
    static = {t for t, tt in graph.tensors.items()
              if tt.producer is None and tt.kind in (TensorKind.WEIGHT, TensorKind.SHAPE) and t not in graph.inputs}
    shape_of: set[str] = set()  # tensors computed from shapes only
    outputs = set(graph.outputs)
    out: set[str] = set()
    weight, shape = TensorKind.WEIGHT, TensorKind.SHAPE
    tensors = graph.tensors
    for n in graph.nodes.values():
        # Most nodes read an activation: one look at the first input settles them.
        ins = n.inputs
        first = ins[0] if ins else ""
        if (first and first not in static and first not in shape_of and n.op_type not in _SHAPE_OPS
                and tensors[first].kind not in (weight, shape)):
            continue
        ins = [i for i in ins if i]
        outs = [o for o in n.outputs if o]
        if outputs.intersection(outs):
            continue
        if all(i in static for i in ins):
            static.update(outs)
            out.add(n.name)
            continue
        if not hide_shapes:
            continue
        # Shape/Size read only an activation's shape; what is computed from their results alone
        # (index ranges, anchor grids: float too) never depends on the data.
        reads = [i for i in ins if i not in static]
        if n.op_type in _SHAPE_OPS or (reads and all(i in shape_of for i in reads)):
            shape_of.update(outs)
            out.add(n.name)
    return out


def constant_inputs(graph: DrawnGraph, node: str) -> list[tuple[str, str]]:
    """(tensor, where it comes from) for each constant input of ``node``: initializers and tensors
    computed by folded (undrawn) nodes.  For the inspector."""
    n = graph.nodes.get(node)
    if n is None:
        return []
    out = []
    for t in n.inputs:
        tt = graph.tensors.get(t) if t else None
        if tt is None or tt.kind not in (TensorKind.WEIGHT, TensorKind.SHAPE):
            continue
        if tt.producer is None:
            if t not in graph.inputs:
                out.append((t, "initializer"))
        else:
            out.append((t, f"{graph.nodes[tt.producer].op_type} node {tt.producer}"))
    return out
