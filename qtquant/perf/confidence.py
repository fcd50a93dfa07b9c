"""How sure an estimate is: the march fit's leave-one-out error on the figures nearest the model.

A fitted profile keeps, per figure, what the fit predicted for it when that figure was left out
(``"fit": {"errors": [...]}``, perf/fit.py).  The figures nearest a model are those of its family
(:func:`family_of`) and of the same kind (a static estimate is judged on compile-log figures, a board
estimate on board figures); the median of their leave-one-out |error| is the ±N% the report prints beside
the total.  With no such figure the report says so instead of guessing.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..base.vocab import TensorKind
from .macs import shape_of
from .march import FigureKind

__all__ = ["family_of", "Confidence", "confidence", "NO_FIGURE"]

NO_FIGURE = "no figure of this kind in the fit"
_ACTS = (TensorKind.INPUT, TensorKind.ACTIVATION)


def family_of(graph) -> str:
    """What kind of network a graph is: attention or convolution (a MatMul of two activations is
    attention; a lone Softmax is not: a detector's DFL has one), and classifier (no output is a spatial
    map) or dense (detection, segmentation: some output is a map)."""
    def act(t):
        v = graph.tensors.get(t) if t else None
        return v is not None and v.kind in _ACTS

    attention = any(n.op_type == "MatMul" and len(n.inputs) >= 2 and act(n.inputs[0]) and act(n.inputs[1])
                    for n in graph.nodes.values())

    def is_map(t):
        s = shape_of(graph, t)
        return s is not None and len(s) >= 3 and math.prod(s[2:]) > 1

    dense = any(is_map(t) for t in graph.outputs)
    return f"{'attention' if attention else 'conv'} {'dense' if dense else 'classifier'}"


@dataclass(frozen=True)
class Confidence:
    kind: FigureKind
    family: str
    median_loo: float | None  # median |leave-one-out error| (a fraction); None: no figure of the kind
    figures: int

    @property
    def text(self) -> str:
        if self.median_loo is None:
            return NO_FIGURE
        return (f"±{self.median_loo * 100:.0f}% (median leave-one-out error of {self.figures} "
                f"{self.family} {self.kind.value} figure{'s' if self.figures != 1 else ''} of the fit)")

    @property
    def short(self) -> str:
        return "no fit figure like it" if self.median_loo is None else f"±{self.median_loo * 100:.0f}%"

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "family": self.family, "median_loo_error": self.median_loo,
                "figures": self.figures}


def confidence(march, family: str, kind: FigureKind) -> Confidence:
    """The march fit's leave-one-out error on the figures of ``family`` and ``kind``."""
    errs = [abs(e.loo_error) for e in getattr(march, "fit_errors", ())
            if e.kind is kind and e.family == family and e.loo_error is not None]
    return Confidence(kind, family, statistics.median(errs) if errs else None, len(errs))
