"""The app's export report shows the model export's warnings whole (a raised weight scale, a clip)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings  # noqa: E402

from builders import dead_relu_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.window.exporting import WARNING_COLUMNS, ExportDialog, ExportOptions, export_files  # noqa: E402
from qtquant.gui.window.mainwindow import MainWindow  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.app import Options  # noqa: E402


def _only_model(folder):
    return ExportOptions(folder, "out", plan=False, overrides=False, report=False, png=False)


def _export_report(win, qtbot, tmp_path, monkeypatch) -> str:
    """Export through the window's Export action (the dialog accepted as it is): the report's text."""
    out = tmp_path / "out"
    out.mkdir()
    win.exports.remember_folder(str(out))
    monkeypatch.setattr(ExportDialog, "exec", lambda self: ExportDialog.Accepted)
    n = len(win.messages.report_dialogs)
    win.actions_by_name["export"].trigger()
    qtbot.waitUntil(lambda: win.exports.last_export is not None and len(win.messages.report_dialogs) > n,
                    timeout=30000)
    return win.messages.report_dialogs[-1].text.toPlainText()


def test_report_text_carries_each_warning_whole(tmp_path):
    s = open_model(dead_relu_model(tmp_path / "dead.onnx"), options=Options(calib=CalibConfig(count=4)))
    s.run_calibration()
    rep = export_files(s, _only_model(tmp_path))
    [w] = rep.warnings
    assert w.startswith("bias of Gemm 'fc' did not fit int32") and len(w) > WARNING_COLUMNS
    lines = rep.text().splitlines()
    assert lines[0].startswith("wrote ") and lines[1].startswith("warning: bias of Gemm 'fc'")
    assert all(len(ln) <= WARNING_COLUMNS for ln in lines[1:])
    end = next(i for i, ln in enumerate(lines) if ln.startswith("accuracy of the exported model"))
    assert " ".join(ln.strip() for ln in lines[1:end]) == f"warning: {w}"  # wrapped, nothing lost, in one block


def test_window_export_dialog_shows_the_warning(qtbot, tmp_path, prompts, monkeypatch):
    win = MainWindow(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    try:
        win.open_model(dead_relu_model(tmp_path / "dead.onnx"), calib=CalibConfig(count=4))
        qtbot.waitUntil(lambda: win.controller.spec is not None and win.scene.spec is win.controller.spec
                        and win.relay.ready and not win.controller.busy, timeout=30000)
        text = _export_report(win, qtbot, tmp_path, monkeypatch)
        assert "warning: bias of Gemm 'fc' did not fit int32" in text
        assert "bits of weight precision" in " ".join(text.split())
    finally:
        win.controller.shutdown()


def test_a_qdq_file_export_is_measured_against_the_file(qtbot, tmp_path, prompts, monkeypatch):
    # A QDQ file has no float original: the report says how far the written file is from the one opened.
    from builders import branchy_concat_model, save
    from ortkit import ort_qdq_file

    qdq = ort_qdq_file(save(branchy_concat_model(), tmp_path / "f.onnx"), str(tmp_path / "q.onnx"),
                       per_channel=False, n=3)
    win = MainWindow(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.show()
    try:
        win.open_model(qdq, calib=CalibConfig(count=2))
        qtbot.waitUntil(lambda: win.controller.spec is not None and win.relay.ready and not win.controller.busy,
                        timeout=30000)
        text = _export_report(win, qtbot, tmp_path, monkeypatch)
        assert "against the input file (the QDQ file as it was, run in onnxruntime), on 2 synthetic samples" in text
        assert "  y: " in text and "dB SQNR" in text
    finally:
        win.controller.shutdown()
