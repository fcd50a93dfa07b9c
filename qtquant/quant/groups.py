"""User groups: tensors tied to one shared observer (DESIGN §3, "Constraints").

A :class:`GroupSet` holds the groups of a session.  Sharing is checked against the
graph before anything changes, so a refused share leaves the set untouched and
raises :class:`~qtquant.base.errors.ShareRefused` with a one-line reason.  Sharing a
tensor that already belongs to a group merges the groups (union), which keeps the
invariant "a tensor belongs to exactly one group".

The top-level functions (:func:`share`, :func:`unshare`, :func:`remove_member`,
:func:`restore`) act on a session and call ``session.groups_changed()`` so listeners
refresh; the GUI's undo/redo uses :meth:`GroupSet.snapshot` / :func:`restore`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

import onnx

from ..base.errors import ShareRefused
from ..model.graphitems import Tensor
from ..model.graphmodel import Graph
from ..model.ops import handler_for
from ..base.vocab import TensorKind

__all__ = ["Group", "GroupSet", "GroupsSnapshot", "share", "unshare", "remove_member", "restore", "clear"]


@dataclass(frozen=True)
class Group:
    id: int
    members: tuple[str, ...]
    name: str = ""
    # Facts the user should see but that do not block the share, e.g. other consumers
    # of a member's producer that now see the shared scale.
    notes: tuple[str, ...] = ()

    def __contains__(self, tensor: str) -> bool:
        return tensor in self.members

    def __len__(self) -> int:
        return len(self.members)


def _dtype(t: Tensor) -> str:
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    except Exception:
        return t.dtype_name


class Shares(Protocol):
    """What sharing reads of a session (a :class:`~qtquant.quant.state.QuantState` meets it; that
    contract holds a :class:`GroupSet`, so it cannot be named here)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def ready(self) -> bool: ...

    def export_float(self) -> frozenset[str]: ...


def _graph_of(obj: Graph | Shares) -> Graph:
    return obj if isinstance(obj, Graph) else obj.graph


def _per_channel_use(graph: Graph, tensor: str) -> str | None:
    """The consumer that reads ``tensor`` as a per-channel weight, if any."""
    for c in graph.consumers(tensor):
        for idx in handler_for(c.op_type).weight_inputs:
            if idx < len(c.inputs) and c.inputs[idx] == tensor:
                return c.name
    return None


def check_member(graph: Graph, tensor: str) -> None:
    """Raise :class:`ShareRefused` when ``tensor`` cannot join a scale domain."""
    t = graph.tensors.get(tensor) if isinstance(tensor, str) else None
    if t is None:
        raise ShareRefused(f"tensor {tensor!r} is not in the model")
    if t.kind == TensorKind.WEIGHT:
        if not t.is_float:
            raise ShareRefused(f"tensor {tensor!r} is not quantized (it is a {_dtype(t)} constant)")
        user = _per_channel_use(graph, tensor)
        if user is not None:
            raise ShareRefused(f"tensor {tensor!r} is the weight of {user!r}; weights are quantized per channel "
                               "and cannot share an activation scale")
        return  # constants can join: they are cloned and requantized on export
    if t.kind == TensorKind.SHAPE:
        raise ShareRefused(f"tensor {tensor!r} is not quantized (it is a {_dtype(t)} shape/index value)")
    if not graph.is_quantized(tensor):
        p = graph.producer(tensor)
        why = f"it is produced by {p.op_type} {p.name!r}, which is never quantized" if p is not None else \
            f"it is a {_dtype(t)} tensor"
        raise ShareRefused(f"tensor {tensor!r} is not quantized ({why})")


def ships_float(session: Shares) -> frozenset[str]:
    """What the export of a calibrated session leaves in float; nothing before calibration (the
    output rule needs the ranges)."""
    return session.export_float() if session.ready else frozenset()


def check_ships_quantized(session: Shares, tensors: Iterable[str], floats: Collection[str] | None = None) -> None:
    """Raise :class:`ShareRefused` for a tensor the export leaves in float (an output Concat's
    members that cannot share one int8 scale, or precision float): joining a group it ships
    without the group's scale, and its range only widens the others' (a plan putting yolov8n's
    output0 in a group cut /model.2/Concat's worst slice from 7.81 to 1.72 dB).  ``floats``:
    :func:`ships_float` of ``session``, when the caller has it."""
    floats = ships_float(session) if floats is None else floats
    for t in tensors:
        if t in floats:
            raise ShareRefused(f"tensor {t!r} ships in float (the export leaves it unquantized: a model output "
                               "whose Concat's members cannot share one int8 scale, or set to float), so it "
                               "cannot share a scale; --quantize-outputs (or its precision) quantizes it")


def _notes(graph: Graph, members: Iterable[str]) -> tuple[str, ...]:
    notes = []
    for m in members:
        users = graph.tensors[m].consumers
        if len(users) > 1:
            notes.append(f"{m!r} also feeds {len(users) - 1} other op(s); they see the shared scale too")
    return tuple(notes)


GroupsSnapshot: TypeAlias = "tuple[tuple[Group, ...], int]"
"""What :meth:`GroupSet.snapshot` takes: the groups and the next id."""


@dataclass
class GroupSet:
    groups: list[Group] = field(default_factory=list)
    next_id: int = 0

    # -- queries ------------------------------------------------------------------------
    def as_lists(self) -> list[tuple[str, ...]]:
        return [g.members for g in self.groups]

    def get(self, group_id: int) -> Group | None:
        return next((g for g in self.groups if g.id == group_id), None)

    def group_of(self, tensor: str) -> Group | None:
        return next((g for g in self.groups if tensor in g.members), None)

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self) -> Iterator[Group]:
        return iter(list(self.groups))

    # -- undo/redo -----------------------------------------------------------------------
    def snapshot(self) -> GroupsSnapshot:
        """Cheap immutable state: restore it with :meth:`restore`."""
        return (tuple(self.groups), self.next_id)

    def restore(self, snapshot: GroupsSnapshot) -> None:
        groups, next_id = snapshot
        self.groups = list(groups)
        self.next_id = max(next_id, max((g.id + 1 for g in self.groups), default=0))

    # -- edits ---------------------------------------------------------------------------
    def share(self, session_or_graph: Graph | Shares, tensors: str | Iterable[str], name: str = "") -> Group:
        """Tie ``tensors`` to one observer.  Tensors already grouped pull their groups in.

        Raises :class:`ShareRefused` (and changes nothing) when a constraint is violated.
        """
        graph = _graph_of(session_or_graph)
        if isinstance(tensors, str):
            tensors = [tensors]
        wanted = list(dict.fromkeys(tensors))
        for t in wanted:
            check_member(graph, t)
        if not isinstance(session_or_graph, Graph):  # a session: what it exports in float is known
            check_ships_quantized(session_or_graph, wanted)
        merged_groups = [g for g in self.groups if any(t in g.members for t in wanted)]
        merged_groups += self._linked(graph, wanted, merged_groups)
        members = list(dict.fromkeys([m for g in merged_groups for m in g.members] + wanted))
        if len(members) < 2:
            raise ShareRefused("sharing needs at least two tensors")
        first = graph.tensors[members[0]]
        for m in members[1:]:
            other = graph.tensors[m]
            if other.elem_type and first.elem_type and other.elem_type != first.elem_type:
                raise ShareRefused(f"tensors have different dtypes: {first.name!r} is {_dtype(first)} "
                                   f"but {m!r} is {_dtype(other)}")
        if merged_groups:
            gid = min(g.id for g in merged_groups)
            name = name or next((g.name for g in merged_groups if g.id == gid), "")
        else:
            gid = self.next_id
            self.next_id += 1
        group = Group(gid, tuple(members), name, _notes(graph, members))
        gone = {g.id for g in merged_groups}
        pos = next((i for i, g in enumerate(self.groups) if g.id in gone), len(self.groups))
        rest = [g for g in self.groups if g.id not in gone]
        rest.insert(min(pos, len(rest)), group)
        self.groups = rest
        return group

    def _linked(self, graph: Graph, wanted: Sequence[str], merged: Sequence[Group]) -> list[Group]:
        """The other groups tied to ``wanted`` and ``merged``'s members by pass-through ops (a Reshape
        from one group's Concat into the joined Concat): they end up with one scale, so they are one
        group (a drop that links three head Concats merges the three)."""
        rest = [g for g in self.groups if g not in merged]
        if not rest:
            return []
        from .domains import natural_sets

        uf = natural_sets(graph, None)
        roots = {uf.find(t) for t in [*wanted, *(m for g in merged for m in g.members)]}
        found = []
        changed = True
        while changed:  # a linked group's members can link one more
            changed = False
            for g in rest:
                if g not in found and any(uf.find(m) in roots for m in g.members):
                    found.append(g)
                    roots.update(uf.find(m) for m in g.members)
                    changed = True
        return found

    def unshare(self, group_id: int) -> Group:
        g = self.get(group_id)
        if g is None:
            raise ShareRefused(f"there is no group {group_id}")
        self.groups = [x for x in self.groups if x.id != group_id]
        return g

    def remove_member(self, group_id: int, tensor: str) -> Group | None:
        """Drop one tensor; a group left with fewer than two members is dissolved (returns None)."""
        g = self.get(group_id)
        if g is None:
            raise ShareRefused(f"there is no group {group_id}")
        if tensor not in g.members:
            raise ShareRefused(f"tensor {tensor!r} is not in group {group_id}")
        rest = tuple(m for m in g.members if m != tensor)
        if len(rest) < 2:
            self.unshare(group_id)
            return None
        new = Group(g.id, rest, g.name, tuple(n for n in g.notes if repr(tensor) not in n))
        self.groups = [new if x.id == group_id else x for x in self.groups]
        return new

    def clear(self) -> None:
        self.groups = []


# -- session-level functions (networkx style); each notifies listeners -----------------------

class Edited(Shares, Protocol):
    """A session whose groups are edited (the live :class:`~qtquant.app.session.Session`)."""

    @property
    def groups(self) -> GroupSet: ...

    def groups_changed(self) -> None: ...


def share(session: Edited, tensors: str | Iterable[str], name: str = "") -> Group:
    g = session.groups.share(session, tensors, name)
    session.groups_changed()
    return g


def unshare(session: Edited, group_id: int) -> Group:
    g = session.groups.unshare(group_id)
    session.groups_changed()
    return g


def remove_member(session: Edited, group_id: int, tensor: str) -> Group | None:
    g = session.groups.remove_member(group_id, tensor)
    session.groups_changed()
    return g


def restore(session: Edited, snapshot: GroupsSnapshot) -> None:
    session.groups.restore(snapshot)
    session.groups_changed()


def clear(session: Edited) -> None:
    session.groups.clear()
    session.groups_changed()
