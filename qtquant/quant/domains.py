"""Scale domains: the sets of tensors that must carry one scale (DESIGN §3).

Built with union-find from three sources: pass-through ops, the user's groups, and
target rules.  A domain's range comes from its members under a :class:`Policy`.

A Concat output that no group or file scale decides takes its scale by the target's
:class:`ConcatScaleRule` (:func:`concat_scale_source` is that rule, the one place it is spelt);
under ``PRODUCERS_WRITE`` the output keeps its own and the inputs
:func:`~qtquant.quant.concatwrite.written_inputs` names take it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

import numpy as np

from ..base.gcpause import gc_paused
from ..model.scales import QParams, Scheme, qparams_for_range, range_width
from ..base.vocab import DEFAULT_PERCENTILE, ConcatScaleRule, Policy, Precision, TensorKind
from .concatwrite import written_inputs
from .outputs import pass_through_walk

if TYPE_CHECKING:
    from ..model.graphmodel import Graph

Range: TypeAlias = "tuple[float, float]"
NaturalOf: TypeAlias = "dict[str, frozenset[str]]"
"""Tensor -> its natural set (the tensors pass-through ops tie to it)."""
HistPool: TypeAlias = "Callable[[list[str], float], tuple[float, float] | None]"
"""``hist_pool(members, percentile)``: a pooled-percentile range (Policy.POOLED), or None."""
Span: TypeAlias = "tuple[float, float, float, float]"
"""(grid lo, grid hi, lo, hi) of a Concat input: see :func:`concat_scale_source`."""

__all__ = ["Policy", "Domain", "DomainMap", "build_domains", "concat_scale_source", "grid_spans", "ConcatScaleRule",
           "UnionFind"]


@dataclass(slots=True)  # one per quantized tensor of a big graph: no dict each
class Domain:
    id: int
    members: tuple[str, ...]
    lo: float
    hi: float
    qparams: QParams | None
    fixed: bool = False  # range read from a QDQ file, not calibrated
    user_groups: tuple[int, ...] = ()

    @property
    def scale(self) -> float | None:
        return self.qparams.scale if self.qparams else None

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class DomainMap:
    domains: dict[int, Domain]
    of: dict[str, int]  # tensor -> domain id
    # pass-through-only domain members; a tensor alone in its set may have no entry: .get(t, (t,))
    natural_of: NaturalOf = field(default_factory=dict)
    scheme: Scheme = Scheme.SYMMETRIC_INT8
    # Each tensor's own range before sharing: what bits lost are measured against.
    member_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    concat_rule: ConcatScaleRule = ConcatScaleRule.OWN
    # Concat node -> the input tensor whose scale its output took under ``concat_rule``.
    concat_source: dict[str, str] = field(default_factory=dict)
    # domain id -> the domain whose qparams it took (the export points both at one initializer).
    scale_from: dict[int, int] = field(default_factory=dict)
    # Concats whose output kept its own range because no input's grid holds the others' values
    # (an asymmetric scheme: see concat_scale_source).
    concat_declined: frozenset[str] = frozenset()
    # Concat node -> the inputs whose producers write them at its output's scale (PRODUCERS_WRITE).
    concat_written: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def domain_of(self, tensor: str) -> Domain | None:
        i = self.of.get(tensor)
        return self.domains.get(i) if i is not None else None

    def scale_of(self, tensor: str) -> float | None:
        d = self.domain_of(tensor)
        return d.scale if d else None

    def qparams_of(self, tensor: str) -> QParams | None:
        d = self.domain_of(tensor)
        return d.qparams if d else None

    def qparams_at(self, tensor: str, precision: Precision | None = None) -> QParams | None:
        """What the export quantizes ``tensor`` with at ``precision``: its domain's int8
        parameters, or int16 ones over the same range (int8 and int16 members of one domain
        cover the same values, the int16 ones in 256x finer steps); None in float."""
        if precision is Precision.FLOAT:
            return None
        if precision is Precision.INT16:
            d = self.domain_of(tensor)
            return qparams_for_range(d.lo, d.hi, self.scheme, bits=16) if d else None
        return self.qparams_of(tensor)


def concat_scale_source(rule: ConcatScaleRule, scales: Sequence[float | None],
                        spans: Sequence[Span] | None = None) -> int | None:
    """The position in ``scales`` (a Concat's quantized inputs, in order) of the input whose scale
    the output takes under ``rule``; None when the output keeps its own scale (OWN, PRODUCERS_WRITE).

    WIDEST_INPUT: the input with the largest scale, i.e. the widest range (the first of equals),
    as the Horizon compiler picks it; the others are requantized to it.  On a symmetric grid the
    largest scale holds every other input's values.  On an asymmetric one it need not (a box input
    in [-3.5, 11.9] beside class logits in [-10.6, -1.7]: the wider one's grid ends at 0 and clips
    the other), so ``spans`` (per input: the values its grid can hold and the values it has, as
    ``(grid_lo, grid_hi, lo, hi)``) limits the choice to an input whose grid holds all the others'
    values, within half a step; with none, None: the output keeps its own range, which does.
    """
    if ConcatScaleRule(rule) is not ConcatScaleRule.WIDEST_INPUT:
        return None
    best: int | None = None
    top = 0.0
    for i, s in enumerate(scales):
        if s is not None and s > 0 and (best is None or s > top) \
                and (spans is None or _holds_all(spans, i, s / 2)):
            best, top = i, s
    return best


def _holds_all(spans: Sequence[Span], i: int, tol: float) -> bool:
    glo, ghi = spans[i][0] - tol, spans[i][1] + tol
    return all(glo <= lo and hi <= ghi for _, _, lo, hi in spans if lo == lo)


def grid_spans(scheme: Scheme, members: Iterable[tuple[QParams | None, float, float]]) -> list[Span] | None:
    """``spans`` for :func:`concat_scale_source` from ``(qparams, lo, hi)`` per input; None on the
    symmetric grid, where the largest scale holds every input's values anyway."""
    if scheme is Scheme.SYMMETRIC_INT8:
        return None
    spans = []
    for q, lo, hi in members:
        assert q is not None  # (quantized inputs: each has its parameters)
        spans.append((q.lo, q.hi, lo, hi))
    return spans


def _apply_written_inputs(graph: Graph, domains: dict[int, Domain], of: dict[str, int], natural: NaturalOf,
                          fixed: Mapping[str, Range] | None) -> tuple[dict[str, tuple[str, ...]], dict[int, int]]:
    """PRODUCERS_WRITE: give the inputs :func:`written_inputs` names their Concat output's scale.
    An input whose domain the user grouped, a target rule tied or a file (a QDQ file, a compile
    log) gave a scale keeps it: the rule is only the compiler's default.  A Concat whose output is
    (or reaches through pass-through ops) a model output is left alone: the export may keep it in
    float, its inputs at their own scales, and no compile log shows such a Concat.  Returns
    (Concat -> the inputs written at its scale, domain -> the domain it took its qparams from)."""
    written: dict[str, tuple[str, ...]] = {}
    scale_from: dict[int, int] = {}
    feeding = None
    for node in graph.concat_nodes():
        did = of.get(node.outputs[0])
        if did is None or domains[did].qparams is None:
            continue
        if feeding is None:  # one walk up from the outputs, not one down from each Concat
            feeding = set(pass_through_walk(graph, graph.outputs, upstream=True))
        if node.outputs[0] in feeding:
            continue
        d, mine = domains[did], list[str]()
        for t in written_inputs(graph, node):
            sid = of.get(t)
            if sid is None or sid == did:
                continue
            s = domains[sid]
            if s.user_groups or len(s.members) != len(natural.get(t, (t,))) \
                    or (fixed and any(m in fixed for m in s.members)):
                continue
            s.lo, s.hi, s.qparams = d.lo, d.hi, d.qparams
            scale_from[sid] = scale_from.get(did, did)
            mine.append(t)
        if mine:
            written[node.name] = tuple(mine)
    return written, scale_from


def _apply_concat_rule(graph: Graph, domains: dict[int, Domain], of: dict[str, int], natural: NaturalOf,
                       rule: ConcatScaleRule, scheme: Scheme = Scheme.SYMMETRIC_INT8
                       ) -> tuple[dict[str, str], dict[int, int], frozenset[str]]:
    """Give each Concat output its rule's input scale, in graph order (a Concat feeding a Concat
    passes its chosen scale on).  An output grouped by the user, tied by a target rule or read
    from a QDQ file keeps that scale: the rule is only the compiler's default.  Returns (Concat ->
    source input, domain -> the domain it took its qparams from, the Concats left their own range
    because no input's grid holds the others')."""
    sources: dict[str, str] = {}
    scale_from: dict[int, int] = {}
    declined: set[str] = set()
    if ConcatScaleRule(rule) is not ConcatScaleRule.WIDEST_INPUT:
        return sources, scale_from, frozenset()
    for node in graph.concat_nodes():
        out = node.outputs[0]
        did = of.get(out)
        if did is None:
            continue
        d = domains[did]
        if d.fixed or d.user_groups or len(d.members) != len(natural.get(out, (out,))):
            continue
        ins = [t for t in dict.fromkeys(node.inputs) if t and graph.is_quantized(t) and t in of
               and of[t] != did and domains[of[t]].qparams is not None]
        cands = [domains[of[t]] for t in ins]
        k = concat_scale_source(rule, [c.scale for c in cands], grid_spans(scheme, [(c.qparams, c.lo, c.hi)
                                                                                   for c in cands]))
        if k is None:
            if cands:
                declined.add(node.name)
            continue
        src = domains[of[ins[k]]]
        d.lo, d.hi, d.qparams = src.lo, src.hi, src.qparams
        sources[node.name] = ins[k]
        scale_from[did] = scale_from.get(src.id, src.id)
    return sources, scale_from, frozenset(declined)


K = TypeVar("K", bound=Hashable)


class _Sets(Generic[K]):
    """Union-find over tensor names (or domain ids: auto-share's trial merges).  A name never united
    is a set of its own and costs nothing: most tensors of a graph are (one observer, no
    pass-through chain)."""

    __slots__ = ("parent", "merges")

    def __init__(self) -> None:
        self.parent: dict[K, K] = {}
        self.merges = 0  # unions that joined two sets

    def find(self, x: K) -> K:
        parent = self.parent
        root = x
        while (p := parent.get(root, root)) != root:
            root = p
        while x != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: K, b: K) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.merges += 1

    def attach(self, a: K, b: K) -> None:
        """``union(a, b)``, without a find for ``b`` while it is a root (no parent): the natural sets
        meet most pass-through outputs first as the ``b`` of a union."""
        parent = self.parent
        if b in parent:
            self.union(a, b)
            return
        ra = self.find(a) if a in parent else a
        if ra != b:
            parent[b] = ra
            self.merges += 1

    __getitem__ = find  # networkx.utils.UnionFind's spelling, which auto-share used

    def groups(self, names: Iterable[K]) -> list[list[K]]:
        """The sets of ``names``, each in the order of ``names``, ordered by their first member."""
        if not self.parent:
            return [[t] for t in names]
        find, parent = self.find, self.parent
        by_root: dict[K, list[K]] = {}
        for t in names:
            if t in parent:
                r = parent[t]
                if r in parent:  # not a root yet: find, which compresses the path (one step needs no find)
                    r = find(t)
            else:
                r = t
            lst = by_root.get(r)
            if lst is None:
                by_root[r] = [t]
            else:
                lst.append(t)
        return list(by_root.values())


# The one union-find of the project (auto-share's trial merges use it too).
UnionFind = _Sets


def natural_sets(graph: Graph, fixed: Mapping[str, Range] | None) -> _Sets[str]:
    uf: _Sets[str] = _Sets()
    quantized = graph.quantized  # graph.is_quantized, without a call per tensor
    attach = uf.attach
    for node in graph.passing_nodes:
        ins = node.inputs
        if not ins:
            continue
        src = ins[0]
        if src not in quantized:
            continue
        for o in node.outputs:
            if o and o in quantized:
                # A QDQ file may re-quantize after a pass-through op; keep its scales apart then.
                if fixed and o in fixed and src in fixed and fixed[o] != fixed[src]:
                    continue
                attach(src, o)
    return uf


def policy_range(policy: Policy, members: Iterable[str], natural_sets: Mapping[str, Iterable[str]],
                 ranges: Mapping[str, Range], graph: Graph, hist_pool: HistPool | None, percentile: float,
                 scheme: Scheme = Scheme.SYMMETRIC_INT8) -> Range | None:
    have = [m for m in members if m in ranges]
    if not have:
        return None

    def from_concat(m: str) -> bool:  # m's natural set holds a Concat output (directly or via Reshape etc.)
        return any((p := graph.producer(t)) is not None and p.op_type == "Concat"
                   for t in natural_sets.get(m, (m,)))

    if policy is Policy.OUTPUT:
        outs = [m for m in have if from_concat(m)]
        if outs:
            return min(ranges[o][0] for o in outs), max(ranges[o][1] for o in outs)
    if policy is Policy.MAX_INPUT:
        # The largest scale among the members that feed a Concat (not its output, nor a
        # pass-through view of that output, which would just be the union again).
        cands = [m for m in have if not from_concat(m)] or have
        best = max(cands, key=lambda m: range_width(*ranges[m], scheme))
        return ranges[best]
    # A domain of one natural set keeps its observer's own range: pooling is for shared ones.
    if policy is Policy.POOLED and hist_pool is not None and len({natural_sets.get(m, m) for m in have}) > 1:
        r = hist_pool(have, percentile)
        if r is not None:
            return r
    return min(ranges[m][0] for m in have), max(ranges[m][1] for m in have)


def _constant_range(graph: Graph, name: str) -> Range | None:
    """Range of a float constant that a user group pulls into a domain (it is cloned on export)."""
    t = graph.tensors.get(name)
    if t is None or t.kind != TensorKind.WEIGHT or not t.is_float:
        return None
    try:
        v = graph.constant_value(name)
    except Exception:
        return None
    if v is None or not v.size:
        return None
    w = np.asarray(v, dtype=np.float64)
    return float(w.min()), float(w.max())


_new = object.__new__


def _domain(did: int, members: tuple[str, ...], lo: float, hi: float, q: QParams | None, fixed: bool,
            user_groups: tuple[int, ...]) -> "Domain":
    """``Domain(did, members, lo, hi, q, fixed, user_groups)``, its slots filled past the dataclass
    __init__, whose call costs more than what it sets (10,000s of domains)."""
    d = _new(Domain)
    d.id = did
    d.members = members
    d.lo = lo
    d.hi = hi
    d.qparams = q
    d.fixed = fixed
    d.user_groups = user_groups
    return d


def _set_range(members: Sequence[str], fs: frozenset[str], natural: NaturalOf,
               get: Callable[[str], Range | None], member_range: dict[str, Range]) -> tuple[float, float] | None:
    """The finite ranges of a natural set's ``members`` (``get``: tensor -> range) joined, written
    to each member in ``member_range``, and ``fs`` (the set) to each in ``natural``; None when no
    member has a finite range.  min() and max() spelt out, in member order (no generator per set)."""
    isfinite = math.isfinite
    lo: float | None = None
    hi: float | None = None
    for t in members:
        natural[t] = fs
        r = get(t)
        if r is not None:
            a, b = r
            if isfinite(a) and isfinite(b):
                if lo is None or hi is None:
                    lo, hi = a, b
                else:
                    lo = a if a < lo else lo
                    hi = b if b > hi else hi
    if lo is None or hi is None:  # (set together)
        return None
    r = (lo, hi)
    for t in members:
        member_range[t] = r
    return r


def _natural_domains(natural_groups: list[list[str]], src: Mapping[str, Range], scheme: Scheme
                     ) -> tuple[dict[int, Domain], dict[str, int], NaturalOf, dict[str, Range]]:
    """(domains, of, natural_of, member_range) of :func:`build_domains` when nothing but the
    pass-through ops joins tensors (no group, target rule or file range): each natural set is a
    domain, so the sets' ranges and the domains are made in one pass over the sets, not two
    (the dicts get their entries in the same order as there).  A tensor alone in its set gets no
    entry in natural_of (read it with ``.get(t, (t,))``): most tensors are, and a set each costs."""
    natural: NaturalOf = {}
    member_range: dict[str, tuple[float, float]] = {}
    domains: dict[int, Domain] = {}
    of: dict[str, int] = {}
    isfinite = math.isfinite
    get = src.get
    q: QParams | None
    lo: float
    hi: float
    nan = float("nan")
    new = _new
    for did, group in enumerate(natural_groups):
        if len(group) == 1:  # the common case: one observer, no pass-through chain
            t = group[0]
            r = get(t)
            if r is not None and isfinite(lo := r[0]) and isfinite(hi := r[1]):
                member_range[t] = r
                q = qparams_for_range(lo, hi, scheme)
            else:
                q, lo, hi = None, nan, nan
            members: tuple[str, ...] = (t,)
            of[t] = did
        else:
            r = _set_range(group, frozenset(group), natural, get, member_range)
            if r is not None:
                lo, hi = r
                q = qparams_for_range(lo, hi, scheme)
            else:
                q, lo, hi = None, nan, nan
            members = tuple(group)
            for t in members:
                of[t] = did
        # _domain(did, members, lo, hi, q, False, ()) spelt out: one call fewer per domain
        d = domains[did] = new(Domain)
        d.id = did
        d.members = members
        d.lo = lo
        d.hi = hi
        d.qparams = q
        d.fixed = False
        d.user_groups = ()
    return domains, of, natural, member_range


@gc_paused
def build_domains(graph: Graph, ranges: Mapping[str, tuple[float, float]], groups: Iterable[Sequence[str]] = (), *,
                  policy: Policy = Policy.UNION, scheme: Scheme = Scheme.SYMMETRIC_INT8,
                  fixed: Mapping[str, tuple[float, float]] | None = None,
                  target_rules: Iterable[Sequence[str]] = (), hist_pool: HistPool | None = None,
                  percentile: float = DEFAULT_PERCENTILE,
                  concat_rule: ConcatScaleRule = ConcatScaleRule.OWN) -> DomainMap:
    """Build the scale domains.

    ``ranges`` maps observed tensors to their calibrated (lo, hi).  ``groups`` is an
    iterable of tensor-name collections the user tied together.  ``fixed`` gives
    ranges read from a QDQ file; those keep their file scale unless a group joins them.
    ``hist_pool(members, pct)`` returns a pooled-percentile range (Policy.POOLED).
    ``concat_rule`` is the target's Concat scale rule (its march profile).
    """
    uf = natural_sets(graph, fixed)
    natural: NaturalOf = {}
    natural_groups = uf.groups(graph.quantized_tensors)
    natural_merges = uf.merges
    # A member's own range is the union over its natural set (pass-through chain); a file's
    # ranges win over calibrated ones.  Worked out in the same pass that makes the sets.
    src = ranges if not fixed else {**ranges, **fixed}
    if not fixed and not groups and not target_rules:
        nd, nof, nnat, nmr = _natural_domains(natural_groups, src, scheme)
        return _ruled_map(graph, nd, nof, nnat, scheme, nmr, concat_rule, fixed)
    isfinite = math.isfinite
    member_range: dict[str, tuple[float, float]] = {}
    get = src.get
    for members in natural_groups:
        fs = frozenset(members)
        if len(members) == 1:  # the common case: one observer, no pass-through chain
            t = members[0]
            natural[t] = fs
            r = get(t)
            if r is not None and isfinite(r[0]) and isfinite(r[1]):
                member_range[t] = r
            continue
        _set_range(members, fs, natural, get, member_range)
    const_ranges: dict[str, tuple[float, float]] = {}
    for given in groups:  # constants can join a domain (DESIGN §3), as sets of their own
        for m in given:
            if m not in natural and (r := _constant_range(graph, m)) is not None:
                natural[m] = frozenset((m,))
                const_ranges[m] = r
                if fixed and m in fixed:
                    r = fixed[m]
                if isfinite(r[0]) and isfinite(r[1]):
                    member_range[m] = r
    group_of: dict[str, list[int]] = {}
    for gi, given in enumerate(groups):
        joined = [m for m in given if m in natural]
        for m in joined:
            group_of.setdefault(m, []).append(gi)
        for a, b in zip(joined, joined[1:]):
            uf.union(a, b)
    for given in target_rules:
        joined = [m for m in given if m in natural]
        for a, b in zip(joined, joined[1:]):
            uf.union(a, b)

    domains: dict[int, Domain] = {}
    of: dict[str, int] = {}
    # Domain ids follow the first member in graph order, so they are stable across runs.
    if not const_ranges and uf.merges == natural_merges:
        sets_in_order = natural_groups  # no group joined anything: the domains are the natural sets
    else:
        order = graph.quantized_tensors if not const_ranges else [t for t in graph.tensors if t in natural]
        sets_in_order = uf.groups(order)
    nan = float("nan")
    any_fixed = bool(fixed)
    own_range = member_range.get
    q: QParams | None
    for did, members in enumerate(sets_in_order):
        first = members[0]
        if len(members) == 1:  # one member: it is its own natural set, with that set's own range
            r = own_range(first)
            if r is not None:
                q = qparams_for_range(r[0], r[1], scheme)
                lo, hi = r
            else:
                q, lo, hi = None, nan, nan
            domains[did] = _domain(did, (first,), lo, hi, q, any_fixed,
                                   tuple(sorted(set(group_of[first]))) if first in group_of else ())
            of[first] = did
            continue
        nat0 = natural[first]
        is_fixed = any_fixed and fixed is not None and all(m in fixed or natural[m] == nat0 for m in members) \
            and len({natural[m] for m in members}) == 1
        if len(members) == len(nat0) and not fixed:
            r = member_range.get(first)
        else:
            r = policy_range(policy, members, natural, member_range, graph, hist_pool, percentile, scheme)
        q = qparams_for_range(r[0], r[1], scheme) if r is not None else None
        gids = tuple(sorted({g for m in members for g in group_of.get(m, ())})) if group_of else ()
        lo, hi = r if r is not None else (nan, nan)
        domains[did] = Domain(did, tuple(members), lo, hi, q, fixed=is_fixed, user_groups=gids)
        for m in members:
            of[m] = did
    return _ruled_map(graph, domains, of, natural, scheme, member_range, concat_rule, fixed)


def _ruled_map(graph: Graph, domains: dict[int, Domain], of: dict[str, int], natural: NaturalOf, scheme: Scheme,
               member_range: dict[str, Range], concat_rule: ConcatScaleRule,
               fixed: Mapping[str, Range] | None) -> DomainMap:
    """The domain map once the target's Concat rule has acted on the domains."""
    rule = ConcatScaleRule(concat_rule)
    if rule is ConcatScaleRule.PRODUCERS_WRITE:
        written, scale_from = _apply_written_inputs(graph, domains, of, natural, fixed)
        return DomainMap(domains, of, natural, scheme, member_range, rule, {}, scale_from, frozenset(), written)
    sources, scale_from, declined = _apply_concat_rule(graph, domains, of, natural, rule, scheme)
    return DomainMap(domains, of, natural, scheme, member_range, rule, sources, scale_from, declined)
