"""``qtquant perf``: per-layer latency table and totals on a BPU march, as opened and as edited
(groups, int16 and float tensors), with the price of each kind of edit."""

from __future__ import annotations

import json
import sys

from .common import add_board_args, add_common, board_clock_from_args, open_session, read_paths
from .compilerlog import print_log_text

NAME = "perf"
HELP = "per-layer latency, FPS, DDR traffic and rescale cost on a BPU march (DESIGN §4)"


def add_arguments(p) -> None:
    from .compilerlog import add_compiler_log_args

    p.add_argument("model", metavar="MODEL", nargs="?", default=None,
                   help="ONNX model (float or QDQ-quantized); not with --fit")
    add_common(p, model=False)
    add_compiler_log_args(p)
    add_board_args(p)
    fit = p.add_argument_group("fit the march to your own compile logs")
    fit.add_argument("--fit", action="append", default=[], metavar="MODEL=LOG",
                     help="a model and its hb_mapper compile log (repeatable): fit the march's global parameters "
                          "to the logs' static estimates, print in-sample and leave-one-out error")
    fit.add_argument("--march-out", default=None, metavar="MY.json",
                     help="with --fit: write the fitted profile here (then use it with --march-file)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the stable JSON form")
    out.add_argument("--report", metavar="OUT.html", default=None, help="write a self-contained HTML report")
    out.add_argument("--csv", metavar="OUT.csv", default=None, help="write the layer table as CSV")
    out.add_argument("--top", type=int, default=None, metavar="N",
                     help="print only the N most expensive layers (default: every layer that costs time)")
    out.add_argument("--explain", metavar="NODE", default=None,
                     help="print the arithmetic of one layer (compute, memory, overhead, what bounds it and what "
                          "was fused into it) instead of the table")


def run(args) -> int:
    from ..base.errors import BadInputError, UsageError
    from ..base.fileio import check_output_path
    from ..perf import load_march, simulate_session
    from ..perf.confidence import confidence
    from ..perf.march import FigureKind
    from ..perf.precision import precision_table_text
    from ..perf.price import edit_price
    from ..perf.report import explain_text, layer_table_text, summary_text
    from ..files.report import calibration_dict, calibration_text, cut_text
    from ..model.shapes import format_shape

    if args.top is not None and args.top < 1:
        raise UsageError("--top must be at least 1")
    # Check the march and output paths before the (slow) calibration so a typo fails fast.
    march = load_march(args.march_file if args.march_file else args.march)
    if ghz := board_clock_from_args(args):
        import dataclasses

        march = dataclasses.replace(march, board_bpu_ghz=ghz)
    if args.fit:
        from .perffit import run_fit

        return run_fit(args, march)
    if args.march_out:
        raise UsageError("--march-out goes with --fit MODEL=LOG")
    if not args.model:
        raise UsageError("give MODEL (or --fit MODEL=LOG ... to fit the march to your compile logs)")
    named: list[tuple[str, str]] = []
    for out, what in ((args.report, "report"), (args.csv, "CSV file")):
        if out:
            check_output_path(out, inputs=read_paths(args), what=what, outputs=named)
            named.append((out, what))
    session = open_session(args)
    after = simulate_session(session, march_file=march)
    grouped = len(session.groups) > 0
    edited = grouped or bool(session.options.precision)  # "before": the model as opened (no group, all int8)
    before = simulate_session(session, march_file=march, baseline=True)
    g = session.graph
    shapes = ", ".join(f"{k}={format_shape(v)}" for k, v in g.input_shapes.items())
    model = g.path.name if g.path else "model"
    inputs = [g.path, args.plan, args.march_file]

    if args.report or args.csv:
        from ..app.exporting import write_perf_report

        write_perf_report(session, args.report, args.csv, march=march, after=after, before=before, inputs=inputs)

    if args.explain is not None:
        name = args.explain.strip()
        if after.layer(name) is None:
            import difflib

            known = [*g.nodes, *(r.name for r in after.rescales)]
            close = difflib.get_close_matches(name, known, n=1)
            raise BadInputError(f"--explain: no node {name!r} in {model}"
                                + (f" (did you mean {close[0]!r}?)" if close else ""))
        print(explain_text(after, name, march))
        return 0

    if args.json:
        doc = {
            "schema_version": 1,
            "model": str(g.path) if g.path else None,
            "model_sha256": g.sha256,
            "input_shapes": {k: list(v) for k, v in g.input_shapes.items()},
            "cut": list(g.cut),
            "march": march.to_dict(),
            "groups": [list(m) for m in session.groups.as_lists()],
            "calibration": calibration_dict(session),
            "before": before.to_dict(),
            "after": after.to_dict(),
            "price": edit_price(before, after).to_dict(),
            # How sure the two latencies are: the march fit's leave-one-out error on the nearest figures.
            "confidence": {k.value: confidence(march, after.family, k).to_dict() for k in FigureKind},
        }
        if session.compiler_log is not None:
            from ..horizon.report import compiler_log_dict

            doc["compiler_log"] = compiler_log_dict(session, after)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    print(layer_table_text(after, top=args.top))
    print()
    print(f"{model} ({shapes}{cut_text(g)}) on {march.name}" + (f", {len(session.groups)} group(s)" if grouped else "")
          + f"; {calibration_text(session)} (the rescales follow from those scales)")
    print(summary_text(after, before if edited else None, march=march))
    if after.precision is not None:
        print()
        print(precision_table_text(after))
    print_log_text(session, after)
    if args.report:
        print(f"report written to {args.report}")
    if args.csv:
        print(f"layer table written to {args.csv}")
    return 0
