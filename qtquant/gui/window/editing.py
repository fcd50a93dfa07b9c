"""What the gestures mean: each one becomes a command on the session's one command stack.

Every edit is a :class:`~qtquant.app.commands.Command` pushed on the
:class:`~qtquant.app.CommandStack` that :class:`~qtquant.gui.relay.SessionRelay` holds.  A
share the core refuses (:class:`~qtquant.base.errors.ShareRefused`) is not recorded: the reason
goes to the status bar and nothing changes.

Gestures (:class:`Editor`):

* Share (Ctrl+G) on a single selected Concat shares its inputs and output at once.  On a
  larger selection it proposes only the tensors feeding the selected Concat(s) through
  pass-through ops (none selected: the largest set feeding one Concat), see
  :func:`~qtquant.app.shareplan.plan_share`; :attr:`Editor.proposed` carries the proposal
  to the confirmation dialog and :meth:`Editor.commit_plan` does it.
* Dropping nodes on a Concat joins its group: the dropped nodes' outputs, the Concat's
  quantized inputs and its output.  Dropping on any other node shares the outputs of
  both.  Drops are strict: every tensor must be shareable, or nothing changes.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from ...app.commands import CompoundCommand, RemoveMemberCommand, SetOptionsCommand, ShareCommand, UngroupCommand
from ...app.scene import node_outputs
from ...app.sharing import auto_share
from ...app.shareplan import plan_share
from ...quant.concat import concat_members
from ...quant.domains import Policy
from ...base.errors import QtQuantError
from ...quant.groups import check_member
from ...base.tables import plural

__all__ = ["Editor", "split_shareable"]


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
    """Turns gestures into commands on ``relay.stack``; reports outcomes as one-liners."""

    message = Signal(str)  # for the status bar
    autoShared = Signal(object)  # AutoShareReport
    proposed = Signal(object)  # SharePlan awaiting the user's confirmation

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.last_message = ""

    @property
    def session(self):
        return self.relay.session

    def _say(self, text: str) -> None:
        self.last_message = text
        self.message.emit(text)

    # -- the one way in ---------------------------------------------------------------------
    def push(self, cmd, *, refused: str = "Not shared", unchanged: str | None = None) -> bool:
        """Do ``cmd`` on the session and record it; a refusal or a no-op is said and not recorded."""
        if self.session is None:
            self._say("Open a model first")
            return False
        try:
            done = self.relay.stack.push(cmd)
        except QtQuantError as e:  # ShareRefused and friends: one line, nothing changed
            self._say(f"{refused}: {e}")
            return False
        if not done and unchanged:
            self._say(unchanged)
        return done

    # -- grouping ---------------------------------------------------------------------------
    def share_nodes(self, names) -> bool:
        """Share (Ctrl+G) on the canvas selection."""
        g = self.session.graph if self.session is not None else None
        if g is None:
            return False
        names = [n for n in names if n]
        if not names:
            self._say("Select nodes first (Shift+drag draws a selection rectangle)")
            return False
        if len(names) == 1 and names[0] in g.nodes and g.nodes[names[0]].op_type == "Concat":
            return self._share(concat_members(g, names[0]), names[0], strict=True)
        plan = plan_share(self.session, names)
        if plan is None:
            self._say("Not shared: select a Concat, or at least two tensors feeding one "
                      "(drag a node onto another to share just their outputs)")
            return False
        self.proposed.emit(plan)
        return True

    def commit_plan(self, plan) -> bool:
        """The confirmed proposal: its members share one observer (one undo step)."""
        name = plan.concats[0] if len(plan.concats) == 1 else ""
        ok = self._share(plan.members, name, strict=True)
        if ok and (plan.left_out or plan.unquantized):
            self._say(self.last_message + f"; left out {len(plan.left_out) + plan.unquantized} that feed no "
                      f"selected Concat or cannot be quantized")
        return ok

    def drop(self, sources, target: str) -> bool:
        """Nodes dropped on ``target``: join a Concat's group, or share outputs with the target."""
        g = self.session.graph if self.session is not None else None
        if g is None:
            return False
        sources = [n for n in sources if n != target]
        tensors = [t for n in sources for t in node_outputs(g, n)]
        if target in g.nodes and g.nodes[target].op_type == "Concat":
            return self._share(tensors + concat_members(g, target), target, strict=True,
                               text=f"Join {_short(target, 40)}")
        return self._share(tensors + node_outputs(g, target), "", strict=True)

    def _share(self, tensors, name: str, *, strict: bool, text: str = "") -> bool:
        g = self.session.graph
        tensors = _topological(g, dict.fromkeys(tensors))  # members listed in graph order
        ok, bad = split_shareable(g, tensors)
        use = tensors if strict or len(ok) < 2 else ok  # the core names the first refusal
        if not self.push(ShareCommand(tuple(use), name, label=text), refused="Not shared",
                         unchanged="Nothing changed: those tensors already share one observer"):
            return False
        grp = self.session.groups.group_of(use[0])
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
        cmds = [UngroupCommand(group_id=i) for i in ids]
        cmd = cmds[0] if len(cmds) == 1 else CompoundCommand(cmds, f"Ungroup {len(ids)} groups")
        ok = self.push(cmd, refused="Not ungrouped")
        if ok:
            self._say(f"Ungrouped {', '.join(f'group {i}' for i in ids)}")
        return ok

    def remove_member(self, group_id: int, tensor: str) -> bool:
        ok = self.push(RemoveMemberCommand(group_id=group_id, tensor=tensor), refused="Not removed")
        if ok:
            left = self.session.groups.get(group_id)
            self._say(f"Removed {_short(tensor)} from group {group_id}"
                      + ("" if left is not None else "; the group had one member left and was dissolved"))
        return ok

    def auto_share(self, max_bits_lost: float | None = None):
        """Run auto-share at ``max_bits_lost`` (None: the session's auto-share threshold); returns
        its report (also emitted), or None when refused.  A run that grouped nothing is not an undo step."""
        s = self.session
        if s is None or not s.ready:
            self._say("Auto-share needs calibrated scales: wait for calibration to finish")
            return None
        try:
            rep = auto_share(self.relay.stack, max_bits_lost)
        except QtQuantError as e:
            self._say(f"Auto-share refused: {e}")
            return None
        self._say(f"Auto-share (≤ {rep.max_bits_lost:g} bits): {plural(len(rep.grouped), 'Concat')} shared into "
                  f"{plural(len(rep.groups), 'group')}, {len(rep.skipped)} left alone, {len(rep.already)} already "
                  "matched")
        self.autoShared.emit(rep)
        return rep

    # -- options ----------------------------------------------------------------------------
    def set_option(self, key: str, value) -> bool:
        """Any option (policy, march, a threshold) as an undoable edit."""
        s = self.session
        if s is None or getattr(s.options, key) == value:
            return False
        return self.push(SetOptionsCommand(**{key: value}), refused=f"{key.replace('_', ' ').capitalize()} "
                                                                    f"not changed")

    def set_policy(self, policy) -> bool:
        return self.set_option("policy", Policy(policy))

    def set_march(self, march: str) -> bool:
        return self.set_option("march", march)

    def set_threshold(self, bits: float) -> bool:
        """The auto-share threshold."""
        return self.set_option("auto_share_max_bits_lost", float(bits))

    def set_float_output_threshold(self, bits: float) -> bool:
        return self.set_option("float_output_max_bits_lost", float(bits))

    # -- queries for the UI -------------------------------------------------------------------
    def groups_of_nodes(self, names) -> list[int]:
        """Ids of the groups holding an output of any of ``names``."""
        s = self.session
        if s is None:
            return []
        out = []
        for n in names:
            for t in node_outputs(s.graph, n):
                gr = s.groups.group_of(t)
                if gr is not None and gr.id not in out:
                    out.append(gr.id)
        return out
