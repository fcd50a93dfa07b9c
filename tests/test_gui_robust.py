"""Robustness of the app (issue 8, GUI half): autosave and recovery after a crash, and faults
injected into background jobs, driven through the real window (pytest-qt, offscreen).

Every window here answers QMessageBox.question from a script (``prompts``), so no prompt can
block a test, and points its recovery folder at tmp_path (the ``recovery/dir`` settings key).
"""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui import recovery as recovery_mod  # noqa: E402
from qtquant.gui.mainwindow import MainWindow  # noqa: E402
from test_gui_edit import edit_model, settle  # noqa: E402

CAT1 = ["br_a_out", "br_b_out", "br_c_out", "cat1_out"]


@pytest.fixture
def prompts(monkeypatch):
    """QMessageBox.question answered from ``answers`` (default: Discard) and recorded."""
    log = {"asked": [], "answers": []}

    def question(parent, title, text, buttons=None, default=None):
        log["asked"].append((title, text))
        return log["answers"].pop(0) if log["answers"] else QMessageBox.Discard

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    return log


@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(recovery_mod.ENV_VAR, raising=False)
    return tmp_path / "recovery"


@pytest.fixture
def make_win(qtbot, tmp_path, prompts, rec_dir):
    made = []

    def make(settings_name="settings.ini", **kw):
        st = QSettings(str(tmp_path / settings_name), QSettings.IniFormat)
        st.setValue("recovery/dir", str(rec_dir))
        w = MainWindow(st, **kw)
        qtbot.addWidget(w)
        w.resize(1200, 800)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.undo_stack.setClean()  # teardown closes the windows: no save prompt
        w.projects.remapped = False
        w.controller.shutdown()


@pytest.fixture
def model(tmp_path):
    return edit_model(tmp_path / "edit.onnx")


def open_settled(qtbot, win, path, count=4):
    win.open_model(path, calib=CalibConfig(count=count))
    settle(qtbot, win)


def crash(win):
    """Drop the window the way a crash would: no closeEvent, the recovery file stays."""
    win.recovery.stop()
    win.controller.shutdown()
    win.setAttribute(Qt.WA_DeleteOnClose, False)
    win.hide()


def groups(win):
    s = win.bridge.session
    return [sorted(g.members) for g in s.groups] if s is not None else None


# -- autosave and recovery -------------------------------------------------------------------------
def test_autosave_after_an_edit_and_restore_after_a_crash(qtbot, make_win, model, prompts, rec_dir):
    w1 = make_win()
    open_settled(qtbot, w1, model)
    assert not w1.recovery.pending()  # nothing unsaved yet: nothing written
    assert w1.editor.share_nodes(["cat1"])
    assert groups(w1) == [CAT1]
    qtbot.waitUntil(w1.recovery.pending, timeout=recovery_mod.EDIT_DEBOUNCE_MS + 5000)  # debounced write
    doc = json.loads((rec_dir / recovery_mod.PROJECT_NAME).read_text())
    assert [sorted(g["members"]) for g in doc["groups"]] == [CAT1]
    assert (rec_dir / recovery_mod.STATS_NAME).is_dir()  # the restore needs no calibration
    crash(w1)

    prompts["answers"] = [QMessageBox.Open]
    w2 = make_win("settings.ini")
    qtbot.waitUntil(lambda: groups(w2) == [CAT1] and w2.bridge.ready, timeout=20000)
    assert prompts["asked"][0][0] == "Recover unsaved changes"
    assert "1 group(s)" in prompts["asked"][0][1]
    assert w2.recovery.restored
    assert w2.bridge.session.calibration is not None and not w2.controller.calibrating  # from the cache
    assert w2.projects.modified and w2.projects.path is None  # unsaved, and Save never targets the autosave
    assert "edit.onnx" in w2.windowTitle()
    settle(qtbot, w2)
    assert w2.scene.nodes["cat1"] is not None

    # A clean close (the save prompt answered Discard) removes the recovery file.
    w2.close()
    assert prompts["asked"][-1][0] == "Unsaved changes"
    assert not w2.recovery.pending() and not (rec_dir / recovery_mod.STATS_NAME).exists()


def test_save_undo_and_clean_close_remove_the_autosave(qtbot, make_win, model, rec_dir, tmp_path):
    w = make_win()
    open_settled(qtbot, w, model)
    w.editor.share_nodes(["cat1"])
    assert w.recovery.autosave() and w.recovery.pending()
    w.undo_stack.undo()  # back to the unedited model: nothing to recover
    assert not w.recovery.pending()
    w.undo_stack.redo()
    assert w.recovery.autosave() and w.recovery.pending()
    assert w.projects.save_to(tmp_path / "p.qtquant")  # saved: nothing to recover
    assert not w.recovery.pending()
    assert not w.recovery.autosave()  # and a timer tick on a clean window writes nothing
    w.editor.share_nodes(["cat2"])
    assert w.recovery.autosave()
    meta = w.recovery.meta()
    assert meta["project"].endswith("p.qtquant") and meta["groups"] == 2
    w.undo_stack.setClean()
    w.close()
    assert not w.recovery.pending()


def test_offer_discard_deletes_cancel_keeps(qtbot, make_win, model, prompts, rec_dir):
    w1 = make_win()
    open_settled(qtbot, w1, model)
    w1.editor.share_nodes(["cat1"])
    assert w1.recovery.autosave()
    crash(w1)
    prompts["answers"] = [QMessageBox.Cancel]
    w2 = make_win(offer_recovery=False)
    assert w2.recovery.offer() is False and w2.recovery.pending()  # kept for the next start
    prompts["answers"] = [QMessageBox.Discard]
    assert w2.recovery.offer() is False and not w2.recovery.pending()
    assert w2.bridge.session is None
    assert w2.recovery.offer() is False and len(prompts["asked"]) == 2  # nothing left to offer


def test_restore_of_a_vanished_model_is_an_error_dialog(qtbot, make_win, model, prompts, rec_dir):
    w1 = make_win()
    open_settled(qtbot, w1, model)
    w1.editor.share_nodes(["cat1"])
    assert w1.recovery.autosave()
    crash(w1)
    model.unlink()
    prompts["answers"] = [QMessageBox.Open]
    w2 = make_win(show_dialogs=False)  # errors recorded, not shown
    assert w2.recovery.offer()
    qtbot.waitUntil(lambda: bool(w2.errors), timeout=10000)
    title, msg, _ = w2.errors[0]
    assert "\n" not in msg and "Traceback" not in msg
    assert w2.bridge.session is None and w2.recovery.pending()  # the file stays for another try


def test_windows_on_other_settings_never_autosave(qtbot, tmp_path, monkeypatch):
    monkeypatch.delenv(recovery_mod.ENV_VAR, raising=False)
    w = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    assert not w.recovery.enabled and not w.recovery.autosave()
    monkeypatch.setenv(recovery_mod.ENV_VAR, str(tmp_path / "env"))
    assert recovery_mod.recovery_dir(w.settings, False) == tmp_path / "env"
