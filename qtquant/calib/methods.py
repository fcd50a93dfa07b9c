"""Calibration methods as values, and the ranges a method search chose.

A :class:`Method` is one observer with its setting (``percentile 99.99``).  :data:`CANDIDATES` are
the methods ``--observer search`` tries on the whole model, as the X5 toolchain's default
calibration ("modelwise search": max, KL, max-percentile) does.  Every candidate reads only the
statistics (a full histogram per tensor), so trying one costs a run of the exported model on the
check samples, never a second calibration pass.

:class:`MethodChoice` is what a search decided: one method for the model and, for
``search-per-node``, another for some tensors.  A calibration result that holds one computes its
ranges from it (:func:`choice_ranges`), so switching the scheme or re-reading the statistics keeps
the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.vocab import DEFAULT_PERCENTILE, Observer
from .observers import observe
from .stats import TensorStats

__all__ = ["Method", "CANDIDATES", "MINMAX", "SEARCH_OBSERVERS", "MethodChoice", "choice_ranges"]


@dataclass(frozen=True, order=True)
class Method:
    observer: str
    percentile: float = DEFAULT_PERCENTILE  # read by the percentile observer only

    @property
    def label(self) -> str:
        return f"{self.observer} {self.percentile:g}" if self.observer == Observer.PERCENTILE else str(self.observer)

    def __str__(self) -> str:
        return self.label

    def ranges(self, stats: TensorStats, scheme: str) -> tuple[float, float] | None:
        return observe(stats, self.observer, scheme, self.percentile)

    def to_dict(self) -> dict[str, str | float]:
        d: dict[str, str | float] = {"observer": str(self.observer)}
        if self.observer == Observer.PERCENTILE:
            d["percentile"] = self.percentile
        return d


MINMAX = Method(Observer.MINMAX.value)
# MinMax first: on a tie the search keeps the range that clips nothing.  99.995 is the method the X5
# toolchain's own search selected for every model in its compile logs ("Select
# max-percentile:percentile=0.99995 method"; its statistic is not documented to be this |x| one).
CANDIDATES = (MINMAX, *(Method(Observer.PERCENTILE.value, p) for p in (99.9, 99.99, 99.995, 99.999)),
              Method(Observer.MSE.value), Method(Observer.KL.value))
SEARCH_OBSERVERS = (Observer.SEARCH.value, Observer.SEARCH_PER_NODE.value)


@dataclass(frozen=True)
class MethodChoice:
    """The model's method and the tensors a per-node search gave another."""

    model: Method = MINMAX
    per_tensor: dict[str, Method] = field(default_factory=dict)

    def of(self, tensor: str) -> Method:
        return self.per_tensor.get(tensor, self.model)


def choice_ranges(stats: dict[str, TensorStats], choice: MethodChoice, scheme: str) -> dict[str, tuple[float, float]]:
    """Every tensor's range under its chosen method (``MethodChoice(method)``: one method for all)."""
    out = {}
    for n, s in stats.items():
        r = choice.of(n).ranges(s, scheme)
        if r is not None:
            out[n] = r
    return out
