"""The GUI thread's side of the garbage-collection policy (:mod:`qtquant.app.gcpolicy`).

The policy decides when to collect and what to freeze; this module only gives it a Qt timer
on the GUI thread, so a garbage cycle holding a Qt object is never destroyed from a worker.
:func:`long_lived` and :func:`model_closing` are the policy's, re-exported for the window and
the controller.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QObject, QTimer

from ..app.gcpolicy import BULK_OBJECTS, INTERVAL_MS, Collector, long_lived, model_closing

__all__ = ["install_collector", "long_lived", "model_closing", "BULK_OBJECTS"]


class _Collector(QObject):
    def __init__(self, app):
        super().__init__(app)
        self.policy = Collector()
        self.timer = QTimer(self, interval=INTERVAL_MS)
        self.timer.timeout.connect(self.policy.check)
        self.timer.start()

    @property
    def collections(self) -> list[int]:
        return self.policy.collections

    @property
    def bulk_freezes(self) -> int:
        return self.policy.bulk_freezes

    def check(self):
        return self.policy.check()


def install_collector() -> "_Collector | None":
    """Idempotent; needs the QApplication.  Returns the collector (None without an app)."""
    app = QCoreApplication.instance()
    if app is None:
        return None
    found = app.findChild(_Collector)
    if found is None:
        found = _Collector(app)
    Collector.take_over()
    return found
