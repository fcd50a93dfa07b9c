"""Calibration method search: ``--observer search`` and ``search-per-node``.

The X5 toolchain's default calibration tries several methods on the whole model and keeps the one
whose quantized model agrees best with the float one ("modelwise search"); its ``mix`` mode
chooses per node.  Here:

* ``search``: every method of :data:`~qtquant.calib.methods.CANDIDATES` on the whole model, each
  judged as the fidelity check judges an export: the worst output slice's SQNR of the exported
  model (onnxruntime, default options) against the float model on the check samples (held out
  from calibration, or in-sample when there are too few; the report says which).  The best one
  is kept (:func:`_better`: the worst slice higher by more than :data:`_GAIN_DB`, or no lower and
  the next worst slice higher), so on a tie the earlier candidate, MinMax (which clips nothing), stays.
* ``search-per-node``: the same, then a greedy walk over the tensors within a time budget.  A
  tensor is "open" when some method gives it a range that differs from the current one by more
  than :data:`_DIFFERENT` of its span; the open tensors are taken widest disagreement first, each
  of their other ranges is measured with everything kept so far, and the best one is kept where
  it does better by the same rule (the worst slice first, then the next: a step that only raises
  the box rows of a detector, leaving its class rows where they are, is kept too) and takes no
  slice below where the whole-model choice left it (the class rows are not bought with the boxes).

Every method reads the statistics already collected (full histograms), so the search costs runs
of the exported model, not another calibration pass, and it works as well on a statistics file
(``--stats``, e.g. from a ``--ray`` run).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias

from ..fidelity.accuracy.check import Bench
from ..calib.methods import CANDIDATES, MINMAX, Method, MethodChoice
from ..calib.searchreport import MethodScore, NodeStep, SearchReport
from ..base.errors import BadInputError, Cancelled
from ..quant.outputs import float_output_tensors
from ..base.vocab import DEFAULT_SEARCH_BUDGET_S as DEFAULT_BUDGET_S, Observer

if TYPE_CHECKING:
    from ..calib import CalibrationResult
    from ..calib.state import SessionState
    from ..fidelity.accuracy.check import Variant
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo
    from ..quant.domains import DomainMap
    from ..quant.groups import GroupsSnapshot
    from .options import Options
    from .session import Session

__all__ = ["search_calibration", "run_search", "searched", "DEFAULT_BUDGET_S", "needs_search"]

# (ranges, domain map, what the export leaves in float, a key equal for equal exports)
Trial: TypeAlias = "tuple[dict[str, tuple[float, float]], DomainMap, frozenset[str], object]"
Profile: TypeAlias = "dict[str, float]"  # slice label -> its SQNR (dB)
Cancel: TypeAlias = "Callable[[], bool] | None"
Progress: TypeAlias = "Callable[[str, int, int], object] | None"  # (what, done, total)

_DIFFERENT = 0.02  # another method's range counts as another choice beyond this share of the span
_GAIN_DB = 0.01  # a per-node step must raise the worst slice by more than this (the figures' noise)


def needs_search(calibration: CalibrationResult | None) -> bool:
    """A search observer whose search has not run on these statistics yet."""
    return calibration is not None and calibration.searched and calibration.choice is None


class _Trials:
    """Measures a choice of methods: the export the session would write with its ranges."""

    def __init__(self, session: SessionState, cancel: Cancel) -> None:
        from .options import domains_for as _domains_for

        cal = session.calibration
        if cal is None:
            raise BadInputError("the method search needs a calibration; calibrate first")
        self.session, self.cal = session, cal
        self._domains_for = _domains_for
        self.bench = Bench(session, output_mode=session.options.output_mode, cancel=cancel)
        self.groups = session.groups.as_lists()

    def plan(self, choice: MethodChoice) -> Trial:
        """(ranges, domain map, what the export leaves in float, a key equal for equal exports)."""
        s = self.session
        trial = self.cal.with_choice(choice)
        dm = self._domains_for(s.graph, trial, s.options, s.qdq, self.groups)
        base = self._domains_for(s.graph, trial, s.options, s.qdq, ()) if self.groups else dm
        # What the default export leaves in float depends on the ranges (an output Concat that
        # cannot share a scale): each trial is the export its ranges would give.
        ft, _ = float_output_tensors(s.graph, base, s.options.output_mode,
                                     s.options.float_output_max_bits_lost)
        # The export reads each domain's range (int8 and int16 scales alike), which Concat input's
        # scale an output takes, and what stays float; a tensor's own range only through these.
        key = (tuple((d.id, d.lo, d.hi) for d in dm.domains.values()), tuple(sorted(dm.concat_source.items())),
               tuple(sorted(dm.scale_from.items())), frozenset(ft))
        return trial.ranges, dm, ft, key

    def measure(self, choice: MethodChoice, planned: Trial | None = None) -> Variant:
        ranges, dm, ft, _ = planned if planned is not None else self.plan(choice)
        self.bench.export_float, self.bench.ranges = ft, ranges
        return self.bench.measure(dm)


def _key(db: float) -> float:
    return db if math.isfinite(db) else -math.inf


def _profile(v: Variant) -> Profile:
    """Every measured slice's SQNR (the whole output where it has no slices), by label."""
    found: Profile = {}
    for f in v.outputs.values():
        parts = [p for p in f.slices if p.measured] or ([f.whole] if f.whole.measured else [])
        found.update((p.label, _key(p.sqnr_db)) for p in parts if p.sqnr_db is not None)
    return found


def _holds(new: Mapping[str, float], floor: Mapping[str, float]) -> bool:
    """No slice of ``new`` below its ``floor`` figure by more than the noise."""
    return all(new.get(k, -math.inf) >= x - _GAIN_DB for k, x in floor.items())


def _better(new_profile: Mapping[str, float], cur_profile: Mapping[str, float]) -> bool:
    """``new`` raises the worst slice by more than :data:`_GAIN_DB`; or keeps it (no lower at all)
    and raises the next worst slice that moves by more than that, before any falls by as much."""
    new, cur = sorted(new_profile.values()), sorted(cur_profile.values())
    if not new or not cur:
        return False
    if new[0] > cur[0] + _GAIN_DB:
        return True
    if new[0] < cur[0]:
        return False
    for x, y in zip(new[1:], cur[1:]):
        if x > y + _GAIN_DB:
            return True
        if x < y - _GAIN_DB:
            return False
    return False


def _open_tensors(cal: CalibrationResult, current: MethodChoice) -> list[tuple[str, list[Method]]]:
    """(tensor, [other methods with a range of their own]) for the tensors where the methods
    disagree, widest disagreement first."""
    scheme = cal.config.scheme
    found: list[tuple[float, str, list[Method]]] = []
    for t, st in cal.stats.items():
        cur = current.of(t).ranges(st, scheme)
        if cur is None or t not in cal.ranges:
            continue
        span = cur[1] - cur[0]
        if not (span > 0):
            continue
        alts: list[Method] = []
        seen = [cur]
        spread = 0.0
        for m in CANDIDATES:
            r = m.ranges(st, scheme)
            if r is None or any(abs(r[0] - q[0]) <= _DIFFERENT * span and abs(r[1] - q[1]) <= _DIFFERENT * span
                                for q in seen):
                continue
            seen.append(r)
            alts.append(m)
            if r[1] - r[0] > 0:
                spread = max(spread, abs(math.log((r[1] - r[0]) / span)))
        if alts:
            found.append((spread, t, alts))
    found.sort(key=lambda x: (-x[0], x[1]))
    return [(t, alts) for _, t, alts in found]


def search_calibration(session: Session, *, per_node: bool | None = None, budget_s: float = DEFAULT_BUDGET_S,
                       cancel: Cancel = None, progress: Progress = None) -> SearchReport:
    """Search the methods for the session's calibration and install the choice (one
    "calibrated" event).  ``per_node`` None: as the calibration's observer says.  Returns the
    report (also kept as ``session.calibration.search``)."""
    cal = session.calibration
    if cal is None:
        raise BadInputError("the method search needs a calibration; calibrate first")
    per_node = cal.config.observer == Observer.SEARCH_PER_NODE if per_node is None else per_node
    rep = run_search(session, per_node=per_node, budget_s=budget_s, cancel=cancel, progress=progress)
    session.set_calibration(cal.with_choice(rep.choice, rep))
    return rep


def searched(graph: Graph, calibration: CalibrationResult, options: Options, groups: GroupsSnapshot | None = None,
             qdq: QdqInfo | None = None, *, cancel: Cancel = None, progress: Progress = None) -> CalibrationResult:
    """``calibration`` with the choice of its search, for background work that holds no session (the
    app's Calibrate job): measured on a scratch session of ``graph`` with ``options`` and the groups
    of ``groups`` (a ``GroupSet.snapshot()``)."""
    from .session import Session

    s = Session(graph, options, qdq=qdq)
    if groups:
        s.groups.restore(groups)
    s.calibration = calibration
    rep = run_search(s, per_node=calibration.config.observer == Observer.SEARCH_PER_NODE, cancel=cancel,
                     progress=progress)
    return calibration.with_choice(rep.choice, rep)


def run_search(session: SessionState, *, per_node: bool, budget_s: float = DEFAULT_BUDGET_S, cancel: Cancel = None,
               progress: Progress = None) -> SearchReport:
    """The search without changing the session: its report (``report.choice`` is the decision)."""
    if not (budget_s >= 0):
        raise BadInputError(f"the search budget must be 0 s or more, got {budget_s}")
    t0 = time.perf_counter()
    trials = _Trials(session, cancel)
    bench = trials.bench
    rep = SearchReport(per_node, bench.samples, bench.in_sample, budget_s=float(budget_s) if per_node else 0.0)
    bench.float_out()  # the float reference once, counted in the search's time
    profiles: dict[Method, Profile] = {}
    for k, m in enumerate(CANDIDATES):
        _check(cancel)
        t = time.perf_counter()
        v = trials.measure(MethodChoice(m))
        rep.scores.append(MethodScore(m, v.worst_label, v.worst_db, time.perf_counter() - t))
        profiles[m] = _profile(v)
        if progress is not None:
            progress("methods", k + 1, len(CANDIDATES))
    best = rep.scores[0]
    for sc in rep.scores[1:]:  # in candidate order: a later one must do better by more than the noise
        if _better(profiles[sc.method], profiles[best.method]):
            best = sc
    if not math.isfinite(best.worst_db):
        # Nothing to judge by (integer outputs only, or no signal on the check samples).
        rep.note = "no output slice carries signal on the check samples: MinMax is kept"
        best = next(s for s in rep.scores if s.method == MINMAX)
    rep.choice = MethodChoice(best.method)
    rep.final_label, rep.final_db = best.worst_label, best.worst_db
    if per_node and not rep.note:
        _per_node(trials, rep, profiles[best.method], t0, budget_s, cancel, progress)
    rep.runs = bench.runs
    rep.seconds = time.perf_counter() - t0
    return rep


def _per_node(trials: _Trials, rep: SearchReport, profile: Profile, t0: float, budget_s: float, cancel: Cancel,
              progress: Progress) -> None:
    cal = trials.cal
    current = rep.choice
    todo = _open_tensors(cal, current)
    rep.tensors_open = len(todo)
    per_tensor = dict(current.per_tensor)
    floor = dict(profile)  # where the whole-model choice left each slice: no step may take one lower
    key = trials.plan(current)[3]
    for k, (t, alts) in enumerate(todo):
        if time.perf_counter() - t0 >= budget_s:
            break
        best: tuple[Method, Variant, Profile] | None = None
        for m in alts:
            _check(cancel)
            choice = MethodChoice(current.model, {**per_tensor, t: m})
            planned = trials.plan(choice)
            if planned[3] == key:  # the same export (t's domain keeps its range): nothing to measure
                rep.unchanged += 1
                continue
            v = trials.measure(choice, planned)
            p = _profile(v)
            if _holds(p, floor) and _better(p, profile if best is None else best[2]):
                best = (m, v, p)
        rep.tensors_tried = k + 1
        if best is not None:
            m, v, profile = best
            per_tensor[t] = m
            key = trials.plan(MethodChoice(current.model, per_tensor))[3]
            rep.final_label, rep.final_db = v.worst_label, v.worst_db
            rep.steps.append(NodeStep(t, m, v.worst_db))
        if progress is not None:
            progress("tensors", k + 1, len(todo))
    rep.choice = MethodChoice(current.model, per_tensor)


def _check(cancel: Cancel) -> None:
    if cancel is not None and cancel():
        raise Cancelled("calibration search cancelled")
