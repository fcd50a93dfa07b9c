"""The vocabulary: every enum and default the core, the CLI, the GUI and the files share.

One definition each.  The CLI's choices, the dialogs' lists and the project files derive from
here, so a name can only be spelled one way.  This module imports nothing of the project: every
layer may use it.

The string-valued kinds are :class:`StrEnum`: a member equals, hashes, prints and serialises as
its value, so code and files that still compare or store the plain strings keep working.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["StrEnum", "Scheme", "SCHEME_NAMES", "scheme_name", "Policy", "Observer", "OBSERVERS", "RESIZE_MODES",
           "COLOR_ORDERS", "PIXEL_RANGES", "LAYOUTS", "Overlay", "OVERLAYS", "TensorKind", "JobStatus",
           "ShareAction", "Blank", "Precision", "PRECISIONS", "CostClass", "ConcatScaleRule",
           "DEFAULT_SCHEME", "DEFAULT_POLICY", "DEFAULT_OBSERVER", "DEFAULT_SEARCH_BUDGET_S", "DEFAULT_MARCH",
           "DEFAULT_CALIB_COUNT", "DEFAULT_PERCENTILE", "DEFAULT_AUTO_SHARE_MAX_BITS_LOST",
           "DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST", "SYNTHETIC"]


class StrEnum(str, Enum):
    """``enum.StrEnum`` (Python 3.11), which the supported 3.10 lacks."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # str's, as StrEnum has: the value, not the member


class Scheme(Enum):
    SYMMETRIC_INT8 = "int8-sym"  # Horizon default: zero point 0, scale = absmax / 127
    ASYMMETRIC_UINT8 = "uint8-asym"  # onnxruntime / TFLite style

    @property
    def short(self) -> str:
        """``sym`` / ``asym``: how ``--scheme`` and ``CalibConfig.scheme`` spell it."""
        return "sym" if self is Scheme.SYMMETRIC_INT8 else "asym"

    @classmethod
    def parse(cls, text: object) -> "Scheme":
        """Any spelling in use (``int8-sym``, ``symmetric_int8``, ``sym``, a Scheme), any case."""
        if isinstance(text, cls):
            return text
        t = str(text).strip().lower()
        for s in cls:
            if t in (s.value, s.name.lower(), s.short):
                return s
        raise ValueError(text)


SCHEME_NAMES = tuple(s.short for s in Scheme)


def scheme_name(value: object) -> str:
    """The short name (``sym`` / ``asym``) of any spelling of a scheme; ValueError otherwise."""
    return Scheme.parse(value).short


class Policy(Enum):
    UNION = "union"  # min of mins, max of maxes (NNCF, ModelOpt)
    OUTPUT = "output"  # the Concat output's own calibrated range (TFLite, ONE, AIMET)
    MAX_INPUT = "max-input"  # the widest input range (DLA qdq-translator)
    POOLED = "pooled"  # percentile over the members' merged histograms (ModelOpt entropy)


class Observer(StrEnum):
    MINMAX = "minmax"
    MA_MINMAX = "ma-minmax"
    PERCENTILE = "percentile"
    MSE = "mse"
    KL = "kl"
    # Not observers themselves: the calibration tries the ones above and keeps what the exported
    # model measures best with, for the whole model or per tensor (qtquant.app.calibsearch).
    SEARCH = "search"
    SEARCH_PER_NODE = "search-per-node"


OBSERVERS = tuple(o.value for o in Observer)


# Image preprocessing choices (the first of each is the default).
RESIZE_MODES = ("stretch", "letterbox", "center-crop")
COLOR_ORDERS = ("rgb", "bgr")
PIXEL_RANGES = ("0-1", "0-255")
LAYOUTS = ("nchw", "nhwc")


class Overlay(StrEnum):
    """What the canvas colours nodes by."""

    NONE = "none"
    LATENCY = "latency"
    MISMATCH = "mismatch"
    BITS = "bits"
    ERROR = "error"  # SQNR per node from the accuracy check (cumulative, or local by a toggle)
    COSINE = "cosine"  # the compile log's cosine similarity per node (qtquant.horizon)

    @property
    def label(self) -> str:
        return {"none": "None", "latency": "Latency", "mismatch": "Mismatch", "bits": "Bits lost",
                "error": "Error (SQNR)", "cosine": "Compiler cosine"}[self.value]


OVERLAYS = tuple(o.value for o in Overlay)


class TensorKind(StrEnum):
    INPUT = "input"  # a float model input
    WEIGHT = "weight"  # a float constant (initializer, Constant, or folded from constants)
    ACTIVATION = "activation"  # a float value computed at run time
    SHAPE = "shape"  # integer/bool values: shapes, indices, masks (never quantized)


class JobStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    STALE = "stale"  # finished, but the session changed meanwhile
    CANCELLED = "cancelled"
    FAILED = "failed"


class ShareAction(StrEnum):
    """What auto-share decided for one Concat."""

    GROUPED = "grouped"
    SKIPPED = "skipped"
    ALREADY = "already"  # its members already share one domain


class Blank(StrEnum):
    """Why an accuracy figure is said in words instead of a number (a table cell shows the value)."""

    NO_SIGNAL = "no signal"  # the float reference varies by less than one quantization step
    IDENTICAL = "identical"  # nothing quantized reaches the output: an infinite SQNR tells nothing
    # An integer output (ArgMax's class, TopK's indices) has no SQNR: how often it equals the float
    # model's is said instead (metrics.AgreementSums).
    AGREEMENT = "agreement"


class RankedBy(StrEnum):
    """What the sensitivity ranking's gains are measured in: the worst float slice's SQNR, or, for a
    model whose outputs are all integer (an ArgMax's class or mask), the share of the elements of
    its least-agreeing output that equal the float model's (a gain in percentage points)."""

    SQNR = "sqnr"
    AGREEMENT = "agreement"

    @property
    def gain_unit(self) -> str:
        return "dB" if self is RankedBy.SQNR else "pp"

    def value_text(self, value: float) -> str:
        """A worst value with its unit: "12.46 dB", "93.75% equal"."""
        return f"{value:.2f} dB" if self is RankedBy.SQNR else f"{value:.2f}% equal"


class Precision(StrEnum):
    """What a tensor (or the node producing it) is computed in on the target.

    INT8 is the default for every quantized tensor; INT16 costs more on the BPU; FLOAT means no Q/DQ
    on export and, on the target, the producing node runs on the CPU.
    """

    INT8 = "int8"
    INT16 = "int16"
    FLOAT = "float"

    @property
    def label(self) -> str:
        return {"int8": "int8", "int16": "int16", "float": "float (CPU)"}[self.value]


PRECISIONS = tuple(p.value for p in Precision)


class CostClass(Enum):
    """How the perf simulator prices an op (DESIGN §4); declared per op in the op registry."""

    COMPUTE = "compute"  # MACs on the MAC array, channel alignment, fused chains
    MEMORY = "memory"  # bytes moved, or elements streamed through the vector unit
    VIEW = "view"  # no data moved
    SPLIT = "split"  # a view on the channel axis, else a memory op
    CONCAT = "concat"  # a copy, unless the Concat analysis says it is done in place


class ConcatScaleRule(StrEnum):
    """How a target's compiler picks a Concat's output scale; stated per march in its profile."""

    OWN = "own"  # the output keeps its own calibrated scale; every input that differs is rescaled
    # The output takes the scale of its widest input; only the others are requantized.
    WIDEST_INPUT = "widest-input"
    # RDK X5 (hb_mapper/hbdk, learned from its compile logs, docs/perf-model.md): the output keeps
    # its own scale; an input made by a computing layer for this Concat alone (other readers only
    # ops that move values) is written at that scale by its layer; every other input whose scale
    # differs is requantized (the log's <tensor>_calibrated_Requantize): qtquant.quant.concatwrite.
    PRODUCERS_WRITE = "producers-write"


DEFAULT_SCHEME = Scheme.SYMMETRIC_INT8
DEFAULT_POLICY = Policy.UNION
DEFAULT_OBSERVER = Observer.MINMAX
DEFAULT_MARCH = "bayes-e"
DEFAULT_CALIB_COUNT = 16  # --calib-count, CalibConfig.count and the GUI's "Samples"
# The calibration source that is no data: --calib's default, CalibConfig.source, the statistics
# file's "source" and the GUI's first choice (seeded uniform samples, see calib.sources.SyntheticSource).
SYNTHETIC = "synthetic"
DEFAULT_PERCENTILE = 99.99
DEFAULT_SEARCH_BUDGET_S = 60.0  # --observer search-per-node's time budget (--search-budget)
# Two rules in bits lost (qtquant.model.scales.bits_lost: how much of a member's int8 precision one
# shared scale costs it), each with its own option:
# auto-share shares a Concat when no member would lose more than this (--auto-share-max-bits-lost)
DEFAULT_AUTO_SHARE_MAX_BITS_LOST = 1.0
# a model-output Concat whose members would lose more than this on one scale stays float when
# model outputs export by the default rule (--float-output-max-bits-lost; qtquant.quant.outputs)
DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST = 1.0
