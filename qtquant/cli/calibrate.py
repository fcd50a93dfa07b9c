"""``qtquant calibrate``: write calibration statistics to a file, or merge such files.

    qtquant calibrate MODEL [options] --stats-out STATS      calibrate (locally, --jobs N or --ray)
    qtquant calibrate --merge A B ... --stats-out STATS      merge files computed on disjoint data

The file is opened with ``--stats STATS`` by analyze, fix, perf, screenshot and the app, which
then skip calibration: calibrate once on a cluster, look at the model on a laptop.
"""

from __future__ import annotations

from ..base.errors import BadInputError, UsageError
from .progress import ProgressLine

NAME = "calibrate"
HELP = "calibrate MODEL and write the statistics file (--stats-out), or merge statistics files (--merge)"


def add_arguments(p) -> None:
    from .common import add_common

    p.add_argument("model", metavar="MODEL", nargs="?", help="ONNX float model (not with --merge)")
    p.add_argument("--stats-out", required=True, metavar="STATS",
                   help="statistics file to write (an .npz archive; written atomically, never over an input)")
    p.add_argument("--merge", nargs="+", default=None, metavar="STATS",
                   help="merge these statistics files (same model and settings, disjoint data) into --stats-out")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    add_common(p, model=False, sharing=False)  # statistics depend on the data, not on sharing or target


def run(args) -> int:
    from ..calib import statsfile

    if args.merge:
        if args.model:
            raise UsageError("give either MODEL or --merge, not both")
        if len(args.merge) < 2:
            raise UsageError("--merge needs two or more statistics files")
        header = statsfile.merge_stats(args.merge, args.stats_out)
        print(f"merged {len(args.merge)} files ({header.batches} samples, {len(header.tensors)} tensors, "
              f"{len(header.shards)} shards) into {args.stats_out}; {header.notes[-1]}")
        return 0
    if not args.model:
        raise UsageError("give MODEL to calibrate, or --merge STATS... to merge statistics files")
    if args.stats:
        raise UsageError("--stats reads a statistics file; calibrate writes one with --stats-out")
    from .common import open_session

    session = open_session(args, calibrate=False)
    if session.quantized_file:
        raise BadInputError(f"{args.model} is already quantized (QDQ): there is nothing to calibrate")
    res = session.run_calibration(progress=ProgressLine("calibrating", "samples", args.quiet))
    out = statsfile.write_stats(args.stats_out, session.graph, res)
    size = out.stat().st_size
    where = f"Ray ({res.config.ray})" if res.config.ray else f"{res.config.jobs} job(s)"
    print(f"calibrated {res.batches} samples of {res.config.source} on {where} in {res.seconds:.1f} s; "
          f"{len(res.stats)} tensors, {res.check_description} for the check")
    for note in res.notes:
        print(f"note: {note}")
    print(f"wrote {out} ({size / 1e6:.1f} MB)")
    return 0
