"""The open dialog's holdout field maps to the calibration config as --holdout does (tests/calib/test_holdout.py)."""

import onnx
import pytest

from builders import mul_relu_model

pytest.importorskip("pytestqt")

from qtquant.calib.holdout import CalibConfigError  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog, calib_config  # noqa: E402


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(mul_relu_model(), str(p))
    return str(p)


def test_open_dialog_holdout_field(qtbot, tmp_path, model_file):
    dlg = OpenDialog(model_file, {})
    qtbot.addWidget(dlg)
    assert dlg.holdout.text() == "auto" and dlg.count.value() == 16
    assert calib_config(dlg.values()["calib"]).holdout is None
    for text, want in (("0", 0), ("5", 5), ("0.2", 0.2), (" Auto ", None)):
        dlg.holdout.setText(text)
        vals = dlg.values()["calib"]
        assert calib_config(vals).holdout == want
    dlg.holdout.setText("1.5")
    with pytest.raises(CalibConfigError, match="--holdout"):
        dlg.values()
    dlg2 = OpenDialog(model_file, {"calib": {"holdout": "0.2"}})
    qtbot.addWidget(dlg2)
    assert dlg2.holdout.text() == "0.2"
    assert calib_config({}).holdout is None and calib_config({}).count == 16
