"""The one frozen view of a session that background work receives.

Perf simulation, fidelity, export, plans and auto-share planning read a session's graph,
options, calibration, groups and domain maps.  A worker thread must not read the live session:
the next edit changes it under the worker's feet.  :meth:`Session.snapshot` takes these on the
GUI thread, at submission; the worker reads only the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from ..quant.concat import analyze_concats
from ..quant.groups import GroupSet
from ..quant.outputs import export_float_of
from .options import Options, domains_for

if TYPE_CHECKING:
    from ..calib import CalibrationResult
    from ..quant.concat import ConcatInfo
    from ..quant.precision import PrecisionMap
    from ..horizon.match import LogMatch
    from ..quant.domains import DomainMap
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo

__all__ = ["Snapshot", "StateFacts", "Ranges"]

Ranges: TypeAlias = "dict[str, tuple[float, float]]"  # tensor -> (lo, hi)


class StateFacts:
    """What the live :class:`~.session.Session` and its :class:`Snapshot` both answer from their
    ``options``, ``qdq``, ``calibration`` and domains: one definition, so the two cannot drift apart."""

    __slots__ = ()
    graph: Graph
    options: Options
    calibration: CalibrationResult | None
    qdq: QdqInfo | None

    if TYPE_CHECKING:
        @property
        def domains(self) -> DomainMap: ...  # built on demand by the session, fixed in a snapshot

    @property
    def quantized_file(self) -> bool:
        return self.qdq is not None

    @property
    def ready(self) -> bool:
        return self.calibration is not None or self.qdq is not None

    def export_float(self, dm: DomainMap | None = None) -> frozenset[str]:
        """What the default export leaves in float: see :func:`~qtquant.quant.outputs.export_float_of`."""
        return export_float_of(self.graph, self.options, self.qdq, self.domains if dm is None else dm)

    @property
    def precision(self) -> PrecisionMap:
        """tensor -> int16 / float (a PrecisionMap; int8 is every other tensor)."""
        return self.options.precision

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        return self.calibration.ranges if self.calibration is not None else {}


@dataclass(frozen=True, eq=False)  # identity equality: caches keyed by a snapshot stay cheap
class Snapshot(StateFacts):
    graph: Graph
    options: Options
    calibration: CalibrationResult | None
    qdq: QdqInfo | None
    groups: GroupSet  # a private copy: the session's own set keeps changing
    revision: int
    domains: DomainMap
    baseline_domains: DomainMap  # without any user group
    # baseline? -> analysis; seeded with what the session had built, else computed by the worker.
    _concats: dict[bool, list[ConcatInfo]] = field(default_factory=dict, repr=False)
    compiler: Ranges | None = None  # the compile log's ranges, when they are the scales
    compiler_log: LogMatch | None = None  # the compile log placed on the graph (the perf report's header names it)

    @property
    def compiler_ranges(self) -> Ranges | None:
        """As :attr:`Session.compiler_ranges`: the compile log's ranges when they are the scales."""
        return self.compiler

    def domains_with(self, groups: Iterable[Sequence[str]]) -> DomainMap:
        """As :meth:`Session.domains_with`: the domains if ``groups`` were the user's groups."""
        return domains_for(self.graph, self.calibration, self.options, self.qdq, groups, self.compiler)

    def concats(self, baseline: bool = False) -> list[ConcatInfo]:
        key = bool(baseline)
        hit = self._concats.get(key)
        if hit is None:
            dm = self.baseline_domains if key else self.domains
            hit = self._concats[key] = analyze_concats(
                self.graph, dm, export_float_of(self.graph, self.options, self.qdq, dm))
        return hit
