"""Opening models and projects from the window: the open dialog (settings remembered per
model), the demo, recalibration with other data, Open Recent."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject

from ...base.errors import QtQuantError
from ...model.graph import parse_cut, read_model_file
from ...model.shapes import parse_input_shapes
from ..dialogs.modeldialog import (CALIB_DEFAULTS, ModelSettings, OpenDialog, calib_config, check_open_values,
                                   given_shapes, holdout_text, model_inputs, needs_shapes, pick_open_file)
from .projects import PROJECT_SUFFIX

__all__ = ["ModelOpener", "MAX_RECENT"]

MAX_RECENT = 10


def _calib_values(cfg) -> dict:
    """A CalibConfig as the open dialog's remembered values."""
    out = {k: getattr(cfg, k) for k in CALIB_DEFAULTS if hasattr(cfg, k)}
    out["holdout"] = holdout_text(cfg.holdout)
    for k in ("mean", "std"):
        v = out.get(k)
        out[k] = "" if v is None else v if isinstance(v, str) else ",".join(f"{x:g}" for x in v)
    return out


class ModelOpener(QObject):
    def __init__(self, controller, projects, settings, messages, recent_menu, parent=None):
        super().__init__(parent)
        self.controller, self.projects, self.settings, self.messages = controller, projects, settings, messages
        self.model_settings = ModelSettings(settings)
        self.recent_menu = recent_menu
        self.pending_plan: str | None = None  # --plan from the command line, for the first calibration
        # (path, settings) of the open under way: remembered for the model once it has loaded, so
        # settings that fail to open it (a shape that does not fit, a cut at nothing) never stick.
        self._unsaved: tuple[Path, dict] | None = None
        # (path, calibration settings) of the calibration under way: remembered once it finishes, so
        # the settings of a cancelled or failed one are not used silently at the next start.
        self._calib_unsaved: tuple[Path, dict] | None = None
        controller.calibrationFinished.connect(self._remember_calibrated)
        controller.calibrationFinished.connect(self._apply_pending_plan)
        controller.modelLoaded.connect(self._remember_loaded)
        controller.loadFailed.connect(self._forget_failed)
        projects.saved.connect(self.add_recent)
        self._rebuild_recent()

    def open_model(self, path, input_shapes=None, calib=None, cut=(), stats=None):
        """Open ``path`` with explicit shapes/calibration (no dialog).  Returns the load job."""
        return self.controller.open_model(path, input_shapes, calib, cut, stats=stats)

    def request_open(self, path, ask: bool | None = None) -> bool:
        """Open with remembered settings; ask first when ``ask`` or when shapes are unresolved."""
        path = Path(path)
        if path.suffix.lower() == PROJECT_SUFFIX:
            return self.open_project(path) is not None
        # The file first: a file that is not a model (a text file named .onnx) gets its error at
        # once, not after the save prompt and the whole calibration dialog.
        try:
            model, _ = read_model_file(path)
        except QtQuantError as e:
            self.messages.error("Cannot open the model", str(e))
            return False
        if not self.projects.maybe_save():
            return False
        rem = self.model_settings.load(path)
        if ask is None:
            ask = needs_shapes(model_inputs(model)) and not rem.get("shapes")
        problem = ""
        if not ask:  # remembered settings that cannot open it (a typo an older version kept)
            try:
                check_open_values(model, rem)
            except QtQuantError as e:
                problem, ask = f"The remembered settings cannot open this model: {e}", True
        values = rem
        if ask:
            if not self.messages.show_dialogs:
                if problem:
                    self.messages.error("Cannot open the model", problem)
                    return False
            else:
                dlg = OpenDialog(path, rem, self.messages.widget, error=problem)
                if dlg.exec() != OpenDialog.Accepted:
                    return False
                values = dlg.values()
        self._open_remembering(path, values)
        return True

    def _open_remembering(self, path: Path, values: dict):
        """Open ``path`` with checked open settings (``given_shapes`` and the rest), and remember
        them for it once it has loaded."""
        self._unsaved = (path, values)
        return self.open_model(path, given_shapes(values), calib_config(values.get("calib") or {}),
                               parse_cut(values.get("cut") or ()), stats=values.get("stats") or None)

    def _remember_loaded(self, _session) -> None:
        """The open settings once the model has loaded; its calibration settings once that finishes."""
        pending, self._unsaved = self._unsaved, None
        if pending is not None and self._is_open(pending[0]):
            path, values = pending
            kept = self.model_settings.load(path).get("calib")
            self.model_settings.save(path, {**values, "calib": kept or {}})
            self._calib_unsaved = (path, values.get("calib") or {})

    def _is_open(self, path) -> bool:
        return self.controller.path is not None and Path(path).resolve() == Path(self.controller.path).resolve()

    def _remember_calibrated(self, ok: bool) -> None:
        pending, self._calib_unsaved = self._calib_unsaved, None
        if ok and pending is not None and self._is_open(pending[0]):
            path, calib = pending
            self.model_settings.save(path, {**self.model_settings.load(path), "calib": calib})

    def _forget_failed(self, _message: str) -> None:
        self._unsaved = None

    def launch(self, path, input_shapes=(), calib=None, plan=None, cut=()) -> bool:
        """``qtquant MODEL --input-shape ... --calib ...``: the command line's choices, no dialog
        when they are complete (every dynamic dimension given or recorded); otherwise the open
        dialog, filled in with them.  ``plan`` is applied once the first calibration is in."""
        path = Path(path)
        shapes = parse_input_shapes(input_shapes)
        inputs = model_inputs(path)
        open_dims = [(n, d) for n, d in inputs if n not in shapes]
        values = {"shapes": {n: "x".join(map(str, v)) for n, v in shapes.items()},
                  "calib": _calib_values(calib) if calib is not None else {}, "cut": ",".join(parse_cut(cut))}
        if needs_shapes(open_dims) and self.messages.show_dialogs:
            dlg = OpenDialog(path, values, self.messages.widget)
            if dlg.exec() != OpenDialog.Accepted:
                return False
            values = dlg.values()
            shapes = given_shapes(values)
            calib = calib_config(values["calib"])
            cut = values.get("cut") or ()
        self.pending_plan = str(plan) if plan else None
        self._unsaved = (path, values)  # the next open of this model starts from them, once it loads
        self.open_model(path, shapes, calib, parse_cut(cut))
        return True

    def _apply_pending_plan(self, ok: bool) -> None:
        plan, self.pending_plan = self.pending_plan, None
        if not plan or not ok or self.controller.session is None:
            return
        from ...app.plans import apply_plan

        try:  # one command on the stack: Undo takes it back, the views refresh once
            applied = apply_plan(self.controller.relay.stack, plan)
        except QtQuantError as e:
            self.messages.error("Cannot apply the plan", str(e))
            return
        self.messages.status(f"Applied {Path(plan).name}: {len(applied.groups)} groups", 8000)

    def open_project(self, path, ask: bool = True):
        """Open a ``.qtquant`` project (after the unsaved-changes prompt when ``ask``)."""
        if ask and not self.projects.maybe_save():
            return None
        return self.projects.open(path)

    def _start_folder(self) -> str:
        p = self.projects.path or self.controller.path
        return str(p.parent) if p else str(Path.home())

    def open_dialog(self) -> None:
        p = pick_open_file(self.messages.widget, "Open ONNX model", str(self.controller.path.parent)
                           if self.controller.path else str(Path.home()), "ONNX models (*.onnx);;All files (*)")
        if p:
            self.request_open(p, ask=True)

    def open_project_dialog(self) -> None:
        if not self.projects.maybe_save():
            return
        p = pick_open_file(self.messages.widget, "Open project", self._start_folder(),
                           f"qtquant projects (*{PROJECT_SUFFIX});;All files (*)")
        if p:
            self.open_project(p, ask=False)

    def open_demo(self) -> None:
        from ...app.demo import demo_model_path

        try:
            self.request_open(demo_model_path(), ask=False)
        except (OSError, QtQuantError) as e:
            self.messages.error("Cannot write the demo model", str(e))

    def calibrate_dialog(self) -> None:
        path = self.controller.path
        if path is None or self.controller.session is None:
            return
        rem = self.model_settings.load(path)
        current = {k: "x".join(map(str, v)) for k, v in self.controller.session.graph.input_shapes.items()}
        # The shapes start from the open model's (not only the remembered ones) and can change:
        # a new shape re-opens the model with it (after the unsaved-changes prompt).
        rem = {**rem, "shapes": {**rem.get("shapes", {}), **current}}
        dlg = OpenDialog(path, rem, self.messages.widget, cut_editable=False, title="Calibrate")
        if dlg.exec() != OpenDialog.Accepted:
            return
        values = dlg.values()
        values["cut"] = rem.get("cut", "")  # recalibrating keeps the open model's cut
        shapes = given_shapes(values)
        if any(current.get(k) != "x".join(map(str, v)) for k, v in shapes.items()):
            if not self.projects.maybe_save():
                return
            self._open_remembering(path, values)
            return
        self.model_settings.save(path, {**values, "calib": rem.get("calib") or {}})
        self._calib_unsaved = (path, values["calib"])  # remembered once it finishes
        self.controller.calibrate(calib_config(values["calib"]))

    # -- recent files ---------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        v = self.settings.value("recent", [])
        if isinstance(v, str):
            v = [v]
        return [p for p in (v or []) if p]

    def add_recent(self, path) -> None:
        p = str(Path(path).resolve())
        rec = [p] + [r for r in self.recent_files() if r != p]
        self.settings.setValue("recent", rec[:MAX_RECENT])
        self._rebuild_recent()

    def _rebuild_recent(self) -> None:
        self.recent_menu.clear()
        rec = self.recent_files()
        for p in rec:
            a = self.recent_menu.addAction(Path(p).name)
            a.setToolTip(p)
            a.triggered.connect(lambda checked=False, p=p: self.request_open(p))
        self.recent_menu.setEnabled(bool(rec))
