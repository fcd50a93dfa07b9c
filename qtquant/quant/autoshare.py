"""Auto-share: tie each Concat's inputs and output to one observer when it is cheap.

For every Concat (in topological order) the candidate domain is the union of the
domains its members are in now, including what earlier Concats merged, so nested
Concats merge transitively.  The candidate's range comes from the session's policy,
and every tensor in it is charged ``bits_lost(own range, candidate range)``.  The
Concat is shared when no tensor would lose more than ``max_bits_lost`` bits;
otherwise it is left alone with a reason that names the widest and the narrowest
member, e.g. "'boxes' (Mul, absmax 320) next to 'scores' (Sigmoid, absmax 1): 8.3 bits".

A flagged Concat gets no "could share within N bits" suggestion: that would name a partial
share the tool never makes nor measures.  Trading accuracy for rescales is what
``--max-sqnr-drop`` does, on the measured worst output slice (:mod:`qtquant.fidelity.accuracy.share`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .concat import concat_members
from .domains import Policy, UnionFind, policy_range
from ..base.errors import ShareRefused
from .outputs import OutputMode, float_output_tensors, output_reached
from ..model.qdq import channel_scales_of
from ..model.scales import Scheme, bits_lost, qparams_for_range, range_width, scales_differ
from ..base.vocab import ShareAction

if TYPE_CHECKING:
    from ..model.graphmodel import Graph
    from .domains import DomainMap
    from .groups import Group
    from .outputs import FloatOutput
    from .state import EditableState, QuantState

__all__ = ["AutoShareDecision", "AutoShareReport", "auto_share", "plan_auto_share", "MAX_CLIP"]

# A share that leaves more than this fraction of a member's calibrated range outside the
# shared range is refused too (except under 'pooled', whose point is to clip tails).
MAX_CLIP = 0.01


@dataclass
class AutoShareDecision:
    concat: str
    action: ShareAction
    worst_bits: float
    members: tuple[str, ...] = ()
    widest: str | None = None
    narrowest: str | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()


@dataclass
class AutoShareReport:
    max_bits_lost: float
    decisions: list[AutoShareDecision] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)  # the groups made

    @property
    def grouped(self) -> list[str]:
        return [d.concat for d in self.decisions if d.action == ShareAction.GROUPED]

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return [(d.concat, d.reason) for d in self.decisions if d.action == ShareAction.SKIPPED]

    @property
    def already(self) -> list[str]:
        return [d.concat for d in self.decisions if d.action == ShareAction.ALREADY]

    @property
    def notes(self) -> list[tuple[str, str]]:
        return [(d.concat, n) for d in self.decisions for n in d.notes]

    def text(self) -> str:
        lines = [f"auto-share (max {self.max_bits_lost:g} bits lost): {len(self.grouped)} Concats shared "
                 f"into {len(self.groups)} groups, {len(self.skipped)} left alone, "
                 f"{len(self.already)} already matched"]
        for d in self.decisions:
            if d.action == ShareAction.GROUPED:
                lines.append(f"  shared   {d.concat}: worst member loses {d.worst_bits:.2f} bits")
            elif d.action == ShareAction.SKIPPED:
                lines.append(f"  FLAGGED  {d.concat}: {d.reason}")
            elif d.notes:  # an already matched Concat: its own line, or its notes read as the line above's
                lines.append(f"  matched  {d.concat}")
            for n in d.notes:
                lines.append(f"           note: {n}")
        return "\n".join(lines)


def _one_grid(graph: Graph, dm: DomainMap, members: Sequence[str]) -> bool:
    """Every member quantized with the same scale and zero point, per tensor."""
    found = [dm.qparams_of(t) for t in members]
    qs = [q for q in found if q is not None]
    if len(qs) < len(found) or any(channel_scales_of(graph, t) is not None for t in members):
        return False
    return all(not scales_differ(q.scale, qs[0].scale) and q.zero_point == qs[0].zero_point for q in qs)


def _label(graph: Graph, t: str, rng: tuple[float, float], scheme: Scheme) -> str:
    p = graph.producer(t)
    op = p.op_type if p is not None else ("input" if t in graph.inputs else "constant")
    what = "absmax" if scheme is Scheme.SYMMETRIC_INT8 else "span"
    return f"{t!r} ({op}, {what} {range_width(*rng, scheme):.3g})"


def _bits(x: float, limit: float) -> str:
    """'8.6 bits > 1', with more digits when rounding would hide the excess."""
    text = f"{x:.1f}"
    if float(text) <= limit:
        text = f"{x:.3f}"
    return f"{text} bits > {limit:g}"


@dataclass
class _Trial:
    range: tuple[float, float] | None
    worst: float = 0.0
    wide: str | None = None
    narrow: str | None = None
    clip: float = 0.0  # largest fraction of a member's range outside the shared range
    clipped: str | None = None


class _Planner:
    """Union-find over the session's current domains, so trial merges are cheap."""

    def __init__(self, session: QuantState):
        self.session = session
        self.graph = session.graph
        self.dm = session.domains
        self.scheme = self.dm.scheme
        self.policy = session.options.policy
        cal = session.calibration
        self.hist_pool = cal.pooled_range if cal is not None else None
        self.pct = session.options.calib.percentile
        self.order = {n: i for i, n in enumerate(self.graph.tensors)}
        self.uf: UnionFind[int] = UnionFind()
        self.tensors: dict[int, list[str]] = {}
        for did, d in self.dm.domains.items():
            self.uf[did]
            self.tensors[did] = list(d.members)

    def merged(self, dids: Iterable[int]) -> list[str]:
        roots = {self.uf[d] for d in dids}
        out: list[str] = []
        for d, ts in self.tensors.items():
            if self.uf[d] in roots:
                out.extend(ts)
        return out

    def evaluate(self, tensors: Sequence[str]) -> "_Trial":
        """Range, worst bits lost, widest/narrowest member and worst clipping of one candidate domain."""
        mr = self.dm.member_range
        rng = policy_range(self.policy, tensors, self.dm.natural_of, mr, self.graph, self.hist_pool,
                            self.pct, self.scheme)
        if rng is None:
            return _Trial(None)
        q = qparams_for_range(*rng, self.scheme)
        # One representative per pass-through chain: the tensor that owns the observer.
        have = list(dict.fromkeys(self.root(t) for t in tensors if t in mr))
        tr = _Trial(rng)
        for t in have:
            b = bits_lost(mr[t], rng, self.scheme)
            if tr.narrow is None or b > tr.worst:
                tr.worst, tr.narrow = b, t
            if tr.wide is None or range_width(*mr[t], self.scheme) > range_width(*mr[tr.wide], self.scheme):
                tr.wide = t
            # Policies other than union can leave part of a member outside the shared range
            # (max-input with uint8, a percentile output): that is clipping, not lost bits.
            lo, hi = mr[t]
            clip = (max(0.0, q.lo - lo) + max(0.0, hi - q.hi)) / max(hi - lo, 1e-12)
            if clip > tr.clip:
                tr.clip, tr.clipped = clip, t
        return tr

    def root(self, t: str) -> str:
        nat = self.dm.natural_of.get(t)
        if not nat or len(nat) == 1:
            return t
        obs = [x for x in nat if self.graph.observed(x)] or list(nat)
        return min(obs, key=lambda x: (self.order.get(x, 0), x))

    def union(self, dids: Iterable[int]) -> None:
        ids = list(dids)
        for d in ids[1:]:
            self.uf.union(ids[0], d)


def _output_note(kept: FloatOutput | None) -> str:
    """A Concat that feeds a model output: its own scale is the output's resolution, shared or not.
    ``kept``: the export's FloatOutput for it (:func:`qtquant.quant.outputs.float_output_tensors`, the one
    place that decides), or None when the export quantizes it."""
    note = "feeds a model output directly: its scale is the output's resolution"
    if kept is not None:
        note += (f"; at that scale {kept.worst_member!r} would lose {kept.worst_bits:.1f} bits even without sharing, "
                 "so the export keeps this output in float and its inputs at their own scales "
                 "(--quantize-outputs forces int8)")
    return note


def plan_auto_share(session: QuantState, max_bits_lost: float | None = None) -> tuple[AutoShareReport, list[list[str]]]:
    """Decide without changing the session: (report, groups of tensors to share)."""
    limit = session.options.auto_share_max_bits_lost if max_bits_lost is None else float(max_bits_lost)
    pl = _Planner(session)
    graph, dm = pl.graph, pl.dm
    report = AutoShareReport(limit)
    kept_float = {k.concat: k for k in float_output_tensors(graph, dm, OutputMode.AUTO, limit)[1]}
    accepted: dict[str, list[str]] = {}
    touched: set[int] = set()  # domains an accepted share merged
    for node in graph.concat_nodes():
        notes: list[str] = []
        members = concat_members(graph, node, notes)
        out = node.outputs[0]
        feeds = output_reached(graph, out) is not None
        if feeds:
            notes.append(_output_note(kept_float.get(node.name)))
        if len(members) < 2:
            continue
        dids = {dm.of[t] for t in members}
        if len({pl.uf[d] for d in dids}) == 1:
            report.decisions.append(AutoShareDecision(node.name, ShareAction.ALREADY, 0.0, tuple(members),
                                                      notes=tuple(notes)))
            continue
        if not (dids & touched) and all(dm.domains[d].fixed for d in dids) and _one_grid(graph, dm, members):
            # A QDQ file (one qtquant exported, say) that gives them one scale already: grouping the
            # file's equal scales changes nothing ("14 Concats shared" on re-running fix on its output)
            report.decisions.append(AutoShareDecision(
                node.name, ShareAction.ALREADY, 0.0, tuple(members),
                notes=(*notes, "the file gives its members one scale already")))
            continue
        if (node.name in dm.concat_source or node.name in dm.concat_written) and not (dids & touched) and not any(
                scales_differ(dm.scale_of(t) or 0.0, dm.scale_of(out) or 0.0) for t in members if t != out):
            # The target's rule already gives the output its inputs' one scale: no rescale to save
            # (unless an earlier share moved one of its members: then it is judged as usual).
            report.decisions.append(AutoShareDecision(
                node.name, ShareAction.ALREADY, 0.0, tuple(members),
                notes=(*notes, f"no rescale under the target's Concat rule ({dm.concat_rule})")))
            continue
        tensors = pl.merged(dids)
        tr = pl.evaluate(tensors)
        rng, worst, wide, narrow = tr.range, tr.worst, tr.wide, tr.narrow
        if rng is None:
            report.decisions.append(AutoShareDecision(
                node.name, ShareAction.SKIPPED, 0.0, tuple(members), reason="no calibrated range for its members",
                notes=tuple(notes)))
            continue
        if worst > limit and wide is not None and narrow is not None:  # (both set with worst)
            mr = dm.member_range
            why = (f"{_label(graph, wide, mr[wide], pl.scheme)} next to "
                   f"{_label(graph, narrow, mr[narrow], pl.scheme)}: {_bits(worst, limit)}")
            report.decisions.append(AutoShareDecision(
                node.name, ShareAction.SKIPPED, worst, tuple(members), wide, narrow, why, tuple(notes)))
            continue
        if tr.clip > MAX_CLIP and tr.clipped is not None and pl.policy is not Policy.POOLED:  # pooled clips on purpose
            lo, hi = dm.member_range[tr.clipped]
            why = (f"under {pl.policy.value} the shared range [{rng[0]:.3g}, {rng[1]:.3g}] would clip "
                   f"{_label(graph, tr.clipped, (lo, hi), pl.scheme)} ([{lo:.3g}, {hi:.3g}]) by "
                   f"{100 * tr.clip:.0f}% of its range")
            report.decisions.append(AutoShareDecision(
                node.name, ShareAction.SKIPPED, worst, tuple(members), wide, narrow, why, tuple(notes)))
            continue
        pl.union(dids)
        touched |= dids
        accepted[node.name] = members
        report.decisions.append(AutoShareDecision(node.name, ShareAction.GROUPED, worst, tuple(members), wide, narrow,
                                                  notes=tuple(notes)))
    # One group per merged domain: nested Concats end up in a single group.
    by_root: dict[int, list[str]] = {}
    for name, members in accepted.items():
        by_root.setdefault(pl.uf[dm.of[members[0]]], []).extend(members)
    groups = [list(dict.fromkeys(ms)) for ms in by_root.values()]
    return report, groups


def auto_share(session: EditableState, max_bits_lost: float | None = None) -> AutoShareReport:
    """Share every Concat whose sharing costs at most ``max_bits_lost`` bits (default: the session's)."""
    report, groups = plan_auto_share(session, max_bits_lost)
    before = session.groups.snapshot()
    made = []
    try:
        for members in groups:
            names = [d.concat for d in report.decisions
                     if d.action == ShareAction.GROUPED and set(d.members) & set(members)]
            made.append(session.groups.share(session.graph, members, name="auto: " + ", ".join(names[:3])
                                             + (" ..." if len(names) > 3 else "")))
    except ShareRefused:
        session.groups.restore(before)
        raise
    # A later share may have merged an earlier one: keep the final version of each.
    final = {g.id: g for g in session.groups.groups}
    report.groups = [final[g.id] for g in {g.id: g for g in made}.values() if g.id in final]
    session.groups_changed()
    return report
