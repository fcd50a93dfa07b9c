"""Layered (Sugiyama) layout of the node graph, computed off the GUI thread.

This module imports no Qt: a job runs :func:`layered_layout` in a worker thread and the
canvas only places items at the returned coordinates.

Pipeline:

1. **Layering.** Longest path from the sources, then subgraphs fed only by constants are
   pulled down to just above their first consumer.  Plain longest-path layering (igraph's
   default) parks every source -- Constant nodes, shape-constant chains -- on the top row and
   draws long edges from there across the whole model.
2. **Ordering.** python-igraph's ``layout_sugiyama`` (C code: dummy vertices on long
   edges, barycentric crossing reduction) with our layers.
3. **Placement.** igraph gives every vertex, dummy or not, one unit of width.  Nodes here
   are wide boxes and dummies are thin edge bends, so the x coordinates are recomputed
   with real widths: alternating down/up sweeps pull each vertex towards the mean of its
   neighbours, and per layer an isotonic regression (pool-adjacent-violators) finds the
   closest positions that keep the order and the minimum gaps.  Long edges end up
   straight and the drawing is far narrower than igraph's unit grid.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = ["Point", "LayoutInput", "EdgeRoute", "Layout", "layered_layout", "sink_layers", "count_crossings",
           "igraph_reference"]

Point: TypeAlias = "tuple[float, float]"  # (x, y) in scene units
Adjacency: TypeAlias = "Sequence[Sequence[int]]"  # vertex -> its neighbours on one side
Edges: TypeAlias = "Sequence[tuple[int, int]]"  # (src, dst) vertex indices


@dataclass
class LayoutInput:
    """What the layout needs: box sizes and directed edges between box indices."""

    sizes: list[tuple[float, float]]  # (width, height) per node
    edges: list[tuple[int, int]]  # (src, dst) node indices; parallel edges allowed
    # Sources that must stay on top (graph inputs and their readers).  Other sources
    # (Constant nodes and what hangs off them only) float down.  None: all anchored.
    anchored: list[bool] | None = None
    # Nodes put on the bottom row (an expanded block's exits to what lies below it).  None: none.
    bottom: list[bool] | None = None


@dataclass
class EdgeRoute:
    src: int
    dst: int
    points: list[tuple[float, float]]  # start (bottom of src) ... bends ... end (top of dst)


@dataclass
class Layout:
    pos: list[tuple[float, float]]  # node centres
    layers: list[int]
    routes: list[EdgeRoute]  # one per input edge, same order
    width: float
    height: float
    crossings: int
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds
    left: float = 0.0  # the drawing's extent starts here (expanding a block can push nodes left of 0)
    top: float = 0.0


def _adjacency(n: int, edges: Edges) -> tuple[list[list[int]], list[list[int]]]:
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if a != b:
            succ[a].append(b)
            pred[b].append(a)
    return succ, pred


def _topo(n: int, succ: Adjacency, pred: Adjacency) -> list[int]:
    indeg = [len(set(p)) for p in pred]
    order = [i for i in range(n) if indeg[i] == 0]
    k = 0
    while k < len(order):
        u = order[k]
        k += 1
        for v in set(succ[u]):
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    if len(order) < n:  # cycles (never for valid ONNX): append the rest in index order
        done = set(order)
        order += [i for i in range(n) if i not in done]
    return order


def sink_layers(n: int, edges: Edges, anchored: Sequence[bool] | None = None) -> list[int]:
    """Longest-path layers; constant-only subgraphs moved down to just above their first consumer."""
    succ, pred = _adjacency(n, edges)
    order = _topo(n, succ, pred)
    layer = [0] * n
    for u in order:
        for v in succ[u]:
            if layer[v] <= layer[u]:
                layer[v] = layer[u] + 1
    # Only nodes that hang off nothing but constants float down; real branches stay next to
    # their producer (sinking those turns short branches into long edges and adds crossings).
    floating = [False] * n
    if anchored is not None:
        for u in order:
            floating[u] = not anchored[u] and all(floating[p] for p in pred[u])
    for u in reversed(order):
        if succ[u] and floating[u]:
            want = min(layer[v] for v in succ[u]) - 1
            if want > layer[u]:
                layer[u] = want
    return layer


def _pav(desired: Sequence[float], weights: Sequence[float], seps: Sequence[float]) -> list[float]:
    """Positions closest (weighted L2) to ``desired`` with p[i+1] - p[i] >= seps[i], order kept."""
    n = len(desired)
    if n == 0:
        return []
    c = [0.0] * n
    for i in range(1, n):
        c[i] = c[i - 1] + seps[i - 1]
    # Isotonic regression of y = desired - c (non-decreasing), pool adjacent violators.
    vals: list[float] = []
    wts: list[float] = []
    cnt: list[int] = []
    for i in range(n):
        v, w, k = desired[i] - c[i], weights[i], 1
        while vals and vals[-1] > v:
            pv, pw, pk = vals.pop(), wts.pop(), cnt.pop()
            v = (v * w + pv * pw) / (w + pw)
            w += pw
            k += pk
        vals.append(v)
        wts.append(w)
        cnt.append(k)
    out: list[float] = []
    i = 0
    for v, k in zip(vals, cnt):
        for _ in range(k):
            out.append(v + c[i])
            i += 1
    return out


def count_crossings(rows: list[list[int]], down: list[list[int]]) -> int:
    """Edge crossings between consecutive rows.

    ``rows[k]`` lists the vertices of layer k left to right; ``down[v]`` the vertices in
    layer k+1 that v connects to.  Counted by inversions (Fenwick tree), O(E log V).
    """
    total = 0
    for k in range(len(rows) - 1):
        rank = {v: i for i, v in enumerate(rows[k + 1])}
        seq = []
        for v in rows[k]:
            seq.extend(sorted(rank[w] for w in down[v] if w in rank))
        m = len(rows[k + 1])
        tree = [0] * (m + 1)
        seen = 0
        for r in seq:
            # count earlier entries with a larger rank
            s, i = 0, r + 1
            while i > 0:
                s += tree[i]
                i -= i & -i
            total += seen - s
            seen += 1
            i = r + 1
            while i <= m:
                tree[i] += 1
                i += i & -i
    return total


def layered_layout(inp: LayoutInput, *, layer_gap: float = 64.0, node_gap: float = 28.0,
                   dummy_width: float = 14.0, sweeps: int = 6, maxiter: int = 60, crossings: bool = True) -> Layout:
    """``crossings`` False: the count is skipped (0), for layouts nobody reports on."""
    import igraph as ig

    t0 = time.perf_counter()
    n = len(inp.sizes)
    edges = [(a, b) for a, b in inp.edges]
    timings: dict[str, float] = {}
    if n == 0:
        return Layout([], [], [], 0.0, 0.0, 0, 0.0)
    layers = sink_layers(n, edges, inp.anchored)
    if inp.bottom is not None and any(inp.bottom):
        last = max(layers) + 1
        layers = [last if b else k for k, b in zip(layers, inp.bottom)]
    timings["layering"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    g = ig.Graph(n=n, edges=[(a, b) for a, b in edges if a != b], directed=True)
    lay = g.layout_sugiyama(layers=layers, maxiter=maxiter)
    timings["igraph"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    # Build the extended graph: original vertices plus one dummy per bend point.
    xs = [c[0] for c in lay.coords[:n]]
    vlayer = list(layers)
    vwidth = [s[0] for s in inp.sizes]
    chains: list[list[int]] = []  # per input edge: vertex chain src .. dummies .. dst
    routing = iter(lay.edge_routing)
    for a, b in edges:
        if a == b:
            chains.append([a, b])
            continue
        pts = next(routing)
        chain = [a]
        for k, p in enumerate(pts):
            v = len(xs)
            xs.append(p[0])
            vlayer.append(layers[a] + k + 1)
            vwidth.append(dummy_width)
            chain.append(v)
        chain.append(b)
        chains.append(chain)
    nv = len(xs)
    up: list[list[int]] = [[] for _ in range(nv)]
    down: list[list[int]] = [[] for _ in range(nv)]
    for chain in chains:
        for u, v in zip(chain, chain[1:]):
            if u != v:
                down[u].append(v)
                up[v].append(u)
    nrows = max(vlayer) + 1
    rows: list[list[int]] = [[] for _ in range(nrows)]
    for v in range(nv):
        rows[vlayer[v]].append(v)
    for r in rows:
        r.sort(key=lambda v: xs[v])
    n_crossings = count_crossings(rows, down) if crossings else 0

    # Placement with real widths.
    unit = max(vwidth[:n]) * 0.6 + node_gap
    pos = [x * unit for x in xs]
    weight = [1.0 if v < n else 4.0 for v in range(nv)]  # keep long edges straight

    # Row constants, computed once: minimum gaps between neighbours and PAV weights.
    row_seps = [[(vwidth[a] + vwidth[b]) / 2 + (node_gap if (a < n or b < n) else 6.0) for a, b in zip(r, r[1:])]
                for r in rows]
    row_w = [[weight[v] for v in r] for r in rows]

    def place_row(k: int, neigh: Adjacency | _NoNeighbours) -> None:
        r = rows[k]
        if len(r) == 1:  # most rows of a deep net: no packing needed
            nb = neigh[r[0]]
            if nb:
                pos[r[0]] = sum(pos[u] for u in nb) / len(nb)
            return
        desired: list[float] = []
        for v in r:
            nb = neigh[v]
            desired.append(sum(pos[u] for u in nb) / len(nb) if nb else pos[v])
        for v, p in zip(r, _pav(desired, row_w[k], row_seps[k])):
            pos[v] = p

    for k in range(nrows):  # make the igraph start feasible
        place_row(k, _NO_NEIGH)
    for s in range(sweeps):
        seq = range(1, nrows) if s % 2 == 0 else range(nrows - 2, -1, -1)
        neigh = up if s % 2 == 0 else down
        for k in seq:
            place_row(k, neigh)
    # Final balancing pass: both neighbour sets at once.
    both = [up[v] + down[v] for v in range(nv)]
    for k in range(nrows):
        place_row(k, both)
    timings["placement"] = time.perf_counter() - t2

    # Vertical positions: rows as tall as their tallest box.
    row_h = [0.0] * nrows
    for v in range(n):
        row_h[vlayer[v]] = max(row_h[vlayer[v]], inp.sizes[v][1])
    row_y = [0.0] * nrows
    y = 0.0
    for k in range(nrows):
        h = row_h[k] or 8.0
        row_y[k] = y + h / 2
        y += h + layer_gap
    minx = min(pos[v] - vwidth[v] / 2 for v in range(nv))
    pos = [p - minx for p in pos]
    centres = [(pos[v], row_y[vlayer[v]]) for v in range(n)]
    routes: list[EdgeRoute] = []
    for (a, b), chain in zip(edges, chains):
        pts = [(pos[a], row_y[vlayer[a]] + inp.sizes[a][1] / 2)]
        pts += [(pos[v], row_y[vlayer[v]]) for v in chain[1:-1]]
        pts.append((pos[b], row_y[vlayer[b]] - inp.sizes[b][1] / 2))
        routes.append(EdgeRoute(a, b, pts))
    width = max(pos[v] + vwidth[v] / 2 for v in range(nv))
    height = y - layer_gap
    return Layout(centres, layers, routes, width, height, n_crossings, time.perf_counter() - t0, timings)


class _NoNeighbours:
    def __getitem__(self, v: int) -> tuple[int, ...]:
        return ()


_NO_NEIGH = _NoNeighbours()


def igraph_reference(n: int, edges: Edges, layers: Sequence[int] | None = None,
                     maxiter: int = 100) -> tuple[float, int]:
    """Plain ``layout_sugiyama`` (igraph's own layering): (seconds, crossings), for benchmarks."""
    import igraph as ig

    t0 = time.perf_counter()
    g = ig.Graph(n=n, edges=[(a, b) for a, b in edges if a != b], directed=True)
    lay = g.layout_sugiyama(layers=layers, maxiter=maxiter)
    dt = time.perf_counter() - t0
    xs = [c[0] for c in lay.coords[:n]]
    ly = [int(round(c[1])) for c in lay.coords[:n]]
    down: list[list[int]] = [[] for _ in range(n)]
    vl = list(ly)
    for (a, b), pts in zip([(a, b) for a, b in edges if a != b], lay.edge_routing):
        chain = [a]
        for p in pts:
            xs.append(p[0])
            vl.append(int(round(p[1])))
            down.append([])
            chain.append(len(xs) - 1)
        chain.append(b)
        for u, v in zip(chain, chain[1:]):
            down[u].append(v)
    rows: list[list[int]] = [[] for _ in range(max(vl) + 1)]
    for v in range(len(xs)):
        rows[vl[v]].append(v)
    for r in rows:
        r.sort(key=lambda v: xs[v])
    return dt, count_crossings(rows, down)
