"""A budget a quantized model must meet in CI (``qtquant check``): read from TOML, checked
against a measured :class:`~qtquant.compare.sides.Side`, written as lines, JSON and JUnit XML.

Every key is optional::

    max_rescales = 10             # requantize nodes the compiler inserts before Concats
    max_mismatched_concats = 5    # Concats with at least one rescaled input
    max_latency_ms = 1.0          # the perf model's static estimate on --march
    max_board_latency_ms = 2.0    # its board estimate (one thread: static + the runtime's CPU work)
    min_sqnr_db = 20.0            # the worst output slice against the float reference
    baseline = "last_release.onnx"   # a plan (.json), a project (.qtquant) or a QDQ file
    no_worse_than_baseline = true    # then none of the four figures may be worse than the baseline's

A budget file that cannot be read, has unknown keys or values of the wrong type is bad input
(exit 3), as a bad plan is: the command line itself was well formed."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from ..base.errors import BadInputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from .sides import Side

__all__ = ["Budget", "BudgetError", "LimitResult", "CheckResult", "check_budget", "SQNR_TOLERANCE_DB",
           "LATENCY_TOLERANCE_MS"]

# "No worse than the baseline" allows what printing rounds away, no more: the measurements are
# deterministic (one seed, one sample set), so anything larger is a real change.
SQNR_TOLERANCE_DB = 0.005
LATENCY_TOLERANCE_MS = 0.0005


class BudgetError(BadInputError):
    """A budget file that cannot be used."""


# key -> (accepted types, what the message calls them)
_KEYS = {
    "max_rescales": ((int,), "a whole number"),
    "max_mismatched_concats": ((int,), "a whole number"),
    "max_latency_ms": ((int, float), "a number"),
    "max_board_latency_ms": ((int, float), "a number"),
    "min_sqnr_db": ((int, float), "a number"),
    "baseline": ((str,), "a path in quotes"),
    "no_worse_than_baseline": ((bool,), "true or false"),
}


@dataclass(frozen=True)
class Budget:
    path: Path
    max_rescales: int | None = None
    max_mismatched_concats: int | None = None
    max_latency_ms: float | None = None
    max_board_latency_ms: float | None = None
    min_sqnr_db: float | None = None
    baseline: Path | None = None  # resolved against the budget file's folder
    no_worse_than_baseline: bool = False

    @classmethod
    def load(cls, path) -> "Budget":
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BudgetError(f"budget: no such file: {p}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise BudgetError(f"budget {p}: cannot read it ({e})") from None
        except tomllib.TOMLDecodeError as e:
            raise BudgetError(f"budget {p}: not valid TOML ({e})") from None
        return cls.from_dict(data, p)

    @classmethod
    def from_dict(cls, data: dict, path: Path) -> "Budget":
        unknown = [k for k in data if k not in _KEYS]
        if unknown:
            raise BudgetError(f"budget {path}: unknown key{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(map(repr, unknown))} (known: {', '.join(_KEYS)})")
        for k, v in data.items():
            types, what = _KEYS[k]
            # (bool is an int in Python: true is no count of rescales)
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                raise BudgetError(f"budget {path}: {k} must be {what}, not {_toml_repr(v)}")
            if isinstance(v, float) and not math.isfinite(v):
                raise BudgetError(f"budget {path}: {k} must be a finite number, not {v}")
            if k.startswith("max_") and isinstance(v, (int, float)) and v < 0:
                raise BudgetError(f"budget {path}: {k} must not be negative, not {v}")
        if data.get("no_worse_than_baseline") and "baseline" not in data:
            raise BudgetError(f"budget {path}: no_worse_than_baseline needs baseline = \"PATH\"")
        baseline = None
        if "baseline" in data:
            baseline = Path(data["baseline"])
            if not baseline.is_absolute():
                baseline = path.parent / baseline
            if not baseline.is_file():
                raise BudgetError(f"budget {path}: baseline {data['baseline']!r}: no such file ({baseline})")
        limits: dict[str, Any] = {k: (float(v) if _KEYS[k][0] == (int, float) else v)
                                  for k, v in data.items() if k != "baseline"}
        return cls(path=path, baseline=baseline, **limits)



def _toml_repr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    return str(v)


@dataclass(frozen=True)
class LimitResult:
    limit: str  # the budget key ("no_worse_than_baseline.rescales" for a figure against the baseline)
    value: float | None  # the model's figure (None: not measured)
    bound: float | None
    ok: bool
    unit: str = ""
    why: str = ""  # why a figure is missing, or what it is measured against

    @property
    def value_text(self) -> str:
        return "not measured" if self.value is None else _fmt(self.value, self.unit)

    @property
    def bound_text(self) -> str:
        return "-" if self.bound is None else _fmt(self.bound, self.unit)

    def line(self) -> str:
        op = ">=" if self.limit.endswith("sqnr_db") or self.limit == "min_sqnr_db" else "<="
        head = f"{self.limit}: {self.value_text} (limit {op} {self.bound_text})"
        return f"{head}: {'ok' if self.ok else 'BROKEN'}" + (f" ({self.why})" if self.why else "")

    def to_dict(self) -> dict:
        return {"limit": self.limit, "value": self.value, "bound": self.bound, "ok": self.ok, "unit": self.unit,
                "why": self.why or None}


def _fmt(v: float, unit: str) -> str:
    if unit == "ms":
        return f"{v:.3f} ms"
    if unit == "dB":
        return f"{v:.2f} dB"
    return f"{int(v)}"


@dataclass
class CheckResult:
    side: Side  # the measured model
    budget: Budget
    results: list[LimitResult] = field(default_factory=list)
    baseline: Side | None = None  # the measured baseline, when the budget names one

    @property
    def passed(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def broken(self) -> list[LimitResult]:
        return [r for r in self.results if not r.ok]

    def lines(self) -> list[str]:
        out = [r.line() for r in self.results]
        if not self.results:
            out.append(f"budget {self.budget.path}: no limits set")
        out.append(f"{'passed' if self.passed else 'FAILED'}: {len(self.results) - len(self.broken)} of "
                   f"{len(self.results)} limits met")
        return out

    def to_dict(self) -> dict:
        s = self.side
        w = s.worst_slice
        return {"model": str(s.path), "budget": str(self.budget.path), "passed": self.passed,
                "figures": {"rescales": s.rescales, "mismatched_concats": s.mismatched_concats,
                            "latency_ms": s.latency_ms, "worst_slice": w.label if w else None,
                            "worst_sqnr_db": w.sqnr_db if w else None, "basis": s.basis},
                "baseline": str(self.baseline.path) if self.baseline is not None else None,
                "limits": [r.to_dict() for r in self.results]}

    def junit_xml(self) -> str:
        """One JUnit test case per limit, a failure for each one broken (what CI systems display)."""
        suite = ET.Element("testsuite", name="qtquant check", tests=str(len(self.results)),
                           failures=str(len(self.broken)), errors="0", skipped="0")
        cls = f"qtquant.check.{self.side.path.name}"
        for r in self.results:
            case = ET.SubElement(suite, "testcase", classname=cls, name=r.limit, time="0")
            if not r.ok:
                fail = ET.SubElement(case, "failure", message=r.line(), type="BudgetExceeded")
                fail.text = r.line()
            else:
                ET.SubElement(case, "system-out").text = r.line()
        root = ET.Element("testsuites", name="qtquant check", tests=str(len(self.results)),
                          failures=str(len(self.broken)), errors="0")
        root.append(suite)
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _not_measured(side, what: str) -> str:
    if what == "latency":
        return "no perf simulation ran" if side.perf is None else \
            f"nothing for the simulator to price on {side.session.options.march}"
    return ("no SQNR check ran: give calibration data (--calib DATA) for its samples"
            if side.fidelity is None else "no output slice carries a signal")


def check_budget(side, budget: Budget, baseline=None) -> CheckResult:
    """``side``: the measured model; ``baseline``: the measured baseline (needed when the budget
    says no_worse_than_baseline).  A limit whose figure was not measured is broken: a gate that
    cannot see must not pass."""
    res = CheckResult(side=side, budget=budget, baseline=baseline)
    add = res.results.append
    if budget.max_rescales is not None:
        add(LimitResult("max_rescales", side.rescales, budget.max_rescales, side.rescales <= budget.max_rescales))
    if budget.max_mismatched_concats is not None:
        n = side.mismatched_concats
        add(LimitResult("max_mismatched_concats", n, budget.max_mismatched_concats,
                        n <= budget.max_mismatched_concats))
    if budget.max_latency_ms is not None:
        v = side.latency_ms
        add(LimitResult("max_latency_ms", v, budget.max_latency_ms, v is not None and v <= budget.max_latency_ms,
                        "ms", "" if v is not None else _not_measured(side, "latency")))
    if budget.max_board_latency_ms is not None:
        v = side.board_latency_ms
        add(LimitResult("max_board_latency_ms", v, budget.max_board_latency_ms,
                        v is not None and v <= budget.max_board_latency_ms,
                        "ms", "" if v is not None else _not_measured(side, "latency")))
    if budget.min_sqnr_db is not None:
        w = side.worst_slice
        add(LimitResult("min_sqnr_db", w.sqnr_db if w else None, budget.min_sqnr_db,
                        w is not None and w.sqnr_db >= budget.min_sqnr_db, "dB",
                        f"worst slice {w.label}" if w else _not_measured(side, "sqnr")))
    if budget.no_worse_than_baseline:
        if baseline is None:
            raise BudgetError("no_worse_than_baseline: the baseline was not measured")
        name = f"baseline {baseline.name}"
        add(LimitResult("no_worse_than_baseline.rescales", side.rescales, baseline.rescales,
                        side.rescales <= baseline.rescales, why=name))
        add(LimitResult("no_worse_than_baseline.mismatched_concats", side.mismatched_concats,
                        baseline.mismatched_concats, side.mismatched_concats <= baseline.mismatched_concats, why=name))
        v, bv = side.latency_ms, baseline.latency_ms
        add(LimitResult("no_worse_than_baseline.latency_ms", v, bv,
                        v is not None and bv is not None and v <= bv + LATENCY_TOLERANCE_MS, "ms",
                        name if v is not None and bv is not None else
                        f"{name}: {_not_measured(side if v is None else baseline, 'latency')}"))
        w, bw = side.worst_slice, baseline.worst_slice
        why = name
        if w is not None and bw is not None:
            why += f"; worst slice {w.label} against the baseline's {bw.label}"
            if side.reference != baseline.reference:
                why += f" (the model against {side.reference}, the baseline against {baseline.reference})"
        else:
            why += f": {_not_measured(side if w is None else baseline, 'sqnr')}"
        add(LimitResult("no_worse_than_baseline.sqnr_db", w.sqnr_db if w else None, bw.sqnr_db if bw else None,
                        w is not None and bw is not None and w.sqnr_db >= bw.sqnr_db - SQNR_TOLERANCE_DB, "dB", why))
    return res
