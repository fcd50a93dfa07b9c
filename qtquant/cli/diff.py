"""``qtquant diff A B``: two quantizations of one model side by side."""

from __future__ import annotations

import json
import sys

from ..base.errors import UsageError
from .common import add_common
from .output_options import add_output_options

NAME = "diff"
HELP = "two quantized files (or a model with two plans, or projects) of one model side by side"


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A", help="QDQ file, float model (with --plan-a) or .qtquant project")
    p.add_argument("b", metavar="B", help="the same model as A, quantized another way")
    add_common(p, model=False)
    p.add_argument("--plan-a", default=None, metavar="PLAN.json", help="sharing plan applied to A")
    p.add_argument("--plan-b", default=None, metavar="PLAN.json", help="sharing plan applied to B")
    p.add_argument("--json", action="store_true", help="print the JSON form")
    p.add_argument("--report", default=None, metavar="OUT.html", help="write a self-contained HTML report")
    p.add_argument("--top", type=int, default=25, metavar="N", help="changed tensors listed in the text (default 25)")
    p.add_argument("--no-perf", action="store_true", help="skip the perf simulation")
    p.add_argument("--no-fidelity", action="store_true", help="skip the SQNR check")
    add_output_options(p)


def run(args) -> int:
    from ..compare import diff_sides
    from ..base.fileio import atomic_write_text, check_output_path
    from .sides import open_side

    if args.plan:
        raise UsageError("diff takes --plan-a and --plan-b (a plan per side), not --plan")
    inputs = [args.a, args.b, args.plan_a, args.plan_b, args.stats]
    if args.report:
        check_output_path(args.report, inputs=inputs, what="report")
    a = open_side(args, args.a, label="A", plan=args.plan_a)
    b = open_side(args, args.b, label="B", plan=args.plan_b)
    d = diff_sides(a, b)
    if args.report:
        from ..compare.html import diff_html

        atomic_write_text(args.report, diff_html(d), inputs=inputs, what="report")
    if args.json:
        json.dump(d.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(d.text(top=args.top))
        if args.report:
            print(f"wrote {args.report}")
    return 0
