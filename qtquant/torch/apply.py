"""Apply a qtquant sharing plan to a torch.ao QAT/PTQ model: one observer per group.

Both conventions are handled: FX (``prepare_qat_fx``/``prepare_fx``: ``activation_post_process_N``
modules called after each producer node) and eager mode (``prepare_qat``, Horizon's plugin:
a module's own ``activation_post_process`` attribute).  Tying means pointing every member's
observer attribute at one instance, exactly what torch.ao FX itself does for the inputs of a
``torch.cat`` (ObservationType.OUTPUT_SHARE_OBSERVER_WITH_INPUT); convert_fx then reads one
scale for all of them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from ..base.errors import PlanError
from ._plan import read_plan
from ._resolve import CAT_TARGETS, Resolver, Site, Unmappable, is_pt2e, op_name, settled

__all__ = ["TiedMember", "Unmapped", "GroupResult", "ApplyReport", "UnionUpdates", "apply_plan", "check_shared",
           "resolve_sites", "precision_note"]


@dataclass
class TiedMember:
    tensor: str
    target: str  # module path or FX node name that produces the tensor
    observer: str  # attribute path of its activation_post_process
    via: str  # how the plan name was mapped


@dataclass
class Unmapped:
    group: int
    tensor: str
    producer: str | None
    reason: str


@dataclass
class GroupResult:
    id: int
    status: str  # "tied" | "already-shared" | "partial" (some members unmapped) | "refused" | "skipped"
    shared: str | None  # attribute path of the one instance every member now uses
    members: list[TiedMember] = field(default_factory=list)
    concats: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class ApplyReport:
    groups: list[GroupResult]
    unmapped: list[Unmapped]
    notes: list[str] = field(default_factory=list)

    @property
    def tied(self) -> int:
        """Observer attributes re-pointed at a shared instance."""
        return sum(len(g.members) - 1 for g in self.groups if g.status in ("tied", "partial"))

    @property
    def ok(self) -> bool:
        return not self.unmapped and all(g.status in ("tied", "already-shared") for g in self.groups)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "tied": self.tied, "groups": [asdict(g) for g in self.groups],
                "unmapped": [asdict(u) for u in self.unmapped], "notes": list(self.notes)}

    def text(self) -> str:
        lines = []
        for g in self.groups:
            lines.append(f"group {g.id}: {g.status}" + (f", shared observer {g.shared}" if g.shared else ""))
            for m in g.members:
                lines.append(f"  {m.tensor} -> {m.target} [{m.observer}] via {m.via}")
            lines += [f"  note: {n}" for n in g.notes]
        for u in self.unmapped:
            lines.append(f"unmapped (group {u.group}): {u.tensor}"
                         + (f" (producer {u.producer})" if u.producer else "") + f": {u.reason}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    __str__ = text


# -- observers ----------------------------------------------------------------------------
def _range_holder(obs):
    """The module holding min_val/max_val for ``obs`` (an observer or a fake-quant)."""
    inner = getattr(obs, "activation_post_process", None)
    for m in (inner, obs):
        if m is not None and hasattr(m, "min_val") and hasattr(m, "max_val"):
            return m
    return None


def _calibrated(obs) -> bool:
    h = _range_holder(obs)
    if h is None:
        return type(obs).__name__.startswith("FixedQParams")
    mn = h.min_val
    return mn.numel() > 0 and bool(torch.isfinite(mn).all())


def _qparams(obs) -> tuple[float, int]:
    if hasattr(obs, "scale") and hasattr(obs, "zero_point") and torch.is_tensor(obs.scale):
        s, z = obs.scale, obs.zero_point
    else:
        s, z = obs.calculate_qparams()
    return float(s.reshape(-1)[0]), int(z.reshape(-1)[0])


def _signature(obs) -> tuple:
    fixed = type(obs).__name__.startswith("FixedQParams")
    qs = getattr(obs, "qscheme", None)
    per_channel = qs in (torch.per_channel_affine, torch.per_channel_symmetric)
    return (fixed, getattr(obs, "dtype", None), str(qs), getattr(obs, "quant_min", None),
            getattr(obs, "quant_max", None), getattr(obs, "ch_axis", None) if per_channel else None)


def _merge_union(shared, others) -> bool:
    """Widen ``shared``'s running range to the union of every member's (policy 'union')."""
    hs = _range_holder(shared)
    if hs is None or "Histogram" in type(hs).__name__:
        return False  # a histogram's bins are tied to its range: merging min/max alone would corrupt it
    mins, maxs = [], []
    for o in [shared, *others]:
        h = _range_holder(o)
        if h is None or not _calibrated(o) or h.min_val.shape != hs.min_val.shape:
            continue
        mins.append(h.min_val.detach().clone())
        maxs.append(h.max_val.detach().clone())
    if len(mins) < 2:
        return False
    with torch.no_grad():
        hs.min_val.resize_(mins[0].shape).copy_(torch.stack(mins).amin(0))
        hs.max_val.resize_(maxs[0].shape).copy_(torch.stack(maxs).amax(0))
        if isinstance(getattr(shared, "scale", None), torch.Tensor) and hasattr(shared, "calculate_qparams"):
            s, z = shared.calculate_qparams()
            shared.scale.resize_(s.shape).copy_(s)
            shared.zero_point.resize_(z.shape).copy_(z)
    return True


def _set_module(model, path: str, value) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, value)


class UnionUpdates:
    """Forward hooks on a shared fake-quant: one statistics update per step, from the union.

    A moving-average observer called once per member per step drifts toward the *mean* of
    the members' ranges (its fixed point), clipping the widest member.  With these hooks the
    k calls of one step quantize with the step's current scale, and after the k-th call the
    observer is updated once with [min over members, max over members]: the 'union' policy,
    per step.  Until the instance has seen data, calls update as usual so the first step
    does not quantize with the default scale.  A plain class (not a closure) so that
    ``copy.deepcopy`` of the model copies the hook state along with the module.
    """

    def __init__(self, calls_per_step: int):
        self.k = max(1, int(calls_per_step))
        self.n = 0
        self.lo: torch.Tensor | None = None  # this step's union of the inputs' ranges
        self.hi: torch.Tensor | None = None
        self.paused = False
        self.fresh = False  # the step began before the instance had seen any data

    def pre(self, mod, args):
        en = getattr(mod, "observer_enabled", None)
        if not args or en is None or int(en[0]) != 1 or not torch.is_tensor(args[0]):
            return None
        x = args[0].detach()
        if self.n == 0:
            self.fresh = not _calibrated(mod)
        lo, hi = x.amin().float(), x.amax().float()
        self.lo = lo if self.lo is None else torch.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
        self.n += 1
        if _calibrated(mod):
            en[0] = 0  # quantize with the step's scale; the update comes once, below
            self.paused = True
        return None

    def post(self, mod, args, out):
        if self.paused:
            mod.observer_enabled[0] = 1
            self.paused = False
        if self.n >= self.k:
            self.flush(mod)
        return None

    def flush(self, mod) -> None:
        if self.lo is None or self.hi is None:  # no data this step
            return
        obs = getattr(mod, "activation_post_process", None)
        if obs is not None and hasattr(obs, "min_val"):
            with torch.no_grad():
                if self.fresh:  # first data: start from this step's union, not from the first member
                    obs.min_val.fill_(float("inf"))
                    obs.max_val.fill_(float("-inf"))
                obs(torch.stack([self.lo, self.hi]))  # the observer's own rule (EMA or min/max)
                s, z = mod.calculate_qparams()
                mod.scale.resize_(s.shape).copy_(s)
                mod.zero_point.resize_(z.shape).copy_(z)
        self.n, self.lo, self.hi = 0, None, None


def _install_union_updates(model, shared, res: Resolver) -> int:
    """Hook ``shared`` (a per-tensor fake-quant) so it updates once per step; returns k."""
    if not isinstance(getattr(shared, "observer_enabled", None), torch.Tensor) or \
            getattr(shared, "is_per_channel", False) or not hasattr(shared, "calculate_qparams"):
        return 0
    for h in list(shared._forward_pre_hooks.values()) + list(shared._forward_hooks.values()):
        if isinstance(getattr(h, "__self__", None), UnionUpdates):
            return 0  # already installed (apply_plan run twice)
    mods = dict(model.named_modules(remove_duplicate=False))
    if res.is_fx:
        k = sum(1 for n in model.graph.nodes if n.op == "call_module" and mods.get(n.target) is shared)
    else:
        k = sum(1 for m in mods.values() if m is shared)
    if k < 2:
        return 0
    u = UnionUpdates(k)
    shared.register_forward_pre_hook(u.pre)
    shared.register_forward_hook(u.post)
    return k


# -- binding plan members to observers ------------------------------------------------------
@dataclass
class _Binding:
    tensor: str
    site: Site
    observer_path: str
    observer: torch.nn.Module


def _bind(res: Resolver, tensor: str, site: Site) -> _Binding:
    if site.node is not None:
        obs = res.observer_nodes_after(site.node)
        if not obs:
            raise Unmappable(f"{site.label} (FX node {site.node.name}) has no activation_post_process after it "
                             "(not quantized under this qconfig/backend config?)")
        if len({id(res.modules[o.target]) for o in obs}) > 1:
            raise Unmappable(f"{site.label} feeds {len(obs)} different observers; tie them by hand")
        return _Binding(tensor, site, obs[0].target, res.modules[obs[0].target])
    path = f"{site.module_path}.activation_post_process"
    return _Binding(tensor, site, path, res.modules[site.module_path].activation_post_process)


def _is_concat(m) -> bool:
    return (m.producer_op or "").lower() == "concat"


def resolve_sites(res: Resolver, g, accept=None) -> tuple[list[tuple[str, Site]], list[Unmapped], list]:
    """Where each member of plan group ``g`` is produced, the unmapped members, and the cats
    the group feeds.  Concat outputs are found by structure: the one cat fed only by the
    group's other members.  Shared by the FX bridge (:func:`apply_plan`) and the PT2E one
    (:class:`qtquant.torch.PlanQuantizer`): one mapping rule for both.  ``accept(node)``: whether
    a node's output is quantized; a member whose node is not is moved to its pattern's output."""
    sites, bad, later = [], [], []
    for m in g.members:
        if _is_concat(m) and res.is_fx:
            later.append(m)  # resolved below, from the group's inputs
            continue
        try:
            site = res.resolve(m.tensor, m.producer, m.producer_op, m.module)
            sites.append((m.tensor, settled(site, accept) if accept is not None else site))
        except Unmappable as e:
            bad.append(Unmapped(g.id, m.tensor, m.producer, str(e)))
    producers = {s.node for _, s in sites if s.node is not None}
    cats = res.cats_fed_by(producers) if producers else []
    for m in later:
        # Structure first: the one cat fed only by this group's members is strong evidence;
        # names decide when there are several (nested Concats merged into one group).
        try:
            if len(cats) == 1 and not (m.module or m.tensor in res.aliases or m.producer in res.aliases):
                site = Site(label=cats[0].name, via="Concat fed by the group", node=cats[0])
            else:
                site = res.resolve(m.tensor, m.producer, m.producer_op, m.module)
        except Unmappable as e:
            why = "no torch.cat is fed only by this group's other members" if not cats else \
                f"{len(cats)} cats are fed by the group ({', '.join(c.name for c in cats)})"
            bad.append(Unmapped(g.id, m.tensor, m.producer, f"{e}; {why}"))
            continue
        sites.append((m.tensor, site))
    return sites, bad, cats


def _resolve_group(res: Resolver, g, tie_concat_outputs: bool):
    """Bindings (member -> observer) and unmapped entries for one plan group."""
    sites, bad, cats = resolve_sites(res, g, lambda n: bool(res.observer_nodes_after(n)) if res.is_fx else True)
    binds, notes = [], []
    for tensor, site in sites:
        try:
            binds.append(_bind(res, tensor, site))
        except Unmappable as e:
            m = next(m for m in g.members if m.tensor == tensor)
            bad.append(Unmapped(g.id, tensor, m.producer, str(e)))
    if tie_concat_outputs and res.is_fx:
        have = {b.site.node for b in binds}
        for c in cats:
            if c in have or not res.observer_nodes_after(c):
                continue
            # The rescale rule compares each input with the Concat's *output* scale: tie it too.
            binds.append(_bind(res, f"<output of {c.name}>", Site(c.name, "Concat fed by the group", node=c)))
            notes.append(f"also tied the output observer of {c.name} (its inputs are all in this group)")
    return binds, bad, notes


def precision_note(plan) -> str | None:
    """The plan's per-tensor precision (version 2) is not applied on the torch side: say so."""
    prec = getattr(plan, "precision", None) or {}
    if not prec:
        return None
    kinds = ", ".join(sorted({str(getattr(v, "value", v)) for v in prec.values()}))
    return (f"the plan sets the precision of {len(prec)} tensor(s) ({kinds}); qtquant.torch shares scales only: "
            "set those tensors' dtype in your quantizer or qconfig")


def _plan_groups(model, plan, aliases, tie_concat_outputs):
    p = read_plan(plan)
    res = Resolver(model, aliases)
    if not res.has_observers:
        raise PlanError("the model has no observers or fake-quant modules: pass the prepared model "
                        "(prepare_qat_fx / prepare_fx / prepare_qat), before convert")
    return p, res, [(g, *_resolve_group(res, g, tie_concat_outputs)) for g in p.groups]


def apply_plan(prepared_model: torch.nn.Module, plan, *, aliases: dict | None = None, merge: str = "union",
               union_updates: bool = True, tie_concat_outputs: bool = True, strict: bool = False) -> ApplyReport:
    """Make every plan group's members use ONE shared FakeQuantize/observer instance.

    ``plan``: dict, path to the JSON, or a plan object.  ``aliases`` maps plan names (ONNX
    tensor or node names) to module paths or FX node names, for names that do not map by
    themselves.  ``merge="union"`` widens the shared instance's running range to the union
    of the members' ranges (when already calibrated); ``"none"`` keeps the first member's.
    ``union_updates=True`` hooks each shared moving-average fake-quant so that it updates once
    per step from the union of its members' batches (see :class:`UnionUpdates`); ``False``
    leaves torch's behaviour, one moving-average update per call, as FX does for a cat.
    ``strict=True`` raises :class:`PlanError` and changes nothing if any member is unmapped.
    """
    if merge not in ("union", "none"):
        raise PlanError(f"merge must be 'union' or 'none', not {merge!r}")
    p, res, resolved = _plan_groups(prepared_model, plan, aliases, tie_concat_outputs)
    report = ApplyReport(groups=[], unmapped=[u for _, _, bad, _ in resolved for u in bad])
    if (note := precision_note(p)) is not None:
        report.notes.append(note)
    if strict and report.unmapped:
        u = report.unmapped[0]
        raise PlanError(f"{len(report.unmapped)} plan member(s) do not map to the model, e.g. "
                        f"{u.tensor!r}: {u.reason}")
    schemes = set()
    for g, binds, _bad, notes in resolved:
        seen, uniq = set(), []
        for b in binds:
            if b.observer_path not in seen:
                seen.add(b.observer_path)
                uniq.append(b)
        gr = GroupResult(g.id, "skipped", None, concats=list(g.concats), notes=list(notes))
        gr.members = [TiedMember(b.tensor, b.site.label, b.observer_path, b.site.via) for b in uniq]
        report.groups.append(gr)
        if len(uniq) < 2:
            gr.notes.append(f"only {len(uniq)} member(s) mapped: nothing to tie")
            continue
        sigs = {_signature(b.observer) for b in uniq}
        if len(sigs) > 1:
            fixed = [b.observer_path for b in uniq if _signature(b.observer)[0]]
            why = (f"{', '.join(fixed)} has fixed qparams (sigmoid/tanh-style output): its scale is set by the op"
                   if fixed else "the members' observers differ in dtype, qscheme or quant range")
            gr.status = "refused"
            gr.notes.append(f"not tied: {why}")
            continue
        shared = uniq[0].observer
        gr.shared = uniq[0].observer_path
        others = [b.observer for b in uniq[1:] if b.observer is not shared]
        schemes.add((getattr(shared, "dtype", None), getattr(shared, "qscheme", None)))
        if not others:
            gr.status = "already-shared"
            gr.notes.append("the members already use one observer instance (torch.ao FX shares a cat's "
                            "inputs by default)")
            continue
        if merge == "union" and _merge_union(shared, others):
            gr.notes.append("shared observer's running range widened to the union of the members' ranges")
        for b in uniq[1:]:
            _set_module(prepared_model, b.observer_path, shared)
        gr.status = "tied"
        if union_updates:
            k = _install_union_updates(prepared_model, shared, res)
            if k:
                gr.notes.append(f"the shared fake-quant updates once per step from the union of its {k} calls")
    for gr, (g, _b, bad, _n) in zip(report.groups, resolved):
        if bad and gr.status in ("tied", "already-shared"):
            gr.status = "partial"  # the mapped members share; the unmapped ones keep their own observer
    if p.scheme and schemes:
        want_sym = p.scheme.startswith("int8-sym")
        for dt, qs in schemes:
            sym = qs in (torch.per_tensor_symmetric, torch.per_channel_symmetric)
            if want_sym != sym or (want_sym and dt not in (torch.qint8, None)):
                report.notes.append(f"the plan's scales were computed for {p.scheme}; this model's observers are "
                                    f"{dt} {qs}, so its shared scales differ from the plan's (they are still "
                                    "shared)")
                break
    return report


# -- verification -------------------------------------------------------------------------
def _qt_params(v):
    if torch.is_tensor(v) and v.is_quantized and v.qscheme() in (torch.per_tensor_affine,
                                                                 torch.per_tensor_symmetric):
        return float(v.q_scale()), int(v.q_zero_point())
    return None


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm, want):
        super().__init__(gm)
        self.want, self.seen = want, {}

    def run_node(self, n):
        out = super().run_node(n)
        if n in self.want:
            self.seen[n] = out
        return out


def _literal_qparams(n) -> tuple[float, int] | None:
    """(scale, zero point) written into a decomposed per-tensor quantize/dequantize node (PT2E)."""
    if n.op != "call_function" or op_name(n.target) not in ("quantize_per_tensor", "dequantize_per_tensor"):
        return None
    if len(n.args) < 3 or not isinstance(n.args[1], (int, float)) or not isinstance(n.args[2], int):
        return None
    return float(n.args[1]), int(n.args[2])


def _static_qparams(n) -> tuple[float, int] | None:
    return next((q for q in map(_literal_qparams, n.users) if q is not None), None)


def _converted_qparams(res: Resolver, nodes: list, example_inputs) -> dict:
    """Real output qparams of FX nodes in a converted model: those written in the graph (PT2E),
    else from running it (the QTensor, or the quantize after it)."""
    static = {n: _static_qparams(n) for n in nodes}
    if all(q is not None for q in static.values()) or example_inputs is None:
        return static
    want = set(nodes)
    for n in nodes:
        want.update(u for u in n.users if u.op == "call_function"
                    and getattr(u.target, "__name__", "") == "quantize_per_tensor")
    rec = _Recorder(res.model, want)
    with torch.no_grad():
        rec.run(*example_inputs)
    out = {}
    for n in nodes:
        q = _qt_params(rec.seen.get(n))
        if q is None:
            q = next((_qt_params(rec.seen.get(u)) for u in n.users if u in rec.seen
                      and _qt_params(rec.seen.get(u))), None)
        out[n] = q
    return out


def _same(a: tuple, b: tuple, rtol: float) -> bool:
    return math.isclose(a[0], b[0], rel_tol=rtol) and a[1] == b[1]


def check_shared(model: torch.nn.Module, plan, *, example_inputs=None, aliases: dict | None = None,
                 rtol: float = 1e-6) -> list[str]:
    """Problems that keep a plan group from having ONE scale; an empty list means all is well.

    On a prepared model (after calibration) the members' observers are compared.  On a
    converted FX model (``convert_fx`` or ``convert_to_reference_fx``) pass ``example_inputs``:
    the model is run and the real quantized outputs of every member and of every Concat the
    group feeds are compared.
    """
    p = read_plan(plan)
    res = Resolver(model, aliases)
    prepared = res.has_observers
    problems: list[str] = []
    if not prepared and not res.is_fx:
        return ["the model has no observers and is not an FX GraphModule: cannot check it"]
    pt2e = is_pt2e(model)
    if not prepared and example_inputs is None and not pt2e:
        return ["this is a converted model: pass example_inputs so its real quantized outputs can be compared"]
    for g in p.groups:
        if prepared:
            binds, bad, _ = _resolve_group(res, g, True)
            problems += [f"group {g.id}: {u.tensor} not mapped: {u.reason}" for u in bad]
            vals = []
            for b in binds:
                if not _calibrated(b.observer):
                    problems.append(f"group {g.id}: observer {b.observer_path} ({b.site.label}) has not seen "
                                    "data: calibrate first")
                    continue
                vals.append((b.site.label, b.observer_path, _qparams(b.observer)))
        else:
            vals, nodes = [], []
            for m in g.members:
                if _is_concat(m):
                    continue
                try:
                    s = res.resolve(m.tensor, m.producer, m.producer_op, m.module)
                except Unmappable as e:
                    problems.append(f"group {g.id}: {m.tensor} not mapped: {e}")
                    continue
                if pt2e:
                    s = settled(s, lambda n: _static_qparams(n) is not None)
                assert s.node is not None  # (an FX model's sites are its nodes)
                nodes.append(s.node)
            nodes += [c for c in res.cats_fed_by(set(nodes)) if c not in nodes]
            qp = _converted_qparams(res, nodes, example_inputs) if nodes else {}
            for n in nodes:
                if qp.get(n) is None:
                    problems.append(f"group {g.id}: output of {n.name} is not quantized in the converted model")
                else:
                    vals.append((n.target if n.op == "call_module" else n.name, n.name, qp[n]))
                if n.target in CAT_TARGETS:  # PT2E: the dequantize feeding each cat input holds its scale
                    ts = n.args[0] if n.args and isinstance(n.args[0], (list, tuple)) else []
                    vals += [(f"{n.name} input {k}", t.name, q) for k, t in enumerate(ts)
                             if isinstance(t, torch.fx.Node) and (q := _literal_qparams(t)) is not None]
        if len(vals) >= 2:
            ref = vals[0]
            diff = [v for v in vals[1:] if not _same(v[2], ref[2], rtol)]
            if diff:
                problems.append(f"group {g.id}: scales differ: " + ", ".join(
                    f"{lab} scale {q[0]:.6g} zp {q[1]}" for lab, _, q in [ref, *diff]))
    return problems
