"""After an edit the fidelity check starts at once, in its child process, while the window still
recolours the canvas and docks: not after them (issue 21's live refresh)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from builders import edit_model  # noqa: E402
from guikit import open_settled, settle  # noqa: E402
from qtquant.fidelity.measure import measure_session  # noqa: E402


def test_an_edit_starts_its_check_before_the_views_refresh_and_only_once(qtbot, win, tmp_path):
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    qtbot.waitUntil(lambda: win.session.fidelity is not None, timeout=30000)
    settle(qtbot, win, timeout=30000)
    seen, started = [], []
    # A view's slot, connected after the window's own: what it finds when the views refresh.
    win.relay.groupsChanged.connect(lambda: seen.append([j.kind for j in win.controller.jobs.active()]))
    win.controller.jobs.jobStarted.connect(lambda j: started.append(j.kind))
    win.scene.nodes["cat1"].setSelected(True)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    win.view.setFocus()
    qtbot.keyClick(win.view, Qt.Key_G, Qt.ControlModifier)  # Ctrl+G on a Concat: its inputs share
    rev = win.session.revision
    assert win.session.groups.group_of("br_a_out") is not None
    assert seen and "fidelity" in seen[0]  # under way while the views recolour
    qtbot.waitUntil(lambda: win.session.fidelity.revision == rev, timeout=30000)
    settle(qtbot, win, timeout=30000)
    assert started.count("fidelity") == 1  # the settled refresh did not start it again
    # and it is the check of the edited state (what a check run here gives)
    assert win.session.fidelity.value.to_dict() == measure_session(win.session).to_dict()
