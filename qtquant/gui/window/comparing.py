"""File › Compare With…: a second file of the open model as the comparison.

The second file (B) is opened and simulated in the background (:func:`qtquant.compare.live.open_comparison`);
then the canvas colours what B changes (scale ratio B/A, rescales added or removed), the Concat
list shows each Concat's rescales on both sides and the inspector both sides of the selection.
An edit of the open model (A) re-compares against the same B.  Selection stays one: the canvas,
the list and the inspector all follow the open model's node names."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

from ...compare.diff import diff_sides
from ...compare.sides import Side

__all__ = ["ComparisonController"]


class ComparisonController(QObject):
    changed = Signal(object)  # the ModelDiff, or None when the comparison is cleared

    def __init__(self, relay, jobs, messages, canvas, concat_list, inspector, parent=None):
        super().__init__(parent)
        self.relay, self.jobs, self.messages = relay, jobs, messages
        self.canvas, self.concat_list, self.inspector = canvas, concat_list, inspector
        self.diff = None
        relay.on_state_change(self._session_changed)
        relay.perfChanged.connect(self._session_changed)

    # -- opening -----------------------------------------------------------------------------------
    def dialog(self, parent) -> None:
        if self.relay.session is None:
            return
        path, _ = QFileDialog.getOpenFileName(parent, "Compare with", "", "Models and projects (*.onnx *.qtquant)")
        if path:
            self.open(path)

    def open(self, path) -> None:
        """Open ``path`` as B in the background."""
        from ...compare.live import open_comparison

        s = self.relay.session
        perf = self.relay.perf()
        fid = s.fidelity.value if getattr(s, "fidelity", None) is not None else None

        def work(progress, cancelled):
            return open_comparison(path, s, perf, fid)

        self.jobs.submit("compare", f"Compare with {path}", work, self.set_diff,
                         on_error=lambda payload: self.messages.error("Compare", f"Cannot compare with {path}",
                                                                       str(payload)))

    # -- showing -----------------------------------------------------------------------------------
    def set_diff(self, diff, *, quiet: bool = False) -> None:
        self.diff = diff
        self.canvas.set_comparison(diff)
        self.concat_list.model.set_comparison(diff)
        self.inspector.set_comparison(diff)
        if diff is not None and not quiet:
            m = diff.match
            self.messages.status(f"Compared with {diff.b.name}: {len(m.pairs)} tensors matched, "
                                 f"{len(diff.changed_tensors)} changed; rescales {diff.a.rescales} → {diff.b.rescales}",
                                 10000)
        self.changed.emit(diff)

    def clear(self) -> None:
        self.set_diff(None)

    def _session_changed(self, *_) -> None:
        """A's scales or groups changed: compare again with the same B (a new model: drop B)."""
        d, s = self.diff, self.relay.session
        if d is None:
            return
        if s is None or s.graph is not d.a.session.graph:
            self.clear()
            return
        if not s.ready:
            return
        a = Side(label="A", path=d.a.path, session=s, perf=self.relay.perf(), fidelity=d.a.fidelity)
        try:
            self.set_diff(diff_sides(a, d.b), quiet=True)
        except Exception as e:  # noqa: BLE001 - the comparison never takes the window down
            self.messages.status(f"Comparison dropped: {e}", 8000)
            self.clear()
