"""A session's options, and the scale domains a session state makes of them: what the live
:class:`~qtquant.app.session.Session` and its :class:`~qtquant.app.snapshot.Snapshot` both build on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from ..calib import CalibConfig
from ..model.scales import Scheme
from ..quant.domains import DomainMap, Policy, build_domains
from ..quant.outputs import OutputMode
from ..quant.precision import PrecisionMap

if TYPE_CHECKING:
    from ..calib import CalibrationResult
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo

__all__ = ["Options", "concat_rule", "domains_for"]


@dataclass(frozen=True)
class Options:
    scheme: Scheme = Scheme.SYMMETRIC_INT8
    policy: Policy = Policy.UNION
    march: str = "bayes-e"
    max_bits_lost: float = 1.0
    calib: CalibConfig = field(default_factory=CalibConfig)
    # tensor -> int16 / float (int8, the default, is never stored): qtquant.quant.precision
    precision: PrecisionMap = field(default_factory=PrecisionMap)
    # How model outputs export (--quantize-outputs / --float-outputs): the Concat table, the
    # simulator and the export read it from here, so they describe the same file.
    output_mode: OutputMode = OutputMode.AUTO

    def __post_init__(self):
        # Spelled as text by the CLI, the dialogs and project files: one typed value here.
        object.__setattr__(self, "scheme", Scheme.parse(self.scheme))
        if not isinstance(self.precision, PrecisionMap):
            object.__setattr__(self, "precision", PrecisionMap(self.precision))
        object.__setattr__(self, "policy", Policy(self.policy))
        object.__setattr__(self, "max_bits_lost", float(self.max_bits_lost))
        object.__setattr__(self, "output_mode", OutputMode(self.output_mode))

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))



def concat_rule(options: Options):
    """The Concat output-scale rule of the options' march (its profile states it)."""
    from ..perf import load_march  # cached per file: cheap on every rebuild

    return load_march(options.march).concat_output_scale


def domains_for(graph: Graph, calibration: CalibrationResult | None, options: Options, qdq: QdqInfo | None,
                groups: Iterable[Sequence[str]], compiler: dict[str, tuple[float, float]] | None = None) -> DomainMap:
    """The scale domains of a session state (the live session's and a snapshot's, one rule).
    ``compiler``: tensor -> range from a compile log's thresholds (:meth:`Session.set_compiler_log`),
    fixed as a QDQ file's scales are, and over them."""
    ranges = calibration.ranges if calibration is not None else {}
    hist_pool = calibration.pooled_range if calibration is not None else None
    fixed = {**(qdq.ranges if qdq else {}), **(compiler or {})} or None
    return build_domains(graph, ranges, groups, policy=options.policy, scheme=options.scheme,
                         fixed=fixed, hist_pool=hist_pool,
                         percentile=options.calib.percentile,
                         concat_rule=concat_rule(options))
