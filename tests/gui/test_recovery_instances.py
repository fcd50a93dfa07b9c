"""Recovery with two instances running at once, in two real processes (issue 20).

Before: the second instance said the first "did not close cleanly", and closing it deleted the
first one's unsaved autosave.  Now each instance has its own locked slot, and only the slot of
an instance that is gone is offered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from builders import edit_model  # noqa: E402

SCRIPT = Path(__file__).with_name("recovery_instance.py")


def start(role, rec, model, report):
    # This checkout's qtquant, not the one the interpreter has installed (its folder is not the child's path[0]).
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    env.pop("QTQUANT_RECOVERY_DIR", None)
    return subprocess.Popen([sys.executable, str(SCRIPT), role, str(rec), str(model), str(report)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: a kill takes its workers too


def report_of(proc, report, timeout=120.0):
    end = time.monotonic() + timeout
    while not Path(report).exists():
        if proc.poll() is not None:
            raise AssertionError(f"instance exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > end:
            raise AssertionError("instance gave no report")
        time.sleep(0.1)
    return json.loads(Path(report).read_text())


@pytest.mark.slow
def test_two_instances_keep_their_own_autosaves(tmp_path):
    rec = tmp_path / "recovery"
    model = edit_model(tmp_path / "edit.onnx")
    first = start("edit-and-wait", rec, model, tmp_path / "a.json")
    try:
        a = report_of(first, tmp_path / "a.json")
        assert a["autosaved"] and not a["pending"]
        # A second instance while the first runs: nothing to offer, and its clean close keeps
        # the first one's unsaved edits.
        second = start("edit-and-close", rec, model, tmp_path / "b.json")
        b = report_of(second, tmp_path / "b.json")
        assert second.wait(120) == 0, second.stderr.read()[-2000:]
        assert not b["pending"] and not b["offered"] and b["asked"] == []
        assert b["slot"] != a["slot"] and Path(b["slot"]).name in b["slots"]
        assert not Path(b["slot"]).exists()  # the second's slot went with its clean close
        assert (Path(a["slot"]) / "autosave.json").is_file()  # the first's is still there
        # Still running: a third start offers nothing either.
        probe = start("probe", rec, model, tmp_path / "c.json")
        c = report_of(probe, tmp_path / "c.json")
        assert probe.wait(120) == 0 and not c["pending"] and c["asked"] == []
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # our own child and its workers, by its group: a crash
        first.wait(30)
    # The first instance is gone: its autosave is offered (the probe answers Cancel, keeping it).
    probe = start("probe", rec, model, tmp_path / "d.json")
    d = report_of(probe, tmp_path / "d.json")
    assert probe.wait(120) == 0
    assert d["pending"] and len(d["asked"]) == 1
    title, text = d["asked"][0]
    assert title == "Recover unsaved changes" and f"process {a['pid']}" in text and "1 group(s)" in text
    assert (Path(a["slot"]) / "autosave.json").is_file()  # Cancel kept it for the next start
