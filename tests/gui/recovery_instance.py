"""One qtquant instance in a process of its own, for the two-instance recovery test.

``python recovery_instance.py ROLE RECOVERY_DIR MODEL REPORT.json``; ROLE is
``edit-and-wait`` (share cat1, autosave, report, then run until killed), ``edit-and-close``
(the same, then a clean close) or ``probe`` (report what a new start would offer).
"""

import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.gui.window.app import make_app  # noqa: E402
from qtquant.gui.window.mainwindow import MainWindow  # noqa: E402



def main() -> None:
    role, rec, model, report = sys.argv[1:5]
    asked = []

    def question(parent, title, text, buttons=None, default=None):
        asked.append([title, text])
        return QMessageBox.Discard if title == "Unsaved changes" else QMessageBox.Cancel

    QMessageBox.question = staticmethod(question)
    app = make_app()
    st = QSettings(report + ".ini", QSettings.IniFormat)
    st.setValue("recovery/dir", rec)
    win = MainWindow(st, offer_recovery=False)
    win.show()

    def pump(cond, timeout=60.0):
        end = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > end:
                raise SystemExit(f"timed out in {role}")
            app.processEvents()
            time.sleep(0.01)

    out = {"pid": os.getpid(), "pending": win.recovery.pending(), "offered": win.recovery.offer(), "asked": asked}
    if role != "probe":
        win.open_model(model, calib=CalibConfig(count=4))
        pump(lambda: win.controller.spec is not None and win.relay.ready and not win.controller.busy)
        win.editor.share_nodes(["cat1"])
        out["autosaved"] = win.recovery.autosave()
        out["slot"] = str(win.recovery.dir)
    out["slots"] = sorted(p.name for p in win.recovery.root.iterdir())
    with open(report + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(report + ".tmp", report)
    if role == "edit-and-wait":
        while True:  # until killed: a crash, as far as the files know
            app.processEvents()
            time.sleep(0.05)
    win.close()


if __name__ == "__main__":  # worker processes (spawn) import this file too
    main()
