"""What a calibration method search measured and chose (made by :mod:`qtquant.app.calibsearch`).

Every figure is the worst output slice's SQNR of the exported model (onnxruntime, default
options) against the float model on the check samples, as the fidelity check measures it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..base.tables import samples_text
from .methods import Method, MethodChoice

__all__ = ["MethodScore", "NodeStep", "SearchReport"]


def _num(x: float):
    return round(float(x), 4) if x is not None and math.isfinite(x) else None


def _db(x: float) -> str:
    return f"{x:.2f} dB" if math.isfinite(x) else "no figure"


@dataclass(frozen=True)
class MethodScore:
    """One method on the whole model."""

    method: Method
    worst_label: str
    worst_db: float  # NaN: no output slice carries signal
    seconds: float

    def to_dict(self) -> dict:
        return {**self.method.to_dict(), "method": self.method.label, "worst_slice": self.worst_label or None,
                "worst_sqnr_db": _num(self.worst_db), "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class NodeStep:
    """One kept step of a per-node search: ``tensor`` changed to ``method``."""

    tensor: str
    method: Method
    worst_db: float  # the worst slice once the step is kept

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, **self.method.to_dict(), "method": self.method.label,
                "worst_sqnr_db": _num(self.worst_db)}


@dataclass
class SearchReport:
    per_node: bool
    samples: int
    in_sample: bool
    scores: list[MethodScore] = field(default_factory=list)  # every candidate, in trial order
    choice: MethodChoice = field(default_factory=MethodChoice)
    final_label: str = ""
    final_db: float = math.nan
    steps: list[NodeStep] = field(default_factory=list)  # per node: the kept steps, in order
    tensors_tried: int = 0  # per node: tensors whose alternatives were measured
    tensors_open: int = 0  # per node: tensors some method gives another range
    unchanged: int = 0  # per node: alternatives not measured (their export is the current one)
    budget_s: float = 0.0
    seconds: float = 0.0  # the whole search, float reference included
    runs: int = 0  # exported models measured
    note: str = ""  # why the search could not judge (no slice carries signal), else ""

    @property
    def ranked(self) -> list[MethodScore]:
        """Best first by worst-slice SQNR (the choice is :attr:`choice`: on near-ties the earlier candidate)."""
        key = lambda s: -s.worst_db if math.isfinite(s.worst_db) else math.inf  # noqa: E731
        return sorted(self.scores, key=key)

    @property
    def chosen(self) -> MethodScore | None:
        return next((s for s in self.scores if s.method == self.choice.model), None)

    @property
    def runner_up(self) -> MethodScore | None:
        rest = [s for s in self.ranked if s.method != self.choice.model]
        return rest[0] if rest else None

    @property
    def sample_text(self) -> str:
        return samples_text(self.samples, self.in_sample)

    def summary(self) -> str:
        """One line: the note calibration results carry."""
        c, r = self.chosen, self.runner_up
        head = f"observer chosen by search: {self.choice.model.label}"
        if c is not None:
            head += f" (worst slice {_db(c.worst_db)}"
            head += f"; runner-up {r.method.label} {_db(r.worst_db)})" if r is not None else ")"
        if self.per_node:
            head += (f"; per node: {len(self.choice.per_tensor)} tensors changed, worst slice "
                     f"{_db(self.final_db)}")
        return head + f"; {self.sample_text}"

    def text(self) -> str:
        from ..base.tables import text_table

        kind = "per-node method search" if self.per_node else "method search"
        lines = [f"calibration {kind} ({self.sample_text}; worst output slice of the exported model, onnxruntime "
                 f"default options; {self.runs} runs, {self.seconds:.1f} s)"]
        if self.in_sample:
            lines.append("note: judged on the calibration samples themselves (too few to hold some back): "
                         "the choice may fit them better than new data")
        if self.note:
            lines.append(f"note: {self.note}")
        rows = [(s.method.label, s.worst_label or "-", _db(s.worst_db), f"{s.seconds:.2f}",
                 "chosen" if s.method == self.choice.model else "") for s in self.ranked]
        lines.append(text_table(rows, ("method", "worst slice", "SQNR", "s", ""), "llrrl", rule=True))
        r = self.runner_up
        lines.append(f"chosen: {self.choice.model.label}" + (f" (runner-up {r.method.label}, {_db(r.worst_db)})"
                                                               if r is not None else ""))
        if self.per_node:
            same = f" ({self.unchanged} alternatives left the export as it was)" if self.unchanged else ""
            lines.append(f"per node (budget {self.budget_s:g} s): {self.tensors_tried} of {self.tensors_open} "
                         f"tensors with another range tried{same}, {len(self.steps)} changed; worst slice "
                         f"{self.final_label or '-'} {_db(self.final_db)}")
            for st in self.steps[:12]:
                lines.append(f"  {st.tensor}: {st.method.label} -> {_db(st.worst_db)}")
            if len(self.steps) > 12:
                lines.append(f"  ... {len(self.steps) - 12} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        c, r = self.chosen, self.runner_up
        return {"per_node": self.per_node, "samples": self.samples, "held_out": not self.in_sample,
                "chosen": self.choice.model.label, "chosen_sqnr_db": _num(c.worst_db) if c else None,
                "runner_up": r.method.label if r else None, "runner_up_sqnr_db": _num(r.worst_db) if r else None,
                "methods": [s.to_dict() for s in self.scores],
                "per_tensor": {t: m.label for t, m in sorted(self.choice.per_tensor.items())},
                "steps": [s.to_dict() for s in self.steps], "tensors_tried": self.tensors_tried,
                "tensors_open": self.tensors_open, "unchanged": self.unchanged, "budget_s": self.budget_s,
                "final_worst_slice": self.final_label or None, "final_sqnr_db": _num(self.final_db),
                "seconds": round(self.seconds, 3), "runs": self.runs, "note": self.note or None}
