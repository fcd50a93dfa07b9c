"""``qtquant accuracy``: per-tensor error and the sensitivity ranking (docs/accuracy.md)."""

from __future__ import annotations

import json
import sys

from .common import add_common, open_session
from .compilerlog import print_log_text
from .output_options import add_output_options, output_mode_from_args
from .progress import StageProgress

NAME = "accuracy"
HELP = "per-tensor SQNR (cumulative, local) and which nodes to keep in higher precision"


def add_arguments(p) -> None:
    from .compilerlog import add_compiler_log_args

    from ..accuracy import DEFAULT_TOP

    add_common(p)
    add_compiler_log_args(p)
    p.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="N",
                   help=f"measure the N best first-pass estimates by real exports (default {DEFAULT_TOP}; 0: "
                        "estimates only)")
    p.add_argument("--tensors", type=int, default=15, metavar="N", help="tensors and nodes shown in the text form")
    p.add_argument("--json", action="store_true", help="print the stable JSON form")
    add_output_options(p)


def run(args) -> int:
    from ..accuracy import analyze_accuracy
    from ..errors import UsageError

    if args.top < 0:
        raise UsageError("--top must be 0 or more")
    session = open_session(args)
    progress = StageProgress("accuracy", {"tensors": "chunks of tensors", "estimate": "nodes estimated",
                                          "measure": "candidates measured"})
    rep = analyze_accuracy(session, top=args.top, output_mode=output_mode_from_args(args),
                           march_file=getattr(args, "march_file", None), progress=progress)
    if args.json:
        doc = rep.to_dict()
        if session.compiler_log is not None:
            from ..horizon.report import compiler_log_dict

            doc["compiler_log"] = compiler_log_dict(session)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(rep.text(args.tensors))
        print_log_text(session)
    return 0
