"""A session's options, and the scale domains a session state makes of them: what the live
:class:`~qtquant.app.session.Session` and its :class:`~qtquant.app.snapshot.Snapshot` both build on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, SupportsFloat, SupportsIndex, TypeAlias

from ..base.errors import BadInputError
from ..base.vocab import (DEFAULT_AUTO_SHARE_MAX_BITS_LOST, DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST, DEFAULT_MARCH,
                          DEFAULT_POLICY, DEFAULT_SCHEME, ConcatScaleRule)
from ..calib import CalibConfig
from ..model.scales import Scheme
from ..quant.domains import DomainMap, Policy, build_domains
from ..quant.outputs import OutputMode
from ..quant.precision import PrecisionMap

if TYPE_CHECKING:
    from ..calib import CalibrationResult
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo
    from ..quant.state import QuantOptions

__all__ = ["Options", "OptionValue", "BITS_OPTIONS", "bits_option", "concat_rule", "domains_for"]

# A field's value as the CLI, the dialogs and project files give it (a Scheme or its text, a dict for
# the precision map, ...): a different type per field, which Options.__post_init__ parses and checks.
OptionValue: TypeAlias = Any


@dataclass(frozen=True)
class Options:
    scheme: Scheme = DEFAULT_SCHEME
    policy: Policy = DEFAULT_POLICY
    march: str = DEFAULT_MARCH
    # Auto-share shares a Concat when no member would lose more than this many bits (qtquant.quant.autoshare).
    auto_share_max_bits_lost: float = DEFAULT_AUTO_SHARE_MAX_BITS_LOST
    # Under the AUTO output mode, a model-output Concat whose members would lose more than this many
    # bits on one scale stays float (qtquant.quant.outputs): the Concat table, the simulator, the
    # fidelity check and the export all read it.
    float_output_max_bits_lost: float = DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST
    calib: CalibConfig = field(default_factory=CalibConfig)
    # tensor -> int16 / float (int8, the default, is never stored): qtquant.quant.precision
    precision: PrecisionMap = field(default_factory=PrecisionMap)
    # How model outputs export (--quantize-outputs / --float-outputs): the Concat table, the
    # simulator and the export read it from here, so they describe the same file.
    output_mode: OutputMode = OutputMode.AUTO
    # Model outputs the deployed model hands over as integers with their scales (its Dequantize removed,
    # the application dequantises them): the board estimate converts nothing on the CPU for them.
    int_outputs: tuple[str, ...] = ()
    # The board's BPU clock in GHz when it differs from the march's (the model zoo overclocks the X5's BPU
    # to 1.2 GHz for some tables): the board estimate's BPU part runs at it (perf/board.py); 0: the march's.
    board_bpu_ghz: float = 0.0

    def __post_init__(self) -> None:
        # Spelled as text by the CLI, the dialogs and project files: one typed value here.
        object.__setattr__(self, "scheme", Scheme.parse(self.scheme))
        if not isinstance(self.precision, PrecisionMap):
            object.__setattr__(self, "precision", PrecisionMap(self.precision))
        object.__setattr__(self, "policy", Policy(self.policy))
        for name in BITS_OPTIONS:
            object.__setattr__(self, name, bits_option(name, getattr(self, name)))
        object.__setattr__(self, "output_mode", OutputMode(self.output_mode))
        ints = (self.int_outputs,) if isinstance(self.int_outputs, str) else tuple(self.int_outputs or ())
        if not all(isinstance(t, str) and t for t in ints):
            raise BadInputError(f"int_outputs must be output tensor names, got {self.int_outputs!r}")
        object.__setattr__(self, "int_outputs", tuple(sorted(set(ints))))
        object.__setattr__(self, "board_bpu_ghz", board_clock(self.board_bpu_ghz))

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


# The options counted in bits lost, and what each one is (for messages and labels).
BITS_OPTIONS = {"auto_share_max_bits_lost": "auto-share threshold",
                "float_output_max_bits_lost": "float-output threshold"}


def _nonnegative(value: object) -> float:
    """``value`` as a float when it is a finite number ≥ 0 (no bool), else NaN."""
    try:
        v = float(value) if isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    return v if not isinstance(value, bool) and math.isfinite(v) and v >= 0 else math.nan


def board_clock(value: object) -> float:
    """The board's BPU clock option in GHz: a finite number ≥ 0 (0: the march's own clock), else bad input."""
    v = _nonnegative(value)
    if math.isnan(v):
        raise BadInputError(f"the board's BPU clock must be a number of GHz, 0 or more (0: the march's), got {value!r}")
    return v


def bits_option(name: str, value: object) -> float:
    """The bits-lost option ``name`` as a float; anything but a finite number ≥ 0 is bad input (one line)."""
    v = _nonnegative(value)
    if math.isnan(v):
        raise BadInputError(f"{name} (the {BITS_OPTIONS[name]}) must be a number of bits, 0 or more, got {value!r}")
    return v


def concat_rule(options: QuantOptions) -> ConcatScaleRule:
    """The Concat output-scale rule of the options' march (its profile states it)."""
    from ..perf import load_march  # cached per file: cheap on every rebuild

    return load_march(options.march).concat_output_scale


def domains_for(graph: Graph, calibration: CalibrationResult | None, options: QuantOptions, qdq: QdqInfo | None,
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
