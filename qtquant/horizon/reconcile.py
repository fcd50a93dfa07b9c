"""The compiler's requantize list beside qtquant's prediction, per Concat, and the static estimate
beside the simulator's.

For every Concat both know (its row is in the log and qtquant analyses it), each quantized input
is one of

- **agree**: both requantize it, or neither does;
- **missed**: the compiler requantizes it, qtquant predicted no rescale;
- **extra**: qtquant predicted a rescale the compiler does not make;

each with the thresholds that decide it: the compiler's for the input and for the Concat's
output (what the log prints, :class:`~qtquant.horizon.match.TensorThreshold`; None where the log
gives none) and qtquant's (the absolute maximum of the range its scale covers).
"""

from __future__ import annotations

from dataclasses import dataclass

from qtquant.base.vocab import StrEnum  # enum.StrEnum is Python 3.11's; 3.10 is supported
from qtquant.horizon.match import LogMatch

__all__ = ["Verdict", "InputVerdict", "ConcatReconciliation", "Reconciliation", "reconcile_concats",
           "EstimateComparison", "compare_estimate"]


class Verdict(StrEnum):
    AGREE = "agree"
    MISSED = "missed"
    EXTRA = "extra"


@dataclass(frozen=True)
class InputVerdict:
    index: int
    tensor: str
    compiler: bool
    """The log requantizes it in front of this Concat."""
    predicted: bool
    """qtquant predicts a rescale."""
    compiler_threshold: float | None
    qtquant_threshold: float | None
    inferred: bool = False
    """The compiler's threshold is inferred (no row prints it, the log does not requantize it): an
    agreement here follows from the list, it does not test qtquant's rule."""

    @property
    def verdict(self) -> Verdict:
        if self.compiler == self.predicted:
            return Verdict.AGREE
        return Verdict.MISSED if self.compiler else Verdict.EXTRA


@dataclass(frozen=True)
class ConcatReconciliation:
    node: str
    inputs: tuple[InputVerdict, ...]
    output: str
    compiler_output_threshold: float | None
    qtquant_output_threshold: float | None

    @property
    def compiler_list(self) -> tuple[str, ...]:
        return tuple(v.tensor for v in self.inputs if v.compiler)

    @property
    def predicted_list(self) -> tuple[str, ...]:
        return tuple(v.tensor for v in self.inputs if v.predicted)

    def count(self, verdict: Verdict) -> int:
        """Inputs with ``verdict``; for AGREE only the requantized ones both name (a Concat with
        nothing to requantize agrees on nothing)."""
        if verdict is Verdict.AGREE:
            return sum(1 for v in self.inputs if v.compiler and v.predicted)
        return sum(1 for v in self.inputs if v.verdict is verdict)

    @property
    def agrees(self) -> bool:
        return all(v.verdict is Verdict.AGREE for v in self.inputs)


@dataclass(frozen=True)
class Reconciliation:
    concats: tuple[ConcatReconciliation, ...]
    not_in_log: tuple[str, ...]
    """Concats qtquant analyses that the log has no row for (past the log's cut, say)."""
    elsewhere: tuple[str, ...]
    """Tensors the log requantizes that are no input of a reconciled Concat."""

    def total(self, verdict: Verdict) -> int:
        return sum(c.count(verdict) for c in self.concats)

    @property
    def inferred_inputs(self) -> int:
        """Inputs whose compiler threshold was inferred from the list (not a test of the rule)."""
        return sum(1 for c in self.concats for v in c.inputs if v.inferred)

    @property
    def compiler_total(self) -> int:
        return sum(len(c.compiler_list) for c in self.concats)

    @property
    def predicted_total(self) -> int:
        return sum(len(c.predicted_list) for c in self.concats)

    def of(self, node: str) -> ConcatReconciliation | None:
        return next((c for c in self.concats if c.node == node), None)


def reconcile_concats(match: LogMatch, concats) -> Reconciliation:
    """``concats``: qtquant's analysis (:func:`~qtquant.quant.concat.analyze_concats`, the session's)."""
    th = match.thresholds
    out: list[ConcatReconciliation] = []
    missing: list[str] = []
    seen: set[str] = set()
    for c in concats:
        if c.node not in match.nodes:
            missing.append(c.node)
            continue
        listed = set(match.requantized_for.get(c.node, ()))
        verdicts = []
        for m in c.inputs:
            if m.constant:
                continue
            seen.add(m.tensor)
            t = th.get(m.tensor)
            verdicts.append(InputVerdict(m.index, m.tensor, m.tensor in listed, bool(m.needs_rescale),
                                         t.threshold if t is not None else None, _absmax(m),
                                         t is not None and t.inferred))
        o = c.output
        out.append(ConcatReconciliation(c.node, tuple(verdicts), o.tensor,
                                        th[o.tensor].threshold if o.tensor in th else None, _absmax(o)))
    elsewhere = tuple(t for t in match.requantized if t not in seen)
    return Reconciliation(tuple(out), tuple(missing), elsewhere)


def _absmax(m) -> float | None:
    return m.absmax if m.scale is not None and m.absmax == m.absmax else None


@dataclass(frozen=True)
class EstimateComparison:
    """The log's static estimate beside the simulator's for the same graph."""

    log_latency_us: float
    sim_latency_us: float
    log_ddr_bytes: int
    sim_ddr_bytes: int | None
    log_subgraphs: int = 1
    """BPU subgraphs the log's figures add up (:class:`~qtquant.horizon.log.StaticEstimate`)."""

    @property
    def latency_error(self) -> float:
        """Signed relative error of the simulator against the log (0.1 = 10 % slower)."""
        return self.sim_latency_us / self.log_latency_us - 1.0

    @property
    def ddr_error(self) -> float | None:
        if self.sim_ddr_bytes is None or not self.log_ddr_bytes:
            return None
        return self.sim_ddr_bytes / self.log_ddr_bytes - 1.0


def compare_estimate(match: LogMatch, sim_latency_us: float, sim_ddr_bytes: int | None) -> EstimateComparison:
    e = match.log.estimate
    return EstimateComparison(e.latency_us, float(sim_latency_us), e.ddr_bytes, sim_ddr_bytes, e.subgraphs)
