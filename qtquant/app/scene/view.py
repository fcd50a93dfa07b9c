"""The canvas's current view of the module hierarchy, and expanding / collapsing it without Qt.

:class:`SceneModel` holds the drawn graph (what :func:`~.spec.scene_spec` draws minus folded nodes), its
:class:`~.hierarchy.Hierarchy`, which blocks are expanded, and the positions of what shows.
:meth:`SceneModel.spec` is a :class:`~.spec.SceneSpec` of the view (collapsed blocks are
boxes whose edges are the tensors crossing their border) that the canvas turns into items.

Only the first view is laid out in full.  Expanding a block lays out that block's content
alone (with a virtual entry per outside producer on top and an exit per outside consumer at
the bottom, so crossing edges come in and go out straight) and makes room for it: what lies
below the block moves down by the extra height, what sits beside it in its row moves aside by
half the extra width.  Collapsing gives the room back the same way.  Expand all and Collapse
all are new views (laid out in full, like opening).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from .hierarchy import ViewState, block_id, block_name, build_hierarchy, folded_nodes
from .layout import EdgeRoute, Layout, LayoutInput, Point, layered_layout
from .room import Room, place, shifts
from ...base.vocab import TensorKind
from .spec import INPUT_PREFIX, OUTPUT_PREFIX, EdgeSpec, NodeSpec, SceneSpec, node_size, shape_text, spread_ports

if TYPE_CHECKING:
    from .drawn import DrawnGraph

__all__ = ["SceneModel", "ISOLATE_MIN_UNITS", "ViewOp"]

ViewOp: TypeAlias = "tuple[str, str] | tuple[str, str, bool]"  # (what, block or node[, deep]): see SceneModel.log
EdgeKey: TypeAlias = "tuple[str, str, str]"  # (src unit, dst unit, tensor)

ISOLATE_MIN_UNITS = 2000  # a full layout of this many boxes runs in a child process (see .child)
_VIRTUAL = (14.0, 2.0)  # size of an expanded block's entry / exit points in its own layout


class SceneModel:
    """What the canvas shows of ``graph`` and where; every change returns the new :meth:`spec`."""

    # Set by _remap: what stands for each node (itself or a collapsed block), the units that show in
    # order, and the edges between them (each -> the index of its first link: an ordered set).
    unit_of: dict[str, str]
    units: list[str]
    edges: dict[EdgeKey, int]
    log_at = 0  # a frozen copy: how much of the log it has seen

    def __init__(self, graph: DrawnGraph, state: ViewState | None = None) -> None:
        self.graph = graph
        self.state = state or ViewState()
        self._build_full()
        exp = self.state.expanded
        self.expanded: set[str] = ({b for b in exp if b in self.h.blocks} if exp is not None
                                   else self.h.initial_expanded(self.shown))
        self.pos: dict[str, tuple[float, float]] = {}
        self.routes: dict[EdgeKey, list[Point]] = {}  # edge -> its points
        # Expanded block -> the room it was given [x0, y0, x1, y1] (kept up to date as others
        # expand), so collapsing gives back exactly that room.
        self.regions: dict[str, list[float]] = {}
        self.last_seconds = 0.0
        # What the user opened and closed on this view, as ("expand", block, deep), ("collapse",
        # block), ("toggle", name), ("reveal", node): the structure drawn from the file records
        # them, so the loaded graph's view does them again (:meth:`redo`).
        self.log: list[ViewOp] = []
        self._remap()

    def _build_full(self) -> None:
        """The drawn graph as names and (src, dst, tensor) links: what scene_spec draws, without
        its NodeSpecs and shape labels (made for what shows only: 20,000 of them cost ~0.5 s)."""
        g = self.graph
        folded = self.folded = folded_nodes(g, self.state.hide_shapes)
        tensors = g.tensors
        kinds: dict[str, str] = {}
        for name in g.inputs:
            if tensors[name].consumers:
                kinds[INPUT_PREFIX + name] = "input"
        ops = [n for n in g.nodes if n not in folded]
        for n in ops:
            kinds[n] = "op"
        for name in g.outputs:
            if name in tensors:
                kinds[OUTPUT_PREFIX + name] = "output"
        links: list[tuple[str, str, str]] = []
        weight = TensorKind.WEIGHT
        for t in tensors.values():
            p = t.producer
            if p is None:
                if t.kind == weight:
                    continue
                p = INPUT_PREFIX + t.name
            if p not in kinds:
                continue
            seen: set[str] = set()
            for c in t.consumers:
                if c not in seen and c in kinds:
                    seen.add(c)
                    links.append((p, c, t.name))
            if t.producer and OUTPUT_PREFIX + t.name in kinds:
                links.append((p, OUTPUT_PREFIX + t.name, t.name))
        self._kinds, self._links = kinds, links
        self._order = {n: i for i, n in enumerate(kinds)}
        self._block_order: dict[str, int] = {}
        links_of: dict[str, list[int]] = {}  # node -> its links (what a block's opening re-maps)
        for i, (p, c, _t) in enumerate(links):
            links_of.setdefault(p, []).append(i)
            links_of.setdefault(c, []).append(i)
        self._links_of = links_of
        self.__dict__.pop("unit_of", None)  # a new drawn graph: mapped in full
        self._node_specs: dict[str, NodeSpec] = {}
        self._labels: dict[str, str] = {}
        self.h = build_hierarchy(g, ops)
        self.shown = len(ops)
        inputs = set(g.inputs)
        self._anchored = {n for n, k in kinds.items()
                          if k == "input" or (k == "op" and any(x in inputs for x in g.nodes[n].inputs))}

    # -- the view as a graph ---------------------------------------------------------------------
    def _remap(self, changed: str | None = None) -> None:
        """Units (what shows) and the edges between them for the current expanded set.

        ``changed``: the one block opened or closed since the last call.  Only its members can
        stand for something else then, so only they and their links are looked at: a block of a
        20,000-node graph costs its own size, not the graph's (the result is the same as in full,
        order included: units by their first node, edges by their first link)."""
        if changed is None or not hasattr(self, "unit_of"):
            self._remap_all()
            return
        members = self.h.members(changed)
        umap = self.unit_of
        fresh = self.h.unit_map(members, self.expanded)
        links, affected = self._links, sorted({i for m in members for i in self._links_of.get(m, ())})
        gone_units = {umap[m] for m in members}
        gone_edges: set[EdgeKey] = set()
        for i in affected:
            s, d, t = links[i]
            gone_edges.add((umap[s], umap[d], t))
        umap.update(fresh)
        new_units = set(fresh.values())
        key = self._unit_key
        units = [u for u in self.units if u not in gone_units]
        units.extend(sorted(new_units, key=key))
        units.sort(key=key)  # two sorted runs: merged in linear time
        self.units = units
        edges = {k: v for k, v in self.edges.items() if k not in gone_edges}
        for i in affected:
            s, d, t = links[i]
            us, ud = umap[s], umap[d]
            if us != ud:
                edges.setdefault((us, ud, t), i)
        self.edges = dict(sorted(edges.items(), key=lambda kv: kv[1]))

    def _remap_all(self) -> None:
        names = list(self._kinds)
        umap = self.h.unit_map([n for n, k in self._kinds.items() if k == "op"], self.expanded)
        for n in names:
            umap.setdefault(n, n)
        self.unit_of = umap
        units: list[str] = []
        seen: set[str] = set()
        for n in names:
            u = umap[n]
            if u not in seen:
                seen.add(u)
                units.append(u)
        self.units = units
        edges: dict[EdgeKey, int] = {}  # (unit, unit, tensor) -> its first link (an ordered set)
        for i, (s, d, t) in enumerate(self._links):
            us, ud = umap[s], umap[d]
            if us != ud:
                edges.setdefault((us, ud, t), i)
        self.edges = edges

    def _unit_key(self, unit: str) -> int:
        """Where ``unit`` comes in :attr:`units`: the position of its first node."""
        bid = block_id(unit)
        if bid is None:
            return self._order[unit]
        k = self._block_order.get(bid)
        if k is None:
            k = self._block_order[bid] = min(self._order[m] for m in self.h.members(bid))
        return k

    def node_spec(self, unit: str) -> NodeSpec:
        ns = self._node_specs.get(unit)  # made once: every change of the view asks for all of them
        if ns is None:
            ns = self._node_specs[unit] = self._make_node_spec(unit)
        return ns

    def _make_node_spec(self, name: str) -> NodeSpec:
        bid = block_id(name)
        if bid is not None:
            return self._block_spec(name, bid)
        return self._op_or_terminal_spec(name)

    def _block_spec(self, unit: str, bid: str) -> NodeSpec:
        b = self.h.blocks[bid]
        concats = sum(1 for m in self.h.members(bid) if self.graph.nodes[m].op_type == "Concat")
        sub = f"{b.size} nodes" + (f" · {concats} Concat" if concats else "")
        return NodeSpec(unit, "block", b.label, sub, "block")

    def _op_or_terminal_spec(self, name: str) -> NodeSpec:
        kind, g = self._kinds[name], self.graph
        if kind == "op":
            n = g.nodes[name]
            return NodeSpec(name, "op", n.op_type, name, n.handler.category)
        t = name.split(":", 1)[1]
        return NodeSpec(name, kind, t, shape_text(g.tensors[t].shape), kind)

    def label(self, tensor: str) -> str:
        lab = self._labels.get(tensor)
        if lab is None:
            lab = self._labels[tensor] = shape_text(self.graph.tensors[tensor].shape)
        return lab

    def _size(self, unit: str) -> tuple[float, float]:
        if unit.startswith("block:"):
            return node_size("block")
        return node_size(self._kinds[unit])

    def _anchored_unit(self, unit: str) -> bool:
        bid = block_id(unit)
        if bid is None:
            return unit in self._anchored
        return any(m in self._anchored for m in self.h.members(bid))

    def members_shown(self, bid: str) -> list[str]:
        """The units inside block ``bid`` in the current view (itself when collapsed)."""
        seen: set[str] = set()
        out: list[str] = []
        for m in self.h.members(bid):
            u = self.unit_of.get(m)
            if u is not None and u not in seen:
                seen.add(u)
                out.append(u)
        return out

    # -- the spec the canvas draws ---------------------------------------------------------------
    def spec(self) -> SceneSpec:
        nodes = [self.node_spec(u) for u in self.units]
        index = {u: i for i, u in enumerate(self.units)}
        edges: list[EdgeSpec] = []
        routes: list[list[Point]] = []
        for (us, ud, t) in self.edges:
            edges.append(EdgeSpec(index[us], index[ud], t, self.label(t)))
            routes.append([(x, y) for x, y in self.routes[(us, ud, t)]])
        pos = [self.pos[u] for u in self.units]
        spec = SceneSpec(nodes, edges)
        for k, es in enumerate(edges):  # ends on the boxes' borders, then spread along them
            (xs, ys), (xd, yd) = pos[es.src], pos[es.dst]
            hs, hd = self._size(self.units[es.src])[1], self._size(self.units[es.dst])[1]
            r = routes[k]
            r[0] = (xs, ys + hs / 2)
            r[-1] = (xd, yd - hd / 2)
        spread_ports(spec, routes, pos)
        left = top = 0.0
        right = bottom = 0.0
        if pos:
            left = min(x - self._size(u)[0] / 2 for u, (x, y) in zip(self.units, pos))
            right = max(x + self._size(u)[0] / 2 for u, (x, y) in zip(self.units, pos))
            top = min(y - self._size(u)[1] / 2 for u, (x, y) in zip(self.units, pos))
            bottom = max(y + self._size(u)[1] / 2 for u, (x, y) in zip(self.units, pos))
        spec.layout = Layout(pos, [0] * len(pos), [EdgeRoute(e.src, e.dst, r) for e, r in zip(edges, routes)],
                             right - left, bottom - top, 0, self.last_seconds, {}, left, top)
        spec.routes = routes
        return spec

    # -- whole views -----------------------------------------------------------------------------
    def layout_all(self, *, isolate: bool | None = None) -> SceneSpec:
        """Lay out the current view in full (opening, Expand all, Collapse all)."""
        t0 = time.perf_counter()
        index = {u: i for i, u in enumerate(self.units)}
        keys = list(self.edges)
        inp = LayoutInput([self._size(u) for u in self.units], [(index[a], index[b]) for a, b, _ in keys],
                          [self._anchored_unit(u) for u in self.units])
        if isolate is None:
            isolate = len(self.units) >= ISOLATE_MIN_UNITS
        if isolate:
            from .child import layered_layout_isolated

            lay = layered_layout_isolated(inp)
        else:
            lay = layered_layout(inp)
        self.pos = {u: (x, y) for u, (x, y) in zip(self.units, lay.pos)}
        self.routes = {k: list(r.points) for k, r in zip(keys, lay.routes)}
        self.regions = {}
        self.last_seconds = time.perf_counter() - t0
        return self.spec()

    def adopt(self, other: "SceneModel") -> bool:
        """Take ``other``'s positions when it shows the same boxes and edges (the structure drawn
        before the graph was loaded); False, and nothing changed, otherwise."""
        if other.units != self.units or other.edges.keys() != self.edges.keys() or not other.pos:
            return False
        self.pos, self.routes, self.regions = dict(other.pos), dict(other.routes), dict(other.regions)
        self.last_seconds = other.last_seconds
        return True

    def frozen(self) -> "SceneModel":
        """A copy of the view (what is open, where the boxes are) that another thread can read
        while this one keeps changing; ``log_at``: how much of :attr:`log` it has seen."""
        c = copy.copy(self)
        c.expanded, c.pos, c.routes = set(self.expanded), dict(self.pos), dict(self.routes)
        c.regions = {k: list(v) for k, v in self.regions.items()}
        c.units, c.edges, c.log, c.unit_of = list(self.units), dict(self.edges), list(self.log), dict(self.unit_of)
        c.log_at = len(self.log)
        return c

    def redo(self, ops: Iterable[ViewOp]) -> bool:
        """Do ``ops`` (another view's :attr:`log`) on this view; True when anything changed."""
        changed = False
        for op, *args in ops:
            if op in ("expand", "collapse", "toggle", "reveal"):
                changed |= bool(getattr(self, op)(*args))
        return changed

    def set_expanded(self, expanded: Iterable[str]) -> None:
        """A new expanded set; positions are stale until :meth:`layout_all`."""
        self.expanded = {b for b in expanded if b in self.h.blocks}
        self._remap()

    def expand_all_set(self) -> set[str]:
        return set(self.h.blocks)

    def collapse_all_set(self) -> set[str]:
        return self.h.initial_expanded(COLLAPSE_ALL)

    def set_hide_shapes(self, on: bool) -> None:
        """Show or hide shape computations: a new drawn graph (re-laid out by the caller)."""
        self.state.hide_shapes = bool(on)
        before = set(self.h.blocks)
        self._build_full()
        fresh = {b for b in self.h.initial_expanded(self.shown) if b not in before}  # new blocks: the size rule
        self.set_expanded(self.expanded | fresh)

    def view_state(self) -> ViewState:
        return ViewState(set(self.expanded), self.state.hide_shapes)

    # -- expanding and collapsing ------------------------------------------------------------------
    def visible_block(self, name: str) -> str | None:
        """The block id of a canvas name when it is a collapsed block on the canvas."""
        bid = block_id(name)
        return bid if bid is not None and name in self.pos else None

    def expand(self, bid: str, deep: bool = False) -> bool:
        """Open block ``bid`` (and the blocks around it first; ``deep``: every block inside it
        too, laid out as one); False when there is nothing to do."""
        found = self.h.resolve(bid)
        if found is None or (found in self.expanded and not deep):
            return False
        if found in self.expanded:  # open already: deep means closing it and opening it fully
            self.collapse(found)
        for outer in self.h.path(found):
            if outer not in self.expanded:
                self.expand(outer)
        self._expand_one(found, deep)
        return True

    def reveal(self, node: str) -> bool:
        """Expand the blocks around ``node``; True when it shows on the canvas afterwards."""
        changed = False
        if node in self.folded:  # a folded constant shows in its consumer
            g = self.graph
            for t in g.nodes[node].outputs:
                for c in g.tensors[t].consumers if t in g.tensors else ():
                    return self.reveal(c)  # the first one (itself folded: its consumer, and so on)
        if node in self.h.parent_of:
            for b in self.h.path(node):
                if b not in self.expanded:
                    changed |= self.expand(b)
        return changed

    def shows(self, name: str) -> bool:
        return name in self.pos

    def _expand_one(self, bid: str, deep: bool = False) -> None:
        t0 = time.perf_counter()
        B = block_name(bid)
        bx, by = self.pos[B]
        bw, bh = self._size(B)
        old_routes = self.routes
        self.expanded.add(bid)
        if deep:
            self.expanded.update(self.h.descendants(bid))
        self._remap(bid)
        inside = self.members_shown(bid)
        inset = set(inside)
        # The block's own layout: its units, an entry per outside producer, an exit per outside consumer.
        names: list[str | tuple[str, str]] = list(inside)  # a unit, or ("in"/"out", the unit outside)
        idx = {u: i for i, u in enumerate(inside)}
        entries: dict[str, int] = {}
        exits: dict[str, int] = {}
        pairs: dict[tuple[int, int], int] = {}
        for (us, ud, _t) in self.edges:
            if us in inset and ud in inset:
                a, b = idx[us], idx[ud]
            elif ud in inset:
                if us not in entries:
                    entries[us] = len(names)
                    names.append(("in", us))
                a, b = entries[us], idx[ud]
            elif us in inset:
                if ud not in exits:
                    exits[ud] = len(names)
                    names.append(("out", ud))
                a, b = idx[us], exits[ud]
            else:
                continue
            pairs.setdefault((a, b), len(pairs))
        sizes = [self._size(u) if isinstance(u, str) else _VIRTUAL for u in names]
        anchored = [not isinstance(u, str) and u[0] == "in" for u in names]
        for u in inside:  # nothing outside feeds it and it reads a graph input: on top too
            anchored[idx[u]] = self._anchored_unit(u)
        bottom = [not isinstance(u, str) and u[0] == "out" for u in names]
        plist = list(pairs)
        # Fewer sweeps than a whole graph's layout: a block is small and this runs on the GUI thread.
        lay = layered_layout(LayoutInput(sizes, plist, anchored, bottom), sweeps=3, maxiter=30, crossings=False)
        sub = {p: r.points for p, r in zip(plist, lay.routes)}
        w, h = lay.width, lay.height
        ox, oy = bx - w / 2, by - bh / 2
        dw, dh = max(0.0, w - bw), max(0.0, h - bh)
        below = by + bh / 2
        band_lo, band_hi = oy, oy + h

        def f(x: float, y: float) -> Point:
            if y > below:
                return (x, y + dh)
            if band_lo <= y <= band_hi and dw:
                return (x + dw / 2, y) if x > bx else ((x - dw / 2, y) if x < bx else (x, y))
            return (x, y)

        def off(points: Sequence[Point]) -> list[Point]:
            return [(x + ox, y + oy) for x, y in points]

        pos = {u: f(*p) for u, p in self.pos.items() if u != B}
        for u in inside:
            x, y = lay.pos[idx[u]]
            pos[u] = (x + ox, y + oy)
        routes: dict[EdgeKey, list[Point]] = {}
        for key in self.edges:
            us, ud, t = key
            if us in inset and ud in inset:
                routes[key] = off(sub[(idx[us], idx[ud])])
            elif ud in inset:
                old = old_routes.get((us, B, t)) or [self.pos.get(us, (bx, by)), (bx, by)]
                routes[key] = [f(*p) for p in old[:-1]] + off(sub[(entries[us], idx[ud])])
            elif us in inset:
                old = old_routes.get((B, ud, t)) or [(bx, by), self.pos.get(ud, (bx, by))]
                routes[key] = off(sub[(idx[us], exits[ud])]) + [f(*p) for p in old[1:]]
            else:
                routes[key] = [f(*p) for p in old_routes[key]]
        ancestors = set(self.h.path(bid))
        for other, r in self.regions.items():
            if other in ancestors:
                self.regions[other] = [r[0] - dw / 2, r[1], r[2] + dw / 2, r[3] + dh]
            else:
                self.regions[other] = [*f(r[0], r[1]), *f(r[2], r[3])]
        self.regions[bid] = [ox, oy, ox + w, oy + h]
        self.pos, self.routes = pos, routes
        self.last_seconds = time.perf_counter() - t0

    def collapse(self, bid: str) -> bool:
        """Close block ``bid`` (and every block inside it); False when it is not open.

        The blocks inside that were expanded on their own give their room back first, the last
        one opened first (each the inverse of its expansion); then ``bid`` gives back its own, or,
        laid out with its surroundings, as much as keeps every box clear of the others
        (:mod:`.room`)."""
        found = self.h.resolve(bid)
        if found is None or found not in self.expanded or any(b not in self.expanded for b in self.h.path(found)):
            return False
        bid = found
        t0 = time.perf_counter()
        inner = set(self.h.descendants(bid))
        for d in [d for d in reversed(self.regions) if d in inner]:
            if d in self.regions and d in self.expanded:  # not closed with one inside it already
                self.collapse(d)
        B = block_name(bid)
        inside = self.members_shown(bid)
        inset = set(inside)
        bw, bh = self._size(B)
        boxes = [(self.pos[u], self._size(u)) for u in inside]
        x0 = min(x - w / 2 for (x, _), (w, _h) in boxes)
        x1 = max(x + w / 2 for (x, _), (w, _h) in boxes)
        y0 = min(y - h / 2 for (_, y), (_w, h) in boxes)
        y1 = max(y + h / 2 for (_, y), (_w, h) in boxes)
        given = self.regions.pop(bid, None)
        if given is not None:  # the room it was given: everything inside it, entries and exits too
            x0, y0, x1, y1 = min(x0, given[0]), min(y0, given[1]), max(x1, given[2]), max(y1, given[3])
        # else laid out with what surrounds it: the area its boxes cover, given back as far as it can be
        # (other boxes may share it: the box goes where it hits none, its top row first)
        mid = (x0 + x1) / 2
        spots = sorted((self.pos[u] for u in inside), key=lambda p: (p[1], abs(p[0] - mid)))
        cx, cy = place(self.pos, self._size, inset, [(mid, y0 + bh / 2)] + [(x, max(y, y0 + bh / 2)) for x, y in spots],
                       bw, bh)
        box = (cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2)
        room = shifts(self.pos, self._size, Room(x0, y0, x1, y1), box, inset, max(0.0, (x1 - x0) - bw) / 2,
                      max(0.0, (y1 - y0) - bh))
        g = room.moves
        old_routes = self.routes
        into: dict[tuple[str, str], list[Point]] = {}  # (outside producer, tensor) -> an old route into the block
        out_of: dict[tuple[str, str], list[Point]] = {}
        for (us, ud, t), pts in old_routes.items():
            if ud in inset and us not in inset:
                into.setdefault((us, t), pts)
            elif us in inset and ud not in inset:
                out_of.setdefault((ud, t), pts)
        self._move_all(room, bid, inset)
        self.expanded.discard(bid)
        self.expanded.difference_update(inner)
        self._remap(bid)
        pos = self.pos
        pos[B] = (cx, cy)
        top, bottom = cy - bh / 2, cy + bh / 2
        routes: dict[EdgeKey, list[Point]] = {}
        for key in self.edges:
            us, ud, t = key
            if ud == B:
                old = into.get((us, t), [(cx, top), (cx, top)])
                routes[key] = [g(*old[0])] + [g(*p) for p in old[1:-1] if p[1] < top] + [(cx, top)]
            elif us == B:
                old = out_of.get((ud, t), [(cx, bottom), (cx, y1)])
                routes[key] = [(cx, bottom)] + [g(*p) for p in old[1:-1] if p[1] > y1] + [g(*old[-1])]
            else:
                routes[key] = [g(*p) for p in old_routes[key]]
        self.routes = routes
        self.last_seconds = time.perf_counter() - t0
        return True

    def _move_all(self, room: Room, bid: str, gone: Collection[str]) -> None:
        """Apply ``room``'s shifts (block ``bid`` closing) to the boxes outside ``gone`` and to the
        other blocks' rooms (those around ``bid`` shrink by them)."""
        g = room.moves
        self.pos = {u: g(*p) for u, p in self.pos.items() if u not in gone}
        ancestors = set(self.h.path(bid))
        for other, r in self.regions.items():
            if other in ancestors:
                self.regions[other] = [r[0] + room.left, r[1], r[2] - room.right, r[3] - room.up]
            else:
                self.regions[other] = [*g(r[0], r[1]), *g(r[2], r[3])]

    def toggle(self, name: str) -> bool:
        """Double-click: expand a collapsed block, or collapse the innermost open block around a node."""
        bid = self.visible_block(name)
        if bid is not None:
            return self.expand(bid)
        path = self.h.path(name) if name in self.h.parent_of else []
        return self.collapse(path[-1]) if path else False

    def enclosing(self, name: str) -> str | None:
        """The innermost expanded block around canvas item ``name`` (what Collapse closes)."""
        bid = block_id(name)
        path = self.h.path(bid) if bid is not None else (self.h.path(name) if name in self.h.parent_of else [])
        return path[-1] if path else None

    def home(self, name: str) -> str | None:
        """What shows ``name`` (a node, a terminal or a tensor's producer) on the canvas now."""
        if name in self.pos:
            return name
        u = self.unit_of.get(name)
        if u is None and name in self.folded:  # a folded constant: where it is used
            g = self.graph
            for t in g.nodes[name].outputs:
                for c in g.tensors[t].consumers if t in g.tensors else ():
                    h = self.home(c)
                    if h is not None:
                        return h
        if u is None and name.startswith(INPUT_PREFIX):
            return None
        return u


COLLAPSE_ALL = 10 ** 9  # "the graph is big": Collapse all applies the opening rule of big graphs
