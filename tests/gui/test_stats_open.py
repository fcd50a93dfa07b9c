"""Opening a model with a statistics file (qtquant calibrate --stats-out) in the app."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from builders import band_model, edit_model  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.calib import CalibConfig, calibrate  # noqa: E402
from qtquant.calib.statsfile import write_stats  # noqa: E402
from qtquant.gui.dialogs import OpenDialog  # noqa: E402


@pytest.fixture
def win(make_win):
    return make_win(size=(1200, 800))


@pytest.fixture
def stats(tmp_path):
    model = band_model(tmp_path / "bands.onnx")
    graph = open_model(model).graph
    path = write_stats(tmp_path / "bands.stats", graph, calibrate(graph, CalibConfig(count=7, holdout=0)))
    return model, path


def test_open_with_statistics_skips_calibration(qtbot, win, stats):
    model, path = stats
    win.open_model(model, calib=CalibConfig(count=3), stats=str(path))
    qtbot.waitUntil(lambda: win.session is not None and win.session.calibration is not None, timeout=60000)
    qtbot.waitUntil(lambda: not win.controller.busy, timeout=60000)
    cal = win.session.calibration
    assert cal.batches == 7 and win.session.options.calib.count == 7  # the file's, not the 3 asked for
    assert not win.controller.jobs.active("calibrate")
    assert any("statistics from bands.stats" in n for n in cal.notes)


def test_statistics_of_another_model_is_an_error_dialog(qtbot, win, stats, tmp_path):
    _, path = stats
    other = edit_model(tmp_path / "other.onnx")
    win.open_model(other, stats=str(path))
    qtbot.waitUntil(lambda: bool(win.errors), timeout=60000)
    title, msg, details = win.errors[-1]
    assert "holds the statistics of another model" in msg and "\n" not in msg


def test_open_dialog_statistics_field(qtbot, stats, tmp_path):
    model, path = stats
    dlg = OpenDialog(model, {})
    qtbot.addWidget(dlg)
    assert dlg.values()["stats"] == ""
    dlg.stats_path.setText(str(tmp_path / "missing.stats"))
    dlg._accept()
    assert "statistics file not found" in dlg.error.text() and dlg.result() != OpenDialog.Accepted
    dlg.stats_path.clear()
    qtbot.keyClicks(dlg.stats_path, str(path))
    assert dlg.values()["stats"] == str(path)
    again = OpenDialog(model, dlg.values())  # remembered with the model's settings
    qtbot.addWidget(again)
    assert again.stats_path.text() == str(path)
