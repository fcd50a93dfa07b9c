"""Edits as command objects (glue style) on one :class:`CommandStack`, the only undo history.

Every edit of a session, from the CLI or the window -- share, ungroup, remove a member, auto-share
(by bits or by accuracy), a plan applied, a project's groups re-mapped onto a changed model, the
percentile, any option -- is a :class:`Command`.  Group edits undo by restoring the snapshot taken
before ``do`` and redo by replaying the exact result, so commands stay small and exact.  The GUI presents the stack
(actions, history view, window-modified mark); it keeps no second one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

from psygnal import Signal

from ..quant.domains import Policy
from ..base.errors import BadInputError
from ..model.scales import Scheme
from .options import BITS_OPTIONS, Options, OptionValue, bits_option, board_clock

if TYPE_CHECKING:
    from ..base.vocab import Precision
    from ..calib import CalibConfig, CalibrationResult
    from ..fidelity.accuracy.reach import ReachPlan
    from ..fidelity.accuracy.share import SqnrShareReport
    from ..files.plan import AppliedPlan, Plan
    from ..quant.autoshare import AutoShareReport
    from ..quant.groups import GroupsSnapshot
    from ..quant.precision import PrecisionMap
    from .session import Session

__all__ = ["Command", "ShareCommand", "UngroupCommand", "RemoveMemberCommand", "AutoShareCommand",
           "SqnrShareCommand", "GroupsAndPrecisionCommand", "ApplyPlanCommand", "SetOptionsCommand", "SetPolicyCommand",
           "SetMarchCommand", "SetPrecisionCommand", "SetPercentileCommand", "ReachCommand", "CompoundCommand",
           "CommandStack", "StackStep"]

# What a groups-and-precision edit restores (the groups, the precision map), and what a percentile
# edit does (the calibration options, the calibration result).
_GroupsAndPrecision: TypeAlias = "tuple[GroupsSnapshot, PrecisionMap]"
_Calibration: TypeAlias = "tuple[CalibConfig, CalibrationResult]"
_S = TypeVar("_S")  # the snapshot a _SnapshotCommand restores


class Command:
    @property
    def text(self) -> str:
        """What the history and the Undo/Redo actions call it."""
        return "edit"

    def do(self, session: Session) -> None:
        raise NotImplementedError

    def undo(self, session: Session) -> None:
        raise NotImplementedError

    @property
    def changed(self) -> bool:
        """After ``do``: whether it changed anything (an edit that did not is not recorded)."""
        return True


@dataclass
class _SnapshotCommand(Command, Generic[_S]):
    """Base for edits undone by restoring a snapshot of the state they change: ``do`` takes it, applies
    the edit and keeps the result, so undo restores the one and redo replays the other exactly."""

    _before: _S | None = field(default=None, init=False, repr=False)
    _after: _S | None = field(default=None, init=False, repr=False)

    def _state(self, session: Session) -> _S:
        raise NotImplementedError

    def _restore(self, session: Session, state: _S) -> None:
        raise NotImplementedError

    def _refused(self, session: Session, before: _S) -> None:
        """``apply`` raised: put back what it may have changed (a refused edit changes nothing)."""
        self._restore(session, before)

    def _applied(self, session: Session, before: _S, after: _S) -> None:
        """``apply`` succeeded: say what changed, when ``apply`` does not."""

    def do(self, session: Session) -> None:
        with session.batch():
            if self._after is not None:  # redo: replay the exact result
                self._restore(session, self._after)
                return
            before = self._before = self._state(session)
            try:
                self.apply(session)
            except Exception:
                self._refused(session, before)
                raise
            self._after = self._state(session)
            self._applied(session, before, self._after)

    def undo(self, session: Session) -> None:
        if self._before is None:
            raise RuntimeError(f"{self.text}: undone before it was done")
        with session.batch():
            self._restore(session, self._before)

    @property
    def changed(self) -> bool:
        return self._after is not None and self._after != self._before

    def apply(self, session: Session) -> None:
        raise NotImplementedError


@dataclass
class _GroupsCommand(_SnapshotCommand["GroupsSnapshot"]):
    """Base for edits of the group set."""

    def _state(self, session: Session) -> GroupsSnapshot:
        return session.groups.snapshot()

    def _restore(self, session: Session, state: GroupsSnapshot) -> None:
        session.groups.restore(state)
        session.groups_changed()

    def _refused(self, session: Session, before: GroupsSnapshot) -> None:
        session.groups.restore(before)  # nothing was announced: put it back quietly

    def _applied(self, session: Session, before: GroupsSnapshot, after: GroupsSnapshot) -> None:
        if after != before:
            session.groups_changed()


@dataclass
class ShareCommand(_GroupsCommand):
    tensors: tuple[str, ...] = ()
    name: str = ""
    label: str = ""  # the history's text when the gesture has a better name ("Join cat")

    @property
    def text(self) -> str:
        return self.label or f"Share {len(self.tensors)} tensors"

    def apply(self, session: Session) -> None:
        session.groups.share(session, list(self.tensors), self.name)


@dataclass
class UngroupCommand(_GroupsCommand):
    group_id: int = -1

    @property
    def text(self) -> str:
        return f"Ungroup {self.group_id}"

    def apply(self, session: Session) -> None:
        session.groups.unshare(self.group_id)


@dataclass
class RemoveMemberCommand(_GroupsCommand):
    group_id: int = -1
    tensor: str = ""

    @property
    def text(self) -> str:
        return f"Remove {self.tensor} from group {self.group_id}"

    def apply(self, session: Session) -> None:
        session.groups.remove_member(self.group_id, self.tensor)


@dataclass
class AutoShareCommand(_GroupsCommand):
    """Auto-share at ``max_bits_lost`` (None: the session's ``auto_share_max_bits_lost``)."""

    max_bits_lost: float | None = None
    report: AutoShareReport | None = field(default=None, init=False, repr=False)

    @property
    def text(self) -> str:
        if self.report is not None:
            return f"Auto-share (≤ {self.report.max_bits_lost:g} bits)"
        return "Auto-share" if self.max_bits_lost is None else f"Auto-share (≤ {self.max_bits_lost:g} bits)"

    def apply(self, session: Session) -> None:
        from ..quant.autoshare import auto_share

        self.report = auto_share(session, self.max_bits_lost)


@dataclass
class SqnrShareCommand(_GroupsCommand):
    """Install the groups a measured auto-share planned (``plan_sqnr_share`` runs in the
    background: minutes of onnxruntime must not happen inside a command)."""

    max_sqnr_drop: float = 0.2
    planned: GroupsSnapshot = ((), 0)  # GroupSet.snapshot() of the plan
    report: SqnrShareReport | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return f"Auto-share by accuracy (≤ {self.max_sqnr_drop:g} dB)"

    def apply(self, session: Session) -> None:
        session.groups.restore(self.planned)
        if self.report is not None:  # the groups it made, as the session numbers them
            self.report.groups = [g for g in session.groups.groups if g.name.startswith("sqnr-share: ")]


@dataclass
class GroupsAndPrecisionCommand(_SnapshotCommand[_GroupsAndPrecision]):
    """Base for edits that set the groups and the precision map together (a plan, a project's
    groups re-mapped): undo restores both as ``do`` found them, redo replays the exact result."""

    def _state(self, session: Session) -> _GroupsAndPrecision:
        return session.groups.snapshot(), session.options.precision

    def _restore(self, session: Session, state: _GroupsAndPrecision) -> None:
        groups, precision = state
        if session.groups.snapshot() != groups:
            session.groups.restore(groups)
            session.groups_changed()
        session.set_options(precision=precision)


@dataclass
class ApplyPlanCommand(GroupsAndPrecisionCommand):
    """A sharing plan's groups and precision (:func:`qtquant.files.plan.apply_plan`: all or nothing);
    ``applied`` holds what it did (the groups made, its warnings) after ``do``."""

    plan: Plan | None = None  # None: no edit (a command needs a plan to do anything)
    replace: bool = True  # the plan's groups replace the session's (False: added to them)
    applied: AppliedPlan | None = field(default=None, init=False, repr=False)

    @property
    def text(self) -> str:
        return f"Apply plan {self.plan.source if self.plan is not None and self.plan.source else 'plan'}"

    def apply(self, session: Session) -> None:
        from ..files.plan import apply_plan

        if self.plan is None:
            raise BadInputError("no plan given to apply")
        self.applied = apply_plan(session, self.plan, replace=self.replace)


_LABELS = {"scheme": "Scheme", "policy": "Policy", "march": "March",
           **{k: what.capitalize() for k, what in BITS_OPTIONS.items()},
           "calib": "Calibration", "precision": "Precision", "output_mode": "Model outputs",
           "int_outputs": "Outputs the application dequantises", "board_bpu_ghz": "Board BPU clock"}


def _shown(key: str, value: OptionValue) -> str:
    if key in BITS_OPTIONS:
        return f"{value:g} bits"
    if key == "calib":
        return f"{value.observer} on {value.count} samples ({value.source})"
    if key == "precision":
        return f"{len(value)} tensor(s) not int8"
    if key == "int_outputs":
        return ", ".join(value) if value else "none"
    if key == "board_bpu_ghz":
        return f"{value:g} GHz" if value else "the march's"
    return str(getattr(value, "value", value))


class SetOptionsCommand(Command):
    """Any option change; undo puts the previous values back."""

    def __init__(self, **changes: OptionValue) -> None:
        unknown = set(changes) - Options.field_names()
        if not changes or unknown:
            raise BadInputError(f"not an option: {', '.join(sorted(unknown)) or '(none given)'}")
        try:  # the typed value now, so a bad one is refused before anything changes
            if "policy" in changes:
                changes["policy"] = Policy(getattr(changes["policy"], "value", changes["policy"]))
            if "scheme" in changes:
                changes["scheme"] = Scheme.parse(changes["scheme"])
            changes.update({k: bits_option(k, v) for k, v in changes.items() if k in BITS_OPTIONS})
            if "board_bpu_ghz" in changes:
                changes["board_bpu_ghz"] = board_clock(changes["board_bpu_ghz"])
        except ValueError as e:
            raise BadInputError(f"unknown value {e}") from None
        self.changes = changes
        self._old: dict[str, OptionValue] | None = None
        self._new: dict[str, OptionValue] | None = None

    @property
    def value(self) -> OptionValue:
        """The one new value (for a one-field change)."""
        return next(iter(self.changes.values()))

    @property
    def text(self) -> str:
        if len(self.changes) == 1:
            (k, v), = self.changes.items()
            return f"{_LABELS[k]}: {_shown(k, v)}"
        return "Options: " + ", ".join(_LABELS[k].lower() for k in self.changes)

    def do(self, session: Session) -> None:
        self._old = {k: getattr(session.options, k) for k in self.changes}
        session.set_options(**self.changes)
        self._new = {k: getattr(session.options, k) for k in self.changes}

    def undo(self, session: Session) -> None:
        if self._old is None:
            raise RuntimeError(f"{self.text}: undone before it was done")
        session.set_options(**self._old)

    @property
    def changed(self) -> bool:
        return self._old is not None and self._old != self._new


class SetPolicyCommand(SetOptionsCommand):
    def __init__(self, value: Policy | str) -> None:
        super().__init__(policy=value)


class SetMarchCommand(SetOptionsCommand):
    def __init__(self, value: str) -> None:
        super().__init__(march=value)


class SetPrecisionCommand(Command):
    """Set tensors to int8 / int16 / float; undo puts the previous map back.

    ``tensors`` are tensor names (:func:`qtquant.quant.precision.resolve_names` turns node names into
    them; :meth:`for_names` and :meth:`for_domain` build the command from other units)."""

    def __init__(self, tensors: Iterable[str], precision: Precision | str, label: str = "") -> None:
        from ..base.vocab import Precision

        try:
            self.precision = Precision(getattr(precision, "value", precision))
        except ValueError:
            raise BadInputError(f"unknown precision {precision!r}: use int8, int16 or float") from None
        self.tensors = tuple(dict.fromkeys(tensors))
        if not self.tensors:
            raise BadInputError("no tensor given to set the precision of")
        self.label = label
        self._old: PrecisionMap | None = None
        self._new: PrecisionMap | None = None

    @classmethod
    def for_names(cls, session: Session, names: Iterable[str], precision: Precision | str,
                  label: str = "") -> SetPrecisionCommand:
        """Node or tensor names, as the CLI and the GUI get them."""
        from ..quant.precision import resolve_names

        return cls(resolve_names(session.graph, names), precision, label)

    @classmethod
    def for_domain(cls, session: Session, tensor: str, precision: Precision | str,
                   label: str = "") -> SetPrecisionCommand:
        """Every member of ``tensor``'s scale domain at once (a shared group is one unit)."""
        dm = session.domains
        did = dm.of.get(tensor)
        members = dm.domains[did].members if did is not None else (tensor,)
        return cls([t for t in members if session.graph.is_quantized(t)] or [tensor], precision, label)

    @property
    def text(self) -> str:
        if self.label:
            return self.label
        what = self.tensors[0] if len(self.tensors) == 1 else f"{len(self.tensors)} tensors"
        return f"Keep {what} in float" if self.precision.value == "float" else f"{what}: {self.precision.value}"

    def do(self, session: Session) -> None:
        self._old = session.options.precision
        session.set_precision(self.tensors, self.precision)
        self._new = session.options.precision

    def undo(self, session: Session) -> None:
        if self._old is None:
            raise RuntimeError(f"{self.text}: undone before it was done")
        session.set_options(precision=self._old)

    @property
    def changed(self) -> bool:
        return self._old is not None and self._old != self._new


class SetPercentileCommand(Command):
    """The percentile observer's percentile (the export dialog's, like ``--percentile``): the same
    statistics re-derived (no model run); undo puts the previous calibration back."""

    def __init__(self, percentile: float) -> None:
        self.percentile = float(percentile)
        self._old: _Calibration | None = None  # before
        self._new: _Calibration | None = None

    @property
    def text(self) -> str:
        return f"Percentile: {self.percentile:g}"

    def do(self, session: Session) -> None:
        from dataclasses import replace

        from ..base.vocab import Observer

        cal = session.calibration
        if cal is None or str(cal.config.observer) != Observer.PERCENTILE.value:
            raise BadInputError("the percentile applies to a calibration with the percentile observer")
        old = self._old = (session.options.calib, cal)
        new = self._new
        if new is None:
            if abs(float(cal.config.percentile) - self.percentile) <= 1e-9:
                new = old
            else:
                new = (replace(session.options.calib, percentile=self.percentile),
                       cal.recompute(percentile=self.percentile))
            self._new = new
        self._install(session, new)

    def undo(self, session: Session) -> None:
        if self._old is None:
            raise RuntimeError(f"{self.text}: undone before it was done")
        self._install(session, self._old)

    @staticmethod
    def _install(session: Session, state: _Calibration) -> None:
        calib, result = state
        with session.batch():
            session.set_options(calib=calib)
            if session.calibration is not result:
                session.set_calibration(result)

    @property
    def changed(self) -> bool:
        return self._new is not None and self._new is not self._old


class ReachCommand(SetOptionsCommand):
    """Install the precision map a "reach X dB for the least latency" plan chose
    (:func:`qtquant.fidelity.accuracy.reach.plan_reach`, run in the background) as one undoable step."""

    def __init__(self, plan: ReachPlan) -> None:
        super().__init__(precision=plan.precision)
        self.plan = plan

    @property
    def text(self) -> str:
        p = self.plan
        lat = "" if p.latency_us is None else f", {p.latency_us:+.1f} µs"
        return f"Reach {p.value_text(p.target)}: {len(p.kept)} node(s){lat}"


class CompoundCommand(Command):
    """Several commands as one undo step ("Ungroup 3 groups"); all or nothing."""

    def __init__(self, commands: Iterable[Command], text: str) -> None:
        self.commands = list(commands)
        self._text = text

    @property
    def text(self) -> str:
        return self._text

    def do(self, session: Session) -> None:
        done: list[Command] = []
        with session.batch():
            try:
                for c in self.commands:
                    c.do(session)
                    done.append(c)
            except Exception:
                for c in reversed(done):
                    c.undo(session)
                raise

    def undo(self, session: Session) -> None:
        with session.batch():
            for c in reversed(self.commands):
                c.undo(session)

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.commands)


class StackStep(Enum):
    """What the stack did last (:attr:`CommandStack.last_step`): the status line says "Undid …" or
    "Redid …" for a step through the history, and names a new edit as itself."""

    NONE = "none"  # cleared, or marked clean: nothing done
    DO = "do"  # a new edit pushed
    UNDO = "undo"
    REDO = "redo"


class CommandStack:
    """The undo history of one session.  ``changed`` fires after every push, undo, redo,
    clean-state change and clear (the GUI enables Undo/Redo and the modified mark from it);
    :attr:`last_step` says which."""

    changed = Signal()

    def __init__(self, session: Session | None = None) -> None:
        self.session = session
        self._commands: list[Command] = []
        self._index = 0  # commands done: the next undo is _commands[_index - 1]
        self._clean = 0  # the index at the last save; -1 once that state cannot come back
        self.last_step = StackStep.NONE

    def push(self, cmd: Command) -> bool:
        """Do ``cmd`` and record it.  A refused edit raises (QtQuantError) and is not recorded;
        one that changed nothing returns False and is not recorded either."""
        if self.session is None:
            raise BadInputError("open a model first")
        with self.session.batch():
            cmd.do(self.session)
        if not cmd.changed:
            return False
        self._push_done(cmd)
        return True

    def record(self, cmd: Command) -> None:
        """Record ``cmd``, already done on the session before this stack had it (a project's groups
        re-mapped while it opened): it undoes like any edit."""
        if cmd.changed:
            self._push_done(cmd)

    def _push_done(self, cmd: Command) -> None:
        if self._clean > self._index:
            self._clean = -1
        del self._commands[self._index:]
        self._commands.append(cmd)
        self._index += 1
        self._emit(StackStep.DO)

    def undo(self) -> Command | None:
        if not self.can_undo or self.session is None:
            return None
        cmd = self._commands[self._index - 1]
        with self.session.batch():
            cmd.undo(self.session)
        self._index -= 1
        self._emit(StackStep.UNDO)
        return cmd

    def redo(self) -> Command | None:
        if not self.can_redo or self.session is None:
            return None
        cmd = self._commands[self._index]
        with self.session.batch():
            cmd.do(self.session)
        self._index += 1
        self._emit(StackStep.REDO)
        return cmd

    def _emit(self, step: StackStep) -> None:
        self.last_step = step
        self.changed.emit()

    @property
    def can_undo(self) -> bool:
        return self._index > 0

    @property
    def can_redo(self) -> bool:
        return self._index < len(self._commands)

    @property
    def undo_text(self) -> str:
        return self._commands[self._index - 1].text if self.can_undo else ""

    @property
    def redo_text(self) -> str:
        return self._commands[self._index].text if self.can_redo else ""

    @property
    def index(self) -> int:
        return self._index

    @property
    def count(self) -> int:
        return len(self._commands)

    def texts(self) -> list[str]:
        """Every command's text, oldest first (done and undone: ``index`` says where we are)."""
        return [c.text for c in self._commands]

    @property
    def clean(self) -> bool:
        return self._index == self._clean

    def set_clean(self) -> None:
        self._clean = self._index
        self._emit(StackStep.NONE)

    def clear(self, session: Session | None = None) -> None:
        """Forget the history (clean again); ``session``: the stack now edits that one."""
        if session is not None:
            self.session = session
        self._commands, self._index, self._clean = [], 0, 0
        self._emit(StackStep.NONE)
