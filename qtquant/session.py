"""A working session: one graph, its calibration, the user's groups and derived analyses.

This is the model object the CLI and the GUI share.  It knows nothing of Qt; the GUI
subscribes to :attr:`Session.events`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from .calib import CalibConfig, CalibrationResult, calibrate
from .concat import analyze_concats
from .domains import DomainMap, Policy, build_domains
from .groups import GroupSet
from .quant import Scheme

__all__ = ["Options", "Session", "Events", "Derived", "derive"]


@dataclass(frozen=True)
class Options:
    scheme: Scheme = Scheme.SYMMETRIC_INT8
    policy: Policy = Policy.UNION
    march: str = "bayes-e"
    max_bits_lost: float = 1.0
    calib: CalibConfig = field(default_factory=CalibConfig)


class Events:
    """Minimal observer list: ``events.connect(fn)``; fn(kind, **payload)."""

    def __init__(self):
        self._subs: list[Callable] = []

    def connect(self, fn: Callable) -> None:
        self._subs.append(fn)

    def disconnect(self, fn: Callable) -> None:
        if fn in self._subs:
            self._subs.remove(fn)

    def emit(self, kind: str, **payload) -> None:
        for fn in list(self._subs):
            fn(kind, **payload)


@dataclass
class Derived:
    """Domain maps and Concat analyses of one session state, computed away from the GUI
    thread (20,000 nodes: some 0.9 s) and installed by :meth:`Session.set_calibration`."""

    calibration: CalibrationResult
    options: Options
    groups: tuple
    domains: DomainMap
    baseline: DomainMap
    concats: list
    baseline_concats: list


def _domains_for(graph, calibration, options, qdq, groups) -> DomainMap:
    ranges = calibration.ranges if calibration is not None else {}
    hist_pool = getattr(calibration, "pooled_range", None) if calibration is not None else None
    return build_domains(graph, ranges, groups, policy=options.policy, scheme=options.scheme,
                         fixed=qdq.ranges if qdq else None, hist_pool=hist_pool,
                         percentile=getattr(options.calib, "percentile", 99.99))


def derive(graph, calibration, options: Options, groups, qdq=None) -> Derived:
    """Everything :meth:`Session.set_calibration` would otherwise compute on first use.

    Pure: pass the session's options and ``groups.as_lists()`` read where the session is
    edited; the session installs the result only if they still hold.
    """
    groups = tuple(tuple(g) for g in groups)
    dm = _domains_for(graph, calibration, options, qdq, groups)
    base = _domains_for(graph, calibration, options, qdq, ()) if groups else dm
    cs = analyze_concats(graph, dm)
    return Derived(calibration, options, groups, dm, base, cs, analyze_concats(graph, base) if groups else cs)


class Session:
    def __init__(self, graph, options: Options = Options(), *, qdq=None):
        self.graph = graph
        self.options = options
        self.qdq = qdq  # qtquant.qdq.QdqInfo when the model came quantized
        self.calibration: CalibrationResult | None = None
        self.groups = GroupSet()
        self.events = Events()
        self._dm: DomainMap | None = None
        self._baseline_dm: DomainMap | None = None
        self._concat_cache: dict[bool, tuple] = {}  # baseline? -> (DomainMap, analysis)
        self.revision = 0  # bumps on every edit; background results carry it to detect staleness
        if qdq is not None:
            self.options = replace(self.options, scheme=qdq.scheme)

    # -- state ----------------------------------------------------------------------------
    @property
    def quantized_file(self) -> bool:
        return self.qdq is not None

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        if self.calibration is not None:
            return self.calibration.ranges
        return {}

    @property
    def ready(self) -> bool:
        return self.calibration is not None or self.qdq is not None

    def run_calibration(self, progress=None, cancel=None) -> CalibrationResult:
        res = calibrate(self.graph, self.options.calib, progress=progress, cancel=cancel)
        self.set_calibration(res)
        return res

    def set_calibration(self, res: CalibrationResult, derived: Derived | None = None) -> None:
        """``derived``: :func:`derive` for ``res``, used if the options and groups it was
        computed for are still the session's."""
        self.calibration = res
        self._invalidate()
        self._baseline_dm = None
        if derived is not None and derived.calibration is res and derived.options == self.options \
                and derived.groups == tuple(tuple(g) for g in self.groups.as_lists()):
            self._dm, self._baseline_dm = derived.domains, derived.baseline
            self._concat_cache = {False: (derived.domains, derived.concats),
                                  True: (derived.baseline, derived.baseline_concats)}
        self.events.emit("calibrated")

    def set_options(self, **changes) -> None:
        self.options = replace(self.options, **changes)
        if "scheme" in changes and self.calibration is not None:
            # Same statistics, ranges re-derived for the new scheme (no model run).
            tag = "sym" if self.options.scheme is Scheme.SYMMETRIC_INT8 else "asym"
            if getattr(self.calibration.config, "scheme", tag) != tag and hasattr(self.calibration, "recompute"):
                self.calibration = self.calibration.recompute(scheme=tag)
            self.options = replace(self.options, calib=replace(self.options.calib, scheme=tag)) \
                if hasattr(self.options.calib, "scheme") else self.options
        self._invalidate()
        self._baseline_dm = None
        self.events.emit("options", changes=changes)

    def groups_changed(self) -> None:
        self._invalidate()
        self.events.emit("groups")

    def _invalidate(self) -> None:
        self._dm = None
        self.revision += 1

    # -- derived --------------------------------------------------------------------------
    def _build(self, groups) -> DomainMap:
        return _domains_for(self.graph, self.calibration, self.options, self.qdq, groups)

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

    def concats(self, baseline: bool = False):
        dm = self.baseline_domains if baseline else self.domains
        hit = self._concat_cache.get(bool(baseline))
        if hit is None or hit[0] is not dm:
            hit = self._concat_cache[bool(baseline)] = (dm, analyze_concats(self.graph, dm))
        return hit[1]
