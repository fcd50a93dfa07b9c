"""Reach X dB for the least latency: the sensitivity ranking's candidates taken in order of gain per
µs, each measured on top of the ones kept, until the worst output slice reaches the target.

The plan starts from the session as exported now (measured again: the ranking may be older than the
last edit) and walks the ranking (:func:`~qtquant.fidelity.accuracy.sensitivity.rank_key`): a candidate that
raises the worst slice by :data:`~qtquant.fidelity.accuracy.sensitivity.NO_GAIN_DB` or more (any point of
agreement on integer outputs) is kept, one that does not is left out, and the walk stops when the
target is reached, after :data:`MAX_STEPS` measured candidates, or when the candidates run out.
Gains do not add (the worst slice moves from one output to another), so each step is a real export
measured like the check.  Taking candidates by gain per µs is a greedy order, not a proof of the
least latency; the plan says what it measured and what it costs (:mod:`qtquant.perf.precision`).

The result is one precision map: the app installs it as one undoable command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...base.errors import Cancelled
from ...quant.precision import RANK, PrecisionMap
from ...base.tables import fmt_num, samples_text
from ...base.vocab import Precision, RankedBy
from .check import Bench
from .sensitivity import NO_GAIN_DB, ranked_worst

__all__ = ["ReachStep", "ReachPlan", "plan_reach", "MAX_STEPS"]

MAX_STEPS = 12  # candidates measured at most (one real export each: ~6 s on yolov8n_320)


@dataclass(frozen=True)
class ReachStep:
    node: str
    precision: Precision
    tensors: tuple[str, ...]
    worst: float  # measured worst slice with this candidate on top of the ones kept
    kept: bool


@dataclass
class ReachPlan:
    target: float
    start: float  # the worst slice as exported now
    ranked_by: RankedBy
    samples: int
    in_sample: bool
    precision: PrecisionMap  # the whole map to install (the session's, plus the candidates kept)
    worst: float  # the worst slice with that map
    latency_us: float | None  # what the map adds to the simulated latency (None: not priced)
    steps: list[ReachStep] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return math.isfinite(self.worst) and self.worst >= self.target

    @property
    def kept(self) -> list[ReachStep]:
        return [s for s in self.steps if s.kept]

    def value_text(self, x: float) -> str:
        """A worst-slice value in the ranking's unit: "31.20 dB", "93.75% equal"."""
        return f"{fmt_num(x)} dB" if self.ranked_by is RankedBy.SQNR else self.ranked_by.value_text(x)

    def options_text(self) -> str:
        """The plan as command-line options ("--int16 add_spike --keep-float tanh")."""
        flags = {Precision.INT16: "--int16", Precision.FLOAT: "--keep-float"}
        return " ".join(f"{flags[s.precision]} {s.node}" for s in self.kept)

    def to_dict(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 4)

        return {"target": self.target, "reached": self.reached, "ranked_by": self.ranked_by.value,
                "start": num(self.start), "worst": num(self.worst), "latency_delta_us": num(self.latency_us),
                "precision": self.precision.to_dict(), "options": self.options_text(),
                "steps": [{"node": s.node, "precision": s.precision.value, "tensors": list(s.tensors),
                           "worst": num(s.worst), "kept": s.kept} for s in self.steps]}

    def text(self) -> str:
        kept = self.kept
        lat = "n/a" if self.latency_us is None else f"{self.latency_us:+.1f} µs"
        what = ", ".join(f"{s.node} {s.precision.value}" for s in kept) or "nothing"
        head = (f"reach {self.value_text(self.target)}: {'reached' if self.reached else 'not reached'}, worst slice "
                f"{self.value_text(self.start)} -> {self.value_text(self.worst)} with {what} (latency {lat}; "
                f"{len(self.steps)} candidate(s) measured on {samples_text(self.samples, self.in_sample)})")
        lines = [head] + ([f"  as options: {self.options_text()}"] if self.kept else [])
        for s in self.steps:
            lines.append(f"  {s.node} {s.precision.value}: {self.value_text(s.worst)} "
                         f"{'kept' if s.kept else 'left out (no gain)'}")
        return "\n".join(lines)


def _covers(pm: PrecisionMap, tensors, precision: Precision) -> bool:
    """Every tensor already at ``precision`` or higher: the candidate adds nothing."""
    return all(RANK[pm.of(t)] >= RANK[precision] for t in tensors)


def plan_reach(session, target: float, report, *, cancel=None, progress=None, march_file=None,
               max_steps: int = MAX_STEPS) -> ReachPlan:
    """The precision map that reaches ``target`` (dB, or % equal where the report ranks by agreement)
    on the worst slice, from ``report``'s ranking (an :class:`~qtquant.fidelity.accuracy.report.AccuracyReport`).
    Changes nothing in ``session``.  ``progress(done, total)`` after each measured candidate."""
    from ...perf.simulator import map_delta_us
    from ...base.errors import QtQuantError

    bench = Bench(session, output_mode=session.options.output_mode, cancel=cancel)
    by = report.ranked_by
    dm = session.domains
    pm = bench.precision
    now, _ = ranked_worst(bench.measure(dm).outputs, by)
    plan = ReachPlan(target, now, by, bench.samples, bench.in_sample, pm, now, 0.0)
    least = NO_GAIN_DB if by is RankedBy.SQNR else 1e-9
    todo = [r for r in report.sensitivity if r.worth]
    for r in todo:
        if plan.reached or len(plan.steps) >= max_steps:
            break
        if cancel is not None and cancel():
            raise Cancelled("reach cancelled")
        if _covers(pm, r.tensors, r.precision):
            continue
        trial = pm.with_(r.tensors, r.precision)
        value, _ = ranked_worst(bench.measure(dm, precision=trial).outputs, by)
        kept = math.isfinite(value) and (not math.isfinite(now) or value >= now + least)
        plan.steps.append(ReachStep(r.node, r.precision, tuple(r.tensors), value, kept))
        if kept:
            pm, now = trial, value
            plan.precision, plan.worst = pm, now
        if progress is not None:
            progress(len(plan.steps), min(max_steps, len(todo)))
    try:
        plan.latency_us = map_delta_us(session, plan.precision, march_file)
    except QtQuantError:
        plan.latency_us = None
    return plan
