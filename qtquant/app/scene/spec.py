"""What the canvas draws, derived from a Graph without Qt (runs in the layout job).

Op nodes become boxes; graph inputs and outputs become terminals; weights and other
initializers are not drawn (the inspector lists them).  Every producer->consumer tensor
link becomes an edge.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...model.shapes import format_shape
from ...base.vocab import TensorKind
from .layout import Layout, LayoutInput, Point, layered_layout

if TYPE_CHECKING:
    from .drawn import DrawnGraph

__all__ = ["NodeSpec", "EdgeSpec", "SceneSpec", "scene_spec", "layout_scene", "spread_ports", "shape_text",
           "node_size", "node_outputs", "INPUT_PREFIX", "OUTPUT_PREFIX", "NODE_W", "NODE_H", "TERM_W", "TERM_H",
           "BLOCK_W", "BLOCK_H"]

INPUT_PREFIX = "input:"
OUTPUT_PREFIX = "output:"
NODE_W, NODE_H = 172.0, 42.0  # op boxes (scene units)
TERM_W, TERM_H = 150.0, 34.0  # graph input / output terminals
BLOCK_W, BLOCK_H = 196.0, 50.0  # collapsed blocks of the module hierarchy
_SIZES = {"op": (NODE_W, NODE_H), "block": (BLOCK_W, BLOCK_H)}


def node_outputs(graph: DrawnGraph, name: str) -> list[str]:
    """The tensors a canvas node stands for: an op's outputs, a terminal's tensor."""
    if name.startswith((INPUT_PREFIX, OUTPUT_PREFIX)):
        t = name.split(":", 1)[1]
        return [t] if t in graph.tensors else []
    node = graph.nodes.get(name)
    if node is None:
        return []
    return [t for t in node.outputs if t and t in graph.tensors]


def node_size(kind: str) -> tuple[float, float]:
    """(width, height) of a box of ``kind`` ("op", "block", "input", "output")."""
    return _SIZES.get(kind, (TERM_W, TERM_H))


@dataclass
class NodeSpec:
    name: str  # graph node name, or "input:<tensor>" / "output:<tensor>"
    kind: str  # "op" | "input" | "output" | "block" (a collapsed block of the module hierarchy)
    title: str
    subtitle: str
    category: str


@dataclass
class EdgeSpec:
    src: int
    dst: int
    tensor: str
    label: str


@dataclass
class SceneSpec:
    nodes: list[NodeSpec]
    edges: list[EdgeSpec]
    layout: Layout | None = None
    routes: list[list[Point]] | None = None  # per edge, its drawn points (ports spread), set by layout_scene
    # The view.SceneModel this is a view of (None: a plain drawing); object, not SceneModel: the view
    # module builds on this one, and the front end that reads it knows what it set.
    model: object = None


def shape_text(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "?"
    return format_shape(shape).replace("x", "×")


def scene_spec(graph: DrawnGraph, skip: Collection[str] = frozenset()) -> SceneSpec:
    """Every node but those in ``skip`` (folded constants, hidden shape computations) and the
    tensors between the rest."""
    nodes: list[NodeSpec] = []
    index: dict[str, int] = {}
    for name in graph.inputs:
        tt = graph.tensors[name]
        if not tt.consumers:
            continue
        index[INPUT_PREFIX + name] = len(nodes)
        nodes.append(NodeSpec(INPUT_PREFIX + name, "input", name, shape_text(tt.shape), "input"))
    for n in graph.nodes.values():
        if n.name in skip:
            continue
        index[n.name] = len(nodes)
        nodes.append(NodeSpec(n.name, "op", n.op_type, n.name, n.handler.category))
    for name in graph.outputs:
        if name in graph.tensors:
            index[OUTPUT_PREFIX + name] = len(nodes)
            shape = shape_text(graph.tensors[name].shape)
            nodes.append(NodeSpec(OUTPUT_PREFIX + name, "output", name, shape, "output"))
    edges: list[EdgeSpec] = []
    for t in graph.tensors.values():
        if t.kind == TensorKind.WEIGHT and t.producer is None:
            continue
        src = t.producer if t.producer else (INPUT_PREFIX + t.name if INPUT_PREFIX + t.name in index else None)
        if src is None or src not in index:
            continue
        label = shape_text(t.shape)
        seen: set[str] = set()
        for c in t.consumers:
            if c in seen or c not in index:  # one edge per consumer even when it reads the tensor twice
                continue
            seen.add(c)
            edges.append(EdgeSpec(index[src], index[c], t.name, label))
        if t.name in graph.outputs and OUTPUT_PREFIX + t.name in index and t.producer:
            edges.append(EdgeSpec(index[src], index[OUTPUT_PREFIX + t.name], t.name, label))
    return SceneSpec(nodes, edges)


def layout_scene(spec: SceneSpec, graph: DrawnGraph | None = None, *, isolate: bool = False) -> SceneSpec:
    """Compute the layout for ``spec`` (in place) and return it; ``isolate``: in a child process
    (see :mod:`.child`)."""
    sizes = [node_size(n.kind) for n in spec.nodes]
    anchored = [n.kind == "input" for n in spec.nodes]
    if graph is not None:
        inputs = set(graph.inputs)
        for i, n in enumerate(spec.nodes):
            if n.kind == "op" and any(x in inputs for x in graph.nodes[n.name].inputs):
                anchored[i] = True
    return _lay_out(spec, LayoutInput(sizes, [(e.src, e.dst) for e in spec.edges], anchored), isolate)


def _lay_out(spec: SceneSpec, inp: LayoutInput, isolate: bool) -> SceneSpec:
    if isolate:
        from .child import layered_layout_isolated

        spec.layout = layered_layout_isolated(inp)
    else:
        spec.layout = layered_layout(inp)
    # Here, in the layout job, not while the scene is built on the GUI thread (20,000 nodes: ~0.2 s).
    spec.routes = [list(r.points) for r in spec.layout.routes]
    spread_ports(spec, spec.routes, spec.layout.pos)
    return spec


def spread_ports(spec: SceneSpec, routes: Sequence[list[Point]], pos: Sequence[Point]) -> None:
    """Spread edge ends along a box's top/bottom instead of one point (fewer overlaps)."""
    ins: dict[int, list[int]] = {}
    outs: dict[int, dict[str, list[int]]] = {}
    for k, es in enumerate(spec.edges):
        ins.setdefault(es.dst, []).append(k)
        outs.setdefault(es.src, {}).setdefault(es.tensor, []).append(k)
    for node, ks in ins.items():
        if len(ks) < 2:
            continue
        w = node_size(spec.nodes[node].kind)[0] * 0.7
        ks.sort(key=lambda k: routes[k][-2][0] if len(routes[k]) > 2 else pos[spec.edges[k].src][0])
        cx = pos[node][0]
        for j, k in enumerate(ks):
            x = cx - w / 2 + w * (j + 0.5) / len(ks)
            routes[k][-1] = (x, routes[k][-1][1])
    for node, by_t in outs.items():
        if len(by_t) < 2:
            continue
        w = node_size(spec.nodes[node].kind)[0] * 0.6
        order = list(by_t)  # output order
        cx = pos[node][0]
        for j, t in enumerate(order):
            x = cx - w / 2 + w * (j + 0.5) / len(order)
            for k in by_t[t]:
                routes[k][0] = (x, routes[k][0][1])
