"""The main window's editing side: Share / Ungroup / Auto-share, the canvas context menu,
group highlighting, the undo history, export and projects.

:class:`EditingMixin` is mixed into :class:`~qtquant.gui.mainwindow.MainWindow`; it only
wires widgets to :class:`~qtquant.gui.editing.Editor` (the gestures),
:class:`~qtquant.gui.projects.ProjectIO` and :mod:`qtquant.gui.exporting`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog, QMenu,
                               QPlainTextEdit, QUndoView, QVBoxLayout)

from ..domains import Policy
from .editing import Editor, node_outputs
from .exporting import ExportDialog, export_files, render_canvas, snapshot_session
from .projects import PROJECT_SUFFIX, ProjectIO

__all__ = ["EditingMixin", "ReportDialog"]


class ReportDialog(QDialog):
    """A non-modal text report (auto-share decisions, export summary)."""

    def __init__(self, title: str, text: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setModal(False)
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
        self.resize(900, 360)

    def sizeHint(self):
        return QSize(900, 360)


class EditingMixin:
    # -- construction (called from MainWindow.__init__) ---------------------------------------
    def _setup_editing(self) -> None:
        self.editor = Editor(self.bridge, self.undo_stack, self)
        self.projects = ProjectIO(self)
        self.group_focus: int | None = None  # the group selected in the Groups dock
        self.report_dialogs: list[QDialog] = []
        self.last_autoshare = None
        self.last_export = None
        self.undo_view = QUndoView(self.undo_stack)
        self.undo_view.setEmptyLabel("<unedited model>")
        self.docks["history"] = self._dock("History", self.undo_view, Qt.RightDockWidgetArea, "dock_history")
        self.docks["history"].hide()

    def _edit_actions(self) -> dict:
        A = {
            "share": self._act("Share", self.share_selection, "Ctrl+G",
                               "Tie the selected nodes' outputs to one shared observer (a lone Concat: its inputs "
                               "and output)"),
            "ungroup": self._act("Ungroup", self.ungroup_selection, "Ctrl+Shift+G",
                                 "Dissolve the group selected in the Groups dock, or the groups of the selected nodes"),
            "autoshare": self._act("Auto-share", self.auto_share,
                                   tip="Share every Concat whose sharing costs at most the bits-lost threshold"),
            "export": self._act("Export…", self.export_dialog, "Ctrl+E",
                                "Write the fixed QDQ model, plan, overrides, perf report and a PNG of the canvas"),
            "open_project": self._act("Open Project…", self.open_project_dialog, "Ctrl+Shift+O",
                                      "Open a .qtquant project"),
            "save_project": self._act("Save Project", self.projects.save, "Ctrl+S",
                                      "Save model, options, groups and statistics as a .qtquant project"),
            "save_project_as": self._act("Save Project As…", self.projects.save_as, "Ctrl+Shift+S"),
            "history": self.docks["history"].toggleViewAction(),
        }
        A["history"].setText("Undo History")
        A["history"].setShortcut("Ctrl+H")
        self.autoshare_bits = QDoubleSpinBox()
        self.autoshare_bits.setRange(0.0, 16.0)
        self.autoshare_bits.setSingleStep(0.25)
        self.autoshare_bits.setDecimals(2)
        self.autoshare_bits.setPrefix("≤ ")
        self.autoshare_bits.setSuffix(" bits")
        self.autoshare_bits.setValue(self.controller.options.max_bits_lost)
        self.autoshare_bits.setToolTip("Auto-share threshold: the most bits any member may lose by sharing")
        self.autoshare_bits.valueChanged.connect(self._threshold_changed)
        self.policy_combo = QComboBox()
        for p in Policy:
            self.policy_combo.addItem(p.value, p.value)
        self.policy_combo.setToolTip("How a shared range is chosen: union of the members (default), the Concat "
                                     "output's, the widest input's, or a pooled-histogram percentile")
        self.policy_combo.currentIndexChanged.connect(
            lambda i: self.editor.set_policy(self.policy_combo.itemData(i)))
        for k in ("share", "ungroup", "autoshare", "export", "save_project", "save_project_as"):
            A[k].setEnabled(False)
        return A

    def _connect_editing(self) -> None:
        ed = self.editor
        ed.message.connect(self._edit_message)
        ed.autoShared.connect(self.show_autoshare_report)
        self.view.nodesDropped.connect(self.editor.drop)
        self.view.contextRequested.connect(self._context_menu)
        gp = self.groups_panel
        gp.groupSelected.connect(self._on_group_selected)
        gp.ungroupRequested.connect(self.editor.ungroup)
        gp.removeMemberRequested.connect(self.editor.remove_member)
        gp.nodeActivated.connect(self.jump_to)
        # Bound methods, not lambdas: Qt drops them when the window is destroyed.
        self.undo_stack.cleanChanged.connect(self.update_title)
        self.undo_stack.indexChanged.connect(self.update_title)
        self.projects.pathChanged.connect(self.update_title)
        self.bridge.changed.connect(self._on_bridge_changed)
        self.bridge.sessionReplaced.connect(self.update_edit_actions)
        self.controller.calibrationFinished.connect(self._calibrated_for_project)

    # -- state ---------------------------------------------------------------------------------
    def _edit_message(self, text: str) -> None:
        self.statusBar().showMessage(text, 10000)
        self.job_log.log(text)

    def update_edit_actions(self, *_) -> None:
        A = self.actions_by_name
        s = self.bridge.session
        sel = self.scene.selected_names() if s is not None else []
        A["share"].setEnabled(bool(sel))
        A["ungroup"].setEnabled(bool(self._ungroup_ids()))
        A["autoshare"].setEnabled(s is not None and s.ready)
        A["export"].setEnabled(s is not None and s.ready)
        A["save_project"].setEnabled(s is not None)
        A["save_project_as"].setEnabled(s is not None)

    def update_title(self, *_) -> None:
        s = self.bridge.session
        if s is None:
            self.setWindowTitle("qtquant")
            return
        name = self.projects.path.name if self.projects.path else (s.graph.path.name if s.graph.path else "model")
        self.setWindowTitle(f"{name}[*] — qtquant")
        self.setWindowModified(self.projects.modified)

    def _on_bridge_changed(self, kind: str) -> None:
        if kind == "options":
            self._sync_options()
        self.update_edit_actions()

    def _threshold_changed(self, v: float) -> None:
        s = self.bridge.session
        if s is not None and s.options.max_bits_lost != v:
            # Saved with the project; nothing derived depends on it, so no "options" event.
            s.options = replace(s.options, max_bits_lost=float(v))

    def _sync_options(self) -> None:
        s = self.bridge.session
        if s is None:
            return
        self._sync_march(s.options.march)
        self.autoshare_bits.blockSignals(True)
        self.autoshare_bits.setValue(s.options.max_bits_lost)
        self.autoshare_bits.blockSignals(False)
        self.policy_combo.blockSignals(True)
        self.policy_combo.setCurrentIndex(max(0, self.policy_combo.findData(s.options.policy.value)))
        self.policy_combo.blockSignals(False)

    def update_hulls(self) -> None:
        if self._build is not None:  # the scene is half built: done again once it is complete
            return
        s = self.bridge.session
        self.scene.hulls.update(s.graph if s else None, list(s.groups) if s else [])
        self.scene.hulls.highlight(self.group_focus)

    # -- gestures --------------------------------------------------------------------------------
    def share_selection(self) -> bool:
        return self.editor.share_nodes(self.scene.selected_names())

    def _ungroup_ids(self) -> list[int]:
        s = self.bridge.session
        if s is None:
            return []
        if self.group_focus is not None and s.groups.get(self.group_focus) is not None:
            return [self.group_focus]
        return self.editor.groups_of_nodes(self.scene.selected_names())

    def ungroup_selection(self) -> bool:
        return self.editor.ungroup(self._ungroup_ids())

    def auto_share(self):
        return self.editor.auto_share(self.autoshare_bits.value())

    def set_march(self, march: str) -> None:
        """Toolbar / Performance dock: an undoable edit once a model is open."""
        self._sync_march(march)
        s = self.bridge.session
        if s is None:
            self.controller.set_march(march)
        elif s.options.march != march:
            self.editor.set_march(march)

    def _on_selection_for_edit(self) -> None:
        if self.scene.selected_names():
            self.group_focus = None
            self.groups_panel.tree.blockSignals(True)
            self.groups_panel.tree.clearSelection()
            self.groups_panel.tree.blockSignals(False)
            self.scene.hulls.highlight(None)
        self.update_edit_actions()

    def _on_group_selected(self, gid: int) -> None:
        self.group_focus = None if gid < 0 else gid
        self.scene.hulls.highlight(self.group_focus)
        if self.group_focus is not None:
            r = self.scene.hulls.bounds(self.group_focus)
            if not r.isEmpty():
                self.view.ensureVisible(r, 40, 40)
        self.update_edit_actions()

    def _context_menu(self, name: str, global_pos) -> None:
        s = self.bridge.session
        if s is None:
            return
        menu = QMenu(self)
        A = self.actions_by_name
        g = s.graph
        sel = self.scene.selected_names()
        if len(sel) > 1:
            menu.addAction(A["share"])
        elif name in g.nodes and g.nodes[name].op_type == "Concat":
            a = menu.addAction("Share this Concat's inputs and output", self.share_selection)
            a.setShortcut(A["share"].shortcut())
        for t in node_outputs(g, name) if name else []:
            gr = s.groups.group_of(t)
            if gr is not None:
                menu.addAction(f"Remove {t} from group {gr.id}",
                               lambda gid=gr.id, t=t: self.editor.remove_member(gid, t))
        if self._ungroup_ids():
            menu.addAction(A["ungroup"])
        if menu.actions():
            menu.addSeparator()
        menu.addAction(A["autoshare"])
        self.context_menu = menu  # kept for tests
        menu.popup(global_pos)

    def show_autoshare_report(self, report) -> None:
        self.last_autoshare = report
        self.job_log.log(report.text())
        if self.show_dialogs:
            self._report("Auto-share", report.text())

    def _report(self, title: str, text: str) -> ReportDialog:
        dlg = ReportDialog(title, text, self)
        self.report_dialogs = [d for d in self.report_dialogs if d.isVisible()] + [dlg]
        dlg.show()
        return dlg

    # -- export ----------------------------------------------------------------------------------
    def export_dialog(self) -> bool:
        s = self.bridge.session
        if s is None or not s.ready:
            self.statusBar().showMessage("Export needs calibrated scales: wait for calibration", 6000)
            return False
        folder = self.settings.value("export/folder") or str(s.graph.path.parent if s.graph.path else Path.home())
        stem = (s.graph.path.stem if s.graph.path else "model") + "_fixed"
        dlg = ExportDialog(Path(folder), stem, self, self.settings)
        if dlg.exec() != QDialog.Accepted:
            return False
        opts = dlg.values()
        self.settings.setValue("export/folder", str(opts.folder))
        self.export(opts)
        return True

    def export(self, opts):
        """Write the files of ``opts`` (an ExportOptions) in the background; returns the job."""
        s = self.bridge.session
        s.domains  # built here once; the snapshot shares it
        image = render_canvas(self.scene, self.view) if opts.png else None
        snap = snapshot_session(s)

        def done(rep):
            self.last_export = rep
            msg = f"Exported {len(rep.written)} files to {opts.folder}"
            self.statusBar().showMessage(msg, 10000)
            self.job_log.log(msg + "\n" + rep.text())
            if self.show_dialogs:
                self._report("Export", rep.text())

        return self.jobs.submit("export", f"export to {Path(opts.folder).name or opts.folder}",
                                lambda p, c: export_files(snap, opts, image, c), done)

    # -- projects ----------------------------------------------------------------------------------
    def open_project_dialog(self) -> None:
        if not self.projects.maybe_save():
            return
        start = str(self.projects.path.parent if self.projects.path else
                    (self.controller.path.parent if self.controller.path else Path.home()))
        p, _ = QFileDialog.getOpenFileName(self, "Open project", start,
                                           f"qtquant projects (*{PROJECT_SUFFIX});;All files (*)")
        if p:
            self.open_project(p, ask=False)

    def open_project(self, path, ask: bool = True):
        """Open a ``.qtquant`` project (after the unsaved-changes prompt when ``ask``)."""
        if ask and not self.projects.maybe_save():
            return None
        return self.projects.open(path)

    def _calibrated_for_project(self, ok: bool) -> None:
        if ok:
            self.projects.cache_statistics()
        self.update_edit_actions()
