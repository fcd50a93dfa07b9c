"""A sharing plan as a PT2E quantizer: the declaration backends leave out for Concat.

PT2E (``torch.export`` -> a :class:`Quantizer` annotates the graph -> ``prepare_pt2e`` /
``prepare_qat_pt2e`` -> ``convert_pt2e``, in ``torchao.quantization.pt2e``) declares observer
sharing with :class:`SharedQuantizationSpec`.  Many quantizers give each branch feeding a cat
its own observer (or share the cat's inputs with its first input only), so the exported model
requantizes at the Concat.  :class:`PlanQuantizer` wraps any quantizer: the base annotates,
then every member of each plan group, the cats the group feeds (inputs and output) and the
plan's Concat outputs are made to share ONE anchor: the first member's output.

Plan names are mapped to graph nodes by the FX bridge's resolver (module path through
``nn_module_stack``, FX node name, aliases...), with the same Concat-by-structure rule.

Unmapped members: the group is still shared among the members that map, the report
(:attr:`PlanQuantizer.report`) lists each unmapped name with the reason, and a
:class:`~qtquant.base.errors.PlanWarning` is issued; ``strict=True`` raises
:class:`~qtquant.base.errors.PlanError` before any annotation is changed.
"""

from __future__ import annotations

import warnings

import torch
from torchao.quantization.pt2e.quantizer import (
    FixedQParamsQuantizationSpec,
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
    SharedQuantizationSpec,
)

from ..base.errors import PlanError, PlanWarning
from ._plan import read_plan
from ._resolve import CAT_TARGETS, Resolver
from .apply import ApplyReport, GroupResult, TiedMember, precision_note, resolve_sites

__all__ = ["PlanQuantizer"]

_KEY = "quantization_annotation"  # the node.meta key every PT2E quantizer writes


def _annotation(n) -> QuantizationAnnotation | None:
    return n.meta.get(_KEY)


def _output_spec(n):
    a = _annotation(n)
    return a.output_qspec if a is not None else None


def _spec_key(spec) -> tuple:
    return (spec.dtype, spec.qscheme, spec.quant_min, spec.quant_max)


def _cat_inputs(c) -> list:
    ts = c.args[0] if c.args else c.kwargs.get("tensors", [])
    return [t for t in ts if isinstance(t, torch.fx.Node)]


class PlanQuantizer(Quantizer):
    """Wrap ``base_quantizer`` so each group of ``plan`` shares one observer / fake-quant.

    ``plan``: a :class:`qtquant.files.plan.Plan`, a dict or a path to the JSON ``qtquant fix
    --plan-out`` writes.  ``aliases`` maps plan names (ONNX tensor or node names) to FX node
    names or module paths, for names that do not map by themselves.  ``strict=True`` raises
    :class:`PlanError` if any member is unmapped; otherwise a :class:`PlanWarning` is issued
    and :attr:`report` lists them.
    """

    def __init__(self, base_quantizer, plan, *, aliases: dict | None = None, strict: bool = False):
        super().__init__()
        self.base = base_quantizer
        self.plan = read_plan(plan)
        self.aliases = dict(aliases or {})
        self.strict = strict
        self.report: ApplyReport | None = None  # set by annotate()

    # -- the Quantizer interface: the base does everything but the plan's sharing -----------
    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return self.base.transform_for_annotation(model)

    def validate(self, model: torch.fx.GraphModule) -> None:
        self.base.validate(model)

    def prepare_obs_or_fq_callback(self, model, edge_or_node_to_obs_or_fq) -> None:
        cb = getattr(self.base, "prepare_obs_or_fq_callback", None)
        if cb is not None:
            cb(model, edge_or_node_to_obs_or_fq)

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        model = self.base.annotate(model) or model
        res = Resolver(model, self.aliases)
        quantized = lambda n: _output_spec(n) is not None or n.target in CAT_TARGETS  # noqa: E731
        resolved = [(g, *resolve_sites(res, g, quantized)) for g in self.plan.groups]
        report = ApplyReport(groups=[], unmapped=[u for _, _, bad, _ in resolved for u in bad])
        if (note := precision_note(self.plan)) is not None:
            report.notes.append(note)
        if self.strict and report.unmapped:
            u = report.unmapped[0]
            raise PlanError(f"{len(report.unmapped)} plan member(s) do not map to the exported graph, e.g. "
                            f"{u.tensor!r}: {u.reason}")
        for g, sites, bad, cats in resolved:
            report.groups.append(self._share(g, sites, bad, cats))
        self.report = report
        if report.unmapped:
            u = report.unmapped[0]
            warnings.warn(PlanWarning(
                f"{len(report.unmapped)} plan member(s) do not map to the exported graph and keep the base "
                f"quantizer's annotation, e.g. {u.tensor!r}: {u.reason} (see PlanQuantizer.report)"), stacklevel=2)
        return model

    # -- one group --------------------------------------------------------------------------
    def _share(self, g, sites, bad, cats) -> GroupResult:
        gr = GroupResult(g.id, "skipped", None, concats=list(g.concats))
        nodes, members = [], []
        for tensor, site in sites:
            n = site.node
            if n is not None and n not in nodes:
                nodes.append(n)
                members.append(TiedMember(tensor, site.label, "", site.via))
        for c in cats:
            if c not in nodes:
                nodes.append(c)
                members.append(TiedMember(f"<output of {c.name}>", c.name, "", "Concat fed by the group"))
        gr.members = members
        if len(nodes) < 2:
            gr.notes.append(f"only {len(nodes)} member(s) mapped: nothing to share")
            return gr
        specs = [_output_spec(n) for n in nodes]
        specs += [s for c in nodes if c.target in CAT_TARGETS and (ca := _annotation(c)) is not None
                  for s in ca.input_qspec_map.values()]
        if any(isinstance(s, FixedQParamsQuantizationSpec) for s in specs):
            gr.status = "refused"
            gr.notes.append("not shared: a member has fixed qparams (sigmoid/tanh-style output): its scale is set "
                            "by the op")
            return gr
        concrete = [s for s in specs if isinstance(s, QuantizationSpec)]
        if not concrete:
            gr.notes.append("not shared: the base quantizer quantizes none of the members")
            return gr
        if len({_spec_key(s) for s in concrete}) > 1:
            gr.status = "refused"
            gr.notes.append("not shared: the base quantizer gives the members different dtypes, qschemes or "
                            "quant ranges")
            return gr
        anchor = next((n for n in nodes if isinstance(_output_spec(n), QuantizationSpec)), nodes[0])
        self._set_output(anchor, _output_spec(anchor) if isinstance(_output_spec(anchor), QuantizationSpec)
                         else concrete[0])
        shared = SharedQuantizationSpec(anchor)
        for n in nodes:
            if n is not anchor:
                self._set_output(n, shared)
            if n.target in CAT_TARGETS:
                a = _annotation(n)
                assert a is not None  # (_set_output annotated it just above)
                for t in _cat_inputs(n):
                    # every input edge of the cat observes with the anchor, so no requantize is inserted
                    a.input_qspec_map[t] = SharedQuantizationSpec(anchor)
        gr.status = "partial" if bad else "tied"
        gr.shared = anchor.name
        for m in members:
            m.observer = f"output of {anchor.name}"
        return gr

    @staticmethod
    def _set_output(n, spec) -> None:
        a = _annotation(n)
        if a is None:
            n.meta[_KEY] = a = QuantizationAnnotation(_annotated=True)
        a.output_qspec = spec
        a._annotated = True
