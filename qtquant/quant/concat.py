"""Concat analysis: per-input scales, mismatch ratio, rescales and bits lost (DESIGN §3).

Two cases beyond "compare each input with the output":
- **Per-channel inputs** (a QDQ file may quantize an activation per channel): such an input
  matches only when every channel's scale and zero point equal the reference's.  The worst
  channel ratio (max over channels of the larger scale over the smaller) is kept.
- **Float output** (the file has no Q/DQ after the Concat, but its inputs are quantized):
  the file gives no output scale to compare with, so the reference is the input with the
  largest scale (the first of equals), the scale a compiler that takes an input's would give
  (the X5 compiler calibrates the output itself, which such a file does not record); every
  input whose scale differs from it counts as a rescale, and the Concat gets a note saying so.

Under a target whose rule is :attr:`ConcatScaleRule.WIDEST_INPUT` the domain map already gave
the output its widest input's scale (:func:`~qtquant.quant.domains.concat_scale_source`);
:attr:`ConcatInfo.reference_input` names that input.  Under :attr:`ConcatScaleRule.PRODUCERS_WRITE`
(RDK X5) the output keeps its own scale and the domain map gave it to the inputs their producers
write at it (:mod:`qtquant.quant.concatwrite`); :attr:`ConcatInfo.written` names them.
:meth:`ConcatInfo.rescale_nodes` lists the requantize nodes the compiler inserts, under its own names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, cast

from .domains import concat_scale_source, grid_spans
from ..base.gcpause import gc_paused
from .outputs import pass_through_walk
from ..model.qdq import channel_scales_of, has_channel_scales
from ..model.scales import bits_lost, scales_differ
from ..base.vocab import ConcatScaleRule, TensorKind

if TYPE_CHECKING:
    from ..model.graphitems import Node
    from ..model.graphmodel import Graph
    from ..model.qdq import ChannelScales
    from .domains import Domain, DomainMap

__all__ = ["ConcatMember", "ConcatInfo", "analyze_concats", "concat_members", "rescale_node_names"]


def rescale_node_names(concat: str, tensor: str, index: int) -> tuple[str, str]:
    """The names compilers give the rescale of input ``index`` (``tensor``) of Concat ``concat``:
    the X5 hb_mapper log's ``<tensor>_calibrated_Requantize`` and perf_model's ``<concat>_rescale_<i>``."""
    return f"{tensor}_calibrated_Requantize", f"{concat}_rescale_{index}"


def concat_members(graph: Graph, node: Node | str, notes: list[str] | None = None) -> list[str]:
    """The tensors a Concat's group holds: its quantized, non-constant inputs and its output.

    ``node`` is a Node or a node name.  Constant inputs stay out: they are requantized offline to
    the output scale, so they need no observer and cost no runtime op.  With ``notes`` given, an
    input left out because it is not quantized is said there.
    """
    if isinstance(node, str):
        node = graph.nodes[node]
    members: list[str] = []
    for i, t in enumerate(node.inputs):
        if not t or t not in graph.tensors or graph.tensors[t].kind == TensorKind.WEIGHT:
            continue
        if not graph.is_quantized(t):
            if notes is not None:
                notes.append(f"input {i} ({t}) is not quantized and stays out of the group")
            continue
        members.append(t)
    members += [t for t in node.outputs[:1] if t and graph.is_quantized(t)]
    return list(dict.fromkeys(members))


@dataclass(slots=True)  # 10,000s on a big graph: no dict each
class ConcatMember:
    tensor: str
    index: int  # input index, or -1 for the output
    producer: str | None
    domain: int | None
    scale: float | None  # per-channel members: the widest channel
    zero_point: int | None
    lo: float
    hi: float
    bits_lost_if_shared: float  # against the merged range of this Concat's inputs and output
    bits_lost_now: float  # against the member's current domain (0 unless grouped)
    needs_rescale: bool = False
    constant: bool = False
    other_consumers: int = 0  # consumers other than this Concat: they see the shared scale too
    channel_scales: tuple[float, ...] | None = None  # per-channel quantization read from the file
    channel_zero_points: tuple[int, ...] | None = None
    channel_axis: int | None = None
    worst_channel_ratio: float | None = None  # per-channel members, against the reference scale

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def per_channel(self) -> bool:
        return self.channel_scales is not None


@dataclass(slots=True)
class ConcatInfo:
    node: str
    axis: int
    inputs: list[ConcatMember]
    output: ConcatMember
    ratio: float
    rescales: int
    feeds_output: bool = False
    notes: list[str] = field(default_factory=list)
    output_float: bool = False  # output left unquantized while inputs are quantized
    # The export leaves the output in float (outputs.export_float_tensors): the inputs keep their
    # own scales and the Concat runs in float, so no input is rescaled.
    export_float: bool = False
    # The input whose scale the output takes: by the target's rule, or (output_float) would take.
    reference_input: int | None = None
    rule_note: str = ""  # how the target's rule chose the output scale (empty: its own scale)
    # The inputs (indices) their producers write at the output's scale under the target's rule.
    written: tuple[int, ...] = ()

    @property
    def mismatched(self) -> bool:
        return self.rescales > 0

    @property
    def rescale_inputs(self) -> list[int]:
        return [m.index for m in self.inputs if m.needs_rescale]

    @property
    def worst_channel_ratio(self) -> float | None:
        rs = [m.worst_channel_ratio for m in self.inputs if m.worst_channel_ratio is not None]
        return max(rs) if rs else None

    def members(self) -> list[ConcatMember]:
        return [*self.inputs, self.output]

    def rescale_nodes(self) -> list[tuple[str, str]]:
        """Per input that needs a rescale: (X5 name, perf_model name), see :func:`rescale_node_names`."""
        return [rescale_node_names(self.node, m.tensor, m.index) for m in self.inputs if m.needs_rescale]


Members: TypeAlias = "tuple[list[ConcatMember], list[ConcatMember], list[str], list[float]]"
"""(members, live, notes, scales) of one Concat: see :func:`_members_maker`."""


def _members_maker(graph: Graph, dm: DomainMap, channels: bool) -> Callable[[Node], Members]:
    """``members_of(node)``: ``(members, live, notes, scales)`` of one Concat, with the graph's and
    the domain map's tables bound once (a big graph makes 10,000s of members).

    ``members``: the :class:`ConcatMember` of each input in the graph, in input order, then the
    output's; ``live``: the inputs a rescale can concern (quantized, not constant); ``notes``: why
    the other non-constant inputs are not; ``scales``: the positive scales of the live inputs and
    the output (per channel where the file has them), for the mismatch ratio.  ``channels``: the
    graph carries per-channel scales read from a QDQ file."""
    tensors, of, domains, member_range, scheme = graph.tensors, dm.of, dm.domains, dm.member_range, dm.scheme
    weight = TensorKind.WEIGHT
    new = object.__new__
    no_range = _NO_RANGE

    def members_of(node: Node) -> Members:
        name, ins = node.name, node.inputs
        last = len(ins)
        # One loop makes every member (no call each) and the merged range of the inputs and the
        # output (what sharing one scale would give them) as it reads their own ranges.
        members: list[ConcatMember] = []
        live: list[ConcatMember] = []
        notes: list[str] = []
        scales: list[float] = []
        lo: float | None = None
        hi: float | None = None
        index = -1
        for tensor in (*ins, node.outputs[0]):  # the index counted, not enumerated: no tuple a member
            index += 1
            if index == last:
                index = -1  # the output
            elif not tensor or tensor not in tensors:
                continue
            did = of.get(tensor)
            d = domains.get(did) if did is not None else None  # dm.domain_of, spelt out
            own = member_range.get(tensor, no_range)
            mlo, mhi = own
            if own is not no_range:  # min() and max() spelt out (see quant.bits_lost)
                lo = mlo if lo is None or mlo < lo else lo
                hi = mhi if hi is None or mhi > hi else hi
            t = tensors[tensor]
            if d is not None:
                q = d.qparams
                dlo, dhi = d.lo, d.hi
                # Sharing nothing beyond its own range loses nothing: bits_lost(r, r) is 0 for any r.
                now = bits_lost(own, (dlo, dhi), scheme) \
                    if (dlo != mlo or dhi != mhi) and mlo == mlo and dlo == dlo else 0.0
                scale: float | None = q.scale if q is not None else None
                zp: int | None = q.zero_point if q is not None else None
                domain: int | None = d.id
            else:
                scale = zp = domain = None
                q, now = None, 0.0
            consumers = t.consumers
            # ConcatMember(tensor, index, t.producer, domain, scale, zp, lo, hi, shared, now, False,
            # constant, others, ...), its slots filled past the dataclass __init__, whose call costs
            # more than what it sets (10,000s of members); bits_lost_if_shared once the merged
            # range is known, below.
            m = new(ConcatMember)
            m.tensor = tensor
            m.index = index
            m.producer = t.producer
            m.domain = domain
            m.scale = scale
            m.zero_point = zp
            m.lo = mlo
            m.hi = mhi
            m.bits_lost_now = now
            m.needs_rescale = False
            m.constant = constant = t.kind == weight
            m.other_consumers = len(consumers) - consumers.count(name)
            m.worst_channel_ratio = None
            cs = _file_channels(graph, dm, tensor, d) if channels else None
            if cs is not None and q is not None:
                m.channel_scales, m.channel_zero_points, m.channel_axis = cs.scales, cs.zero_points, cs.axis
            else:
                m.channel_scales = m.channel_zero_points = m.channel_axis = None
            members.append(m)
            if index >= 0:
                if constant:
                    # Constants are requantized offline to the output scale: no runtime op.
                    continue
                if scale is None:
                    notes.append(f"input {index} ({tensor}) is not quantized")
                    continue
                live.append(m)
            if m.channel_scales is not None:
                scales.extend([s for s in m.channel_scales if s > 0])
            elif scale and scale > 0:
                scales.append(scale)
        if lo is None or hi is None:  # (set together)
            for m in members:
                m.bits_lost_if_shared = 0.0
        else:
            merged = (lo, hi)
            for m in members:
                mlo, mhi = m.lo, m.hi
                # bits_lost(r, r) is 0 (see bits_lost_now above): the widest member needs no call
                m.bits_lost_if_shared = bits_lost((mlo, mhi), merged, scheme) \
                    if mlo == mlo and (mlo != lo or mhi != hi) else 0.0
        return members, live, notes, scales

    return members_of


_NO_RANGE = (float("nan"), float("nan"))


def _file_channels(graph: Graph, dm: DomainMap, tensor: str, d: Domain | None) -> ChannelScales | None:
    """The file's per-channel scales for this tensor, while its domain is still the file's own.

    A user group gives its members one shared per-tensor scale, so the file's channels no
    longer apply once the tensor is grouped with anything outside its pass-through chain.
    """
    if d is None or d.user_groups:
        return None
    chain = dm.natural_of.get(tensor, frozenset((tensor,)))
    if set(d.members) - chain:
        return None
    cs = channel_scales_of(graph, tensor)
    if cs is not None:
        return cs
    # The Q/DQ may sit before a Reshape or a MaxPool that passes the scale on.
    found = [c for t in chain if (c := channel_scales_of(graph, t)) is not None]
    return found[0] if len(found) == 1 else None


def _ratio(a: float, b: float) -> float:
    return max(a, b) / min(a, b) if min(a, b) > 0 else float("inf")


def _compare(m: ConcatMember, ref_scale: float, ref_zp: int | None) -> bool:
    """True when ``m`` needs a rescale to ``ref_scale``; sets the worst channel ratio."""
    if m.channel_scales is None:
        return scales_differ(_scale(m), ref_scale) or (ref_zp is not None and m.zero_point != ref_zp)
    m.worst_channel_ratio = max(_ratio(s, ref_scale) for s in m.channel_scales)
    return any(scales_differ(s, ref_scale) for s in m.channel_scales) \
        or (ref_zp is not None and any(z != ref_zp for z in m.channel_zero_points or ()))


def _scale(m: ConcatMember) -> float:
    """The scale of a member a rescale can concern (quantized: it has one)."""
    return cast(float, m.scale)


def _compare_channels(m: ConcatMember, out: ConcatMember, offset: int | None, width: int | None) -> bool:
    """An output quantized per channel: compare with the output channels this input fills
    (on the Concat axis), or channel by channel when both span the same channels."""
    # (the output is quantized per channel: both are set)
    outs: tuple[float, ...] = out.channel_scales or ()
    outz: tuple[int | None, ...] = out.channel_zero_points or ()
    if offset is not None and width is not None and offset + width <= len(outs):
        outs, outz = outs[offset:offset + width], outz[offset:offset + width]
    mine = m.channel_scales or (_scale(m),) * len(outs)
    minez = m.channel_zero_points or (m.zero_point,) * len(outs)
    if len(mine) != len(outs):
        # Channel counts that cannot be lined up: matching needs one scale on both sides.
        ref = outs[0]
        differ = len(set(outs)) > 1 or len(set(outz)) > 1
        return _compare(m, ref, outz[0]) or differ
    pairs = list(zip(mine, outs))
    if m.channel_scales is not None or len(set(outs)) > 1:
        m.worst_channel_ratio = max(_ratio(a, b) for a, b in pairs)
    return any(scales_differ(a, b) for a, b in pairs) or any(a != b for a, b in zip(minez, outz))


def _same_axis(graph: Graph, tensor: str, a: int | None, b: int) -> bool:
    shape = graph.tensors[tensor].shape
    if a is None:
        return False
    if a == b:
        return True
    return shape is not None and len(shape) > 0 and a % len(shape) == b % len(shape)


def _channel_width(graph: Graph, tensor: str, axis: int) -> int | None:
    shape = graph.tensors[tensor].shape
    if not shape:
        return None
    try:
        d = shape[axis]
    except IndexError:
        return None
    return d if isinstance(d, int) and d > 0 else None


@gc_paused
def analyze_concats(graph: Graph, dm: DomainMap, float_tensors: Collection[str] = frozenset()) -> list[ConcatInfo]:
    """One :class:`ConcatInfo` per Concat whose output is a quantized activation.

    ``float_tensors``: what the export leaves in float (:func:`qtquant.quant.outputs.export_float_tensors`);
    a Concat whose output is one needs no rescale."""
    infos: list[ConcatInfo] = []
    new = object.__new__
    channels = has_channel_scales(graph)
    concat_source = dm.concat_source  # empty under ConcatScaleRule.OWN
    members_of = _members_maker(graph, dm, channels)
    # What output_reached(graph, t) is not None says, for every t at once: one walk up from the
    # outputs instead of one walk down from each Concat.
    feeding = set(pass_through_walk(graph, graph.outputs, upstream=True))
    nodes = graph.concat_nodes()
    axes = list(map(graph.concat_axis, nodes))
    for node, axis in zip(nodes, axes):
        out, name = node.outputs[0], node.name
        members, live, notes, scales = members_of(node)
        out_m = members.pop()
        rule_note = ""
        written: tuple[int, ...] = ()
        # A file that already leaves the output in float keeps DESIGN §3's comparison below.
        export_float = out in float_tensors and bool(live) and out_m.scale is not None
        output_float = out_m.scale is None and bool(live)
        reference: ConcatMember | None = None
        if export_float:
            notes.append("the export leaves its output in float: its inputs keep their own scales and it runs "
                         "in float, so none is rescaled")
        elif output_float:
            # What a compiler that gives the output an input's scale would do (on an asymmetric grid,
            # an input whose grid holds the others' values): the file records no output scale.
            spans = grid_spans(dm.scheme, [(dm.domains[cast(int, m.domain)].qparams, m.lo, m.hi) for m in live])
            k = concat_scale_source(ConcatScaleRule.WIDEST_INPUT, [m.scale for m in live], spans)
            reference = live[k or 0]
            for m in live:
                m.needs_rescale = _compare(m, _scale(reference), reference.zero_point)
            n = sum(m.needs_rescale for m in live)
            if n:
                notes.append(f"output is not quantized in the file; its inputs are compared with input "
                             f"{reference.index} ({reference.tensor}, the widest, scale {reference.scale:.4g}), "
                             f"whose scale a compiler would give the output: {n} of {len(live)} need a rescale")
            else:
                notes.append(f"output is not quantized in the file; its inputs share one scale "
                             f"({reference.scale:.4g}), which a compiler would give the output: no rescale")
        elif out_m.scale is not None:
            src = concat_source.get(name) if concat_source else None
            reference = next((m for m in live if m.tensor == src), None) if src else None
            if reference is not None:
                rule_note = (f"output takes the scale of input {reference.index} ({reference.tensor}, the widest, "
                             f"scale {reference.scale:.4g}) by the target's Concat rule ({dm.concat_rule})")
            elif name in dm.concat_written:
                mine = dm.concat_written[name]
                written = tuple(m.index for m in live if m.tensor in mine)
                rule_note = (f"input{'s' if len(written) > 1 else ''} {', '.join(map(str, written))} written at the "
                             f"output's own scale by {'their producers' if len(written) > 1 else 'its producer'}, "
                             f"computed for this Concat alone: no rescale by the target's Concat rule "
                             f"({dm.concat_rule})")
            elif name in dm.concat_declined:
                rule_note = (f"output keeps its own range: on the {dm.scheme.value} grid no input's range holds all "
                             f"the others' values, so the target's Concat rule ({dm.concat_rule}) would clip them")
            if out_m.channel_scales is None:
                ref_scale, ref_zp = out_m.scale, out_m.zero_point
                for m in live:
                    # _compare, spelt out for the per-tensor members (all but a QDQ file's per-channel ones)
                    m.needs_rescale = _compare(m, ref_scale, ref_zp) if m.channel_scales is not None else \
                        scales_differ(_scale(m), ref_scale) or (ref_zp is not None and m.zero_point != ref_zp)
            else:
                by_index = {m.index: m for m in live}
                split = _same_axis(graph, out, out_m.channel_axis, axis)
                offset: int | None = 0
                for i, t in enumerate(node.inputs):
                    width = _channel_width(graph, t, axis) if t in graph.tensors else None
                    filled = by_index.get(i)
                    if filled is not None:
                        filled.needs_rescale = _compare_channels(filled, out_m, offset if split else None, width)
                    offset = offset + width if offset is not None and width is not None else None
        rescales = 0  # the inputs that need a rescale (only live ones can)
        for m in live:
            rescales += m.needs_rescale
        ratio = max(scales) / min(scales) if scales else 1.0
        # ConcatInfo(name, axis, members, out_m, ratio, rescales, out in feeding, notes,
        # output_float, export_float, reference index, rule_note), filled past its __init__ (see members_of)
        info = new(ConcatInfo)
        info.node = name
        info.axis = axis
        info.inputs = members
        info.output = out_m
        info.ratio = ratio
        info.rescales = rescales
        info.feeds_output = out in feeding
        info.notes = notes
        info.output_float = output_float
        info.export_float = export_float
        info.reference_input = reference.index if reference is not None else None
        info.rule_note = rule_note
        info.written = written
        infos.append(info)
    return infos
