"""The open-a-project use case: a ``.qtquant`` project (:mod:`qtquant.files.project`, the file
format) as a session.  ``qtquant diff`` and the window's Open Project both call :func:`open_project`.

The project's groups and precision are the state it opens in.  On a model that changed since the
project was saved they are re-mapped by tensor name as an edit, a :class:`RemapGroupsCommand`
(:attr:`OpenReport.remap`), done while the project opens: the caller records it on its command stack
(Undo takes the model back to no group), or undoes it when the user declines the re-map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from ..base.errors import BadInputError, PlanError, QtQuantError
from ..base.vocab import Policy, Precision, Scheme
from ..calib.cache import load_cached
from ..files.project import load_project
from .commands import GroupsAndPrecisionCommand
from .loader import open_model
from .scene import ViewState
from .options import Options

if TYPE_CHECKING:
    from ..base.fileio.paths import StrPath
    from .session import Session

__all__ = ["OpenReport", "RemapGroupsCommand", "open_project", "remap_groups"]

SavedGroup: TypeAlias = "tuple[Sequence[str], str]"  # (members, name) of a group a project saved


@dataclass
class RemapGroupsCommand(GroupsAndPrecisionCommand):
    """A project's groups and precision put onto a model that changed since it was saved, by tensor
    name (:func:`remap_groups`): what no longer exists is dropped and counted in
    ``report`` (an :class:`OpenReport`)."""

    groups: tuple[SavedGroup, ...] = ()  # each group the project saved
    precision: dict[str, Precision] = field(default_factory=dict)  # tensor -> precision the project saved
    report: OpenReport | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return f"Re-map {len(self.groups)} project group(s) onto the changed model"

    def apply(self, session: Session) -> None:
        remap_groups(session, self.groups, self.precision, self.report)


@dataclass
class OpenReport:
    model_changed: bool = False
    missing: list[str] = field(default_factory=list)  # group members not in the (changed) model
    dropped_groups: int = 0
    stats_from_cache: bool = False
    remap: RemapGroupsCommand | None = None  # the re-map onto a changed model, done (record it on a stack)
    log_problem: str = ""  # why the compile log the project names was not placed ("": placed, or none)

    def message(self) -> str:
        parts = [self.log_problem] if self.log_problem else []
        if self.model_changed:
            msg = "the model changed since the project was saved"
            if self.missing:
                msg += f"; {len(self.missing)} grouped tensor(s) no longer exist: {', '.join(self.missing[:5])}"
                if len(self.missing) > 5:
                    msg += ", ..."
            parts.insert(0, msg)
        return "; ".join(parts)


def open_project(path: StrPath, *, remap: bool = True, calibrate: bool = False,
                 model: StrPath | None = None) -> tuple[Session, OpenReport]:
    """Open a project: returns ``(session, OpenReport)``.

    When the model's hash differs, groups are re-mapped by tensor name if ``remap``
    (members missing from the model are dropped and listed), else dropped.  ``model``: the
    model file to use instead of the one the project names (the user located a moved model).
    """
    proj = load_project(path)
    calib = proj.calib_config()
    try:
        opts = Options(scheme=Scheme(proj.scheme), policy=Policy(proj.policy), march=proj.march,
                       auto_share_max_bits_lost=proj.auto_share_max_bits_lost,
                       float_output_max_bits_lost=proj.float_output_max_bits_lost, calib=calib,
                       board_bpu_ghz=proj.board_bpu_ghz)
    except BadInputError as e:  # a value Options refuses: the file is named, as for its schema's errors
        raise PlanError(f"{Path(path).name}: {e}") from None
    session = open_model(Path(model) if model else proj.model_path(),
                         {k: tuple(v) for k, v in proj.input_shapes.items()}, opts, cut=proj.cut)
    report = OpenReport(model_changed=bool(proj.model_sha256) and proj.model_sha256 != session.graph.sha256)
    if proj.view:
        session.view_state = ViewState.from_dict(proj.view)
    ints = tuple(t for t in proj.int_outputs if t in session.graph.outputs)  # (a changed model may lack some)
    if ints:
        session.set_options(int_outputs=ints)
    log = proj.compiler_log_path()
    if log is not None:  # before calibration: its thresholds may be the scales
        from .compilerlog import open_compile_log

        try:
            open_compile_log(session, log, any_shape=proj.compiler_log_any_shape, scales=proj.compiler_log_scales)
        except QtQuantError as e:  # the project still opens; the caller says what became of the log
            report.log_problem = f"its compile log was not placed ({e})"
    if proj.stats_cache and not session.quantized_file:
        cache_dir = Path(proj.stats_cache)
        if not cache_dir.is_absolute():
            cache_dir = Path(path).parent / cache_dir
        try:
            res = load_cached(session.graph, opts.calib, cache_dir)
        except (QtQuantError, OSError, ValueError):
            res = None
        if res is not None:
            session.set_calibration(res)
            report.stats_from_cache = True
    if calibrate and session.calibration is None and not session.quantized_file:
        session.run_calibration()
    if report.model_changed and not remap:
        report.dropped_groups = len(proj.groups)
        return _searched(session), report
    groups = tuple((tuple(gr.members), gr.name) for gr in proj.groups)
    if report.model_changed:
        report.remap = RemapGroupsCommand(groups=groups, precision=dict(proj.precision), report=report)
        report.remap.do(session)
    else:
        with session.batch():
            remap_groups(session, groups, proj.precision, report)
    return _searched(session), report


def remap_groups(session: Session, groups: Iterable[SavedGroup], precision: Mapping[str, Precision],
                 report: OpenReport | None = None) -> None:
    """Share each of ``groups`` ((members, name) pairs) and set ``precision`` (tensor -> precision) by
    tensor name: members the model lacks are dropped (a group left with fewer than two is dropped, as is
    one the sharing rules refuse), and so are the precisions of tensors gone or no longer quantized;
    ``report`` counts them."""
    report = report if report is not None else OpenReport()
    made = False
    for members, name in groups:
        present = [m for m in members if m in session.graph.tensors]
        report.missing += [m for m in members if m not in session.graph.tensors]
        if len(present) < 2:
            report.dropped_groups += 1
            continue
        try:
            session.groups.share(session, present, name=name)
            made = True
        except QtQuantError:
            report.dropped_groups += 1
    if made:
        session.groups_changed()
    kept = {t: p for t, p in precision.items() if session.graph.is_quantized(t)}
    report.missing += [t for t in precision if t not in kept and t not in report.missing]
    if kept:
        session.set_options(precision=kept)


def _searched(session: Session) -> Session:
    """A project calibrated with ``--observer search``: its statistics come back, the choice is made
    again on them (measured on the export with the project's groups and precision)."""
    from .calibsearch import needs_search, search_calibration

    if needs_search(session.calibration):
        search_calibration(session)
    return session
