"""Opening a model with a statistics file (qtquant calibrate --stats-out) in the app."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from builders import band_model, edit_model  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.calib import CalibConfig, calibrate  # noqa: E402
from qtquant.calib.statsfile import write_stats  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog  # noqa: E402


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


@pytest.fixture
def dynamic_stats(tmp_path):
    """A model with dynamic height and width, and statistics calibrated at 12x12."""
    from qtquant.calib.statsfile import stats_input_shapes

    model = band_model(tmp_path / "dyn.onnx", dynamic=True)
    graph = open_model(model, ["x=1x3x12x12"]).graph
    path = write_stats(tmp_path / "dyn.stats", graph, calibrate(graph, CalibConfig(count=5, holdout=0)))
    assert stats_input_shapes(path) == {"x": (1, 3, 12, 12)}
    return model, path


def test_open_dialog_takes_the_input_shapes_of_the_statistics_file(qtbot, dynamic_stats, monkeypatch):
    from PySide6.QtWidgets import QFileDialog, QPushButton

    model, path = dynamic_stats
    dlg = OpenDialog(model, {})
    qtbot.addWidget(dlg)
    assert dlg.shape_edits["x"].text() != "1x3x12x12"
    # Browse... picks the file: the shapes it was calibrated with fill the fields
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(path), "")))
    qtbot.mouseClick(dlg.stats_path.parentWidget().findChild(QPushButton), Qt.LeftButton)
    assert dlg.stats_path.text() == str(path) and dlg.shape_edits["x"].text() == "1x3x12x12"
    assert dlg.values()["shapes"] == {"x": "1x3x12x12"}
    # typed: once the field is left (editingFinished; focus does not move offscreen)
    other = OpenDialog(model, {})
    qtbot.addWidget(other)
    qtbot.keyClicks(other.stats_path, str(path))
    assert other.shape_edits["x"].text() != "1x3x12x12"
    other.stats_path.editingFinished.emit()
    assert other.shape_edits["x"].text() == "1x3x12x12"


def test_open_with_statistics_and_no_shapes_uses_the_files(qtbot, win, dynamic_stats):
    model, path = dynamic_stats
    win.open_model(model, stats=str(path))
    qtbot.waitUntil(lambda: win.session is not None and win.session.calibration is not None, timeout=60000)
    assert win.session.graph.input_shapes == {"x": (1, 3, 12, 12)}
    assert win.session.calibration.batches == 5 and not win.errors


def test_a_qdq_file_with_statistics_is_an_error_dialog(qtbot, win, stats, tmp_path):
    """Statistics would replace a QDQ file's own scales: the load fails with one line (it was
    opened with the statistics silently left unused)."""
    from qtquant.cli import main

    model, path = stats
    qdq = tmp_path / "bands_qdq.onnx"
    assert main(["fix", str(model), "--stats", str(path), "-o", str(qdq), "--no-perf"]) == 0
    win.open_model(qdq, stats=str(path))
    qtbot.waitUntil(lambda: bool(win.errors), timeout=60000)
    title, msg, details = win.errors[-1]
    assert "already quantized (QDQ); a statistics file is for float models" in msg and "\n" not in msg
    assert win.session is None
