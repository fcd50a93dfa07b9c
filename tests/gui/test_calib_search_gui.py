"""The app's calibration dialog offers the method search, and calibrating with it installs the
chosen method and says so (tests/calib/test_calib_search.py checks the search itself)."""

import os

import pytest

pytest.importorskip("pytestqt")

from builders import outlier_case_saturating as _saturating  # noqa: E402

from qtquant.app.views.concats import model_info  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog, calib_config  # noqa: E402


def test_the_dialog_offers_the_searches(qtbot, tmp_path):
    model, _ = _saturating(tmp_path)
    dlg = OpenDialog(model, {})
    qtbot.addWidget(dlg)
    items = [dlg.observer.itemText(i) for i in range(dlg.observer.count())]
    assert "search" in items and "search-per-node" in items
    dlg.observer.setCurrentText("search")
    assert calib_config(dlg.values()["calib"]).observer == "search"
    if os.environ.get("QTQUANT_SHOTS"):
        dlg.show()
        dlg.grab().save(os.path.join(os.environ["QTQUANT_SHOTS"], "calib_dialog_search.png"))


def test_calibrating_with_the_search_installs_its_choice(qtbot, make_win, tmp_path):
    model, npy = _saturating(tmp_path)
    win = make_win()
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=30000):
        win.open_model(model)
    with qtbot.waitSignal(win.controller.calibrationFinished, timeout=60000) as sig:
        win.controller.calibrate(CalibConfig(source=npy, count=8, observer="search"))
    assert sig.args == [True]
    cal = win.session.calibration
    assert cal.search is not None and cal.choice is not None and cal.choice.model.observer != "minmax"
    info = model_info(win.session)
    assert f"search (chose {cal.choice.model.label})" in info.calibration
    assert "observer chosen by search" in info.calibration_tip
