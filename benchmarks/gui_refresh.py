"""Live refresh after an edit in the desktop app: from the edit to the refreshed
canvas, perf summary and fidelity, on yolov8n at 320x320.

The app is driven the way a user drives it (offscreen): the edits go through the window's
Editor and undo stack, exactly what a drop, Ctrl+Z, Ctrl+Shift+Z, Auto-share or the
policy selector runs.  For every edit it records

* **canvas**: the edit call itself, which re-analyses the Concats and re-colours the canvas,
  hulls, badges and docks on the GUI thread before it returns, plus one synchronous repaint;
* **summary**: until the background simulator's result for the new revision is applied
  (latency, FPS, rescales, per-group savings; debounce included) and repainted;
* **fidelity**: until the SQNR per output for the new revision is in the summary.  There is one
  figure per edit, the exact one: the exported program as onnxruntime runs it (no estimate first).

Where the fidelity time went, per edit (``Fidelity.trace``, ms): *edit* from the edit to the check's
submission, *queue* the snapshot, the job queue and the worker's lock, *ipc* the round trip to the
child process less the child's own time, then the child's steps -- *build* the QDQ model the
exporter writes, *prog* finding the kept program and the edit's values in it (a new structure:
making it: three onnxruntime optimisations), *prep* fingerprints and the part to re-run, *sess* its
onnxruntime session, *run* the samples, *figs* the figures and the group members' SQNR still
running when the runs end -- *deliv* the result's way to the GUI thread, and *apply* what remains
(the GUI applying it; for a revisited state, waiting for the summary, which this script reads first).
Last, *cpu*: the CPU time the child spent on the check, all its threads.  Far below the child's own
steps, it says the child (nice 10) waited for a core while the window and other processes ran.

Reference in the same run: what a non-incremental refresh costs (a Concat analysis plus a
cold full simulation, i.e. a fresh ``Simulator``), and a cold fidelity check (no cached
float run), so the figures read as ratios on any machine.

Targets: the summary lands < 300 ms after an edit on yolov8n_320; the fidelity
lands within 100 ms median after an edit that reaches a state not measured before (the exported
model runs: shares across the head and neck, an ungroup, auto-share, a policy, an int16 domain).
Edits back to a state measured before (undo, redo: the check answers from its cache) are printed
apart, as information: the sequence has a few, as a user's has.

Run:  QT_QPA_PLATFORM=offscreen python3 benchmarks/gui_refresh.py [--models DIR] [--calib DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_common import SHARED, pump_events  # noqa: E402

TARGET_MS = 300.0
FIDELITY_TARGET_MS = 100.0  # median over the edits that reach a new state


def pump(app, cond, timeout=120.0) -> float:
    return pump_events(app, cond, timeout)


def edits(win):
    """(label, callable) pairs: a session of editing on yolov8n as a user does it, mostly reaching
    states not measured before (each share, an ungroup, auto-share, a policy, an int16 tensor),
    with the undos that take the user back to one measured before."""
    from qtquant.app.commands import SetPrecisionCommand

    ed, us = win.editor, win.stack
    s = lambda: win.session  # noqa: E731

    def head(k):
        return lambda: ed.drop([f"/model.22/cv2.{k}/cv2.{k}.2/Conv"], f"/model.22/cv3.{k}/cv3.{k}.2/Conv")

    def ungroup_first():
        return ed.ungroup([s().groups.group_of("/model.22/cv2.0/cv2.0.2/Conv_output_0").id])

    def int16_head():
        t = "/model.22/cv3.1/cv3.1.2/Conv_output_0"
        return ed.push(SetPrecisionCommand.for_domain(s(), t, "int16"), refused="Precision not changed")

    return [
        ("share head level 0 (box on class)", head(0)),
        ("share head level 1", head(1)),
        ("share head level 2", head(2)),
        ("join /model.20/Concat (neck, late)", lambda: ed.share_nodes(["/model.20/Concat"])),
        ("drop Resize on /model.14/Concat", lambda: ed.drop(["/model.13/Resize"], "/model.14/Concat")),
        ("drop Resize on /model.11/Concat", lambda: ed.drop(["/model.10/Resize"], "/model.11/Concat")),
        ("ungroup head level 0", ungroup_first),
        ("undo ungroup", us.undo),
        ("auto-share (1 bit)", lambda: ed.auto_share(1.0)),
        ("undo auto-share", us.undo),
        ("policy max-input", lambda: ed.set_policy("max-input")),
        ("undo policy", us.undo),
        ("head level 1 domain int16", int16_head),
        ("undo int16", us.undo),
        ("join /model.17/Concat (neck)", lambda: ed.share_nodes(["/model.17/Concat"])),
        ("undo join", us.undo),
    ]


def run(model, shapes, calib, rounds: int, overlay: str):
    from PySide6.QtCore import QSettings

    from qtquant.calib import CalibConfig
    from qtquant.gui.window.app import make_app
    from qtquant.gui.window.mainwindow import MainWindow

    app = make_app()
    tmp = tempfile.TemporaryDirectory(prefix="qtquant-bench-")
    win = MainWindow(QSettings(str(Path(tmp.name) / "s.ini"), QSettings.IniFormat), show_dialogs=False)
    win.resize(1600, 1000)
    win.show()
    win.open_model(model, shapes, CalibConfig(source=calib))
    c, s = win.controller, (lambda: win.session)
    pump(app, lambda: c.spec is not None and win.scene.spec is c.spec and win.relay.ready and not c.busy
         and s().fidelity is not None)
    win.set_overlay(overlay)
    win.view.set_zoom(0.8)
    win.view.centerOn(win.scene.nodes["/model.22/Concat"])
    pump(app, lambda: not c.busy)
    rows, seen = [], {state_key(s())}
    for r in range(rounds):
        while r and win.stack.can_undo:  # back to the start: a later round revisits measured states
            win.stack.undo()
        pump(app, lambda: not c.busy)
        for label, fn in edits(win):
            t0 = time.perf_counter()
            fn()
            win.view.viewport().repaint()
            t_canvas = time.perf_counter()
            rev = s().revision
            t_perf = pump(app, lambda: s().perf.revision == rev)
            win.perf_summary.repaint()
            win.view.viewport().repaint()
            t_perf = time.perf_counter()
            t_fid = pump(app, lambda: s().fidelity.revision == rev)
            win.perf_summary.repaint()
            t_fid = time.perf_counter()
            key = state_key(s())
            tr = dict(getattr(s().fidelity.value, "trace", {}))
            if "submitted_at" in tr:
                tr["edit"] = (tr.pop("submitted_at") - t0) * 1e3  # from the edit to the check's submission
            rows.append((label, (t_canvas - t0) * 1e3, (t_perf - t0) * 1e3, (t_fid - t0) * 1e3, key not in seen, tr))
            seen.add(key)
            pump(app, lambda: not c.busy)
    session = s()
    refs = reference(session)
    win.stack.set_clean()
    win.close()
    win.deleteLater()
    app.processEvents()
    tmp.cleanup()
    return rows, refs, len(session.graph.nodes)


def state_key(session):
    """What the measured program depends on: the groups and the options (an undo or redo back to a
    state measured before is answered from the check's cache; a new state runs the exported model)."""
    return repr((session.groups.as_lists(), session.options))


def reference(session):
    """Non-incremental costs on a headless twin of the session (same graph file, same statistics):
    domains + Concat analysis + a cold full simulation; a cold fidelity check."""
    from qtquant.fidelity.measure import measure_session
    from qtquant.app import open_model
    from qtquant.perf import Simulator, load_march

    twin = open_model(session.graph.path, dict(session.graph.input_shapes), session.options)
    twin.set_calibration(session.calibration)
    march = load_march(twin.options.march)
    sims = []
    for _ in range(5):
        twin.groups_changed()  # drop the cached domains and analysis
        t0 = time.perf_counter()
        Simulator(twin.graph, march).full(twin.concats())
        sims.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    measure_session(twin, follow_edits=True)  # first call: no cached float run (the GUI's first check)
    cold_fid = (time.perf_counter() - t0) * 1e3
    return {"cold_sim_ms": statistics.median(sims), "cold_fidelity_ms": cold_fid,
            "new_state": new_states(session)}


def new_states(session):
    """Headless, in this process: the check of edits reaching new states (after a first edit),
    with the exported program re-run where it changed (qtquant.runs.incremental) and, on a twin, in a
    fresh default session per edit as before; then, on the runner's own program and the models it
    ran, the issue's one-session design (:func:`feeds_not_models`).  Same edits, same machine,
    same minute."""
    from qtquant.fidelity import checkruns as fidelity_runs
    from qtquant.runs import incremental
    from qtquant.app import open_model
    from qtquant.fidelity.measure import measure_session
    from qtquant.quant.groups import share

    g = session.graph
    steps = _steps(g)
    out, ran, edits = {}, [], []  # ran: (model, outputs, results) of each incremental run; edits: each edit's
    real, real_run = incremental.MAX_NODES, incremental.IncrementalRunner.run

    def spy(self, model, names, *a, **k):
        res = real_run(self, model, names, *a, **k)
        ran.append((model, names, res))
        return res

    for how, limit in (("incremental", real), ("fresh", 0)):
        incremental.MAX_NODES = limit
        incremental.IncrementalRunner.run = spy if how == "incremental" else real_run
        try:
            twin = open_model(g.path, dict(g.input_shapes), session.options)
            twin.set_calibration(session.calibration)
            measure_session(twin, follow_edits=True)
            times = []
            for k, members in enumerate(steps):
                share(twin, members)
                before = len(ran)
                t0 = time.perf_counter()
                measure_session(twin, follow_edits=True)
                if k:  # from the second edit on: the check after a new state with warm caches
                    times.append((time.perf_counter() - t0) * 1e3)
                if how == "incremental":
                    edits.append(ran[-1] if len(ran) > before else None)
            out[how] = times
            if how == "incremental":
                runner = twin.graph.derived.get(fidelity_runs.RUNS).runner
        finally:
            incremental.MAX_NODES, incremental.IncrementalRunner.run = real, real_run
    out["feeds"] = feeds_not_models(runner, edits)
    return out


def feeds_not_models(runner, edits):
    """The alternative design, measured beside the runner: one onnxruntime session per structure in
    which every value an edit can move is a graph input, so that an edit changes feeds and not the
    model.  The session is ``runner``'s optimised program of the export (so the same kernels a
    default session of the file runs) with the initializers that move when every domain moves
    (``Program.moved``) made inputs; it is created once, then per edit the whole program runs on
    the check samples with the edit's values fed.  ``edits``: (model, outputs, results) of the
    runner's run of each edit, whose outputs these are compared with."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from qtquant.runs import incremental, sampleruns

    prog = next(iter(runner._programs.values()), None) if runner is not None else None
    if prog is None or not edits or None in edits or not prog.reusable:
        return None
    values = [prog.program_for(model) for model, _, _ in edits]
    if any(v is None for v in values):
        return None
    # Inputs: what moves when every domain moves, and whatever else these edits changed (a
    # weight whose bias fit raised its scale): the session is made before the edits.
    fed = set(prog.moved) | {n for v in values for n in v}
    inputs = [n for n in prog.inits if n in fed]
    sub = onnx.ModelProto()
    sub.CopyFrom(prog.optimised)
    keep = [t for t in sub.graph.initializer if t.name not in fed]
    del sub.graph.initializer[:]
    sub.graph.initializer.extend(keep)
    for n in inputs:
        t = prog.inits[n]
        sub.graph.input.append(onnx.helper.make_tensor_value_info(n, t.data_type, list(t.dims)))
    t0 = time.perf_counter()
    sess = incremental._disabled_session(sub)
    created = (time.perf_counter() - t0) * 1e3
    defaults = {n: numpy_helper.to_array(prog.inits[n]) for n in inputs}
    times, same = [], True
    for (_, names, ref), changed in zip(edits, values):
        t0 = time.perf_counter()
        edit = {**defaults, **{n: numpy_helper.to_array(t) for n, t in changed.items()}}
        out = sampleruns.run_session(sess, names, [{**f, **edit} for f in runner.feeds], None,
                                     threads=sampleruns.sample_threads())
        times.append((time.perf_counter() - t0) * 1e3)
        same = same and all(np.array_equal(a[n], b[n]) for a, b in zip(out, ref) for n in names)
    return {"created_ms": created, "inputs": len(inputs), "times": times, "same": same}


def _steps(g):
    """The headless edits of :func:`new_states`: the three head shares, then a Resize dropped on a
    mid-network Concat."""
    from qtquant.quant.concat import concat_members
    from qtquant.gui.window.editing import node_outputs

    heads = [("/model.22/cv2.0/cv2.0.2/Conv", "/model.22/cv3.0/cv3.0.2/Conv"),
             ("/model.22/cv2.1/cv2.1.2/Conv", "/model.22/cv3.1/cv3.1.2/Conv"),
             ("/model.22/cv2.2/cv2.2.2/Conv", "/model.22/cv3.2/cv3.2.2/Conv")]
    steps = [node_outputs(g, a) + node_outputs(g, b) for a, b in heads]
    steps.append(node_outputs(g, "/model.10/Resize") + concat_members(g, "/model.11/Concat"))
    return steps


# (column, trace keys): where an edit's fidelity time went, from the edit to the figure in the window
_STEPS = (("edit", ("edit",)), ("queue", ("snapshot", "queued", "before_call")), ("ipc", ()),
          ("build", ("build",)), ("prog", ("program",)), ("prep", ("prepare",)), ("sess", ("session",)),
          ("run", ("run",)), ("figs", ("figures", "members")), ("rest", ()), ("deliv", ("delivered",)))


def print_trace(rows):
    """Per edit: ms of each step of its fidelity check (Fidelity.trace); ipc is the round trip to
    the child process less the child's own time, rest the child's time outside the named steps,
    and *apply* what remains of the landing time (the GUI thread applying the result); *cpu* the CPU
    time the child process spent on the check, all its threads (against the child's steps: how long it
    waited for a core at its lower priority)."""
    print(f"  where the fidelity time went (ms): {'edit':30s} " + " ".join(f"{c:>6s}" for c, _ in _STEPS)
          + f" {'apply':>6s} {'landed':>7s} {'cpu':>6s}")
    for label, _, _, f, new, tr in rows:
        if not tr:
            continue
        vals = {c: sum(tr.get(k, 0.0) for k in keys) for c, keys in _STEPS}
        total = tr.get("total", 0.0)
        vals["ipc"] = tr.get("call", 0.0) - total
        vals["rest"] = total - sum(vals[c] for c in ("build", "prog", "prep", "sess", "run", "figs"))
        apply_ms = f - sum(vals.values())
        print(f"  {'new' if new else 'revisit':>7s} {label[:30]:30s}                      "
              + " ".join(f"{vals[c]:6.0f}" for c, _ in _STEPS) + f" {apply_ms:6.0f} {f:7.0f} {tr.get('cpu', 0.0):6.0f}")


def stats(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))], xs[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=str(SHARED / "models"), help="folder with yolov8n_320.onnx")
    ap.add_argument("--calib", default=str(SHARED / "calib"), help="calibration images (else synthetic data)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of the edit sequence (from the second on, every state was measured before)")
    ap.add_argument("--child-nice", type=int, default=None,
                    help="niceness of the app's child processes (the fidelity worker among them; "
                         "default: the app's own, qtquant.gui.jobs.WORKER_NICENESS)")
    args = ap.parse_args()
    if args.child_nice is not None:
        from qtquant.gui import jobs

        jobs.WORKER_NICENESS = args.child_nice
    model = Path(args.models) / "yolov8n_320.onnx"
    if not model.exists():
        print(f"{model} not found: give --models DIR")
        return 2
    calib = args.calib if Path(args.calib).is_dir() else "synthetic"
    from qtquant.gui.jobs import WORKER_NICENESS

    print(f"model {model.name} (images=1x3x320x320), calibration {calib}, {args.rounds} round(s) of the edit sequence; "
          f"child processes at nice {WORKER_NICENESS}")
    worst, new_medians = 0.0, []
    for overlay in ("none", "latency"):
        rows, refs, nodes = run(model, {"images": (1, 3, 320, 320)}, calib, args.rounds, overlay)
        print(f"\noverlay {overlay!r} ({nodes} nodes): milliseconds from the edit to ...")
        print(f"{'edit':38s} {'state':>9s} {'canvas':>8s} {'summary':>8s} {'fidelity':>9s}")
        by = {}
        for label, a, p, f, new, _ in rows:
            by.setdefault(label, []).append((a, p, f, new))
        for label, vals in by.items():
            med = [statistics.median(v[i] for v in vals) for i in range(3)]
            state = "/".join(sorted({"new" if v[3] else "revisit" for v in vals}))
            print(f"{label:38s} {state:>9s} {med[0]:8.1f} {med[1]:8.1f} {med[2]:9.1f}")
        print_trace(rows)
        for name, i in (("canvas", 1), ("summary", 2), ("fidelity", 3)):
            m, p90, mx = stats([r[i] for r in rows])
            print(f"  {name:9s} median {m:7.1f}  p90 {p90:7.1f}  max {mx:7.1f} ms  over {len(rows)} edits")
        for name, new in (("new state", True), ("revisited", False)):
            part = [r[3] for r in rows if r[4] is new]
            if part:
                m, p90, mx = stats(part)
                print(f"  fidelity, {name:9s}: median {m:7.1f}  p90 {p90:7.1f}  max {mx:7.1f} ms  over {len(part)} "
                      f"edits ({'a state not measured before' if new else 'back to a state measured before'})")
                if new:
                    new_medians.append(m)
        sm, _, smax = stats([r[2] for r in rows])
        worst = max(worst, smax)
        print(f"  reference: analysis + cold full simulation {refs['cold_sim_ms']:.1f} ms "
              f"(summary median / reference = {sm / refs['cold_sim_ms']:.2f}); "
              f"cold fidelity check {refs['cold_fidelity_ms']:.0f} ms "
              f"(fidelity median / cold = {stats([r[3] for r in rows])[0] / refs['cold_fidelity_ms']:.2f})")
        inc, fresh = refs["new_state"]["incremental"], refs["new_state"]["fresh"]
        print("  new states, headless check only (3 edits: two head shares, a mid-network Concat): "
              f"program re-run where changed {' '.join(f'{x:.0f}' for x in inc)} ms; fresh default session "
              f"{' '.join(f'{x:.0f}' for x in fresh)} ms (ratio of sums {sum(inc) / sum(fresh):.2f})")
        fd = refs["new_state"]["feeds"]
        if fd is None:
            print("  one session, edits as feeds: not measured (the program does not hold when the values move)")
        else:
            fed = fd["times"][1:]
            print(f"  one session, edits as feeds (the alternative design; {fd['inputs']} values as inputs, session "
                  f"made once in {fd['created_ms']:.0f} ms): same 3 edits {' '.join(f'{x:.0f}' for x in fed)} ms, "
                  f"the whole program each time (ratio of sums to the re-run {sum(fed) / sum(inc):.2f}); "
                  f"outputs {'bit-identical to' if fd['same'] else 'DIFFERENT from'} the runner's")
        runs = sorted(tr.get("run", 0.0) for _, _, _, _, new, tr in rows if new and tr)
        if runs:
            print(f"  floor: onnxruntime running only what each new-state edit changed (the trace's run step, "
                  f"its session made already): median {statistics.median(runs):.0f} ms over {len(runs)} edits "
                  f"({' '.join(f'{x:.0f}' for x in runs)})")
    print(f"\ntarget: summary refreshed < {TARGET_MS:.0f} ms after an edit: worst {worst:.1f} ms "
          f"-> {'met' if worst < TARGET_MS else 'NOT met'}")
    if new_medians:
        w = max(new_medians)
        print(f"target: fidelity refreshed <= {FIDELITY_TARGET_MS:.0f} ms median after an edit that reaches "
              f"a new state: {' / '.join(f'{m:.1f}' for m in new_medians)} ms (overlays none / latency) "
              f"-> {'met' if w <= FIDELITY_TARGET_MS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
