"""Edits as command objects with do/undo (glue style), and a plain undo stack.

Every edit of a session — share, ungroup, remove a member, auto-share, a policy or
march change — is a :class:`Command`.  Undo restores a snapshot taken before ``do``,
so commands stay small and exact.  The GUI wraps these in QUndoCommands; the core
:class:`UndoStack` serves scripts and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .domains import Policy

__all__ = ["Command", "ShareCommand", "UngroupCommand", "RemoveMemberCommand", "AutoShareCommand",
           "SetPolicyCommand", "SetMarchCommand", "UndoStack"]


class Command:
    text = "edit"

    def do(self, session) -> None:
        raise NotImplementedError

    def undo(self, session) -> None:
        raise NotImplementedError


@dataclass
class _GroupsCommand(Command):
    """Base for edits of the group set: undo restores the snapshot taken by ``do``."""

    _before: tuple | None = field(default=None, init=False, repr=False)
    _after: tuple | None = field(default=None, init=False, repr=False)

    def do(self, session) -> None:
        from .groups import restore

        if self._after is not None:  # redo: replay the exact result
            restore(session, self._after)
            return
        self._before = session.groups.snapshot()
        try:
            self.apply(session)
        except Exception:
            session.groups.restore(self._before)  # a refused edit changes nothing
            raise
        self._after = session.groups.snapshot()
        session.groups_changed()

    def undo(self, session) -> None:
        from .groups import restore

        restore(session, self._before)

    def apply(self, session) -> None:
        raise NotImplementedError


@dataclass
class ShareCommand(_GroupsCommand):
    tensors: tuple[str, ...] = ()
    name: str = ""

    @property
    def text(self) -> str:
        return f"Share {len(self.tensors)} tensors"

    def apply(self, session) -> None:
        session.groups.share(session.graph, list(self.tensors), self.name)


@dataclass
class UngroupCommand(_GroupsCommand):
    group_id: int = -1

    @property
    def text(self) -> str:
        return f"Ungroup {self.group_id}"

    def apply(self, session) -> None:
        session.groups.unshare(self.group_id)


@dataclass
class RemoveMemberCommand(_GroupsCommand):
    group_id: int = -1
    tensor: str = ""

    @property
    def text(self) -> str:
        return f"Remove {self.tensor} from group {self.group_id}"

    def apply(self, session) -> None:
        session.groups.remove_member(self.group_id, self.tensor)


@dataclass
class AutoShareCommand(_GroupsCommand):
    max_bits_lost: float = 1.0
    report: object = field(default=None, init=False, repr=False)

    @property
    def text(self) -> str:
        return f"Auto-share (≤ {self.max_bits_lost:g} bits)"

    def apply(self, session) -> None:
        from .autoshare import auto_share

        self.report = auto_share(session, self.max_bits_lost)


@dataclass
class _OptionCommand(Command):
    value: object = None
    _old: object = field(default=None, init=False, repr=False)
    key = ""

    def do(self, session) -> None:
        self._old = getattr(session.options, self.key)
        session.set_options(**{self.key: self.value})

    def undo(self, session) -> None:
        session.set_options(**{self.key: self._old})


@dataclass
class SetPolicyCommand(_OptionCommand):
    key = "policy"

    def __post_init__(self):
        if isinstance(self.value, str):
            self.value = Policy(self.value)

    @property
    def text(self) -> str:
        return f"Policy: {self.value.value}"


@dataclass
class SetMarchCommand(_OptionCommand):
    key = "march"

    @property
    def text(self) -> str:
        return f"March: {self.value}"


class UndoStack:
    def __init__(self, session):
        self.session = session
        self._done: list[Command] = []
        self._undone: list[Command] = []
        self.clean_index = 0

    def push(self, cmd: Command) -> Command:
        cmd.do(self.session)
        self._done.append(cmd)
        self._undone.clear()
        return cmd

    def undo(self) -> Command | None:
        if not self._done:
            return None
        cmd = self._done.pop()
        cmd.undo(self.session)
        self._undone.append(cmd)
        return cmd

    def redo(self) -> Command | None:
        if not self._undone:
            return None
        cmd = self._undone.pop()
        cmd.do(self.session)
        self._done.append(cmd)
        return cmd

    @property
    def can_undo(self) -> bool:
        return bool(self._done)

    @property
    def can_redo(self) -> bool:
        return bool(self._undone)

    @property
    def dirty(self) -> bool:
        return len(self._done) != self.clean_index

    def mark_clean(self) -> None:
        self.clean_index = len(self._done)

    def history(self) -> list[str]:
        return [c.text for c in self._done]
