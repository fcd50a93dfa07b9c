"""A progress line on stderr for the long commands (calibrate, accuracy), rewritten in place."""

from __future__ import annotations

import sys

__all__ = ["ProgressLine", "StageProgress"]


class ProgressLine:
    """``line(done, total)``: "LABEL: done/total UNIT" at most ~20 times, only on a terminal (a
    log or a pipe gets the results alone)."""

    def __init__(self, label: str, unit: str, quiet: bool = False):
        self.label, self.unit = label, unit
        self.quiet, self.last = quiet or not sys.stderr.isatty(), -1

    def __call__(self, done: int, total: int) -> None:
        step = max(1, total // 20)
        if self.quiet or (done != total and done // step == self.last):
            return
        self.last = done // step
        sys.stderr.write(f"\r{self.label}: {done}/{total} {self.unit}\033[K")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class StageProgress:
    """``progress(stage, done, total)`` as :func:`qtquant.fidelity.accuracy.analyze_accuracy` reports it:
    one :class:`ProgressLine` per stage (PP-OCR's ranking ran four silent minutes)."""

    def __init__(self, label: str, units: dict[str, str], quiet: bool = False):
        self.label, self.units, self.quiet = label, units, quiet
        self.lines: dict[str, ProgressLine] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        line = self.lines.get(stage)
        if line is None:
            line = self.lines[stage] = ProgressLine(f"{self.label} ({stage})", self.units.get(stage, ""), self.quiet)
        line(done, total)
