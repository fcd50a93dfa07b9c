"""One side of a comparison or a budget check: a session as ``qtquant analyze`` opens and
measures it (the opening is the CLI's; see qtquant.cli.sides), and the figures read from it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app.session import Session
    from ..fidelity.report import Fidelity
    from ..perf.simulator import PerfResult

__all__ = ["Side", "SliceFigure", "slice_figures"]


@dataclass(frozen=True)
class SliceFigure:
    """One output, or one slice of a Concat output, against the float reference."""

    output: str
    label: str  # "output0" for the whole output, "output0[4:22]" for a slice
    sqnr_db: float | None  # None: not measured (no signal, or no check ran)
    whole: bool = False


def slice_figures(fidelity) -> list[SliceFigure]:
    """Every measured part of every output, as ``qtquant analyze`` prints them ("after" column)."""
    if fidelity is None:
        return []
    out = []
    for o in fidelity.outputs:
        of = fidelity.after[o]
        for k, f in enumerate([of.whole, *of.slices]):
            v = f.sqnr_db if f.measured and f.sqnr_db is not None and math.isfinite(f.sqnr_db) else None
            out.append(SliceFigure(o, f.label, v, whole=k == 0))
    return out


@dataclass
class Side:
    label: str  # "A", "B", "model", "baseline"
    path: Path
    session: Session
    perf: PerfResult | None = None  # None: not simulated
    fidelity: Fidelity | None = None  # None: no check ran
    plan: Path | None = None
    concats: list = field(default_factory=list)

    def __post_init__(self):
        if not self.concats:
            self.concats = self.session.concats()

    @property
    def name(self) -> str:
        return self.path.name + (f" + {self.plan.name}" if self.plan else "")

    @property
    def rescales(self) -> int:
        return sum(c.rescales for c in self.concats)

    @property
    def mismatched_concats(self) -> int:
        return sum(1 for c in self.concats if c.rescales)

    @property
    def latency_ms(self) -> float | None:
        return self.perf.total_ms if self.perf is not None and self.perf.total_us > 0 else None

    @property
    def board_latency_ms(self) -> float | None:
        """The board estimate (one thread: the static estimate plus the runtime's CPU work)."""
        return self.perf.board_ms if self.perf is not None and self.perf.total_us > 0 else None

    @property
    def rescale_us(self) -> float | None:
        return self.perf.rescale_us if self.perf is not None else None

    @property
    def slices(self) -> list[SliceFigure]:
        return slice_figures(self.fidelity)

    @property
    def worst_slice(self) -> SliceFigure | None:
        """The lowest measured figure over every output's slices (an output without slices: the whole)."""
        parts = [s for s in self.slices if s.sqnr_db is not None]
        by_output: dict[str, list] = {}
        for s in parts:
            by_output.setdefault(s.output, []).append(s)
        heads = [min((s for s in ss if not s.whole), key=lambda s: s.sqnr_db, default=None) or ss[0]
                 for ss in by_output.values()]
        return min(heads, key=lambda s: s.sqnr_db, default=None)

    @property
    def reference(self) -> str:
        return self.fidelity.reference if self.fidelity is not None else ""

    @property
    def basis(self) -> str:
        """What the figures rest on: samples and where the scales came from."""
        from ..files.report import calibration_text

        text = calibration_text(self.session)
        if self.fidelity is not None:
            text += f"; SQNR on {self.fidelity.sample_text} against {self.fidelity.reference}"
        return text
