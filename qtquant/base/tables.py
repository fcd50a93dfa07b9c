"""The one text-table helper: every table the CLI prints (analysis, fix, fidelity, perf) is laid out here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["text_table", "clip_left", "fmt_num", "samples_text", "plural"]


def plural(n: int, word: str) -> str:
    """"1 Concat", "3 Concats": a count and its noun (a regular plural)."""
    return f"{n} {word}{'s' if n != 1 else ''}"


def fmt_num(x: float | str | None, nd: int = 2, *, signed: bool = False, missing: str = "n/a") -> str:
    """A figure in a table cell: ``missing`` for None or nan, "inf" / "-inf", text as it is, and
    never "-0.00" (a figure that rounds to zero prints 0.00)."""
    if isinstance(x, str):
        return x
    if x is None or x != x:
        return missing
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return f"{x:{'+' if signed else ''}z.{nd}f}"

def samples_text(samples: int, in_sample: bool, *, short: bool = False) -> str:
    """What a figure rests on, in the one wording reports use: "7 samples in-sample (the calibration
    samples)" / "20 samples held out from calibration"; ``short``: "7 in-sample samples"."""
    plural = "s" if samples != 1 else ""
    if short:
        return f"{samples} {'in-sample' if in_sample else 'held-out'} sample{plural}"
    n = f"{samples} sample{plural}"
    return f"{n} in-sample (the calibration samples)" if in_sample else f"{n} held out from calibration"


RULE_MAX = 120  # a rule under the header never runs wider than a wide terminal


def clip_left(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, keeping its end (ONNX names differ at the end)."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def text_table(rows: Iterable[Sequence[object]], headers: Sequence[object] | None = None, align: str | None = None,
               *, rule: bool = False, max_width: int | None = None, sep: str = "  ") -> str:
    """Rows of cells as aligned text.

    ``align`` has one letter per column, ``l`` or ``r``; the default puts the first column
    (the names) on the left and the numbers on the right.  ``rule`` draws a line of ``-`` under
    the header.  ``max_width`` clips longer cells from the left.  Lines carry no trailing blanks.
    """
    body = [[str(c) for c in r] for r in rows]
    head = [str(h) for h in headers] if headers is not None else None
    table = ([head] if head is not None else []) + body
    if not table:
        return ""
    ncols = max(len(r) for r in table)
    if max_width:
        table = [[clip_left(c, max_width) for c in r] for r in table]
    align = align or ("l" + "r" * (ncols - 1))
    widths = [max((len(r[i]) for r in table if i < len(r)), default=0) for i in range(ncols)]

    def line(r: list[str]) -> str:
        cells = [c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]) for i, c in enumerate(r)]
        return sep.join(cells).rstrip()

    lines = [line(r) for r in table]
    if rule and head is not None:
        lines.insert(1, "-" * min(RULE_MAX, max(len(x) for x in lines)))
    return "\n".join(lines)
