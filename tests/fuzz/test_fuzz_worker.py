"""Crash-proof harness for the fuzz tests, plus tests of the harness itself.

Hostile input may crash the interpreter inside onnx / onnxruntime C++ code, or hang
it.  A crash must fail one test, not kill pytest, so every fuzz case runs in a
long-lived worker *process*: hypothesis generates and shrinks cases in pytest, the
worker writes the files into a fresh folder and calls one named target.  A dead
worker is reported as ``crash`` (with its faulthandler output) and restarted; a case
that does not answer within the timeout is reported as ``hang``.

The protocol is JSON lines over a private pipe (no pickle anywhere).  Targets are
looked up by name in :data:`TARGETS`; nothing from the request is evaluated.

Run ``python tests/fuzz/test_fuzz_worker.py --serve`` to start a worker by hand.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FuzzWorker", "Outcome", "Tally", "fuzz_examples", "fuzz_settings", "worker", "report", "run_and_report"]

# -- bounded example counts -----------------------------------------------------------------
# Normal runs are small and deterministic (CI); QTQUANT_FUZZ_EXAMPLES=5000 gives a long,
# randomized run.  The per-target figures are printed and, with QTQUANT_FUZZ_REPORT=FILE,
# appended to FILE as JSON lines (docs/robustness.md is built from those).
LONG_RUN = bool(os.environ.get("QTQUANT_FUZZ_EXAMPLES"))


def fuzz_examples(default: int) -> int:
    v = os.environ.get("QTQUANT_FUZZ_EXAMPLES")
    return int(v) if v else default


def fuzz_settings(default: int, **kw):
    from hypothesis import HealthCheck, settings

    return settings(max_examples=fuzz_examples(default), deadline=None, database=None,
                    derandomize=not LONG_RUN, print_blob=True,
                    suppress_health_check=list(HealthCheck), **kw)


@dataclass
class Outcome:
    status: str  # "ok" | "error" (a QtQuantError) | "bug" (other exception) | "crash" | "hang"
    type: str = ""
    msg: str = ""
    detail: str = ""  # traceback, stderr tail
    value: dict = field(default_factory=dict)

    @property
    def fine(self) -> bool:
        return self.status in ("ok", "error")

    def check(self) -> "Outcome":
        """Raise AssertionError unless this is success or a one-line QtQuantError."""
        assert self.fine, f"{self.status}: {self.type}: {self.msg}\n{self.detail}"
        if self.status == "error":
            assert self.msg.strip(), f"{self.type} with an empty message"
            assert "\n" not in self.msg and "Traceback" not in self.msg, repr(self.msg)
            assert len(self.msg) < 2000, f"message too long ({len(self.msg)} chars)"
        return self


@dataclass
class Tally:
    target: str
    cases: int = 0
    ok: int = 0
    errors: dict = field(default_factory=dict)  # error type -> count
    bad: int = 0
    misses: int = 0  # statistics-cache target: unreadable entries treated as a miss
    seconds: float = 0.0
    samples: dict = field(default_factory=dict)  # error type -> one example message

    def add(self, o: Outcome, dt: float) -> None:
        self.cases += 1
        self.seconds += dt
        if o.status == "ok" and o.value.get("rc") not in (None, 0):  # the CLI refused: exit 3
            self.errors[f"exit {o.value['rc']}"] = self.errors.get(f"exit {o.value['rc']}", 0) + 1
            self.samples.setdefault(f"exit {o.value['rc']}", o.value.get("stderr", "").strip()[:160])
        elif o.status == "ok":
            self.ok += 1
            if o.value.get("hit") is False:
                self.misses += 1
        elif o.status == "error":
            self.errors[o.type] = self.errors.get(o.type, 0) + 1
            self.samples.setdefault(o.type, o.msg[:160])
        else:
            self.bad += 1
        log = os.environ.get("QTQUANT_FUZZ_LOG")  # every outcome, for looking at coverage
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps([self.target, o.status, o.type, o.msg[:200]]) + "\n")

    def line(self) -> str:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items(), key=lambda kv: -kv[1]))
        miss = f" ({self.misses} cache misses)" if self.misses else ""
        return (f"fuzz[{self.target}]: {self.cases} cases in {self.seconds:.1f}s: {self.ok} ok{miss}, "
                f"{sum(self.errors.values())} refused ({errs or '-'}), {self.bad} bad")


_TALLIES: dict[str, Tally] = {}


def tally(target: str) -> Tally:
    return _TALLIES.setdefault(target, Tally(target))


def report(target: str) -> Tally:
    """Print (and optionally record) the figures of one target; returns its tally."""
    t = tally(target)
    line = t.line()
    print(line)
    if LONG_RUN:
        sys.__stderr__.write(line + "\n")
    out = os.environ.get("QTQUANT_FUZZ_REPORT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"target": t.target, "cases": t.cases, "ok": t.ok, "errors": t.errors,
                                "bad": t.bad, "misses": t.misses, "seconds": round(t.seconds, 2),
                                "samples": t.samples}) + "\n")
    return t


def run_and_report(check, target: str) -> "Tally":
    """Run a hypothesis test function, then report the target's figures even when it failed."""
    try:
        check()
    finally:
        t = report(target)
    return t


# -- the parent side -----------------------------------------------------------------------
class FuzzWorker:
    """One worker process; :meth:`run` sends a case, restarts the worker after a crash or hang."""

    def __init__(self, timeout: float = 60.0, mem_gb: float = 8.0, recycle: int = 400):
        self.timeout = timeout
        self.mem_gb = mem_gb
        # A fresh worker every `recycle` cases: thousands of hostile cases fragment the address
        # space under the memory cap until glibc cannot even start a thread (seen once at ~20k
        # cases with a 6 GB cap; the case itself passed on replay).
        self.recycle = recycle
        self.proc: subprocess.Popen | None = None
        self._err = None
        self._served = 0
        self.restarts = 0

    def start(self) -> None:
        env = dict(os.environ, PYTHONFAULTHANDLER="1", OMP_NUM_THREADS="1", QTQUANT_WORKER_MEM_GB=str(self.mem_gb))
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=env, bufsize=0)
        ready = self._readline(120.0)
        assert ready and json.loads(ready).get("ready"), "fuzz worker did not start"

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for s in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(Exception):
                    s.close()
            self.proc = None
        if self._err is not None:
            self._err.close()
            self._err = None

    def _readline(self, timeout: float) -> bytes | None:
        buf = b""
        end = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while not buf.endswith(b"\n"):
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
        return buf

    def _stderr_tail(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read()[-3000:].decode("utf-8", "replace")

    def run(self, target: str, files: dict | None = None, args: dict | None = None,
            timeout: float | None = None, label: str | None = None) -> Outcome:
        """Run ``target`` on ``files`` ({relative path: bytes}) in a fresh folder of the worker."""
        if self.proc is not None and self._served >= self.recycle:
            self.close()
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.start()
            self._served = 0
        self._served += 1
        req = {"target": target, "args": args or {},
               "files": {k: base64.b64encode(v).decode() for k, v in (files or {}).items()}}
        t0 = time.monotonic()
        limit = timeout or self.timeout
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            line = self._readline(limit)
        except TimeoutError:
            self.proc.kill()
            self.proc.wait()
            out = Outcome("hang", msg=f"no answer within {limit:.0f}s", detail=self._stderr_tail())
            self.close()
            self.restarts += 1
        except OSError:  # broken pipe: the worker died before reading the case
            line = None
            out = None
        else:
            out = None
        if out is None and line is None:
            rc = self.proc.wait()
            out = Outcome("crash", msg=f"worker died with exit code {rc}", detail=self._stderr_tail())
            self.close()
            self.restarts += 1
        elif out is None:
            d = json.loads(line)
            out = Outcome(d["status"], d.get("type", ""), d.get("msg", ""), d.get("detail", ""),
                          d.get("value", {}))
        tally(label or target).add(out, time.monotonic() - t0)
        keep = os.environ.get("QTQUANT_FUZZ_CRASHDIR")
        if keep and out.status in ("crash", "hang"):  # keep the case to replay it by hand
            Path(keep).mkdir(parents=True, exist_ok=True)
            name = f"{out.status}-{time.strftime('%H%M%S')}-{os.getpid()}-{tally(label or target).cases}.json"
            (Path(keep) / name).write_text(json.dumps({**req, "outcome": out.msg, "detail": out.detail}))
        return out


_SHARED: FuzzWorker | None = None


def worker() -> FuzzWorker:
    """The process-wide worker (started on first use, killed at interpreter exit)."""
    global _SHARED
    if _SHARED is None:
        import atexit

        _SHARED = FuzzWorker()
        atexit.register(_SHARED.close)
    return _SHARED


# -- the worker side -----------------------------------------------------------------------
def _target_load_graph(d: Path, a: dict):
    from qtquant.model.graph import load_graph

    g = load_graph(d / a.get("model", "model.onnx"), a.get("shapes") or None)
    return {"nodes": len(g.nodes), "concats": len(g.concat_nodes())}


def _target_open_model(d: Path, a: dict):
    from qtquant.app import open_model

    s = open_model(d / a.get("model", "model.onnx"), a.get("shapes") or None)
    return {"nodes": len(s.graph.nodes), "qdq": s.qdq is not None}


def _target_analyze(d: Path, a: dict):
    """Load, calibrate on two synthetic samples, build domains and the Concat report."""
    from qtquant.calib import CalibConfig
    from qtquant.app import open_model
    from qtquant.files.report import analysis_dict
    from qtquant.app import Options

    opts = Options(calib=CalibConfig(count=2, holdout=1))
    s = open_model(d / a.get("model", "model.onnx"), a.get("shapes") or None, opts)
    if not s.quantized_file:
        s.run_calibration()
    perf = fid = None
    if a.get("full"):  # what `qtquant analyze` adds: the perf simulation and the fidelity check
        from qtquant.fidelity.measure import measure_session
        from qtquant.perf import simulate_session

        perf = simulate_session(s)
        if s.calibration is not None and s.calibration.holdout:
            fid = measure_session(s)
    rep = analysis_dict(s, perf=perf, fidelity=fid)
    json.dumps(rep, allow_nan=True)
    return {"concats": len(s.concats())}


def _target_cli(d: Path, a: dict):
    """``qtquant.cli.main(argv)`` with ``{dir}`` in argv replaced by the case folder."""
    from qtquant.cli import main

    argv = [x.replace("{dir}", str(d)) for x in a["argv"]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    return {"rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue()[-2000:]}


def _report_json(session) -> dict:
    from qtquant.files.report import analysis_dict

    rep = analysis_dict(session)
    json.dumps(rep, allow_nan=True)
    return {"concats": len(rep.get("concats", [])), "groups": len(session.groups)}


def _calibrated(path: Path, config=None):
    from qtquant.calib import CalibConfig
    from qtquant.app import open_model
    from qtquant.app import Options

    s = open_model(path, None, Options(calib=config or CalibConfig(count=2, holdout=1)))
    if not s.quantized_file:
        s.run_calibration()
    return s


def _target_plan(d: Path, a: dict):
    """load_plan + apply_plan on a calibrated session, then the report."""
    from qtquant.files.plan import apply_plan, load_plan

    s = _calibrated(d / "model.onnx")
    plan = load_plan(d / a.get("plan", "plan.json"))
    res = apply_plan(s, plan)
    out = _report_json(s)
    out["warnings"] = len(res.warnings)
    return out


def _target_project(d: Path, a: dict):
    """open_project (model next to it, statistics cache optional), then the report."""
    from qtquant.app.projects import open_project

    s, rep = open_project(d / a.get("project", "p.qtquant"), calibrate=bool(a.get("calibrate")))
    rep.message()
    out = _report_json(s)
    out["from_cache"] = rep.stats_from_cache
    return out


def _target_calib_cache(d: Path, a: dict):
    """load_cached from a (mutated) cache folder; a hit is used for the report and fidelity."""
    from qtquant.calib import CalibConfig
    from qtquant.calib.cache import load_cached
    from qtquant.app import open_model

    cfg = CalibConfig(count=2, holdout=1)
    from qtquant.app import Options

    s = open_model(d / "model.onnx", None, Options(calib=cfg))
    res = load_cached(s.graph, cfg, d / "cache")
    if res is None:
        return {"hit": False}
    s.set_calibration(res)
    out = _report_json(s)
    from qtquant.fidelity.measure import measure_session

    measure_session(s).text()
    out["hit"] = True
    return out


def _target_calib(d: Path, a: dict):
    """Calibrate from the data files of the case (source relative to the case folder)."""
    from qtquant.calib import CalibConfig

    kw = dict(a.get("config", {}))
    src = kw.pop("source", "data")
    cfg = CalibConfig(source=src if src == "synthetic" else str(d / src), **kw)
    s = _calibrated(d / "model.onnx", cfg)
    out = _report_json(s)
    out["tensors"] = len(s.calibration.ranges)
    return out


def _target_selftest(d: Path, a: dict):
    what = a.get("what")
    if what == "crash":
        import ctypes

        ctypes.string_at(0)  # segfault
    if what == "hang":
        time.sleep(3600)
    if what == "raise":
        raise ValueError("plain bug")
    if what == "qtquant":
        from qtquant.base.errors import ModelError

        raise ModelError("refused\nover two lines")
    return {"files": sorted(p.name for p in d.iterdir())}


TARGETS = {
    "load_graph": _target_load_graph,
    "open_model": _target_open_model,
    "analyze": _target_analyze,
    "cli": _target_cli,
    "plan": _target_plan,
    "project": _target_project,
    "calib_cache": _target_calib_cache,
    "calib": _target_calib,
    "selftest": _target_selftest,
}


def _serve() -> None:
    import faulthandler
    import resource
    import traceback

    faulthandler.enable()
    gb = float(os.environ.get("QTQUANT_WORKER_MEM_GB", "8"))
    # A hostile 'huge dims' model must fail with MemoryError, not summon the OOM killer.
    resource.setrlimit(resource.RLIMIT_AS, (int(gb * 2**30), int(gb * 2**30)))
    # The protocol gets a private copy of stdout; fd 1 goes to /dev/null so prints from
    # C++ or from the code under test cannot corrupt it.
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w")
    import qtquant.app.loader  # noqa: F401  (warm imports before the first case)
    import qtquant.files.report  # noqa: F401

    proto.write(b'{"ready": true}\n')
    from qtquant.base.errors import QtQuantError

    for line in sys.stdin.buffer:
        req = json.loads(line)
        d = Path(tempfile.mkdtemp(prefix="qtq-fuzz-"))
        try:
            for rel, b64 in req["files"].items():
                p = d / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(base64.b64decode(b64))
            try:
                value = TARGETS[req["target"]](d, req["args"])
                resp = {"status": "ok", "value": value}
            except QtQuantError as e:
                resp = {"status": "error", "type": type(e).__name__, "msg": str(e)}
            except BaseException as e:  # noqa: BLE001 - anything else is what we hunt
                resp = {"status": "bug", "type": type(e).__name__, "msg": str(e)[:2000],
                        "detail": traceback.format_exc()[-4000:]}
        finally:
            shutil.rmtree(d, ignore_errors=True)
        proto.write((json.dumps(resp, default=str) + "\n").encode())


# -- tests of the harness ------------------------------------------------------------------
def test_harness_reports_each_outcome():
    w = FuzzWorker(timeout=3.0)
    try:
        ok = w.run("selftest", {"a.onnx": b"x", "sub/b.bin": b"y"}, {"what": "ok"}, label="_selftest")
        assert ok.status == "ok" and ok.value["files"] == ["a.onnx", "sub"]
        err = w.run("selftest", {}, {"what": "qtquant"}, label="_selftest")
        assert err.status == "error" and err.type == "ModelError" and err.msg == "refused over two lines"
        err.check()
        bug = w.run("selftest", {}, {"what": "raise"}, label="_selftest")
        assert bug.status == "bug" and "ValueError" in bug.detail
        crash = w.run("selftest", {}, {"what": "crash"}, label="_selftest")
        assert crash.status == "crash" and "Segmentation fault" in crash.detail
        hang = w.run("selftest", {}, {"what": "hang"}, timeout=2.0, label="_selftest")
        assert hang.status == "hang"
        again = w.run("selftest", {}, {"what": "ok"}, label="_selftest")  # restarted after both
        assert again.status == "ok" and w.restarts == 2
        for o in (bug, crash, hang):
            try:
                o.check()
            except AssertionError:
                continue
            raise AssertionError(f"{o.status} passed the check")
    finally:
        w.close()
    t = tally("_selftest")
    assert (t.cases, t.ok, t.bad) == (6, 2, 3) and t.errors == {"ModelError": 1}


if __name__ == "__main__" and "--serve" in sys.argv:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _serve()
