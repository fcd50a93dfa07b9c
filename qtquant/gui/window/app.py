"""Application start-up: ``qtquant [MODEL]`` lands in :func:`run_app`."""

from __future__ import annotations

import sys
import traceback

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

__all__ = ["make_app", "run_app", "SWITCH_INTERVAL_S"]

SWITCH_INTERVAL_S = 0.0005


def make_app(argv=None) -> QApplication:
    """The QApplication (created once; reused by tests and the screenshot command)."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(list(argv) if argv else ["qtquant"])
        app.setOrganizationName("qtquant")
        app.setApplicationName("qtquant")
        app.setStyle("Fusion")
    # Background jobs run Python too (building QDQ models, the perf simulator, merging
    # statistics).  Every call Qt makes into Python (paint, data, a slot) needs the GIL, and a
    # worker keeps it up to the switch interval: at the default 5 ms a table reset that asks
    # for thousands of cells waits seconds.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return app


def _install_excepthook(window) -> None:
    """Exceptions escaping a slot become an error dialog instead of a silent print or abort."""
    from ..jobs import error_text

    def hook(etype, value, tb):
        details = "".join(traceback.format_exception(etype, value, tb))
        sys.__stderr__.write(details)
        try:
            window.show_error("Unexpected error", error_text(value), details)
        except Exception:  # noqa: BLE001 - the hook itself must never raise
            pass

    sys.excepthook = hook


def run_app(model=None, *, options=None, input_shapes=None, plan=None, cut=None) -> int:
    """Open the main window on ``model`` (a model or a ``.qtquant`` project) or on the bundled demo.

    ``options`` (with ``input_shapes`` and ``plan``) come from the command line: the model opens
    with them, without the open dialog when they are complete (see ``ModelOpener.launch``)."""
    from .mainwindow import MainWindow

    app = make_app(sys.argv[:1])
    win = MainWindow(options=options, offer_recovery=False)
    _install_excepthook(win)
    win.show()
    # Offered before anything opens (a queued open would run inside the prompt's event loop).
    if win.recovery.offer():
        pass  # the restored project replaces the model or demo that would have opened
    elif model:
        if str(model).lower().endswith(".qtquant"):
            QTimer.singleShot(0, lambda: win.open_project(model, ask=False))
        elif options is not None:
            QTimer.singleShot(0, lambda: win.opener.launch(model, input_shapes or (), options.calib, plan,
                                                            cut or ()))
        else:
            QTimer.singleShot(0, lambda: win.request_open(model))
    else:
        QTimer.singleShot(0, win.opener.open_demo)
    return int(app.exec())
