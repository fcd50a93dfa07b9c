"""A working session: one graph, its options, calibration and groups, and every result derived
from them (domain maps, Concat analyses, perf, fidelity), each tied to the revision it is for.

This is the model object the CLI and the GUI share.  It knows nothing of Qt: views subscribe
to :attr:`Session.events`, edits arrive as commands (:mod:`qtquant.app.commands`), and
background work reads a :meth:`Session.snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

from ..calib import CalibrationResult, calibrate
from ..quant.concat import analyze_concats
from ..quant.outputs import export_float_of
from ..quant.domains import DomainMap
from ..quant.groups import GroupSet
from ..base.vocab import Precision, Scheme
from .events import SessionEvents
from .options import Options, OptionValue, domains_for
from .snapshot import Ranges, Snapshot, StateFacts

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..base.fileio.paths import StrPath
    from ..calib.state import SessionState
    from ..fidelity.accuracy.report import AccuracyReport
    from ..fidelity.report import Fidelity
    from ..perf import PerfResult
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo
    from ..quant.concat import ConcatInfo
    from ..quant.state import EditableState
    from ..horizon.match import LogMatch
    from .scene import ViewState

__all__ = ["Session", "Result", "Derived", "derive"]

Histogram: TypeAlias = "tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]"  # (counts, edges)
_ConcatHit: TypeAlias = "tuple[DomainMap, list[ConcatInfo], frozenset[str]]"

# Options the domain maps are built from (the march: its Concat output-scale rule); the others
# (the bits-lost thresholds, the output mode, precision) leave them valid.
_DOMAIN_FIELDS = frozenset({"scheme", "policy", "calib", "march"})


T = TypeVar("T", covariant=True)  # a Result is read-only


@dataclass(frozen=True)
class Result(Generic[T]):
    """A background result and the session revision it was computed for."""

    value: T
    revision: int


@dataclass
class Derived:
    """Domain maps and Concat analyses of one session state, computed away from the GUI
    thread (20,000 nodes: some 0.9 s) and installed by :meth:`Session.set_calibration`."""

    calibration: CalibrationResult
    options: Options
    groups: tuple[tuple[str, ...], ...]
    domains: DomainMap
    baseline: DomainMap
    concats: list[ConcatInfo]
    baseline_concats: list[ConcatInfo]
    compiler: Ranges | None = None  # the compile log's ranges they were built with


def derive(graph: Graph, calibration: CalibrationResult, options: Options, groups: Iterable[Sequence[str]],
           qdq: QdqInfo | None = None, compiler: Ranges | None = None) -> Derived:
    """Everything :meth:`Session.set_calibration` would otherwise compute on first use.

    Pure: pass the session's options and ``groups.as_lists()`` read where the session is
    edited; the session installs the result only if they still hold.
    """
    members = tuple(tuple(g) for g in groups)
    dm = domains_for(graph, calibration, options, qdq, members, compiler)
    base = domains_for(graph, calibration, options, qdq, (), compiler) if members else dm
    ft = export_float_of(graph, options, qdq, base)
    cs = analyze_concats(graph, dm, ft)
    return Derived(calibration, options, members, dm, base, cs, analyze_concats(graph, base, ft) if members else cs,
                   compiler)


class Session(StateFacts):
    def __init__(self, graph: Graph, options: Options = Options(), *, qdq: QdqInfo | None = None):
        self.graph = graph
        self.options = options
        self.qdq = qdq  # qtquant.model.qdq.QdqInfo when the model came quantized
        self.calibration: CalibrationResult | None = None
        self.groups = GroupSet()
        self.events = SessionEvents()
        self.revision = 0  # bumps on every edit; background results carry it to detect staleness
        self.perf: Result[PerfResult] | None = None
        self.perf_baseline: Result[PerfResult] | None = None  # the same simulation without any user group
        self.fidelity: Result[Fidelity] | None = None
        self.accuracy: Result[AccuracyReport] | None = None  # per-tensor error and sensitivity (fidelity.accuracy)
        self.histograms: dict[str, Histogram] = {}  # tensor -> (counts, edges) over the check samples
        # A compile log placed on the graph (qtquant.horizon.match.LogMatch), and whether its
        # thresholds are the scales (the compiler's calibration) or only shown beside qtquant's.
        self.compiler_log: LogMatch | None = None
        self.compiler_scales = False
        self._compiler_ranges: tuple[LogMatch, Ranges] | None = None  # (the LogMatch, its ranges), made once
        # What of the module hierarchy the canvas shows (app.scene.ViewState); None: the size rule.
        # Not an edit: saved in projects, never on the undo stack.
        self.view_state: ViewState | None = None
        self._dm: DomainMap | None = None
        self._baseline_dm: DomainMap | None = None
        self._concat_cache: dict[bool, _ConcatHit] = {}  # baseline? -> (DomainMap, analysis, export float)
        self._batch_depth = 0
        self._pending: dict[str, tuple[object, ...]] = {}  # kind -> emit args, while a batch is open
        if qdq is not None:
            self.options = replace(self.options, scheme=qdq.scheme)

    # -- state ----------------------------------------------------------------------------

    def run_calibration(self, progress: Callable[[int, int], object] | None = None,
                        cancel: Callable[[], bool] | None = None, keep_check_values: bool = False) -> CalibrationResult:
        # keep_check_values: the fidelity check will follow (qtquant analyze), see calibrate()
        res = calibrate(self.graph, self.options.calib, progress=progress, cancel=cancel,
                        keep_check_values=keep_check_values)
        self.set_calibration(res)
        return res

    def load_statistics(self, path: StrPath, explicit: Collection[str] = ()) -> CalibrationResult:
        """Use a statistics file (``qtquant calibrate --stats-out``) instead of calibrating; the
        calibration options become the file's data settings with this session's observer,
        percentile and scheme.  ``explicit``: data settings the user chose, which must match."""
        from ..calib.statsfile import load_stats

        res = load_stats(path, self.graph, self.options.calib, explicit=explicit)
        self.options = replace(self.options, calib=res.config)
        self.set_calibration(res)
        return res

    def set_calibration(self, res: CalibrationResult, derived: Derived | None = None) -> None:
        """``derived``: :func:`derive` for ``res``, used if the options and groups it was
        computed for are still the session's."""
        self.calibration = res
        self.histograms = {}
        self._invalidate(domains=True)
        if derived is not None and derived.calibration is res and derived.options == self.options \
                and derived.groups == tuple(tuple(g) for g in self.groups.as_lists()) \
                and derived.compiler == self.compiler_ranges:
            self._dm, self._baseline_dm = derived.domains, derived.baseline
            ft = self.export_float(derived.domains)
            self._concat_cache = {False: (derived.domains, derived.concats, ft),
                                  True: (derived.baseline, derived.baseline_concats, ft)}
        self._emit("calibrated")

    @property
    def compiler_ranges(self) -> Ranges | None:
        """Tensor -> range from the compile log's thresholds when they are the scales, else None
        (also when the scheme was changed away from symmetric int8, the grid the thresholds are on)."""
        if self.compiler_log is None or not self.compiler_scales or self.options.scheme is not Scheme.SYMMETRIC_INT8:
            return None
        if self._compiler_ranges is None or self._compiler_ranges[0] is not self.compiler_log:
            self._compiler_ranges = (self.compiler_log, self.compiler_log.ranges())
        return self._compiler_ranges[1]

    def set_compiler_log(self, match: LogMatch | None, scales: bool = True) -> None:
        """Show a compile log (a :class:`~qtquant.horizon.match.LogMatch`, None to drop it) beside
        the model; with ``scales`` its thresholds fix the scales of the tensors it gives, as a QDQ
        file's do (the compiler's calibration); the rest keep qtquant's.  Not an undoable edit: a
        file opened beside the model, as calibration data is."""
        if scales and match is not None and self.options.scheme is not Scheme.SYMMETRIC_INT8:
            from ..base.errors import UsageError

            raise UsageError("a compile log's thresholds are symmetric int8 scales: use the sym scheme with them")
        self.compiler_log = match
        self.compiler_scales = bool(scales and match is not None)
        self._invalidate(domains=True)
        self._emit("compiler_log", match)

    def set_options(self, **changes: OptionValue) -> None:
        """Change option fields (commands call this; see ``SetOptionsCommand``).  Fields that
        already have the value are no change: no event, no new revision."""
        unknown = set(changes) - Options.field_names()
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        new = replace(self.options, **changes)
        changed = {k: getattr(new, k) for k in changes if getattr(new, k) != getattr(self.options, k)}
        if not changed:
            return
        self.options = new
        if "scheme" in changed and self.calibration is not None:
            # Same statistics, ranges re-derived for the new scheme (no model run).
            tag = self.options.scheme.short
            if self.calibration.config.scheme != tag:
                self.calibration = self.calibration.recompute(scheme=tag)
            self.options = replace(self.options, calib=replace(self.options.calib, scheme=tag))
        self._invalidate(domains=bool(_DOMAIN_FIELDS & changed.keys()))
        self._emit("options", changed)

    def set_precision(self, tensors: Iterable[str], precision: Precision | str) -> None:
        """Set ``tensors`` (tensor names, see :func:`qtquant.quant.precision.resolve_names`) to
        ``precision``; commands call this (``SetPrecisionCommand``), so it is undoable there."""
        tensors = list(tensors)
        unknown = [t for t in tensors if not self.graph.is_quantized(t)]
        if unknown:
            from ..base.errors import BadInputError

            raise BadInputError(f"{unknown[0]!r} is not a quantized tensor: it has no precision to set")
        self.set_options(precision=self.options.precision.with_(tensors, Precision(precision)))

    def groups_changed(self) -> None:
        self._dm = None
        self._bump()
        self._emit("groups")

    def _invalidate(self, domains: bool) -> None:
        if domains:
            self._dm = self._baseline_dm = None
        self._bump()

    def _bump(self) -> None:
        self.revision += 1

    # -- events ---------------------------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[Session]:
        """Hold the events of everything done inside and emit each kind once at the end: one
        edit is one event per kind, however many steps it takes (auto-share, Ungroup N)."""
        self._batch_depth += 1
        try:
            yield self
        finally:
            self._batch_depth -= 1
            if self._batch_depth == 0 and self._pending:
                pending, self._pending = self._pending, {}
                for kind, args in pending.items():
                    getattr(self.events, kind).emit(*args)

    def _emit(self, kind: str, *args: object) -> None:
        if self._batch_depth == 0:
            getattr(self.events, kind).emit(*args)
        elif kind == "options" and kind in self._pending:
            held, new = self._pending[kind][0], args[0]
            assert isinstance(held, dict) and isinstance(new, dict)
            self._pending[kind] = ({**held, **new},)
        else:
            self._pending[kind] = args

    # -- background results ---------------------------------------------------------------
    def set_perf(self, value: PerfResult, revision: int, baseline: PerfResult | None = None) -> bool:
        """Install a simulation of ``revision`` (and its ungrouped baseline); one for an older
        revision is dropped (False): the session changed while it ran."""
        if revision != self.revision:
            return False
        self.perf = Result(value, revision)
        if baseline is not None:
            self.perf_baseline = Result(baseline, revision)
        self._emit("perf", self.perf)
        return True

    def set_fidelity(self, value: Fidelity, revision: int) -> bool:
        if revision != self.revision:
            return False
        self.fidelity = Result(value, revision)
        self._emit("fidelity", self.fidelity)
        return True

    def set_accuracy(self, value: AccuracyReport, revision: int) -> bool:
        """Install an accuracy report of ``revision``; one for an older revision is dropped."""
        if revision != self.revision:
            return False
        self.accuracy = Result(value, revision)
        self._emit("accuracy", self.accuracy)
        return True

    def is_stale(self, result: Result[object] | None) -> bool:
        """True for a result of an older revision (an edit came after it); None is not stale,
        it is missing."""
        return result is not None and result.revision != self.revision

    def snapshot(self) -> Snapshot:
        """What background work reads, fixed now: see :class:`~qtquant.app.snapshot.Snapshot`."""
        seed: dict[bool, list[ConcatInfo]] = {}  # the analyses built already: the worker makes the others
        for baseline in (False, True):
            hit = self.cached_concats(baseline)
            if hit is not None:
                seed[baseline] = hit
        return Snapshot(self.graph, self.options, self.calibration, self.qdq,
                        GroupSet(list(self.groups.groups), self.groups.next_id), self.revision,
                        self.domains, self.baseline_domains, seed, self.compiler_ranges, self.compiler_log)

    # -- derived --------------------------------------------------------------------------
    def _build(self, groups: Iterable[Sequence[str]]) -> DomainMap:
        return domains_for(self.graph, self.calibration, self.options, self.qdq, groups, self.compiler_ranges)

    def domains_with(self, groups: Iterable[Sequence[str]]) -> DomainMap:
        """The domains if ``groups`` (lists of tensors) were the user's groups: a preview, nothing cached."""
        return self._build(groups)

    @property
    def domains(self) -> DomainMap:
        if self._dm is None:
            self._dm = self._build(self.groups.as_lists())
        return self._dm

    @property
    def baseline_domains(self) -> DomainMap:
        """Domains without any user group: the 'before' of every before/after."""
        if self._baseline_dm is None:
            self._baseline_dm = self._build(())
        return self._baseline_dm

    def concats(self, baseline: bool = False) -> list[ConcatInfo]:
        dm = self.baseline_domains if baseline else self.domains
        ft = self.export_float(dm)
        hit = self._concat_cache.get(bool(baseline))
        if hit is None or hit[0] is not dm or hit[2] != ft:
            hit = self._concat_cache[bool(baseline)] = (dm, analyze_concats(self.graph, dm, ft), ft)
        return hit[1]

    def cached_concats(self, baseline: bool = False) -> list[ConcatInfo] | None:
        """The analysis if it is already built for the current domains, else None (no work)."""
        dm = self._baseline_dm if baseline else self._dm
        hit = self._concat_cache.get(bool(baseline))
        if dm is None or hit is None or hit[0] is not dm:
            return None
        return hit[1] if hit[2] == self.export_float(dm) else None


if TYPE_CHECKING:
    def _meets_the_contract(session: Session, snapshot: Snapshot
                            ) -> tuple[SessionState, SessionState, EditableState]:
        """mypy checks that the live session and a snapshot are both a :class:`SessionState`, and the
        session an :class:`EditableState`."""
        return session, snapshot, session
