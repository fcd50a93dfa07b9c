"""The open dialog's settings are checked before they are used or remembered for the model: a bad
Mean, a shape of the wrong rank, a shape that fails the load.  A typo must neither raise out of a
slot nor stick to the model, so that Open Recent (which opens without the dialog) keeps working."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QDialogButtonBox  # noqa: E402

from builders import branchy_concat_model, save  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog, given_shapes  # noqa: E402


def _fill_and_ok(qtbot, monkeypatch, seen, folder=None, **fields):
    """Every OpenDialog shown: the fields typed over, OK clicked, its error line kept in ``seen``;
    a dialog still open after OK (refused values) is cancelled, as the user would."""
    def run(dlg):
        qtbot.addWidget(dlg)
        seen.append(("shown", dlg.error.text()))
        dlg.count.setValue(3)
        if folder is not None:  # (the preprocessing fields are for images: enabled with a folder)
            dlg.source_kind.setCurrentIndex(1)
            dlg.source_path.setText(str(folder))
        for name, text in fields.items():
            edit = dlg.shape_edits[name] if name in dlg.shape_edits else getattr(dlg, name)
            edit.clear()
            qtbot.keyClicks(edit, text)
        qtbot.mouseClick(dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok), Qt.LeftButton)
        seen.append(("after ok", dlg.error.text()))
        return dlg.result()

    monkeypatch.setattr(OpenDialog, "exec", run)


@pytest.fixture
def model_path(tmp_path):
    return save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")


def test_bad_mean_is_the_dialogs_own_error(qtbot, make_win, model_path, monkeypatch, tmp_path):
    win = make_win()
    win.messages.show_dialogs = True
    seen = []
    _fill_and_ok(qtbot, monkeypatch, seen, folder=tmp_path, mean="abc")
    assert not win.request_open(model_path, ask=True)
    assert seen[-1][0] == "after ok" and "mean" in seen[-1][1].lower() and "\n" not in seen[-1][1]
    assert not win.messages.errors  # no "Unexpected error" dialog
    assert win.session is None and win.opener.model_settings.load(model_path) == {}


def test_shape_of_the_wrong_rank_is_the_dialogs_own_error(qtbot, make_win, model_path, monkeypatch):
    win = make_win()
    win.messages.show_dialogs = True
    seen = []
    _fill_and_ok(qtbot, monkeypatch, seen, x="1x3x16")
    assert not win.request_open(model_path, ask=True)
    assert seen[-1] == ("after ok", "input 'x' has rank 4 but the given shape 1x3x16 has rank 3")
    assert win.session is None and win.opener.model_settings.load(model_path) == {}


def test_settings_are_remembered_once_the_model_has_loaded(qtbot, make_win, model_path, monkeypatch):
    win = make_win()
    seen = []
    _fill_and_ok(qtbot, monkeypatch, seen, x="1,3,16,16")  # commas are a shape too (as --input-shape)
    with qtbot.waitSignal(win.controller.modelLoaded, timeout=20000):
        assert win.request_open(model_path, ask=True)
    rem = win.opener.model_settings.load(model_path)
    assert rem["shapes"] == {"x": "1,3,16,16"} and given_shapes(rem) == {"x": (1, 3, 16, 16)}
    # the calibration settings once the calibration has finished (a cancelled one's are not kept)
    qtbot.waitUntil(lambda: win.opener.model_settings.load(model_path)["calib"].get("count") == 3, timeout=20000)


def test_settings_that_fail_the_load_are_not_remembered(qtbot, make_win, model_path, monkeypatch):
    """Rank and fixed dimensions are checked in the dialog; what only the load finds (here a
    calibration folder with no images) fails it with its one-line message, and the model's
    earlier settings stay as they were."""
    win = make_win()
    win.messages.show_dialogs = True
    win.opener.model_settings.save(model_path, {"shapes": {"x": "1x3x16x16"}, "calib": {"count": 5}})
    seen = []
    _fill_and_ok(qtbot, monkeypatch, seen, cut_edit="conv0_out")
    monkeypatch.setattr("qtquant.gui.window.controller.early_structure", lambda *a: None)

    def fail(*a, **k):
        from qtquant.base.errors import ShapeError

        raise ShapeError("the input shapes do not fit the model: (as a load would say)")

    monkeypatch.setattr("qtquant.app.opening.open_model", fail)
    with qtbot.waitSignal(win.controller.loadFailed, timeout=20000):
        assert win.request_open(model_path, ask=True)
    assert win.opener.model_settings.load(model_path) == {"shapes": {"x": "1x3x16x16"}, "calib": {"count": 5}}
    win.messages.close_dialogs()


def test_remembered_settings_that_cannot_open_the_model_reopen_the_dialog(qtbot, make_win, model_path,
                                                                           monkeypatch):
    """Settings an older version remembered unchecked (a shape of the wrong rank): Open Recent
    shows the dialog with the reason, instead of failing the same way at every open."""
    win = make_win()
    win.messages.show_dialogs = True
    win.opener.model_settings.save(model_path, {"shapes": {"x": "1x3x16"}, "calib": {"mean": "abc"}})
    seen = []
    _fill_and_ok(qtbot, monkeypatch, seen, x="1x3x16x16", mean="")
    with qtbot.waitSignal(win.controller.modelLoaded, timeout=20000):
        assert win.request_open(model_path)  # as Open Recent does: no dialog unless needed
    assert seen[0] == ("shown", "The remembered settings cannot open this model: input 'x' has rank 4 but the "
                                "given shape 1x3x16 has rank 3")
    assert win.opener.model_settings.load(model_path)["shapes"] == {"x": "1x3x16x16"}


def test_remembered_bad_settings_without_dialogs_are_one_line(qtbot, make_win, model_path):
    win = make_win()
    win.messages.show_dialogs = False
    win.opener.model_settings.save(model_path, {"calib": {"mean": "abc"}})
    assert not win.request_open(model_path)
    title, msg, _ = win.messages.errors[-1]
    assert title == "Cannot open the model" and msg.startswith("The remembered settings cannot open this model: ")
    assert "\n" not in msg
