"""``qtquant check MODEL --budget BUDGET.toml``: a CI gate, exit 1 when a limit is broken."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ..base.errors import QtQuantError
from .common import add_common
from .output_options import add_output_options

NAME = "check"
HELP = "check a model against a budget (rescales, latency, SQNR, a baseline): exit 1 when a limit is broken"


def add_arguments(p) -> None:
    add_common(p)
    p.add_argument("--budget", required=True, metavar="BUDGET.toml",
                   help="the limits (TOML; see docs/compare-and-gate.md)")
    p.add_argument("--report", default=None, metavar="OUT.html", help="write a self-contained HTML report")
    p.add_argument("--junit", default=None, metavar="OUT.xml", help="write JUnit XML, one test case per limit")
    p.add_argument("--json", action="store_true", help="print the JSON form instead of the lines")
    p.set_defaults(no_perf=False, no_fidelity=False)
    add_output_options(p)


def _open_baseline(args, path: Path):
    """A plan applies to MODEL; a project or a model file is opened as it is."""
    from .sides import open_side

    if path.suffix.lower() == ".json":
        return open_side(args, args.model, label="baseline", plan=str(path))
    return open_side(args, str(path), label="baseline")


def _canvas(args) -> tuple[bytes | None, str]:
    """The model's canvas with the mismatch overlay, as PNG bytes, and what to say beside it (or
    instead of it, where the app is not installed or the picture failed)."""
    from .sides import is_project

    if is_project(args.model):
        return None, "The canvas picture is not drawn for a project; `qtquant screenshot` renders its model."
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from ..gui.window.shot import take_screenshot
    except ImportError as e:
        return None, f"The canvas picture is unavailable: the desktop app is not installed ({e})."
    from .common import options_from_args

    with tempfile.TemporaryDirectory(prefix="qtquant-check-") as tmp:
        out = Path(tmp) / "canvas.png"
        try:
            take_screenshot(args.model, out, input_shapes=args.input_shape, options=options_from_args(args),
                            overlay="mismatch", canvas_only=True, size=(1400, 900), plan=args.plan,
                            cut=args.cut or (), int16=args.int16, keep_float=args.keep_float, stats=args.stats)
        except QtQuantError as e:
            return None, f"The canvas picture is unavailable: {e}"
        return out.read_bytes(), ("The app's mismatch overlay: each Concat coloured by its max/min input scale ratio, "
                                  "red edges into the inputs that need a rescale; centred on the worst Concat.")


def run(args) -> int:
    from ..compare import diff_sides
    from ..compare.budget import Budget, check_budget
    from ..base.fileio import atomic_write_text, check_output_path
    from .common import read_paths
    from .sides import open_side

    budget = Budget.load(args.budget)
    inputs = [*read_paths(args), args.budget, budget.baseline]
    named: list[tuple[str, str]] = []
    for out, what in ((args.report, "report"), (args.junit, "JUnit file")):
        if out:
            check_output_path(out, inputs=inputs, what=what, outputs=named)
            named.append((out, what))
    side = open_side(args, args.model, label="model", plan=args.plan)
    baseline = _open_baseline(args, budget.baseline) if budget.baseline is not None else None
    result = check_budget(side, budget, baseline)
    if args.junit:
        atomic_write_text(args.junit, result.junit_xml(), inputs=inputs, what="JUnit file")
    if args.report:
        from ..compare.html import check_html
        from ..files.report import concat_table_text

        png, note = _canvas(args)
        html = check_html(result, canvas_png=png, canvas_note=note,
                          concat_table=concat_table_text(side.session, concats=side.concats, perf=side.perf),
                          fidelity_text=side.fidelity.text() if side.fidelity is not None else "",
                          baseline_diff=diff_sides(baseline, side) if baseline is not None else None)
        atomic_write_text(args.report, html, inputs=inputs, what="report")
    if args.json:
        from ..files.report import analysis_dict

        # the model's figures in analyze's stable form beside the limits
        doc = {**result.to_dict(), "analysis": analysis_dict(side.session, concats=side.concats, perf=side.perf,
                                                             fidelity=side.fidelity)}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for line in result.lines():
            print(line)
        for out in (args.report, args.junit):
            if out:
                print(f"wrote {out}")
    return 0 if result.passed else 1
