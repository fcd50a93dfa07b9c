"""Where the app speaks to the user: the status line, the job log, prompts and dialogs.

The window makes one :class:`Messages` and hands it to the controllers (projects, export,
recovery), so none of them needs the window itself.  With ``show_dialogs`` off (screenshots,
tests) nothing modal or floating opens: errors are only recorded and prompts take their
quiet answer.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QSize
from PySide6.QtGui import QFont, QFontMetrics, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QMessageBox, QPlainTextEdit, QVBoxLayout

from .modeldialog import ErrorDialog

__all__ = ["Messages", "ReportDialog", "warnings_first"]


def warnings_first(text: str) -> str:
    """The lines that warn, first (in their order), then the rest: the line that matters was
    below the fold and cut off on the right."""
    lines = text.splitlines()
    warn = [ln for ln in lines if "warning" in ln.lower()]
    return "\n".join(warn + [ln for ln in lines if ln not in warn]) if warn else text


class ReportDialog(QDialog):
    """A non-modal text report (auto-share decisions, export summary), as wide as its longest
    line (up to most of the screen), warnings first."""

    def __init__(self, title: str, text: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setModal(False)
        text = warnings_first(text)
        self.text = QPlainTextEdit(text)
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        f = QFont("DejaVu Sans Mono")
        f.setStyleHint(QFont.Monospace)
        self.text.setFont(f)
        box = QDialogButtonBox(QDialogButtonBox.Close)
        box.rejected.connect(self.close)
        lay = QVBoxLayout(self)
        lay.addWidget(self.text)
        lay.addWidget(box)
        fm = QFontMetrics(self.text.font())
        lines = text.splitlines() or [""]
        screen = (parent.screen() if parent is not None else QGuiApplication.primaryScreen()).availableGeometry()
        w = max(fm.horizontalAdvance(ln) for ln in lines) + 60  # margins, frame, a scroll bar
        h = fm.lineSpacing() * len(lines) + 110
        self._size = QSize(min(max(w, 480), int(screen.width() * 0.9)), min(max(h, 200), int(screen.height() * 0.8)))
        self.resize(self._size)

    def sizeHint(self):
        return self._size


class Messages(QObject):
    def __init__(self, parent_widget, status_bar, job_log, *, show_dialogs: bool = True):
        super().__init__(parent_widget)
        self.widget = parent_widget
        self.status_bar = status_bar
        self.job_log = job_log
        self.show_dialogs = show_dialogs
        self.errors: list[tuple[str, str, str]] = []  # (title, message, details)
        self.error_dialogs: list[ErrorDialog] = []
        self.report_dialogs: list[ReportDialog] = []

    STATUS_MS = 15000  # nothing stays up for good: a "Loading…" outlived its load by 30 s

    def status(self, text: str, ms: int = 0) -> None:
        """A status-line message; it expires after ``ms`` (0: :attr:`STATUS_MS`) or when replaced."""
        self.status_bar.showMessage(text, ms or self.STATUS_MS)

    def log(self, text: str) -> None:
        self.job_log.log(text)

    def say(self, text: str, ms: int = 10000) -> None:
        """A one-line outcome: the status line and the job log."""
        self.status(text, ms)
        self.log(text)

    def error(self, title: str, message: str, details: str = "") -> ErrorDialog | None:
        self.errors.append((title, message, details))
        self.log(f"error: {message}")
        self.status(message, 10000)
        if not self.show_dialogs:
            return None
        dlg = ErrorDialog(title, message, details, self.widget)
        self.error_dialogs.append(dlg)
        dlg.finished.connect(lambda r, d=dlg: self.error_dialogs.remove(d) if d in self.error_dialogs else None)
        dlg.show()
        return dlg

    def report(self, title: str, text: str) -> ReportDialog | None:
        if not self.show_dialogs:
            return None
        dlg = ReportDialog(title, text, self.widget)
        self.report_dialogs = [d for d in self.report_dialogs if d.isVisible()] + [dlg]
        dlg.show()
        return dlg

    def ask(self, title: str, text: str, buttons, default, quiet=None):
        """A modal question; without dialogs the answer is ``quiet`` (``default`` if None)."""
        if not self.show_dialogs:
            return default if quiet is None else quiet
        return QMessageBox.question(self.widget, title, text, buttons, default)

    def close_dialogs(self) -> None:
        for d in list(self.error_dialogs):
            d.close()
