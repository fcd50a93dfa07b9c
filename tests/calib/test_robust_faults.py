"""Issue 8: faults in background jobs, at the core level (the GUI's job runner builds on these).

- onnxruntime raising in the middle of calibration;
- cancellation at every possible point, in-process and with ``--jobs`` worker processes;
- a calibration worker process killed from outside;
- edits while a fidelity/perf job runs in another thread;
- two models calibrating at once;
- a disk that fills up during an export.

In every case: a one-line QtQuantError (or a clean Cancelled), the session keeps its previous
state, no thread or process is left behind, and the next run works.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import threading
import time

import numpy as np
import pytest

from builders import branchy_concat_model, save
from qtquant.calib import CalibConfig
from qtquant.base.errors import Cancelled, ModelError, QtQuantError
from qtquant.app import open_model
from qtquant.app import Options


def _session(tmp_path, count=6, holdout=1, jobs=1, name="m.onnx", gains=(1.0, 3.0, 8.0)):
    p = save(branchy_concat_model(gains=gains, shape=(1, 3, 8, 8), chain=True), tmp_path / name)
    return open_model(p, None, Options(calib=CalibConfig(count=count, holdout=holdout, jobs=jobs)))


def _threads():
    return {t for t in threading.enumerate() if t.is_alive()}


def _no_new_threads(before, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        extra = [t for t in _threads() - before if t.name.startswith("qtquant")]
        if not extra:
            return
        time.sleep(0.02)
    raise AssertionError(f"threads left behind: {extra}")


class _FlakySession:
    """Wraps an InferenceSession; ``run`` raises on call number ``fail_at``."""

    def __init__(self, sess, fail_at, exc):
        self._s, self.fail_at, self.exc, self.calls = sess, fail_at, exc, 0

    def run(self, *a, **kw):
        self.calls += 1
        if self.calls == self.fail_at:
            raise self.exc
        return self._s.run(*a, **kw)

    def __getattr__(self, k):
        return getattr(self._s, k)


@pytest.mark.parametrize("fail_at", [1, 3, 6])
@pytest.mark.parametrize("exc", [RuntimeError("injected: CUDA? no, CPU out of luck\nsecond line"),
                                 MemoryError(), ValueError("")])
def test_onnxruntime_raising_mid_calibration(tmp_path, monkeypatch, fail_at, exc):
    import qtquant.calib.runner as engine

    s = _session(tmp_path)
    good = s.run_calibration()
    rev = s.revision
    real = engine.make_session
    made = []

    def flaky(*a, **kw):
        made.append(_FlakySession(real(*a, **kw), fail_at, exc))
        return made[-1]

    monkeypatch.setattr(engine, "make_session", flaky)
    before = _threads()
    events = []
    s.events.connect(lambda info: events.append(info.signal.name))
    with pytest.raises(QtQuantError) as ei:
        s.run_calibration(progress=lambda d, t: None)
    msg = str(ei.value)
    assert "\n" not in msg and msg.strip(), msg
    assert isinstance(ei.value, ModelError)
    # The failing run is the last one started, bar the one another lane may have started meanwhile.
    assert made and fail_at <= made[0].calls < fail_at + engine.LANES
    # The previous calibration stays; nothing was announced.
    assert s.calibration is good and s.revision == rev and "calibrated" not in events
    _no_new_threads(before)
    monkeypatch.setattr(engine, "make_session", real)
    again = s.run_calibration()
    assert again.ranges.keys() == good.ranges.keys()


def test_cancel_at_every_point(tmp_path):
    """cancel() turns true at its k-th poll, for every k until calibration finishes by itself."""
    s = _session(tmp_path, count=5)
    good = s.run_calibration()
    before = _threads()
    k = 0
    cancelled = 0
    while True:
        polls = 0

        def cancel():
            nonlocal polls
            polls += 1
            return polls > k

        try:
            s.run_calibration(cancel=cancel)
        except Cancelled as e:
            cancelled += 1
            assert str(e) and "\n" not in str(e)
            assert s.calibration is good  # untouched
            k += 1
            continue
        break
    assert cancelled >= 5  # at least once per batch
    assert s.calibration is not good and s.calibration.ranges.keys() == good.ranges.keys()
    _no_new_threads(before)


def _children():
    return [p for p in mp.active_children() if p.name.startswith("qtquant-calib")]


@pytest.mark.slow
def test_parallel_calibration_cancel_and_killed_worker(tmp_path):
    """--jobs 2: cancelling terminates the workers; a worker killed from outside is an error."""
    s = _session(tmp_path, count=3000, holdout=0, jobs=2)
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        s.run_calibration(cancel=lambda: time.monotonic() - t0 > 0.5)
    deadline = time.monotonic() + 10
    while _children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children(), "cancelled calibration left worker processes running"
    assert s.calibration is None

    killed = []

    def progress(done, total):
        if not killed:
            for p in _children():
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.pid)
                break

    with pytest.raises(QtQuantError) as ei:
        s.run_calibration(progress=progress)
    assert killed, "no worker was alive to kill"
    assert "\n" not in str(ei.value) and ("stopped" in str(ei.value) or "failed" in str(ei.value)), str(ei.value)
    deadline = time.monotonic() + 10
    while _children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children()
    assert s.calibration is None


def test_edits_while_fidelity_and_perf_run(tmp_path):
    """A job that reads the session while the user edits it never crashes; its result is tagged
    with the revision it started from, so the GUI can drop it as stale."""
    from qtquant.fidelity.measure import measure_session

    try:
        from qtquant.perf import simulate_session
    except ImportError:  # pragma: no cover
        simulate_session = None
    s = _session(tmp_path, count=4, holdout=2)
    s.run_calibration()
    errors, results = [], []
    stop = threading.Event()

    def job():
        try:
            while not stop.is_set():
                start = s.revision
                fid = measure_session(s)
                results.append((start, fid.revision))
                if simulate_session is not None:
                    simulate_session(s)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    t = threading.Thread(target=job, name="qtquant-test-job")
    t.start()
    try:
        for i in range(60):
            if i % 2 == 0:
                s.groups.share(s.graph, ["conv1_out", "conv2_out"], "g")
            else:
                s.groups.clear()
            s.groups_changed()
            time.sleep(0.005)
    finally:
        stop.set()
        t.join(60)
    assert not t.is_alive()
    assert not errors, errors
    assert results
    # A result's revision is the one at its start or later, never a future one.
    assert all(start <= rev <= s.revision for start, rev in results), results[:5]


def test_two_models_calibrating_at_once(tmp_path):
    """Opening another model while a job runs: each session gets its own, correct statistics."""
    a = _session(tmp_path, name="a.onnx", gains=(1.0, 3.0, 8.0))
    b = _session(tmp_path, name="b.onnx", gains=(5.0, 0.5, 2.0))
    ref_a = a.run_calibration().ranges
    ref_b = b.run_calibration().ranges
    a2 = _session(tmp_path, name="a.onnx", gains=(1.0, 3.0, 8.0))
    b2 = _session(tmp_path, name="b.onnx", gains=(5.0, 0.5, 2.0))
    out, errs = {}, []

    def run(key, sess):
        try:
            for _ in range(3):
                out[key] = sess.run_calibration().ranges
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))

    ts = [threading.Thread(target=run, args=("a", a2)), threading.Thread(target=run, args=("b", b2))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    for key, ref in (("a", ref_a), ("b", ref_b)):
        assert out[key].keys() == ref.keys()
        for n in ref:
            np.testing.assert_allclose(out[key][n], ref[n], rtol=1e-6)


def test_disk_full_during_export(tmp_path, monkeypatch):
    """ENOSPC half-way through writing the model: one-line error, old export intact, no temp left."""
    import onnx

    from qtquant.export import qdq

    s = _session(tmp_path, count=2)
    s.run_calibration()
    out = tmp_path / "fixed.onnx"
    qdq.export_qdq(s, out)
    old = out.read_bytes()
    real = onnx.save_model

    def full_disk(model, f, *a, **kw):
        with open(f, "wb") as fh:
            fh.write(model.SerializeToString()[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx, "save_model", full_disk)
    with pytest.raises(QtQuantError) as ei:
        qdq.export_qdq(s, out)
    assert "No space left" in str(ei.value) and "\n" not in str(ei.value)
    assert out.read_bytes() == old
    assert not list(tmp_path.glob(".qtquant-*")), "temp folder left behind"
    monkeypatch.setattr(onnx, "save_model", real)
    qdq.export_qdq(s, out)  # and the next export works
