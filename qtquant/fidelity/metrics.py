"""Error figures between a float reference and a test tensor: SQNR, cosine, max abs error.

:class:`ErrorSums` accumulates sums, not arrays, so a check over many samples keeps one
small record per output slice whatever the sample count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..base.vocab import Blank

__all__ = ["sqnr_db", "signal_noise_db", "cosine", "ErrorSums", "AgreementSums", "Figure", "no_signal_reason",
           "sums_for", "FLOAT_MODEL", "LOW_SQNR_DB"]


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """10·log10(Σref² / Σ(ref−test)²); +inf when identical."""
    ref = np.asarray(ref, dtype=np.float64).ravel()
    test = np.asarray(test, dtype=np.float64).ravel()
    return signal_noise_db(float(np.sum(ref ** 2)), float(np.sum((ref - test) ** 2)))


def signal_noise_db(signal: float, noise: float) -> float:
    """10·log10(signal / noise) of two sums of squares; +inf without noise."""
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _cos(dot: float, na2: float, nb2: float) -> float:
    if na2 == 0.0 and nb2 == 0.0:
        return 1.0
    if na2 == 0.0 or nb2 == 0.0:
        return 0.0
    return float(dot / math.sqrt(na2 * nb2))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return _cos(float(_sum_of_products(a, b)), float(_sum_of_products(a, a)), float(_sum_of_products(b, b)))


@dataclass
class Figure:
    """One measured part: a model output or one slice of it."""

    label: str
    sqnr_db: float | None  # None when the reference carries no signal (see ``no_signal``)
    cosine: float | None
    max_abs: float | None
    samples: int
    no_signal: str = ""  # the sentence shown instead of a number
    blank: Blank | None = None  # why there is no number: set with ``no_signal``, never alone
    # Blank.AGREEMENT (an integer output): the share of its elements equal to the float model's,
    # and the samples on which all of them are
    agreement: float | None = None
    equal_samples: int | None = None

    def __post_init__(self):
        if bool(self.no_signal) != (self.blank is not None):
            raise ValueError("a figure said in words needs both its word (blank) and its sentence (no_signal)")

    @property
    def measured(self) -> bool:
        return self.blank is None

    @property
    def lost(self) -> bool:
        """Measured under :data:`LOW_SQNR_DB`: the output is lost in all but name."""
        return self.blank is None and self.sqnr_db is not None and math.isfinite(self.sqnr_db) \
            and self.sqnr_db < LOW_SQNR_DB

    @property
    def word(self) -> str:
        """What a table cell shows instead of the number ("no signal", "identical", "15/16 equal");
        "" when measured."""
        if self.blank is Blank.AGREEMENT:
            return f"{self.equal_samples}/{self.samples} equal"
        return self.blank.value if self.blank is not None else ""

    def to_dict(self) -> dict:
        def num(x):
            return x if x is not None and math.isfinite(x) else (None if x is None or math.isnan(x)
                                                                   else ("inf" if x > 0 else "-inf"))

        d = {"label": self.label, "samples": self.samples, "sqnr_db": num(self.sqnr_db),
             "cosine": num(self.cosine), "max_abs_error": num(self.max_abs)}
        if self.no_signal:
            d["no_signal"] = self.blank is Blank.NO_SIGNAL
            if self.blank is Blank.IDENTICAL:
                d["identical"] = True
            if self.blank is Blank.AGREEMENT:
                d["agreement"] = self.agreement
                d["equal_samples"] = self.equal_samples
            d["reason"] = self.no_signal
        return d


FLOAT_MODEL = "the float model"  # what a figure compares with, unless told otherwise
# Under this the signal is less than ten times the error: an output this low is lost in all but
# name, and where a model's cumulative SQNR first falls below it is where to look.
LOW_SQNR_DB = 10.0


def no_signal_reason(lo: float, hi: float, step: float | None, samples: int, reference: str = FLOAT_MODEL) -> str:
    """A sentence when the reference's spread over the samples is below one quantization step."""
    spread = hi - lo
    if not math.isfinite(spread) or spread <= 0.0:
        return (f"no signal: {reference}'s output is constant ({lo:.3g}) on the {samples} check "
                "sample(s); calibrate and check on representative data")
    if step is not None and step > 0 and spread < step:
        return (f"no signal: {reference}'s output varies by {spread:.3g}, less than one quantization "
                f"step ({step:.3g}), on the {samples} check sample(s); use representative data")
    return ""


def _sum_of_products(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b in float64, on this thread, the same bits on every machine."""
    return np.add.reduce(np.multiply(a, b))


class ErrorSums:
    """Running sums over samples for one part of an output."""

    __slots__ = ("ref2", "err2", "dot", "test2", "max_abs", "lo", "hi", "count", "samples")

    def __init__(self):
        self.ref2 = self.err2 = self.dot = self.test2 = self.max_abs = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.count = self.samples = 0

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        r = np.asarray(ref, dtype=np.float64).ravel()
        t = np.asarray(test, dtype=np.float64).ravel()
        e = r - t
        # numpy's pairwise sums, not np.dot: BLAS splits a long dot over its threads, so the last
        # bits of a figure depended on the core count, and on a loaded machine its spinning threads
        # made one output's sums take 0.1-0.9 s (the GUI's refresh after an edit waited on them).
        self.ref2 += float(_sum_of_products(r, r))
        self.err2 += float(_sum_of_products(e, e))
        self.dot += float(_sum_of_products(r, t))
        self.test2 += float(_sum_of_products(t, t))
        if r.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(e))))
            self.lo, self.hi = min(self.lo, float(r.min())), max(self.hi, float(r.max()))
        self.count += r.size
        self.samples += 1

    @property
    def sqnr(self) -> float:
        return signal_noise_db(self.ref2, self.err2)

    @property
    def cos(self) -> float:
        return _cos(self.dot, self.ref2, self.test2)

    def figure(self, label: str, step: float | None = None, reference: str = FLOAT_MODEL,
               test: str | None = None) -> Figure:
        """The figure of the sums.  ``reference``, ``test``: what the sentences call the two sides
        (default: the float model and the quantized model, whose being identical is explained)."""
        reason = no_signal_reason(self.lo, self.hi, step, self.samples, reference)
        blank = Blank.NO_SIGNAL if reason else None
        if not reason and self.samples and self.err2 == 0.0:
            blank = Blank.IDENTICAL
            # An infinite SQNR says nothing a reader can use: in words, and left out of comparisons.
            if test is None:
                reason = (f"identical: the quantized model's output equals {reference}'s on the {self.samples} "
                          "check sample(s); no quantization reaches it (a model that computes inside If/Loop "
                          "subgraphs, which are not quantized, or an output kept in float)")
            else:
                reason = f"identical: {test}'s output equals {reference}'s on the {self.samples} sample(s)"
        if reason:
            return Figure(label, None, None, self.max_abs, self.samples, reason, blank)
        return Figure(label, self.sqnr, self.cos, self.max_abs, self.samples)


def _is_integer(value) -> bool:
    """An output compared by agreement, not SQNR: integer or bool values (ArgMax, TopK indices)."""
    kind = np.asarray(value).dtype.kind
    return kind in "iub"


class AgreementSums:
    """Running counts over samples for an integer output: an ArgMax's class is right or wrong, and
    an SQNR of class numbers would measure nothing.  :meth:`add` and :meth:`figure` as
    :class:`ErrorSums` (``sums_for`` picks one of the two by the output's values)."""

    __slots__ = ("equal", "count", "samples", "equal_samples", "values", "lo", "hi")

    def __init__(self):
        self.equal = self.count = self.samples = self.equal_samples = 0
        self.values: set = set()  # the reference's distinct values, up to two
        self.lo, self.hi = math.inf, -math.inf

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        r, t = np.asarray(ref).ravel(), np.asarray(test).ravel()
        same = int(np.count_nonzero(r == t)) if r.shape == t.shape else 0
        self.equal += same
        self.count += r.size
        self.samples += 1
        self.equal_samples += same == r.size
        if r.size:
            if len(self.values) < 2:
                self.values.update(np.unique(r[:4096]).tolist())
            self.lo, self.hi = min(self.lo, float(r.min())), max(self.hi, float(r.max()))

    def figure(self, label: str, step: float | None = None, reference: str = FLOAT_MODEL,
               test: str | None = None) -> Figure:
        """As :meth:`ErrorSums.figure` (no step applies; the sentence names the reference only)."""
        share = self.equal / self.count if self.count else 1.0
        n, k = self.samples, self.equal_samples
        said = (f"an integer output (a class or an index) has no SQNR: it equals the output of {reference} on {k} "
                f"of the {n} check sample(s) ({share:.1%} of its elements)")
        if len(self.values) < 2:
            said += (f"; the output of {reference} is one value on every sample, so agreement says little: "
                     "use representative data")
        return Figure(label, None, None, None, n, said, Blank.AGREEMENT, share, k)


def sums_for(value) -> "ErrorSums | AgreementSums":
    """The accumulator for an output whose values look like ``value``: agreement for integers and
    bools, else SQNR sums."""
    return AgreementSums() if _is_integer(value) else ErrorSums()
