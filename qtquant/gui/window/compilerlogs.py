"""File › Open Compile Log and a ``.txt`` / ``.log`` dropped on the window: a Horizon compile log
opened beside the model (:mod:`qtquant.app.compilerlog`).  A log compiled at another input shape
is applied only when the user says yes; any other bad log is an error dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMessageBox

from ...app.compilerlog import LOG_SUFFIXES, open_compile_log
from ...base.errors import LogShapeMismatch, QtQuantError
from ..dialogs.modeldialog import pick_open_file

__all__ = ["CompilerLogOpener", "LOG_SUFFIXES"]


class CompilerLogOpener(QObject):
    def __init__(self, relay, messages, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.messages = messages

    def open_dialog(self) -> None:
        s = self.relay.session
        if s is None:
            return
        folder = str(s.graph.path.parent) if s.graph.path else str(Path.home())
        p = pick_open_file(self.messages.widget, "Open compile log", folder,
                           "hb_mapper logs (*.txt *.log);;All files (*)")
        if p:
            self.open_path(p)

    def open_path(self, path) -> bool:
        """Open ``path`` beside the model; True when it was placed on the graph."""
        s = self.relay.session
        if s is None:
            self.messages.error("No model", "Open the model first, then its compile log.")
            return False
        name = Path(path).name
        try:
            try:
                match = open_compile_log(s, path)
            except LogShapeMismatch as e:
                answer = self.messages.ask("Compile log of another input shape",
                                           f"{e}\n\nApply its thresholds by name anyway?",
                                           QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
                if answer != QMessageBox.Yes:
                    self.messages.say(f"compile log {name} not applied (another input shape)")
                    return False
                match = open_compile_log(s, path, any_shape=True)
        except QtQuantError as e:
            self.messages.error("Cannot use the compile log", str(e))
            return False
        missing = f", {len(match.unmatched)} row(s) not placed" if match.unmatched else ""
        self.messages.say(f"compile log {name}: {len(match.nodes)} nodes placed, {len(match.requantized)} "
                          f"requantized inputs, {len(match.thresholds)} thresholds as scales{missing}")
        for u in match.unmatched:
            self.messages.log(f"compile log: {u.describe()}")
        return True
