"""The Export dialog's Deploy target: chosen in the dialog, its files written beside the others."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from builders import detector_model, save  # noqa: E402
from qtquant.app import Options, open_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.window.exporting import ExportDialog, export_files  # noqa: E402


def test_dialog_offers_each_target_and_export_writes_its_files(qtbot, tmp_path):
    dlg = ExportDialog(tmp_path, "out")
    qtbot.addWidget(dlg)
    assert [dlg.deploy.itemData(i) for i in range(dlg.deploy.count())] == \
        [None, "x5-qat", "x5-ptq", "s100", "tensorrt", "ort"]
    assert dlg.values().deploy is None and "deploy-" not in dlg.files.text()
    dlg.deploy.setCurrentIndex(dlg.deploy.findData("tensorrt"))
    assert "deploy-tensorrt/" in dlg.files.text()
    for key in ("model", "plan", "overrides", "report", "png"):
        dlg.checks[key].setChecked(False)
    opts = dlg.values()
    assert opts.deploy == "tensorrt" and opts.paths() == {}

    s = open_model(save(detector_model(), tmp_path / "det.onnx"), options=Options(calib=CalibConfig(count=4)))
    s.run_calibration()
    rep = export_files(s, opts)  # the deploy target alone is something to export
    assert (tmp_path / "deploy-tensorrt" / "det.calib.cache").exists()
    assert any(ln.startswith("wrote tensorrt:") for ln in rep.lines)
    assert any(ln.startswith("checked: the cache parses back") for ln in rep.lines)
