"""``qtquant fix``: share scales (auto-share, a --plan, or both) and export the QDQ model."""

from __future__ import annotations

import json
import math
import sys
from .common import add_board_args, add_common, auto_share_from_args, open_stack, read_paths
from .compilerlog import print_log_text
from ..base.tables import fmt_num
from .output_options import add_output_options, output_mode_from_args

NAME = "fix"
HELP = "share scales (auto-share, a --plan, or both) and export QDQ ONNX"


def add_arguments(p) -> None:
    from .compilerlog import add_compiler_log_args

    add_common(p)
    add_compiler_log_args(p)
    add_board_args(p)
    o = p.add_argument_group("fix")
    o.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the QDQ model")
    o.add_argument("--auto-share", action="store_true",
                   help="share every Concat whose sharing costs at most --auto-share-max-bits-lost bits")
    o.add_argument("--max-sqnr-drop", type=float, default=None, metavar="DB",
                   help="auto-share by measured accuracy instead of bits: share Concats in order of latency "
                        "gained per dB lost on the worst output slice until it has dropped by DB; prints the "
                        "trade-off curve")
    o.add_argument("--plan-out", default=None, metavar="PLAN.json", help="also write the sharing plan")
    o.add_argument("--overrides-out", default=None, metavar="OVERRIDES.json",
                   help="also write onnxruntime TensorQuantOverrides with the same scales")
    o.add_argument("--report", default=None, metavar="OUT.html",
                   help="also write the perf report of the exported model (as qtquant perf --report writes it)")
    o.add_argument("--csv", default=None, metavar="OUT.csv", help="also write its layer table as CSV")
    from .deploy import add_target_option

    add_target_option(o, "--deploy", required=False)
    o.add_argument("--deploy-dir", default=None, metavar="DIR",
                   help="folder for the --deploy files (default: the folder of -o)")
    o.add_argument("--no-fidelity", action="store_true", help="skip the SQNR check")
    o.add_argument("--no-perf", action="store_true", help="skip the latency simulation")
    o.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    add_output_options(p)


def _counts(concats):
    return sum(c.rescales for c in concats), sum(1 for c in concats if c.rescales)


def summary_numbers(session, perf=None) -> dict:
    """The table's counts and costs as numbers, before and after: what a script reads of
    ``fix --json`` (the table's cells are its printed strings)."""
    out = {}
    for side, baseline in (("before", True), ("after", False)):
        rescales, mismatched = _counts(session.concats(baseline=baseline))
        d = {"rescales": rescales, "mismatched_concats": mismatched, "latency_ms": None, "board_latency_ms": None,
             "rescale_us": None}
        if perf is not None:
            res = perf[0] if baseline else perf[1]
            d.update(latency_ms=round(res.total_ms, 6), board_latency_ms=round(res.board_ms, 6),
                     rescale_us=round(res.rescale_us, 3))
        out[side] = d
    return out


def _fmt(x, nd=2):
    return fmt_num(x, nd, missing="-") if isinstance(x, float) or x is None else str(x)


def _perf(session, args):
    if getattr(args, "no_perf", False):
        return None
    from ..perf import simulate_session

    mf = getattr(args, "march_file", None)
    return simulate_session(session, mf, baseline=True), simulate_session(session, mf)


def before_after_rows(session, fid=None, perf=None) -> list[tuple[str, str, str, str]]:
    """(what, before, after, change) rows: the table ``fix`` prints."""
    n = summary_numbers(session)  # (the counts; the table formats what --json gives as numbers)
    (rb, mb), (ra, ma) = ((n[k]["rescales"], n[k]["mismatched_concats"]) for k in ("before", "after"))
    rows = [("rescales", str(rb), str(ra), f"{ra - rb:+d}"),
            ("mismatched Concats", str(mb), str(ma), f"{ma - mb:+d}")]
    if perf is not None:
        pb, pa = perf
        m = session.options.march
        rows.append((f"static estimate ms ({m}, BPU)", f"{pb.total_ms:.3f}", f"{pa.total_ms:.3f}",
                     f"{pa.total_ms - pb.total_ms:+.3f}"))
        rows.append((f"board estimate ms ({m}, 1 thread)", f"{pb.board_ms:.3f}", f"{pa.board_ms:.3f}",
                     f"{pa.board_ms - pb.board_ms:+.3f}"))
        rows.append(("rescale cost µs", f"{pb.rescale_us:.1f}", f"{pa.rescale_us:.1f}",
                     f"{pa.rescale_us - pb.rescale_us:+.1f}"))
    if fid is not None:
        rows.append((f"fidelity: {fid.sample_text}", "", "", ""))
        for o in fid.outputs:
            rows += fidelity_rows(fid, o)
    return rows


def _cell(f) -> str:
    return f.word if f.no_signal else _fmt(f.sqnr_db)


def _delta(after, before) -> str:
    if after.no_signal or before.no_signal:
        return ""
    if math.isfinite(after.sqnr_db) and math.isfinite(before.sqnr_db):
        return fmt_num(after.sqnr_db - before.sqnr_db, signed=True)
    return "-"


def fidelity_rows(fid, o) -> list[tuple[str, str, str, str]]:
    """The headline (worst slice, named) and one row per slice of output ``o``."""
    a, b = fid.after[o], fid.before[o]
    ha, hb = a.headline, b.headline
    if not a.slices:
        rows = [(f"SQNR {o} (dB)", _cell(hb), _cell(ha), _delta(ha, hb))]
    else:
        rows = [(f"SQNR {o} worst slice (dB)", f"{_cell(hb)} {hb.label}", f"{_cell(ha)} {ha.label}",
                 _delta(ha, hb))]
        rows += [(f"  {sa.label} SQNR dB", _cell(sb), _cell(sa), _delta(sa, sb))
                 for sa, sb in zip(a.slices, b.slices)]
    if not ha.no_signal:
        rows.append((f"cosine {o}" + (f" ({ha.label})" if a.slices else ""),
                     "-" if hb.cosine is None else _fmt(hb.cosine, 5), _fmt(ha.cosine, 5), ""))
    return rows


def table_text(rows) -> str:
    from ..base.tables import text_table

    return text_table(rows, ("", "before", "after", "change"), rule=True)


def sqnr_share_from_args(stack, args):
    """``--max-sqnr-drop``: the measured auto-share, its groups installed as one command on ``stack``
    (fix and analyze), as the window's "share what accuracy allows" does."""
    from ..app.sharing import share_by_accuracy
    from ..base.errors import UsageError

    if getattr(args, "auto_share", False):
        raise UsageError("--max-sqnr-drop and --auto-share are two auto-shares: choose one")
    if not (args.max_sqnr_drop >= 0):
        raise UsageError(f"--max-sqnr-drop must be 0 dB or more, got {args.max_sqnr_drop}")
    return share_by_accuracy(stack, args.max_sqnr_drop, output_mode=output_mode_from_args(args),
                             march_file=getattr(args, "march_file", None))


def export_request(args):
    """The export ``fix`` asks for, from its arguments."""
    from pathlib import Path

    from ..app.exporting import ExportRequest

    return ExportRequest(model=Path(args.output), plan=Path(args.plan_out) if args.plan_out else None,
                         overrides=Path(args.overrides_out) if args.overrides_out else None,
                         html=Path(args.report) if args.report else None, csv=Path(args.csv) if args.csv else None,
                         output_mode=output_mode_from_args(args), deploy=args.deploy or None,
                         deploy_dir=Path(args.deploy_dir) if args.deploy_dir else None,
                         # (the table shows the fidelity; the perf report's header names the exported model's)
                         accuracy=bool(args.report) and not args.no_fidelity, compare_input=not args.no_fidelity,
                         march_file=getattr(args, "march_file", None))


def run(args) -> int:
    from ..app.exporting import export
    from ..perf.precision import report_text

    # Refuse bad output paths before the slow part.
    # (the plan and statistics read are inputs too: --plan-out over --plan replaced the plan read)
    request = export_request(args)
    request.check(read_paths(args))
    stack = open_stack(args)
    session = stack.session
    log: list[str] | None = [] if args.json else None

    def say(text):
        if log is None:
            print(text)
        else:
            log.append(text)

    search = getattr(session.calibration, "search", None)
    if search is not None:
        say(search.text())
    if args.plan:
        say(f"plan {args.plan}: {len(session.groups)} group(s)")
    mode = output_mode_from_args(args)
    report = sqnr = None
    if args.max_sqnr_drop is not None:
        sqnr = sqnr_share_from_args(stack, args)
        say(sqnr.text())
    if args.auto_share:
        report = auto_share_from_args(stack, args)
        say(report.text())
    if not args.plan and not args.auto_share and sqnr is None:
        say("no --auto-share or --plan given: exporting without shared groups")

    fid = None
    if not args.no_fidelity and session.calibration is not None and session.calibration.holdout:
        from ..fidelity.measure import measure_session

        fid = measure_session(session, output_mode=mode, cross_check=True)
    perf = _perf(session, args)
    rows = before_after_rows(session, fid, perf)
    exported = export(session, request)
    for k in exported.kept_float:
        say(f"note: {k.text()}")
    result = exported.model
    assert result is not None  # (`fix` always writes the model: its -o is required)
    against, deployed = exported.against, exported.deployed
    float_tensors, kept_float, written = exported.float_tensors, exported.kept_float, exported.written_lines
    if args.json:
        from ..files.report import SCHEMA_VERSION

        doc = {"schema_version": SCHEMA_VERSION, "model": args.model, "model_sha256": session.graph.sha256,
               "output": str(result.path), "march": session.options.march,
               "summary": summary_numbers(session, perf),
               # (the printed table, cell by cell as strings; "summary" and "fidelity" hold the numbers)
               "table": [{"what": r[0], "before": r[1], "after": r[2], "change": r[3]} for r in rows],
               "auto_share": None if report is None else {
                   "grouped": report.grouped, "skipped": [{"concat": c, "reason": r} for c, r in report.skipped],
                   "notes": [{"concat": c, "note": n} for c, n in report.notes]},
               "sqnr_share": None if sqnr is None else sqnr.to_dict(),
               "calibration_search": None if search is None else search.to_dict(),
               "fidelity": fid.to_dict() if fid is not None else None,
               "against_input": against.to_dict() if against is not None else None,
               "outputs": {"mode": mode.value, "float": sorted(float_tensors),
                           "kept_float": [k.text() for k in kept_float]},
               "log": log,
               "groups": [list(g) for g in session.groups.as_lists()],
               "precision": {"tensors": session.options.precision.to_dict(),
                             "cost": perf[1].precision.to_dict()
                             if perf is not None and perf[1].precision is not None else None},
               "notes": result.build.notes,
               "export": result.build.to_dict(),
               "warnings": result.build.warnings(),
               "deploy": deployed.to_dict() if deployed is not None else None}
        if session.compiler_log is not None:
            from ..horizon.report import compiler_log_dict

            doc["compiler_log"] = compiler_log_dict(session, perf[1] if perf is not None else None)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print()
    print(table_text(rows))
    text = report_text(session.graph, session.options.precision, perf[1] if perf is not None else None)
    if text:
        print(text)
    if fid is not None and fid.members:
        worst = min(fid.members, key=lambda m: m.sqnr_db - m.before_sqnr_db)
        print(f"group members: {len(fid.members)}; largest drop {worst.before_sqnr_db - worst.sqnr_db:.2f} dB "
              f"on {worst.tensor} ({worst.bits_lost:.2f} bits lost)")
    if fid is not None:
        for t in fid.low_outputs():
            print(f"low: {t}")
        for f in fid.findings:
            print(f"finding: {f}")
        print(f"runtime: {fid.runtime}")
        if fid.host_default:
            print(fid.host_default)
        for o in fid.outputs:
            for part in [fid.after[o].whole, *fid.after[o].slices]:
                if part.no_signal:
                    print(f"{part.label}: {part.no_signal}")
    for n in result.build.notes:
        print(f"note: {n}")
    for w in result.build.warnings():
        print(f"warning: {w}")
    for w in written:
        print(w)
    for line in against.text() if against is not None else ():
        print(line)
    print_log_text(session, perf[1] if perf is not None else None)
    return 0
