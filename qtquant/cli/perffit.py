"""``qtquant perf --fit MODEL=LOG [...] --march-out MY.json``: fit the march to the user's own compile logs.

Each pair is a model and the ``hb_mapper makertbin`` log the compiler wrote for it; the log's static
estimate (``latency = … us``) is the figure.  The march's global parameters are fitted with the fitter
``benchmarks/perf_fit.py`` uses (qtquant/perf/fit.py); the profile written names the logs each number was
fitted to, and its fit errors are what ``qtquant perf --march-file MY.json`` prints as ±N%.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..base.errors import BadInputError, UsageError

__all__ = ["run_fit", "parse_pair"]


def parse_pair(text: str) -> tuple[str, str]:
    """``MODEL=LOG`` -> (model, log); a usage error when it is not one."""
    model, sep, log = text.rpartition("=")
    if not sep or not model.strip() or not log.strip():
        raise UsageError(f"--fit takes MODEL=LOG (a model and its hb_mapper compile log), got {text!r}")
    return model.strip(), log.strip()


def _latency_us(log: str, march) -> float:
    from ..horizon.log import read_compile_log

    cl = read_compile_log(log)
    if cl.march and cl.march != march.name:
        raise BadInputError(f"{Path(log).name} was compiled for march {cl.march}, not {march.name} "
                            f"(give --march {cl.march})")
    return cl.estimate.latency_us


def run_fit(args, march) -> int:
    import copy

    from ..base.fileio import atomic_write_text, check_output_path
    from ..perf.fit import Figure, fit_with_loo, profile_doc
    from ..perf.march import FigureKind, profile_from_dict
    from ..base.tables import text_table
    from .common import open_session

    if not args.march_out:
        raise UsageError("--fit needs --march-out MY.json (where the fitted profile is written)")
    if args.model:
        raise UsageError("give either MODEL or --fit MODEL=LOG, not both")
    if args.compiler_log:
        raise UsageError("--fit names each model's compile log (MODEL=LOG): --compiler-log does not go with it")
    pairs = [parse_pair(t) for t in args.fit]
    check_output_path(args.march_out, inputs=[p for pair in pairs for p in pair] + [args.march_file],
                      what="march profile")
    latencies = [_latency_us(log, march) for _, log in pairs]  # a bad log fails before any calibration
    figs = []
    for (model, log), us in zip(pairs, latencies):
        a = copy.copy(args)
        a.model, a.compiler_log = model, log  # opened at the log's shape, on the compiler's own scales
        s = open_session(a)
        figs.append(Figure(Path(model).stem, FigureKind.STATIC, us, s.graph, tuple(s.concats()), source=log))
    names = [f.name for f in figs]
    if len(set(names)) < len(names):  # the name is how a profile says what it was fitted to
        for k, (f, (model, _)) in enumerate(zip(figs, pairs)):
            f.name = f"{k + 1}:{Path(model).name}"
    res = fit_with_loo(figs, march, alignments=(march.channel_align,))
    logs = {f.name: Path(log).name for f, (_, log) in zip(figs, pairs)}
    doc = profile_doc(json.loads(Path(march.path).read_text(encoding="utf-8")), res, script="qtquant perf --fit",
                      describe=lambda f: f"{f.name} ({logs[f.name]}: {f.public_us:g} µs static estimate)")
    profile_from_dict(doc, where="the fitted profile")  # what is written must load
    atomic_write_text(args.march_out, json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                      inputs=[p for pair in pairs for p in pair], what="march profile")

    def pct(a, b):
        return f"{(a - b) / b * 100:+.1f}%"

    rows = [(f.name, logs[f.name], f"{f.public_us:.1f}", f"{res.in_sample[f.name]:.1f}",
             pct(res.in_sample[f.name], f.public_us),
             f"{res.loo[f.name]:.1f}" if f.name in res.loo else "-",
             pct(res.loo[f.name], f.public_us) if f.name in res.loo else "-") for f in figs]
    print(text_table(rows, ("model", "log", "log µs", "fitted µs", "in-sample", "leave-one-out µs", "LOO"),
                     "llrrrrr", rule=True, max_width=40))
    ins = [abs(res.in_sample[f.name] / f.public_us - 1) * 100 for f in figs]
    loo = [abs(res.loo[f.name] / f.public_us - 1) * 100 for f in figs if f.name in res.loo]
    print(f"median |error|: in-sample {statistics.median(ins):.1f}%"
          + (f", leave-one-out {statistics.median(loo):.1f}% over {len(loo)} logs" if loo else
             " (one log: no leave-one-out)"))
    print()
    if res.fitted:
        print(f"fitted ({len(res.fitted)} parameter(s) from {len(figs)} log(s)):")
        for n in res.fitted:
            print(f"  {n} = {res.values[n]:.5g} (was {res.start.get(n, 0):.5g})")
    else:
        print("nothing fitted: no parameter is determined by these logs")
    idle = [n for n, why in res.not_fitted.items() if why == "no figure depends on it"]
    for n, why in res.not_fitted.items():
        if n not in idle:
            print(f"  {n}: kept ({why})")
    if idle:
        print(f"  kept, no log depends on them: {', '.join(idle)}")
    print(f"profile written to {args.march_out} (use it with --march-file {args.march_out})")
    return 0
