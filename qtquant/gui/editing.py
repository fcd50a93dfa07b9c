"""Edits in the app: the core's command objects on a QUndoStack, and what the gestures mean.

Every edit is a core :class:`~qtquant.commands.Command` (Qt-free, tested headless)
wrapped in :class:`EditCommand`.  The core command runs *before* the push, so a share
the core refuses (:class:`~qtquant.errors.ShareRefused`) never reaches the stack: the
reason goes to the status bar and nothing changes.  ``QUndoStack.push`` then calls
``redo()`` at once, which the adapter skips that first time.

Gestures (:class:`Editor`):

* Share (Ctrl+G) on the selection ties the selected nodes' output tensors; a single
  selected Concat shares its inputs and output.  Outputs that cannot be quantized (a
  Shape op caught by the rubber band) are left out and named in the message.
* Dropping nodes on a Concat joins its group: the dropped nodes' outputs, the Concat's
  quantized inputs and its output.  Dropping on any other node shares the outputs of
  both.  Drops are strict: every tensor must be shareable, or nothing changes.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoCommand

from ..commands import (AutoShareCommand, RemoveMemberCommand, SetMarchCommand, SetPolicyCommand, ShareCommand,
                        UngroupCommand)
from ..domains import Policy
from ..errors import QtQuantError
from ..groups import check_member
from ..app.scene import INPUT_PREFIX, OUTPUT_PREFIX

__all__ = ["EditCommand", "Editor", "node_outputs", "concat_members", "split_shareable"]


class EditCommand(QUndoCommand):
    """A core command on the QUndoStack (already done once when pushed)."""

    def __init__(self, session, core, text: str | None = None):
        super().__init__(text or core.text)
        self.session = session
        self.core = core
        self._first = True

    def redo(self):
        if self._first:  # Editor.push ran it to catch a refusal before the push
            self._first = False
            return
        self.core.do(self.session)

    def undo(self):
        self.core.undo(self.session)


def node_outputs(graph, name: str) -> list[str]:
    """The tensors a canvas node stands for: an op's outputs, a terminal's tensor."""
    if name.startswith((INPUT_PREFIX, OUTPUT_PREFIX)):
        t = name.split(":", 1)[1]
        return [t] if t in graph.tensors else []
    node = graph.nodes.get(name)
    if node is None:
        return []
    return [t for t in node.outputs if t and t in graph.tensors]


def concat_members(graph, name: str) -> list[str]:
    """A Concat's group: its quantized, non-constant inputs and its output."""
    node = graph.nodes[name]
    ts = [t for t in node.inputs if t and t in graph.tensors and graph.tensors[t].kind != "weight"
          and graph.is_quantized(t)]
    ts += [t for t in node.outputs[:1] if t and graph.is_quantized(t)]
    return list(dict.fromkeys(ts))


def split_shareable(graph, tensors) -> tuple[list[str], list[tuple[str, str]]]:
    """(tensors that can join a group, [(tensor, why not)])."""
    ok, bad = [], []
    for t in dict.fromkeys(tensors):
        try:
            check_member(graph, t)
        except QtQuantError as e:
            bad.append((t, str(e)))
        else:
            ok.append(t)
    return ok, bad


def _topological(graph, tensors) -> list[str]:
    def key(t):
        p = graph.producer(t) if t in graph.tensors else None
        return p.index if p is not None else -1

    return sorted(tensors, key=key)  # stable: a node's outputs keep their order


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1):]


class Editor(QObject):
    """Turns gestures into core commands on ``undo_stack``; reports outcomes as one-liners."""

    message = Signal(str)  # for the status bar
    autoShared = Signal(object)  # AutoShareReport

    def __init__(self, bridge, undo_stack, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.undo_stack = undo_stack
        self.last_message = ""

    def _say(self, text: str) -> None:
        self.last_message = text
        self.message.emit(text)

    # -- the one way in ---------------------------------------------------------------------
    def push(self, core, text: str | None = None, *, refused: str = "Not shared") -> bool:
        """Run ``core`` on the session; on success put it on the undo stack."""
        s = self.bridge.session
        if s is None:
            self._say("Open a model first")
            return False
        try:
            self._do_once(s, core)
        except QtQuantError as e:  # ShareRefused and friends: one line, nothing changed
            self._say(f"{refused}: {e}")
            return False
        before = getattr(core, "_before", None)
        if before is not None and before == getattr(core, "_after", None):
            self._say("Nothing changed: those tensors already share one observer")
            return False
        self.undo_stack.push(EditCommand(s, core, text))
        return True

    def _do_once(self, session, core) -> None:
        """``core.do`` with the window refreshed once, however many events it fires (auto-share
        notifies twice: once itself, once as a command)."""
        kinds: list[str] = []

        def note(info):
            if (kind := info.signal.name) not in kinds:
                kinds.append(kind)

        session.events.connect(note)
        blocked = self.bridge.blockSignals(True)
        try:
            core.do(session)
        finally:
            self.bridge.blockSignals(blocked)
            session.events.disconnect(note)
            for k in kinds:  # also after a refusal that notified before raising
                self.bridge.notify(k)

    # -- grouping ---------------------------------------------------------------------------
    def share_nodes(self, names) -> bool:
        """Share (Ctrl+G) on the canvas selection."""
        g = self.bridge.graph
        if g is None:
            return False
        names = [n for n in names if n]
        if not names:
            self._say("Select nodes first (Shift+drag draws a selection rectangle)")
            return False
        if len(names) == 1 and names[0] in g.nodes and g.nodes[names[0]].op_type == "Concat":
            return self._share(concat_members(g, names[0]), names[0], strict=True)
        tensors = [t for n in names for t in node_outputs(g, n)]
        return self._share(tensors, "", strict=False)

    def drop(self, sources, target: str) -> bool:
        """Nodes dropped on ``target``: join a Concat's group, or share outputs with the target."""
        g = self.bridge.graph
        if g is None:
            return False
        sources = [n for n in sources if n != target]
        tensors = [t for n in sources for t in node_outputs(g, n)]
        if target in g.nodes and g.nodes[target].op_type == "Concat":
            return self._share(tensors + concat_members(g, target), target, strict=True,
                               text=f"Join {_short(target, 40)}")
        return self._share(tensors + node_outputs(g, target), "", strict=True)

    def _share(self, tensors, name: str, *, strict: bool, text: str | None = None) -> bool:
        g = self.bridge.graph
        tensors = _topological(g, dict.fromkeys(tensors))  # members listed in graph order
        ok, bad = split_shareable(g, tensors)
        use = tensors if strict or len(ok) < 2 else ok  # the core names the first refusal
        core = ShareCommand(tuple(use), name)
        if not self.push(core, text, refused="Not shared"):
            return False
        grp = self.bridge.session.groups.group_of(use[0])
        msg = f"Shared {len(use)} tensors" + (f" in group {grp.id} ({len(grp.members)} members)" if grp else "")
        if bad and not strict:
            msg += f"; left out {len(bad)} that cannot be quantized ({_short(bad[0][0], 30)}" + \
                   (", …)" if len(bad) > 1 else ")")
        self._say(msg)
        return True

    def ungroup(self, group_ids) -> bool:
        ids = list(dict.fromkeys(group_ids))
        if not ids:
            self._say("Select a group (in the Groups dock) or a grouped node first")
            return False
        if len(ids) == 1:
            ok = self.push(UngroupCommand(group_id=ids[0]), refused="Not ungrouped")
        else:
            self.undo_stack.beginMacro(f"Ungroup {len(ids)} groups")
            ok = all([self.push(UngroupCommand(group_id=i), refused="Not ungrouped") for i in ids])
            self.undo_stack.endMacro()
        if ok:
            self._say(f"Ungrouped {', '.join(f'group {i}' for i in ids)}")
        return ok

    def remove_member(self, group_id: int, tensor: str) -> bool:
        ok = self.push(RemoveMemberCommand(group_id=group_id, tensor=tensor), refused="Not removed")
        if ok:
            left = self.bridge.session.groups.get(group_id)
            self._say(f"Removed {_short(tensor)} from group {group_id}"
                      + ("" if left is not None else "; the group had one member left and was dissolved"))
        return ok

    def auto_share(self, max_bits_lost: float):
        """Run auto-share; returns its report (also emitted), or None when refused."""
        s = self.bridge.session
        if s is None or not s.ready:
            self._say("Auto-share needs calibrated scales: wait for calibration to finish")
            return None
        core = AutoShareCommand(max_bits_lost=float(max_bits_lost))
        try:
            self._do_once(s, core)
        except QtQuantError as e:
            self._say(f"Auto-share refused: {e}")
            return None
        rep = core.report
        if core._before != core._after:  # noqa: SLF001 - an unchanged set is not an edit
            self.undo_stack.push(EditCommand(s, core))
        self._say(f"Auto-share (≤ {max_bits_lost:g} bits): {len(rep.grouped)} Concats shared into "
                  f"{len(rep.groups)} groups, {len(rep.skipped)} left alone, {len(rep.already)} already matched")
        self.autoShared.emit(rep)
        return rep

    # -- options ----------------------------------------------------------------------------
    def set_policy(self, policy) -> bool:
        s = self.bridge.session
        p = Policy(policy)
        if s is None or s.options.policy is p:
            return False
        return self.push(SetPolicyCommand(p), refused="Policy not changed")

    def set_march(self, march: str) -> bool:
        s = self.bridge.session
        if s is None or s.options.march == march:
            return False
        return self.push(SetMarchCommand(march), refused="March not changed")

    # -- queries for the UI -------------------------------------------------------------------
    def groups_of_nodes(self, names) -> list[int]:
        """Ids of the groups holding an output of any of ``names``."""
        s = self.bridge.session
        if s is None:
            return []
        out = []
        for n in names:
            for t in node_outputs(s.graph, n):
                gr = s.groups.group_of(t)
                if gr is not None and gr.id not in out:
                    out.append(gr.id)
        return out
