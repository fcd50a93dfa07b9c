"""The Sensitivity dock on its own (a Session built headless, the dock and its jobs without a window):
"share what accuracy allows" plans in a background job on a snapshot and installs the plan as one
command on the stack, so Undo takes it back."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QStatusBar  # noqa: E402

from builders import RESCALING_MARCH, branchy_concat_model, save  # noqa: E402
from qtquant.app import Options, open_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.jobs import JobManager  # noqa: E402
from qtquant.gui.dialogs.messages import Messages  # noqa: E402
from qtquant.gui.relay import SessionRelay  # noqa: E402
from qtquant.gui.docks.sensitivity import AccuracyJobs, SensitivityDock  # noqa: E402


class _Log:
    def __init__(self):
        self.lines = []

    def log(self, text):
        self.lines.append(text)


@pytest.fixture
def dock(qtbot, tmp_path):
    s = open_model(save(branchy_concat_model(gains=(1.0, 1.3, 1.6)), tmp_path / "m.onnx"),
                   options=Options(march=RESCALING_MARCH, calib=CalibConfig(count=3)))
    s.run_calibration()
    relay = SessionRelay(s)
    w = SensitivityDock(relay)
    qtbot.addWidget(w)
    jobs = JobManager(w)
    log = _Log()
    acc = AccuracyJobs(relay, jobs, Messages(w, QStatusBar(w), log, show_dialogs=False), w, parent=w)
    w.show()
    yield relay, w, acc, jobs
    jobs.shutdown()


def test_share_what_accuracy_allows_is_one_undoable_command(qtbot, dock):
    relay, w, acc, jobs = dock
    s = relay.session
    with qtbot.waitSignal(acc.shared, timeout=60000):
        w.shareWanted.emit(1000.0)  # a budget that lets every candidate share
    assert len(s.groups) == 1 and [g.id for g in acc.last_share.groups] == [g.id for g in s.groups]
    assert relay.stack.texts() == ["Auto-share by accuracy (≤ 1000 dB)"]
    relay.stack.undo()
    assert len(s.groups) == 0
    relay.stack.redo()
    assert len(s.groups) == 1
