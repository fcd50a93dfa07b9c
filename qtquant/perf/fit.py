"""Fit a march's global parameters to latency figures: the compiler's static estimates, board latencies.

A :class:`Figure` is one public (or the user's own) latency of one graph: a compile log's static estimate
(``latency = … us``, :attr:`FigureKind.STATIC`, compared with the simulated static latency) or a board's
one-thread latency (:attr:`FigureKind.BOARD`, compared with the board estimate, perf/board.py), optionally
with a precision map (the priced precision choices: a node in int16 or kept in float).

:func:`fit` is Levenberg-Marquardt on ``r_i = ln(predicted_i / public_i)`` (Huber beyond ±0.1: a figure the model
cannot reach counts linearly), every parameter in log space,
with a weak pull (``prior`` per e-fold) towards the profile it starts from, so that a parameter the figures
barely constrain stays near its estimate.  Rules:

- no parameter of one model: every parameter is global to the march;
- a parameter is fitted only where at least two fit figures depend on it (a precision price counts the
  figure it changes and the same graph's int8 figure, whose difference prices it), and never more
  parameters than figures: with fewer figures, the ones the most of the total latency depends on;
- every fitted number says what it was fitted to (:func:`profile_doc` writes ``"fitted": "fitted to …"``).

Leave-one-out: each fit figure is predicted by a fit to all the others.

The simulation is not re-run per step: a graph's cost is a sum over its layers of
``max(work / rate, DDR bytes / DDR bandwidth + on-chip bytes / on-chip bandwidth) + overhead``, and only
the rates, the bandwidth and the overhead are fitted, so each figure is reduced once to its layers' work,
bytes and class (:class:`_Layers`); the tests check that it gives the simulator's own total.  Figures with a
precision map are simulated in full (perf/precision.py prices them from the layers' costs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..base.errors import BadInputError
from .march import FigureKind, FitError, MarchProfile
from .confidence import family_of
from .simulator import Simulator, with_int_outputs

__all__ = ["Figure", "FitParam", "FITTABLE", "FitResult", "fit", "fit_with_loo", "predict", "profile_doc",
           "ALIGNMENTS"]

ALIGNMENTS = (8, 16, 32)  # channel_align is chosen from these by the smallest residual (a grid, not a gradient)


@dataclass(frozen=True)
class FitParam:
    name: str  # a march parameter, or "precision.<name>" for the precision section
    lo: float
    hi: float

    @property
    def in_precision(self) -> bool:
        return self.name.startswith("precision.")

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[1] if self.in_precision else self.name


FITTABLE = (
    FitParam("utilization", 0.05, 1.0),
    FitParam("depthwise_efficiency", 0.05, 16.0),
    FitParam("matmul_efficiency", 0.002, 16.0),
    FitParam("op_overhead_us", 0.01, 50.0),
    FitParam("ddr_gbps", 0.5, 60.0),
    FitParam("weight_gbps", 0.5, 60.0),
    FitParam("eltwise_efficiency", 0.01, 16.0),
    FitParam("lut_efficiency", 0.01, 16.0),
    FitParam("resize_efficiency", 0.01, 16.0),
    FitParam("pool_efficiency", 0.01, 16.0),
    FitParam("reduce_efficiency", 0.002, 16.0),
    FitParam("copy_efficiency", 0.002, 16.0),
    FitParam("region_efficiency", 0.002, 16.0),
    FitParam("board_call_us", 1.0, 5000.0),
    FitParam("board_ns_per_element", 0.01, 100.0),
    FitParam("precision.int16_vector_factor", 1.0, 1e5),
    FitParam("precision.cpu_elementwise_flops", 0.1, 1e5),
    FitParam("precision.cpu_softmax_flops", 0.1, 1e5),
)
_START = {"board_call_us": 100.0, "board_ns_per_element": 1.0, "precision.int16_vector_factor": 4.0}
"""Where a parameter the profile lacks starts (and what the prior pulls towards)."""

# Which parameters divide each layer class's work: a MAC-array layer runs at the utilization (times a
# class efficiency), a vector-unit layer at its class's efficiency (perf/costs.py).
_MAC_CLASSES = {"conv": (), "matmul": (), "depthwise": ("depthwise_efficiency",),
                "attention": ("matmul_efficiency",)}


def _rate_params(op_class: str) -> tuple[str, ...]:
    if op_class in _MAC_CLASSES:
        return ("utilization", *_MAC_CLASSES[op_class])
    return (f"{op_class}_efficiency",)


# -- figures ----------------------------------------------------------------------------------------

@dataclass
class Figure:
    """One latency figure of one graph.  ``concats``: the graph's Concat rescales (session.concats());
    ``precision``: tensor -> Precision (int16 / float), or None; ``partner``: for a precision figure, the
    name of the same graph's all-int8 figure (their difference prices the precision)."""

    name: str
    kind: FigureKind
    public_us: float
    graph: object
    concats: tuple = ()
    source: str = ""
    precision: object = None
    partner: str = ""
    family: str = ""
    int_outputs: frozenset = frozenset()  # outputs the application dequantises (perf/board.py)
    board_bpu_ghz: float = 0.0  # the BPU clock the board figure was measured at (0: the march's board clock)
    _layers: dict = field(default_factory=dict, repr=False)  # channel_align -> _Layers

    def __post_init__(self):
        if not (self.public_us > 0 and math.isfinite(self.public_us)):
            raise BadInputError(f"figure {self.name}: latency must be a positive number, got {self.public_us!r}")
        self.family = self.family or family_of(self.graph)

    def board_march(self, march):
        """``march`` at the BPU clock this figure was measured at."""
        return dataclasses.replace(march, board_bpu_ghz=self.board_bpu_ghz) if self.board_bpu_ghz else march

    def simulate(self, march, *, int8: bool = False):
        """The full simulation (with the precision map, when there is one and not ``int8``): a PerfResult."""
        march = self.board_march(march)
        from .precision import apply_precision

        sim = Simulator(self.graph, march)
        res = with_int_outputs(sim.full(self.concats), self.graph, march, self.int_outputs)
        # the nodes the march runs on its CPU are priced in the int8 twin too (perf/placement.py)
        return apply_precision(res, self.graph, march, None if int8 else self.precision, ctx=sim.base_state()[0])

    def reprices(self, march) -> bool:
        """Whether perf/precision.py re-prices some node of this figure: a precision map, or a node the
        march runs on its CPU."""
        from .placement import cpu_placed

        return bool(self.precision) or bool(cpu_placed(self.graph, march))

    def predicted_us(self, res) -> float:
        return res.board_us if self.kind is FigureKind.BOARD else res.total_us

    def layers(self, march) -> "_Layers":
        """The all-int8 graph reduced to its layers (at the march's channel_align), and for a precision
        figure the int8 layers of the nodes its precision map re-prices."""
        got = self._layers.get(march.channel_align)
        if got is None:
            sim = Simulator(self.graph, march)
            res = with_int_outputs(sim.full(self.concats), self.graph, march, self.int_outputs)
            repriced = ()
            if self.reprices(march):
                from .precision import apply_precision

                ctx = sim.base_state()[0]
                names = [n.node for n in apply_precision(res, self.graph, march, self.precision, ctx=ctx)
                         .precision.nodes]
                repriced = (tuple(res.layer(n) for n in names), ctx)
            got = self._layers[march.channel_align] = _Layers.of(res, march, repriced)
        return got


@dataclass(frozen=True)
class _Layers:
    """A simulated graph reduced to what the fitted parameters act on (see the module docstring)."""

    work: np.ndarray  # µs of compute at rate factor 1 (MAC: at utilization 1; vector: at efficiency 1)
    cls: tuple  # op class per layer
    ddr: np.ndarray  # DDR bytes per layer (activations)
    weights: np.ndarray  # constants' DDR bytes per layer
    onchip: np.ndarray  # on-chip bytes per layer
    n_overhead: float  # ops that pay the per-op overhead (a lowered Softmax is several)
    cpu_elems: int  # elements the runtime converts on the CPU (board figures)
    sram_gbps: float
    march: str = ""
    # A precision figure: (the int8 LayerCosts of the nodes its map re-prices, the simulator's CostContext).
    repriced: tuple = ()

    @classmethod
    def of(cls, res, march, repriced=()) -> "_Layers":
        work, classes, ddr, weights, onchip, n_over = [], [], [], [], [], 0
        for lc in res.layers:
            if lc.total_us <= 0:
                continue
            n_over += lc.overhead_us / march.op_overhead_us if march.op_overhead_us > 0 else lc.overhead_us > 0
            c = lc.op_class or "eltwise"
            factor = math.prod(getattr(march, p, 1.0) for p in _rate_params(c))
            work.append(lc.compute_us * factor)
            classes.append(c)
            ddr.append(lc.ddr_bytes - lc.weight_bytes)
            weights.append(lc.weight_bytes)
            onchip.append(lc.bytes - lc.ddr_bytes)
        elems = sum(io.elems for io in res.board_io if io.on_cpu)
        return cls(np.array(work, float), tuple(classes), np.array(ddr, float), np.array(weights, float),
                   np.array(onchip, float),
                   n_over, elems, march.sram_gbps, march.name, repriced)

    def precision_delta_us(self, fig, march, p: dict) -> float:
        """What the figure's precision map adds at parameters ``p``: perf/precision.py re-pricing the
        int8 layers of its nodes, each first re-costed at ``p`` (no simulation of the rest)."""
        from .precision import apply_precision
        from .simulator import PerfResult

        lcs, ctx = self.repriced
        base = {}
        for lc in lcs:
            c = lc.op_class or "eltwise"
            compute = lc.compute_us * math.prod(getattr(march, k, 1.0) for k in _rate_params(c)) \
                / math.prod(p[k] for k in _rate_params(c))
            memory = (lc.ddr_bytes - lc.weight_bytes) / (p["ddr_gbps"] * 1e3) \
                + lc.weight_bytes / (_weight_gbps(p) * 1e3) + (lc.bytes - lc.ddr_bytes) / (self.sram_gbps * 1e3)
            over = p["op_overhead_us"] * (lc.overhead_us / march.op_overhead_us if march.op_overhead_us > 0
                                          else lc.overhead_us > 0)
            base[lc.name] = dataclasses.replace(lc, compute_us=compute, memory_us=memory, overhead_us=over,
                                                total_us=max(compute, memory) + over)
        part = PerfResult(self.march, 0.0, 0, 0.0, 0, 0, 0, 0, _order=tuple(base), _base=base, _concats={},
                          board_bpu_us=0.0)
        got = apply_precision(part, fig.graph, _with(march, p), fig.precision, ctx=ctx)
        return got.board_us if fig.kind is FigureKind.BOARD else got.total_us

    def total_us(self, p: dict, clock: float = 1.0) -> float:
        """The BPU time at parameters ``p``; ``clock``: the BPU clock's ratio to the static estimate's
        (the board's, :attr:`MarchProfile.board_clock_ratio`), which divides all but the DDR time."""
        rate = np.array([math.prod(p[k] for k in _rate_params(c)) for c in self.cls]) if self.cls else np.zeros(0)
        compute = (self.work / rate if self.cls else self.work) / clock
        memory = self.ddr / (p["ddr_gbps"] * 1e3) + self.weights / (_weight_gbps(p) * 1e3) \
            + self.onchip / (self.sram_gbps * 1e3) / clock
        return float(np.maximum(compute, memory).sum() + self.n_overhead * p["op_overhead_us"] / clock)


def _weight_gbps(p: dict) -> float:
    return p.get("weight_gbps") or p["ddr_gbps"]  # 0 or absent: the constants stream as the activations do


# -- parameters <-> a march -----------------------------------------------------------------------

def _value(march: MarchProfile, fp: FitParam) -> float:
    """The parameter as the simulator uses it on ``march`` (absent: the product's default)."""
    if fp.in_precision:
        from .precision import precision_params

        return float(getattr(precision_params(march), fp.key))
    return float(getattr(march, fp.key))


def _start(march: MarchProfile, fp: FitParam) -> float:
    """Where the fit starts a parameter (and what the prior pulls towards): the march's value, or for
    one the profile does not state, :data:`_START`."""
    if fp.in_precision:
        from .precision import DEFAULTS

        section = march.precision_section if march.precision_section is not None else DEFAULTS
        entry = section.get(fp.key) if isinstance(section, dict) else None
        v = entry.get("value") if isinstance(entry, dict) else None
        return float(v) if v else _START.get(fp.name, 1.0)
    v = getattr(march, fp.key)
    return float(v) if v else _START.get(fp.name, 1.0)


def _with(march: MarchProfile, values: dict) -> MarchProfile:
    """``march`` with the parameters of ``values`` (name -> number) replaced."""
    plain = {k: v for k, v in values.items() if not k.startswith("precision.")}
    prec = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("precision.")}
    m = dataclasses.replace(march, **plain)
    if prec:
        from .precision import DEFAULTS

        section = {k: dict(e) for k, e in (march.precision_section or DEFAULTS).items()}
        for k, v in prec.items():
            section[k] = {**section.get(k, {"estimate": "set by the fit"}), "value": v}
        m = dataclasses.replace(m, precision_section=section)
    return m


def _all_values(march: MarchProfile) -> dict:
    return {fp.name: _value(march, fp) for fp in FITTABLE}


def predict(fig: Figure, march: MarchProfile, values: dict | None = None) -> float:
    """The figure's prediction on ``march`` with ``values`` (name -> number) in place of its own."""
    values = values or {}
    p = {**_all_values(march), **values}
    lay = fig.layers(march)
    board = fig.kind is FigureKind.BOARD
    us = lay.total_us(p, fig.board_march(march).board_clock_ratio if board else 1.0)
    if lay.repriced:
        us += lay.precision_delta_us(fig, fig.board_march(march), p)
    if board:
        return us + p["board_call_us"] + p["board_ns_per_element"] * lay.cpu_elems / 1000.0
    return us


# -- the fit ----------------------------------------------------------------------------------------

@dataclass
class FitResult:
    march: MarchProfile  # the base march with the fitted values
    fitted: tuple  # names of the parameters fitted
    values: dict  # name -> fitted value
    start: dict  # name -> value the fit started from
    depends: dict  # name -> figures whose prediction moves with it
    figures: list
    in_sample: dict  # figure name -> predicted µs
    loo: dict = field(default_factory=dict)  # figure name -> predicted µs when left out
    not_fitted: dict = field(default_factory=dict)  # name -> why

    def errors(self) -> list[FitError]:
        return [FitError(figure=f.name, kind=f.kind, family=f.family, public_us=f.public_us,
                         fitted_us=self.in_sample[f.name], loo_us=self.loo.get(f.name)) for f in self.figures]


def _residuals(figs, march, names, z) -> np.ndarray:
    vals = {n: float(math.exp(v)) for n, v in zip(names, z)}
    return np.array([math.log(max(predict(f, march, vals), 1e-9) / f.public_us) for f in figs])


def _depends(figs, march, names, eps=1e-4) -> dict:
    """name -> the figures whose prediction moves when the parameter moves by 5%."""
    z0 = np.array([math.log(_start(march, _PARAM[n])) for n in names])
    r0 = _residuals(figs, march, names, z0)
    out = {}
    for j, n in enumerate(names):
        z = z0.copy()
        z[j] += 0.05
        d = np.abs(_residuals(figs, march, names, z) - r0)
        out[n] = [f for f, x in zip(figs, d) if x > eps]
    return out


_PARAM = {fp.name: fp for fp in FITTABLE}
_SAME_AS = {"weight_gbps": "ddr_gbps"}  # a parameter a profile may leave out (0), then the same as another


def _choose(figs, march, candidates, min_figures) -> tuple[list, dict, dict]:
    """(names to fit, name -> names of the figures depending on it, name -> why not fitted)."""
    dep = _depends(figs, march, candidates)
    names = {f.name for f in figs}
    why, ok = {}, []
    for n in candidates:
        deciding = {f.name for f in dep[n]}
        deciding |= {f.partner for f in dep[n] if f.partner in names}  # a precision price: with its int8 twin
        if not dep[n]:
            why[n] = "no figure depends on it"
        elif len(deciding) < min_figures:
            why[n] = f"only {next(iter(deciding))} depends on it"
        else:
            ok.append(n)
    # Never more parameters than figures: keep those the most of the figures' latency depends on.
    if len(ok) > len(figs):
        z0 = np.array([math.log(_start(march, _PARAM[n])) for n in ok])
        r0 = _residuals(figs, march, ok, z0)
        sens = []
        for j, n in enumerate(ok):
            z = z0.copy()
            z[j] += 0.05
            sens.append(float(np.abs(_residuals(figs, march, ok, z) - r0).sum()))
        keep = {n for _, n in sorted(zip(sens, ok), reverse=True)[:len(figs)]}
        for n in ok:
            if n not in keep:
                why[n] = f"{len(figs)} figure(s) determine at most {len(figs)} parameters; others move them more"
        ok = [n for n in ok if n in keep]
    return ok, {n: [f.name for f in dep[n]] for n in candidates}, why


HUBER = 0.1
"""Residuals (log ratios) beyond this count linearly, not squared (Huber): one figure the model cannot
reach (YOLO12n, its static estimate three times the next model's) must not drag every parameter."""


def _robust(r: np.ndarray) -> np.ndarray:
    """Each residual as sign(r)·sqrt(2·huber(r)): least squares on these is the Huber fit."""
    a = np.abs(r)
    rho = np.where(a <= HUBER, 0.5 * r * r, HUBER * (a - 0.5 * HUBER))
    return np.sign(r) * np.sqrt(2 * rho)


def _lm(figs, march, names, prior, iters=40, z_start=None) -> np.ndarray:
    z0 = np.array([math.log(_start(march, _PARAM[n])) for n in names])
    lo = np.array([math.log(_PARAM[n].lo) for n in names])
    hi = np.array([math.log(_PARAM[n].hi) for n in names])
    z = np.clip(z0 if z_start is None else z_start, lo, hi)
    lam = 1e-2

    def cost(zz):
        return np.concatenate([_robust(_residuals(figs, march, names, zz)), prior * (zz - z0)])

    r = cost(z)
    for _ in range(iters):
        J = np.empty((len(r), len(z)))
        for j in range(len(z)):
            zz = z.copy()
            zz[j] += 1e-3
            J[:, j] = (cost(zz) - r) / 1e-3
        g, H = J.T @ r, J.T @ J
        improved, step = False, np.zeros_like(z)
        for _ in range(10):
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-9), -g)
            zn = np.clip(z + step, lo, hi)
            rn = cost(zn)
            if rn @ rn < r @ r:
                z, r, lam, improved = zn, rn, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or np.max(np.abs(step)) < 1e-4:
            break
    return z


def fit(figs: list[Figure], march: MarchProfile, *, prior: float = 0.1, candidates=None,
        alignments=ALIGNMENTS, min_figures: int | None = None) -> FitResult:
    """Fit ``march``'s global parameters to ``figs`` (see the module docstring); no leave-one-out.
    ``min_figures``: how many figures must depend on a parameter for it to be fitted (default 2, or 1
    when there is only one figure: then the one parameter it moves the most)."""
    if not figs:
        raise BadInputError("nothing to fit: no figures")
    min_figures = min(2, len(figs)) if min_figures is None else min_figures
    cand = [fp.name for fp in FITTABLE] if candidates is None else list(candidates)
    if not any(f.kind is FigureKind.BOARD for f in figs):
        cand = [n for n in cand if not n.startswith("board_")]
    if not any(f.reprices(march) for f in figs):
        cand = [n for n in cand if not n.startswith("precision.")]
    # weight_gbps absent from the profile is ddr_gbps: fitting it apart would change the model.
    unstated = [n for n in cand if n in _SAME_AS and not getattr(march, n)]
    cand = [n for n in cand if n not in unstated]
    best = None
    for align in alignments:
        base = dataclasses.replace(march, channel_align=align)
        names, dep, why = _choose(figs, base, cand, min_figures)
        z = _lm(figs, base, names, prior) if names else np.zeros(0)
        r = _robust(_residuals(figs, base, names, z))
        if best is None or r @ r < best[0]:
            best = (float(r @ r), base, names, dep, why, z)
    _, base, names, dep, why, z = best
    values = {n: float(math.exp(v)) for n, v in zip(names, z)}
    fitted = _with(base, values)
    if len(alignments) > 1:
        names = [*names, "channel_align"]
        values["channel_align"] = base.channel_align
    return FitResult(fitted, tuple(names), values, {n: _start(march, _PARAM[n]) for n in cand} |
                     {"channel_align": march.channel_align}, dep, list(figs),
                     {f.name: predict(f, fitted) for f in figs},
                     not_fitted=why | {n: f"the profile does not state it: it is {_SAME_AS[n]}" for n in unstated})


def fit_with_loo(figs: list[Figure], march: MarchProfile, *, prior: float = 0.1, candidates=None,
                 alignments=ALIGNMENTS, min_figures: int | None = None, progress=None) -> FitResult:
    """:func:`fit`, then each figure predicted by a fit to the others (channel_align kept at the full fit's)."""
    res = fit(figs, march, prior=prior, candidates=candidates, alignments=alignments, min_figures=min_figures)
    if len(figs) < 2:
        return res
    base = dataclasses.replace(march, channel_align=res.march.channel_align)
    for k, f in enumerate(figs):
        if progress is not None:
            progress(k, len(figs), f.name)
        rest = [g for g in figs if g is not f]
        sub = fit(rest, base, prior=prior, candidates=candidates, alignments=(base.channel_align,),
                  min_figures=min_figures)
        res.loo[f.name] = predict(f, sub.march)
    return res


# -- writing the fitted profile ---------------------------------------------------------------------

def profile_doc(doc: dict, res: FitResult, *, script: str, describe=None) -> dict:
    """The profile document ``doc`` (as read) with the fitted values, each saying what it was fitted to,
    the value it replaced kept as ``"prior"``, and the fit's figures and errors under ``"fit"``.
    ``describe(figure)``: how a figure is named in the provenance (default: name, µs and kind)."""
    import copy

    doc = copy.deepcopy(doc)
    errs = [abs(e.loo_error) for e in res.errors() if e.loo_error is not None]
    loo = f"; median leave-one-out |error| {float(np.median(errs)) * 100:.1f}%" if errs else ""

    def name(f):
        return describe(f) if describe else f"{f.name} ({f.public_us:g} µs {f.kind.value})"

    listed = []
    for n in res.fitted:
        fp = _PARAM.get(n)
        key = fp.key if fp else n
        if fp is not None and fp.in_precision:
            from .precision import DEFAULTS

            section = doc.setdefault("precision", copy.deepcopy(DEFAULTS)) or copy.deepcopy(DEFAULTS)
            doc["precision"] = section
        else:
            section = doc["params"]
        deciding = res.depends.get(n) or [f.name for f in res.figures]
        figs = [f for f in res.figures if f.name in set(deciding) | {f2.partner for f2 in res.figures
                                                                      if f2.name in deciding}]
        e = section.setdefault(key, {"estimate": "absent from the profile before the fit"})
        if "prior" not in e and "value" in e:
            e["prior"] = e["value"]
        v = res.values[n]
        e["value"] = round(v, 6) if isinstance(v, float) else v
        e["fitted"] = (f"fitted to {', '.join(name(f) for f in figs)} by {script} (least squares on log "
                       f"latency{loo})")
        listed.append(n)
    doc["fit"] = {"script": script, "figures": [f.name for f in res.figures], "params": listed,
                  "errors": [e.model_dump(mode="json") for e in res.errors()]}
    return doc
