"""Issue 8: a writer killed with SIGKILL at any moment never damages the file it replaces.

A child process writes through the project's own writers (``qtquant.base.fileio.atomic`` for
projects and plans, ``export_qdq`` for models) and is killed at spread-out moments of its
run.  After every kill the target holds either the complete old content or the complete
new content, never a mix or a truncation.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from builders import branchy_concat_model

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

TEXT_WRITER = r"""
import sys
from qtquant.base.fileio import atomic_write_text
text = ("new line of a big project file\n" * (int(sys.argv[2]) // 31 + 1))[: int(sys.argv[2])]
print("READY", flush=True)
atomic_write_text(sys.argv[1], text)
print("DONE", flush=True)
"""


def _start(code: str, *args) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV, text=True)
    line = p.stdout.readline()
    assert line.strip() == "READY", (line, p.stderr.read())
    return p


def _finish(p: subprocess.Popen) -> None:
    p.wait()
    p.stdout.close()
    p.stderr.close()


def _kill_after(p: subprocess.Popen, delay: float) -> bool:
    """SIGKILL ``p`` after ``delay`` seconds; True when it was still running then."""
    end = time.monotonic() + delay
    while time.monotonic() < end:
        if p.poll() is not None:
            return False
        time.sleep(0.0005)
    alive = p.poll() is None
    if alive:
        os.kill(p.pid, signal.SIGKILL)
    _finish(p)
    return alive


def _partial_temp_files(folder: Path) -> list[Path]:
    return [f for d in folder.glob(".qtquant-*") for f in d.rglob("*") if f.is_file()]


def test_killed_text_writer_leaves_old_file_intact(tmp_path):
    target = tmp_path / "model.qtquant"
    old = '{"format": "qtquant-project", "version": 1, "model": "m.onnx"}\n'
    size = 200 * 2**20
    new_sha = hashlib.sha256((("new line of a big project file\n" * (size // 31 + 1))[:size]).encode()).hexdigest()

    # One uninterrupted run measures how long a write takes here.
    target.write_text(old)
    p = _start(TEXT_WRITER, target, size)
    t0 = time.monotonic()
    assert p.stdout.readline().strip() == "DONE"
    span = time.monotonic() - t0
    _finish(p)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == new_sha

    killed = mid_write = k = 0
    while killed < 12 and k < 40:
        target.write_text(old)
        p = _start(TEXT_WRITER, target, size)
        if _kill_after(p, span * (killed + 0.5) / 12):
            killed += 1
            mid_write += bool(_partial_temp_files(tmp_path))
        else:  # the write got faster than the first one (a warm cache, a quieter machine)
            span *= 0.8
        data = target.read_bytes()
        assert data == old.encode() or hashlib.sha256(data).hexdigest() == new_sha, \
            f"kill {k}: target is neither old nor new ({len(data)} bytes)"
        k += 1
    assert killed >= 6, f"only {killed} of {k} runs were killed before they finished"
    assert mid_write >= 1, "no kill landed while the temp file was being written"


EXPORTER = r"""
import os, sys, signal
from qtquant.app import open_model
from qtquant.app import Options
from qtquant.calib import CalibConfig
from qtquant.export import qdq
s = open_model(sys.argv[1], None, Options(calib=CalibConfig(count=2, holdout=0)))
s.run_calibration()
if sys.argv[3] in ("external", "between"):  # as if the weights were over the 1.8 GB threshold
    qdq.EXTERNAL_THRESHOLD = 0
if sys.argv[3] == "between":  # die right after the first file of the output is renamed into place
    real = qdq.commit
    def commit(tmp, final):
        real(tmp, final)
        os.kill(os.getpid(), signal.SIGKILL)
    qdq.commit = commit
print("READY", flush=True)
qdq.export_qdq(s, sys.argv[2])
print("DONE", flush=True)
"""


def _wide_model(gain: float) -> onnx.ModelProto:
    """~50 MB of weights: long enough to write that kills land inside the write."""
    return branchy_concat_model(gains=(gain, 3.0 * gain), shape=(1, 512, 4, 4))


def _export(src: Path, out: Path, mode: str = "full") -> subprocess.Popen:
    return _start(EXPORTER, src, out, mode)


def _fingerprint(out: Path):
    """Output of the exported model on a fixed input (reads external data when there is some)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 512, 4, 4), dtype=np.float32)
    return sess.run(None, {"x": x})[0]


@pytest.mark.slow
def test_killed_export_leaves_old_model_intact(tmp_path):
    src_old, src_new = tmp_path / "old_src.onnx", tmp_path / "new_src.onnx"
    onnx.save(_wide_model(1.0), str(src_old))
    onnx.save(_wide_model(5.0), str(src_new))
    out = tmp_path / "fixed.onnx"
    p = _export(src_old, out)
    assert p.stdout.readline().strip() == "DONE", p.stderr.read()
    _finish(p)
    old_bytes = out.read_bytes()
    old_y = _fingerprint(out)

    p = _export(src_new, tmp_path / "probe.onnx")
    t0 = time.monotonic()
    assert p.stdout.readline().strip() == "DONE"
    span = time.monotonic() - t0
    _finish(p)
    new_bytes = (tmp_path / "probe.onnx").read_bytes()
    assert new_bytes != old_bytes

    killed = 0
    for k in range(8):
        p = _export(src_new, out)
        killed += _kill_after(p, span * (k + 0.5) / 8)
        data = out.read_bytes()
        assert data in (old_bytes, new_bytes), f"kill {k}: the model file is damaged ({len(data)} bytes)"
        if data == old_bytes:
            np.testing.assert_array_equal(_fingerprint(out), old_y)
        out.write_bytes(old_bytes)
    assert killed >= 4


def test_kill_between_weight_and_model_rename_keeps_a_consistent_pair(tmp_path):
    """Models over 1.8 GB are written as two files; a kill between their renames must not mix them."""
    src_old, src_new = tmp_path / "old.onnx", tmp_path / "new.onnx"
    m = branchy_concat_model(gains=(1.0, 3.0), shape=(1, 64, 4, 4))
    onnx.save(m, str(src_old))
    rng = np.random.default_rng(7)
    for t in m.graph.initializer:  # other weights, same layout: the new .data differs from the old
        w = onnx.numpy_helper.to_array(t)
        t.CopyFrom(onnx.numpy_helper.from_array((w * rng.uniform(0.2, 2.0, w.shape)).astype(w.dtype), t.name))
    onnx.save(m, str(src_new))
    out = tmp_path / "fixed.onnx"
    p = _export(src_old, out, "external")
    assert p.stdout.readline().strip() == "DONE", p.stderr.read()
    _finish(p)
    assert list(tmp_path.glob("fixed.onnx.*.data"))
    import onnxruntime as ort

    x = np.random.default_rng(0).random((1, 64, 4, 4), dtype=np.float32)
    old_y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    p = _export(src_new, out, "between")
    _finish(p)
    assert p.returncode == -signal.SIGKILL
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, old_y)  # the old model with the old weights, whole


def test_fix_of_small_model_with_external_data(tmp_path):
    """A small model saved with external data whose float constants stay float in the export."""
    from onnx import helper, numpy_helper

    m = branchy_concat_model(shape=(1, 3, 8, 8))
    m.graph.initializer.append(numpy_helper.from_array(np.full((1, 12, 1, 1), 0.5, np.float32), "c"))
    m.graph.node[-1].output[0] = "r"
    m.graph.node.append(helper.make_node("Add", ["r", "c"], ["y"], name="add_c"))
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.bin", size_threshold=0)
    r = subprocess.run([sys.executable, "-m", "qtquant", "fix", "m.onnx", "-o", "out.onnx", "--calib-count", "2",
                        "--no-fidelity", "--no-perf"], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.onnx").is_file()
