"""Auto-share by measured accuracy (``--max-sqnr-drop DB``), the alternative to the bits rule.

1. Candidates: every Concat whose members are not yet one domain and that costs rescales.
2. Each candidate is shared alone, on top of the session's groups, and measured: the worst output
   slice's SQNR of the exported model in onnxruntime at default options (its *loss* against the
   start), and the simulated latency (its *gain*, the rescales it removes).
3. Candidates are taken in order of latency gained per dB lost (a loss of 0 or less counts as
   :data:`FREE_DB`, so free shares go first, the fastest first).  After each one the model with
   everything accepted so far is measured again (losses do not simply add up; a candidate whose
   members an earlier share already merged is skipped); the first share that takes the worst
   slice more than the budget below the start is undone and the walk stops.

Each accepted step is a row of the trade-off curve: rescales removed against worst-slice SQNR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...quant.concat import analyze_concats, concat_members
from ...base.errors import BadInputError, ShareRefused
from ..measure import samples_blamed
from ...quant.groups import GroupSet
from ...quant.outputs import OutputMode, export_float_of
from .check import Bench
from ...base.tables import samples_text

__all__ = ["ShareStep", "ShareCandidate", "SqnrShareReport", "plan_sqnr_share", "FREE_DB"]

FREE_DB = 0.01  # a candidate that loses nothing measurable is ranked as losing this much


@dataclass
class ShareCandidate:
    concat: str
    members: tuple[str, ...]
    rescales: int
    gain_us: float  # simulated latency removed when shared alone
    loss_db: float  # worst-slice SQNR lost when shared alone (negative: it got better)

    @property
    def ratio(self) -> float:
        return self.gain_us / max(self.loss_db, FREE_DB)


@dataclass
class ShareStep:
    concat: str  # "" for the starting point
    rescales: int  # rescales left in the model
    removed: int  # rescales removed since the start
    latency_ms: float
    worst_label: str
    worst_db: float
    accepted: bool = True

    def to_dict(self, start_db: float) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 4)

        return {"concat": self.concat or None, "rescales": self.rescales, "rescales_removed": self.removed,
                "latency_ms": num(self.latency_ms), "worst_slice": self.worst_label or None,
                "worst_sqnr_db": num(self.worst_db), "drop_db": num(start_db - self.worst_db),
                "accepted": self.accepted}


@dataclass
class SqnrShareReport:
    max_sqnr_drop: float
    samples: int
    in_sample: bool
    march: str
    candidates: list[ShareCandidate] = field(default_factory=list)
    steps: list[ShareStep] = field(default_factory=list)  # the start, each accepted step, then a refused one
    accepted: list[ShareCandidate] = field(default_factory=list)
    groups: list = field(default_factory=list)  # the groups made, once installed (app.sharing, one command)
    runs: int = 0

    @property
    def start(self) -> ShareStep:
        return self.steps[0]

    @property
    def final(self) -> ShareStep:
        return [s for s in self.steps if s.accepted][-1]

    @property
    def sample_text(self) -> str:
        return samples_text(self.samples, self.in_sample)

    @property
    def grouped(self) -> list[str]:
        return [c.concat for c in self.accepted]

    def curve_rows(self) -> list[tuple]:
        s0 = self.start.worst_db
        return [(str(k) if s.concat else "start", s.concat or "-", str(s.removed), str(s.rescales),
                 f"{s.latency_ms:.3f}", f"{s.worst_db:.2f}", f"{s.worst_db - s0:+.2f}",
                 "yes" if s.accepted else "over budget: undone")
                for k, s in enumerate(self.steps)]

    def text(self) -> str:
        from ...base.tables import text_table

        f, s = self.final, self.start
        lines = [f"auto-share by measured accuracy (max {self.max_sqnr_drop:g} dB worst-slice SQNR drop, "
                 f"{self.sample_text}, onnxruntime default options): {len(self.accepted)} of "
                 f"{len(self.candidates)} candidate Concats shared, {f.removed} rescales removed, worst slice "
                 f"{s.worst_label} {s.worst_db:.2f} -> {f.worst_label} {f.worst_db:.2f} dB, "
                 f"latency {s.latency_ms:.3f} -> {f.latency_ms:.3f} ms ({self.march}, estimate)",
                 "trade-off curve (Concats in order of latency gained per dB lost):",
                 text_table(self.curve_rows(), ("step", "concat", "removed", "rescales", "latency ms",
                                                "worst dB", "change dB", "accepted"), "rlrrrrrl", rule=True,
                            max_width=40)]
        alone = sorted(self.candidates, key=lambda c: -c.ratio)
        # (the change in worst-slice SQNR, signed as the table's: "-2.02 dB" read as a loss where
        # sharing had made it 2.02 dB better)
        lines.append("candidates shared alone (latency gained, worst-slice SQNR change): " + "; ".join(
            f"{c.concat} {c.gain_us:.1f} µs, {-c.loss_db:+.2f} dB" for c in alone[:12])
            + (" ..." if len(alone) > 12 else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        s0 = self.start.worst_db
        return {"max_sqnr_drop": self.max_sqnr_drop, "samples": self.samples, "held_out": not self.in_sample,
                "march": self.march, "grouped": self.grouped,
                "candidates": [{"concat": c.concat, "rescales": c.rescales, "gain_us": round(c.gain_us, 3),
                                "loss_db": round(c.loss_db, 4) if math.isfinite(c.loss_db) else None}
                               for c in self.candidates],
                "curve": [s.to_dict(s0) for s in self.steps], "runs": self.runs}


def _latency(sim, graph, dm, float_tensors) -> tuple[float, int, list]:
    cs = analyze_concats(graph, dm, float_tensors)
    res = sim.update(cs)
    return res.total_ms, sum(c.rescales for c in cs), cs


@samples_blamed
def plan_sqnr_share(session, max_sqnr_drop: float, *, output_mode: OutputMode = OutputMode.AUTO, march_file=None,
                    cancel=None, progress=None) -> tuple[SqnrShareReport, GroupSet]:
    """Decide without changing the session: the report and the group set to install."""
    from ...perf import load_march
    from ...perf.simulator import Simulator

    graph = session.graph
    march = load_march(march_file if march_file else session.options.march)
    sim = Simulator(graph, march)
    bench = Bench(session, output_mode=output_mode, cancel=cancel)
    rep = SqnrShareReport(float(max_sqnr_drop), bench.samples, bench.in_sample, march.name)
    start_groups = GroupSet(list(session.groups.groups), session.groups.next_id)
    dm0 = session.domains
    v0 = bench.measure(dm0)
    if not v0.worst_label:  # a budget in dB of nothing: no step could be judged
        why = (f"the model's outputs are all integer (least agreeing: {v0.worst_agreement[0]})"
               if v0.worst_agreement is not None else "no output slice carries signal on the check samples")
        raise BadInputError(f"auto-share by measured accuracy keeps the worst output slice's SQNR within a budget, "
                            f"and there is no such slice: {why}; auto-share by bits lost needs no output figure")
    ft = export_float_of(graph, session.options, session.qdq, dm0, output_mode)
    lat0, resc0, cs0 = _latency(sim, graph, dm0, ft)
    rep.steps.append(ShareStep("", resc0, 0, lat0, v0.worst_label, v0.worst_db))
    info = {c.node: c for c in cs0}

    todo = []
    for node in graph.concat_nodes():
        c = info.get(node.name)
        members = concat_members(graph, node)
        if c is None or not c.rescales or len(members) < 2 or len({dm0.of.get(m) for m in members}) < 2:
            continue
        todo.append((node.name, members, c.rescales))
    for k, (name, members, rescales) in enumerate(todo):
        trial = GroupSet(list(start_groups.groups), start_groups.next_id)
        try:
            trial.share(graph, members, name=f"sqnr-share: {name}")
        except ShareRefused:
            continue
        dm = session.domains_with(trial.as_lists())
        v = bench.measure(dm)
        lat, _, _ = _latency(sim, graph, dm, ft)
        loss = v0.worst_db - v.worst_db if math.isfinite(v.worst_db) and math.isfinite(v0.worst_db) else math.inf
        rep.candidates.append(ShareCandidate(name, tuple(members), rescales, (lat0 - lat) * 1000.0, loss))
        if progress is not None:
            progress("candidates", k + 1, len(todo))

    current, cur_dm = GroupSet(list(start_groups.groups), start_groups.next_id), dm0
    order = sorted((c for c in rep.candidates if c.gain_us > 0), key=lambda c: (-c.ratio, c.concat))
    for k, c in enumerate(order):
        if len({cur_dm.of.get(m) for m in c.members}) < 2:
            continue  # an earlier share already merged its members (nested Concats): nothing to measure
        trial = GroupSet(list(current.groups), current.next_id)
        trial.share(graph, list(c.members), name=f"sqnr-share: {c.concat}")
        dm = session.domains_with(trial.as_lists())
        v = bench.measure(dm)
        lat, resc, _ = _latency(sim, graph, dm, ft)
        ok = math.isfinite(v.worst_db) and v0.worst_db - v.worst_db <= rep.max_sqnr_drop
        rep.steps.append(ShareStep(c.concat, resc, resc0 - resc, lat, v.worst_label, v.worst_db, ok))
        if progress is not None:
            progress("curve", k + 1, len(order))
        if not ok:
            break  # the budget is spent
        current, cur_dm = trial, dm
        rep.accepted.append(c)
    rep.runs = bench.runs
    return rep, current
