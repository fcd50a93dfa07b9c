"""Fixtures and hooks for the tests that need Qt (PySide6 and pytest-qt).

Only this folder may import Qt: the root conftest and every test outside ``tests/gui`` run
without PySide6 installed (CI runs them once in a venv without it).
"""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def _children_at_test_priority(monkeypatch):
    """The app starts its children (the fidelity worker, calibration's processes) at nice 10 so
    that the window keeps a core on a busy machine.  Here they run at the tests' own priority:
    next to other work at nice 0 (CI installs its second venv while these tests run) a nice-10
    child got a few percent of a core, and a window that waits on it did not settle in 20 s
    (seen at load 4-5).  These tests check behaviour, not scheduling; tests/base/test_childproc.py
    checks the niceness itself."""
    from qtquant.base import childproc
    from qtquant.gui import jobs

    monkeypatch.setattr(jobs, "WORKER_NICENESS", 0)
    monkeypatch.setattr(childproc, "NICENESS", 0)


@pytest.fixture
def prompts(monkeypatch):
    """Every QMessageBox.question is recorded and answered from ``answers`` (default: Discard),
    so a save/restore prompt can never block a GUI test."""
    from PySide6.QtWidgets import QMessageBox

    log = {"asked": [], "answers": []}

    def question(parent, title, text, buttons=None, default=None):
        log["asked"].append((title, text))
        return log["answers"].pop(0) if log["answers"] else QMessageBox.Discard

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    return log


@pytest.fixture
def make_win(qtbot, tmp_path, prompts):
    """``make_win(settings_name=None, recovery_dir=None, size=(1400, 900), **MainWindow kwargs)``:
    a shown main window on its own settings file (one per window unless named), closed at the
    end without a save prompt.  It opens models on :data:`builders.RESCALING_MARCH`: the test
    models are conv branches into Concats, which bayes-e writes at the Concat's scale (nothing
    there to rescale, share or colour).  A test of the default march sets it with ``set_march``."""
    from PySide6.QtCore import QSettings

    from builders import RESCALING_MARCH

    from qtquant.gui.window.mainwindow import MainWindow

    made = []

    def make(settings_name=None, *, recovery_dir=None, size=(1400, 900), **kw):
        st = QSettings(str(tmp_path / (settings_name or f"settings{len(made)}.ini")), QSettings.IniFormat)
        if recovery_dir is not None:
            st.setValue("recovery/dir", str(recovery_dir))
        w = MainWindow(st, **kw)
        qtbot.addWidget(w)
        w.set_march(RESCALING_MARCH)
        w.resize(*size)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.stack.set_clean()  # teardown closes the windows: no save prompt
        w.projects.remapped = False
        w.controller.shutdown()


@pytest.fixture
def win(make_win):
    """The folder's default window (``make_win()``); a module may define its own ``win``."""
    return make_win()


@pytest.fixture
def model(tmp_path):
    """The folder's default model, the editing tests' ``edit_model`` (tests/builders.py); a module
    may define its own ``model``."""
    from builders import edit_model

    return edit_model(tmp_path / "edit.onnx")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item):
    """Before pytest-qt closes the test's windows: no unsaved-changes prompt.  A test failing
    after an edit left its window modified, and the modal prompt on close hung the whole run."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    for w in app.topLevelWidgets() if app is not None else ():
        if hasattr(w, "show_dialogs"):
            w.show_dialogs = False
    return (yield)


@pytest.fixture
def scoped_file(tmp_path):
    """``scoped_file(blocks)``: a saved :func:`tests.scoped_models.scoped_model` with two gains
    (so its Concats mismatch), ``blocks`` blocks, in its own file."""
    from tests.builders import save
    from tests.scoped_models import scoped_model

    def make(blocks: int):
        return save(scoped_model(blocks=blocks, gains=(1.0, 9.0)), tmp_path / f"scoped{blocks}.onnx")

    return make


@pytest.fixture
def big_model(scoped_file):
    from tests.gui.guikit import big_blocks

    return scoped_file(big_blocks())
