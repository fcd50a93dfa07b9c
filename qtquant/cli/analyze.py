"""``qtquant analyze``: the Concat table and summary."""

from __future__ import annotations

import json
import sys

from .common import add_board_args, add_common, open_stack
from .compilerlog import print_log_text
from .output_options import add_output_options, output_mode_from_args

NAME = "analyze"
HELP = "Concat table: ratio, rescales, bits lost, latency; summary"


def add_arguments(p) -> None:
    from .compilerlog import add_compiler_log_args

    add_common(p)
    add_compiler_log_args(p)
    add_board_args(p)
    p.add_argument("--json", action="store_true", help="print the stable JSON form")
    p.add_argument("--no-perf", action="store_true", help="skip the perf simulation")
    p.add_argument("--no-fidelity", action="store_true", help="skip the SQNR check")
    p.add_argument("--max-sqnr-drop", type=float, default=None, metavar="DB",
                   help="first auto-share by measured accuracy (as fix --max-sqnr-drop) and analyse the result; "
                        "prints the trade-off curve")
    add_output_options(p)


def _perf(session, args):
    if args.no_perf:
        return None
    from ..perf import simulate_session

    return simulate_session(session, march_file=getattr(args, "march_file", None))


def warm_perf(args):
    """``opened`` for open_stack: the perf simulation's per-node costs (they need no scales) on
    a thread of their own while calibration runs (see perf.simulator.warm_up)."""
    if args.no_perf:
        return None
    from ..perf import warm_up

    return lambda session: warm_up(session, march_file=getattr(args, "march_file", None))


def _fidelity(session, args, meanwhile=None):
    if args.no_fidelity or session.calibration is None or not session.calibration.holdout:
        return None
    from ..fidelity.measure import measure_session

    return measure_session(session, output_mode=output_mode_from_args(args), cross_check=True, meanwhile=meanwhile)


def perf_and_fidelity(session, args):
    """The simulation runs while the fidelity check waits on onnxruntime (which releases the GIL
    while it creates a session: on a 20,000-node model seconds of it), so the two overlap; it
    starts once the check's QDQ models are built (Python, like the simulation: side by side they
    would only take turns)."""
    perf = []
    fid = _fidelity(session, args, meanwhile=lambda: perf.append(_perf(session, args)))
    return (perf[0] if perf else _perf(session, args)), fid


def run(args) -> int:
    from ..perf.precision import report_text
    from ..files.report import analysis_dict, concat_table_text

    stack = open_stack(args, keep_check_values=not args.no_fidelity, opened=warm_perf(args))
    session = stack.session
    sqnr = None
    if args.max_sqnr_drop is not None:
        from .fix import sqnr_share_from_args

        sqnr = sqnr_share_from_args(stack, args)
    perf, fid = perf_and_fidelity(session, args)
    if args.json:
        doc = analysis_dict(session, perf=perf, fidelity=fid)
        if session.compiler_log is not None:
            from ..horizon.report import compiler_log_dict

            doc["compiler_log"] = compiler_log_dict(session, perf)
        if sqnr is not None:
            doc["sqnr_share"] = sqnr.to_dict()
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        search = getattr(session.calibration, "search", None)
        if search is not None:
            print(search.text())
        if sqnr is not None:
            print(sqnr.text())
        print(concat_table_text(session, perf=perf))
        text = report_text(session.graph, session.options.precision, perf)
        if text:
            print()
            print(text)
        if fid is not None:
            print(fid.text())
        elif session.quantized_file and not args.no_fidelity:
            print("accuracy: not measured: a QDQ file has no float original; --calib DATA checks the export against "
                  "its float view (its weights dequantized, its scales standing), and fix measures the written file "
                  "against this one")
        print_log_text(session, perf)
    return 0
