"""Export from the app: the fixed QDQ model, the plan, onnxruntime overrides, the perf
report (HTML + CSV) and a PNG of the canvas.

The files are written by the use case ``qtquant fix`` and ``qtquant perf`` call too
(:func:`qtquant.app.exporting.export` and its perf report writer), so the GUI and the CLI
write the same bytes for the same session; this module adds only the canvas picture and
the Qt parts.  :func:`export_files` runs in a worker on a :class:`~qtquant.app.Snapshot`
of the session: an edit made while it writes does not leak in.  :class:`ExportController`
asks where to write (the dialog), starts that job and reports its outcome.
Every file is written atomically; the first error stops the export with a one-line
message (the window shows it in a dialog).  What the model export had to give up (a weight
scale raised so a bias fits int32, a value clipped) comes right after its summary line as
``warning:`` lines, wrapped so that the report dialog shows them whole.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QPoint, QRectF, QSettings, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QLabel, QLineEdit, QVBoxLayout)

from ...deploy.targets import TARGETS
from ...base.errors import BadInputError
from ...base.fileio.paths import default_output_folder
from ...base.vocab import DEFAULT_PERCENTILE, DEFAULT_SCHEME, SCHEME_NAMES, Observer, Scheme
from ..dialogs.modeldialog import path_row

__all__ = ["ExportOptions", "ExportDialog", "ExportController", "export_files", "render_canvas", "ExportReport"]

MAX_PNG_SIDE = 16384  # pixels: beyond this the canvas picture is scaled down
# The report dialog does not wrap (paths must stay one line); warnings are prose, ~100 columns
# fit its 900 px monospace text.
WARNING_COLUMNS = 100


@dataclass
class ExportOptions:
    folder: Path
    stem: str
    model: bool = True
    plan: bool = True
    overrides: bool = True
    report: bool = True  # HTML and CSV
    png: bool = True
    float_outputs: bool = False  # every model output in float (qtquant fix --float-outputs)
    quantize_outputs: bool = False  # every model output int8 (--quantize-outputs); neither: the default
    scheme: str | None = None  # sym / asym (--scheme); None: the session's
    percentile: float | None = None  # for the percentile observer (--percentile); None: the session's
    deploy: str | None = None  # a deploy target (qtquant deploy --target); its files go to <folder>/deploy-<target>

    @property
    def output_mode(self):
        from ...quant.outputs import OutputMode

        if self.float_outputs:
            return OutputMode.FLOAT
        return OutputMode.QUANTIZE if self.quantize_outputs else OutputMode.AUTO

    def paths(self) -> dict[str, Path]:
        f, s = Path(self.folder), self.stem
        out = {}
        if self.model:
            out["model"] = f / f"{s}.onnx"
        if self.plan:
            out["plan"] = f / f"{s}.plan.json"
        if self.overrides:
            out["overrides"] = f / f"{s}.overrides.json"
        if self.report:
            out["html"] = f / f"{s}.perf.html"
            out["csv"] = f / f"{s}.perf.csv"
        if self.png:
            out["png"] = f / f"{s}.png"
        return out


@dataclass
class ExportReport:
    written: list[Path] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # what the CLI would print
    warnings: list[str] = field(default_factory=list)  # the model export's, also in ``lines``
    accuracy: str = ""  # the exported model's accuracy on the check samples (also in ``lines``)

    def text(self) -> str:
        out = []
        for ln in self.lines:
            prose = ln.startswith("warning: ") or ln == self.accuracy  # wrapped; paths and tables are not
            if prose and len(ln) > WARNING_COLUMNS:
                indent = len("warning: ") if ln.startswith("warning: ") else 2
                out += textwrap.wrap(ln, WARNING_COLUMNS, subsequent_indent=" " * indent,
                                     break_long_words=False, break_on_hyphens=False)
            else:
                out.append(ln)
        return "\n".join(out)


def export_request(opts: ExportOptions):
    """The use case's request for the dialog's choices (the canvas picture is the window's own)."""
    from ...app.exporting import ExportRequest

    paths = opts.paths()
    return ExportRequest(model=paths.get("model"), plan=paths.get("plan"), overrides=paths.get("overrides"),
                         html=paths.get("html"), csv=paths.get("csv"), output_mode=opts.output_mode,
                         deploy=opts.deploy,
                         deploy_dir=Path(opts.folder) / f"deploy-{opts.deploy}" if opts.deploy else None)


def export_files(session, opts: ExportOptions, image: QImage | None = None, cancelled=None,
                 progress=None) -> ExportReport:
    """Write the chosen files (worker thread).  ``session``: a Snapshot, or a session no one edits meanwhile."""
    from ...app.exporting import export
    from ...base.fileio import atomic_dir, commit

    folder = Path(opts.folder)
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"the export folder {folder} is a file")
    try:  # a folder that does not exist yet is made (refusing it closed the dialog for nothing)
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInputError(f"cannot create the export folder {folder}: {e.strerror or e}") from None
    if not opts.stem or "/" in opts.stem or "\\" in opts.stem:
        raise BadInputError(f"{opts.stem!r} is not a file name: give a base name without folders")
    paths = opts.paths()
    if not paths and not opts.deploy:
        raise BadInputError("nothing to export: tick at least one file")
    if "png" in paths:  # refuse clobbering the input before writing anything
        from ...base.fileio import check_output_path

        check_output_path(paths["png"], inputs=[session.graph.path], what="png file")
    res = export(session, export_request(opts), cancelled=cancelled, progress=progress)
    rep = ExportReport(written=list(res.written), lines=list(res.lines), warnings=res.warnings,
                       accuracy=res.accuracy)
    if "png" in paths and image is not None:
        p = paths["png"]
        with atomic_dir(p.parent) as tmp:
            t = tmp / p.name
            if not image.save(str(t), "PNG"):
                raise BadInputError(f"cannot write {p}")
            commit(t, p)
        rep.written.append(p)
        rep.lines.append(f"wrote canvas picture {p} ({image.width()}×{image.height()})")
    return rep


def render_canvas(scene, view=None, max_side: int = MAX_PNG_SIDE) -> QImage:
    """The whole graph (not just the visible part) at 100 % zoom or less, legend in the corner."""
    scene.flush_looks()
    src = scene.itemsBoundingRect().adjusted(-40, -40, 40, 40)
    if src.isEmpty():
        img = QImage(16, 16, QImage.Format_ARGB32)
        img.fill(QColor("#fafbfc"))
        return img
    s = min(1.0, max_side / max(src.width(), src.height()))
    w, h = max(1, int(src.width() * s)), max(1, int(src.height() * s))
    img = QImage(w, h, QImage.Format_ARGB32)
    img.fill(QColor("#fafbfc"))
    labels_were = scene._labels_visible  # noqa: SLF001 - shape labels belong on a picture at 100 %
    overview_was = scene.overview_active
    scene.set_overview(False)
    scene.set_labels_visible(s >= 0.85)
    p = QPainter(img)
    p.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
    scene.render(p, QRectF(0, 0, w, h), src, Qt.KeepAspectRatio)
    if view is not None and getattr(view, "legend", None) is not None:
        view.legend.render(p, QPoint(12, 12))
    p.end()
    scene.set_labels_visible(labels_were)
    scene.set_overview(overview_was)
    return img


class ExportDialog(QDialog):
    """Where and what to export; remembers the folder per application (QSettings)."""

    def __init__(self, folder: Path, stem: str, parent=None, settings: QSettings | None = None, *,
                 scheme: str = DEFAULT_SCHEME.short, percentile: float = DEFAULT_PERCENTILE,
                 percentile_used: bool = False):
        super().__init__(parent)
        self.setWindowTitle("Export")
        self.settings = settings
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.folder = QLineEdit(str(folder))
        row = path_row(self.folder, self._browse)
        self.stem = QLineEdit(stem)
        form.addRow("Folder:", row)
        form.addRow("Base name:", self.stem)
        # qtquant fix --scheme / --percentile: applied to the session before it is written (the
        # canvas then shows what was exported; Undo takes the scheme back).
        self.scheme = QComboBox()
        self.scheme.addItems(SCHEME_NAMES)
        self.scheme.setCurrentText(scheme)
        self.scheme.setToolTip("activation scheme: sym = int8 symmetric (Horizon), asym = uint8 asymmetric "
                               "(like qtquant fix --scheme)")
        self.percentile = QDoubleSpinBox()
        self.percentile.setRange(50.0, 100.0)
        self.percentile.setDecimals(4)
        self.percentile.setSingleStep(0.01)
        self.percentile.setValue(percentile)
        self.percentile.setEnabled(percentile_used)
        self.percentile.setToolTip("percentile of |x| for the percentile observer (like --percentile); "
                                   "the same statistics, no new calibration run"
                                   + ("" if percentile_used else "\n(this calibration uses another observer)"))
        form.addRow("Scheme:", self.scheme)
        form.addRow("Percentile:", self.percentile)
        # qtquant deploy --target: the groups and precision map in one toolchain's own form
        self.deploy = QComboBox()
        self.deploy.addItem("none", None)
        for t, spec in TARGETS.items():
            self.deploy.addItem(spec.title, t.value)
        self.deploy.setToolTip("also write the groups and precision choices for a toolchain (like qtquant deploy; "
                               "docs/deploy.md), into the folder's deploy-<target> folder")
        self.deploy.currentIndexChanged.connect(self._preview)
        form.addRow("Deploy target:", self.deploy)
        lay.addLayout(form)
        self.checks = {}
        for key, text, tip in (
                ("model", "Fixed QDQ model (.onnx)", "every group's tensors use one scale initializer (qtquant fix)"),
                ("float_outputs", "    keep every model output in float", "like qtquant fix --float-outputs"),
                ("quantize_outputs", "    force every model output to int8",
                 "like qtquant fix --quantize-outputs; by default an output Concat whose members cannot share "
                 "one scale stays in float"),
                ("plan", "Sharing plan (.plan.json)", "groups, members, scale and bits lost: tie the same "
                                                       "observers in your QAT code"),
                ("overrides", "onnxruntime TensorQuantOverrides (.overrides.json)", "the same scales for "
                                                                                   "onnxruntime's quantizer"),
                ("report", "Perf report (.perf.html and .perf.csv)", "like qtquant perf --report --csv"),
                ("png", "Canvas picture (.png)", "the whole graph as drawn, with hulls and colours")):
            cb = QCheckBox(text)
            cb.setToolTip(tip)
            cb.setChecked(key not in ("float_outputs", "quantize_outputs"))
            cb.toggled.connect(self._preview)
            lay.addWidget(cb)
            self.checks[key] = cb
        fo, qo = self.checks["float_outputs"], self.checks["quantize_outputs"]
        for cb in (fo, qo):
            self.checks["model"].toggled.connect(cb.setEnabled)
        fo.toggled.connect(lambda on: on and qo.setChecked(False))  # the two exclude each other
        qo.toggled.connect(lambda on: on and fo.setChecked(False))
        self.files = QLabel("")
        self.files.setStyleSheet("color: #555")
        self.files.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.files)
        self.folder.textChanged.connect(self._preview)
        self.stem.textChanged.connect(self._preview)
        box = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        box.button(QDialogButtonBox.Ok).setText("Export")
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self._preview()

    def _browse(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Export folder", self.folder.text())
        if d:
            self.folder.setText(d)

    def _preview(self) -> None:
        v = self.values()
        names = [p.name for p in v.paths().values()] + ([f"deploy-{v.deploy}/"] if v.deploy else [])
        self.files.setText("Writes: " + (", ".join(names) or "nothing"))

    def values(self) -> ExportOptions:
        c = self.checks
        return ExportOptions(Path(self.folder.text().strip() or "."), self.stem.text().strip(),
                             model=c["model"].isChecked(), plan=c["plan"].isChecked(),
                             overrides=c["overrides"].isChecked(), report=c["report"].isChecked(),
                             png=c["png"].isChecked(),
                             float_outputs=c["float_outputs"].isChecked() and c["model"].isChecked(),
                             quantize_outputs=c["quantize_outputs"].isChecked() and c["model"].isChecked(),
                             scheme=self.scheme.currentText(),
                             percentile=self.percentile.value() if self.percentile.isEnabled() else None,
                             deploy=self.deploy.currentData())


class ExportController(QObject):
    """Export of one session relay's session: the dialog, the background job, the report.

    ``render()`` returns the canvas picture (a QImage), taken on the GUI thread when the
    export starts."""

    exported = Signal(object)  # ExportReport

    def __init__(self, relay, jobs, settings: QSettings, messages, render, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.jobs = jobs
        self.settings = settings
        self.messages = messages
        self.render = render
        self.last_export: ExportReport | None = None

    @staticmethod
    def _folder_key(session) -> str:
        from ..dialogs.modeldialog import ModelSettings

        return "export/folder/" + ModelSettings.key(session.graph.path or "model").removeprefix("models/")

    def remember_folder(self, folder) -> None:
        """The folder the export dialog offers next for the open model."""
        self.settings.setValue(self._folder_key(self.relay.session), str(folder))

    def dialog(self) -> bool:
        s = self.relay.session
        if s is None or not s.ready:
            self.messages.status("Export needs calibrated scales: wait for calibration", 6000)
            return False
        # This model's last export folder, else its own folder (not another model's last one, not a
        # hidden cache folder: the demo's)
        key = self._folder_key(s)
        folder = self.settings.value(key) or str(default_output_folder(s.graph.path))
        stem = (s.graph.path.stem if s.graph.path else "model") + "_fixed"
        cal = s.calibration
        pct = getattr(getattr(cal, "config", None), "percentile", DEFAULT_PERCENTILE)
        dlg = ExportDialog(Path(folder), stem, self.messages.widget, self.settings, scheme=s.options.scheme.short,
                           percentile=float(pct), percentile_used=self._percentile_used(s))
        if dlg.exec() != QDialog.Accepted:
            return False
        opts = dlg.values()
        self.settings.setValue(key, str(opts.folder))
        self.apply_choices(opts)
        self.export(opts)
        return True

    @staticmethod
    def _percentile_used(s) -> bool:
        cal = s.calibration
        return hasattr(cal, "recompute") and str(getattr(cal.config, "observer", "")) == Observer.PERCENTILE.value

    def apply_choices(self, opts: ExportOptions) -> None:
        """The dialog's scheme and percentile onto the session, each a command on the stack (the
        same statistics re-derived, as ``qtquant fix --scheme --percentile`` computes them)."""
        from ...app.commands import SetOptionsCommand, SetPercentileCommand

        s = self.relay.session
        if opts.scheme and Scheme.parse(opts.scheme) != s.options.scheme:
            self.relay.stack.push(SetOptionsCommand(scheme=opts.scheme))
        if opts.percentile is not None and self._percentile_used(s):
            self.relay.stack.push(SetPercentileCommand(opts.percentile))

    def export(self, opts: ExportOptions):
        """Write the files of ``opts`` in the background; returns the job."""
        image = self.render() if opts.png else None
        snap = self.relay.session.snapshot()

        def done(rep):
            self.last_export = rep
            msg = f"Exported {len(rep.written)} files to {opts.folder}"
            self.messages.status(msg, 10000)
            self.messages.log(msg + "\n" + rep.text())
            self.messages.report("Export", rep.text())
            self.exported.emit(rep)

        return self.jobs.submit("export", f"export to {Path(opts.folder).name or opts.folder}",
                                lambda p, c: export_files(snap, opts, image, c), done)
