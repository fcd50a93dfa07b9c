"""Dialogs: the open/calibration dialog (remembered per model) and the error dialog."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QSpinBox,
                               QStyle, QToolButton, QTreeView, QVBoxLayout, QWidget)

from ...app.modelinputs import default_shape, model_inputs, needs_shapes, readable_dims, recorded_shapes
from ...calib import CalibConfig
from ...calib.engine import DEFAULT_COUNT
from ...calib.holdout import AUTO_HOLDOUT_FRACTION, AUTO_HOLDOUT_MIN, parse_holdout
from ...model.cut import check_cut
from ...base.errors import BadInputError, QtQuantError
from ...model.graph import parse_cut
from ...model.modelcheck import check_input_shapes
from ...model.shapes import format_shape, parse_input_shape
from ...base.vocab import OBSERVERS, SYNTHETIC

__all__ = ["ErrorDialog", "OpenDialog", "file_dialog", "pick_open_file", "ModelSettings", "model_inputs",
           "default_shape", "calib_config", "needs_shapes", "holdout_text", "given_shapes", "check_open_values"]


def file_dialog(parent, title: str, folder: str, filters: str) -> QFileDialog:
    """An open-file dialog whose Size column shows whole sizes: Qt's own dialog (no native one,
    e.g. offscreen or without a desktop theme) opened it too narrow and "12.3 MB" showed as "12…"."""
    d = QFileDialog(parent, title, folder, filters)
    d.setFileMode(QFileDialog.ExistingFile)
    d.setAcceptMode(QFileDialog.AcceptOpen)
    d.resize(max(d.width(), 860), max(d.height(), 500))
    tree = d.findChild(QTreeView, "treeView")  # only in Qt's widget dialog
    if tree is not None:
        head = tree.header()
        head.setMinimumSectionSize(40)
        head.setSectionResizeMode(0, QHeaderView.Stretch)  # the name takes what is left
        head.setStretchLastSection(False)
        fm = tree.fontMetrics()
        # Size, Type, Date Modified: at least their widest usual text plus the sort arrow.
        for col, sample in ((1, "1,023.9 MiB"), (2, "onnx File"), (3, "2026-12-31 23:59")):
            head.setSectionResizeMode(col, QHeaderView.Interactive)
            head.resizeSection(col, max(head.sectionSize(col), fm.horizontalAdvance(sample) + 32))
    return d


def pick_open_file(parent, title: str, folder: str, filters: str) -> str:
    """The chosen path, or "" when cancelled (like ``QFileDialog.getOpenFileName``)."""
    d = file_dialog(parent, title, folder, filters)
    return d.selectedFiles()[0] if d.exec() == QDialog.Accepted and d.selectedFiles() else ""


def path_row(edit: QLineEdit, browse) -> QWidget:
    """A path field with its "Browse…" button (``browse()`` fills the field)."""
    button = QPushButton("Browse…")
    button.clicked.connect(browse)
    row = QWidget()
    rl = QHBoxLayout(row)
    rl.setContentsMargins(0, 0, 0, 0)
    rl.addWidget(edit, 1)
    rl.addWidget(button)
    return row


class ErrorDialog(QDialog):
    """One-line message, with the traceback behind a "Details" toggle.  Not modal."""

    def __init__(self, title: str, message: str, details: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setModal(False)
        self.setAttribute(Qt.WA_DeleteOnClose, False)
        self.message = message
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.SP_MessageBoxCritical).pixmap(36, 36))
        msg = QLabel(message)
        msg.setWordWrap(True)
        msg.setTextInteractionFlags(Qt.TextSelectableByMouse)
        msg.setMinimumWidth(380)
        self.details = QPlainTextEdit(details or "(no details)")
        self.details.setReadOnly(True)
        self.details.setVisible(False)
        self.details.setMinimumHeight(180)
        self.toggle = QToolButton()
        self.toggle.setText("Details")
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(self.details.setVisible)
        self.toggle.setEnabled(bool(details))
        box = QDialogButtonBox(QDialogButtonBox.Close)
        box.rejected.connect(self.close)
        box.accepted.connect(self.close)
        top = QHBoxLayout()
        top.addWidget(icon, 0, Qt.AlignTop)
        top.addWidget(msg, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.toggle)
        bottom.addStretch(1)
        bottom.addWidget(box)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.details)
        lay.addLayout(bottom)


# -- per-model settings ----------------------------------------------------------------------


class ModelSettings:
    """Input shapes and calibration choices remembered per model (QSettings, keyed by path)."""

    def __init__(self, settings: QSettings):
        self.settings = settings

    @staticmethod
    def key(path) -> str:
        return "models/" + hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:20]

    def load(self, path) -> dict:
        raw = self.settings.value(self.key(path), "")
        try:
            return json.loads(raw) if raw else {}
        except (TypeError, ValueError):
            return {}

    def save(self, path, values: dict) -> None:
        self.settings.setValue(self.key(path), json.dumps(values))
        self.settings.sync()


CALIB_DEFAULTS = {"source": SYNTHETIC, "count": DEFAULT_COUNT, "holdout": "auto", "observer": "minmax",
                  "resize": "stretch", "color": "rgb", "pixel_range": "0-1", "mean": "", "std": "", "layout": "nchw"}


def holdout_text(value) -> str:
    """A CalibConfig.holdout value as the dialog shows it: "auto", "5", "0.2"."""
    v = parse_holdout(value)
    return "auto" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def calib_config(values: dict) -> CalibConfig:
    """A CalibConfig from remembered values; keys the engine does not know are left out."""
    kw = {**CALIB_DEFAULTS, **values}
    for k in ("mean", "std"):
        if k in kw and not kw[k]:
            kw[k] = None
    kw["count"] = int(kw.get("count", DEFAULT_COUNT))
    return CalibConfig.from_dict(kw)


def given_shapes(values: dict) -> dict[str, tuple[int, ...]]:
    """The open settings' input shapes ({"shapes": {name: "1x3x640x640"}}) as tuples; a
    one-line ShapeError for a malformed one."""
    return dict(parse_input_shape(f"{name}={text}") for name, text in (values.get("shapes") or {}).items())


def check_open_values(model, values: dict) -> None:
    """A one-line :class:`QtQuantError` for open settings that cannot open ``model`` (None: what
    needs it is skipped): a malformed shape, or one of the wrong rank or against a fixed
    dimension, a cut at no tensor of the model, a calibration setting the engine refuses.  Asked
    before the settings are remembered or used, so a typo never sticks to the model."""
    shapes = given_shapes(values)
    if model is not None:
        if shapes:
            check_input_shapes(model, shapes)
        check_cut(model, values.get("cut") or ())
    calib_config(values.get("calib") or {})


class OpenDialog(QDialog):
    """Input shapes for dynamic models, and the calibration source and preprocessing."""

    def __init__(self, path, remembered: dict | None = None, parent=None, *, shapes_editable: bool = True,
                 title: str = "Open model", cut_editable: bool | None = None, error: str = ""):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.path = Path(path)
        rem = remembered or {}
        lay = QVBoxLayout(self)
        head = QLabel(f"<b>{self.path.name}</b><br><span style='color:#666'>{self.path.parent}</span>")
        head.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(head)
        self.shape_edits: dict[str, QLineEdit] = {}
        try:
            model = onnx.load(str(self.path), load_external_data=False)
        except Exception:
            model = None
        self._model = model  # what the values are checked against (values())
        inputs = model_inputs(model) if model is not None else []
        recorded = recorded_shapes(model) if model is not None else {}
        shapes_box = QGroupBox("Input shapes")
        sf = QFormLayout(shapes_box)
        for name, dims in inputs:
            e = QLineEdit(rem.get("shapes", {}).get(name) or default_shape(dims, recorded.get(name)))
            e.setPlaceholderText(default_shape(dims, recorded.get(name)))
            e.setToolTip("model declares " + "x".join(str(d) for d in dims)
                         + (f"; it records {default_shape(dims, recorded[name])}" if name in recorded else ""))
            e.setEnabled(shapes_editable)
            sf.addRow(f"{name} ({readable_dims(dims)}):", e)
            self.shape_edits[name] = e
        if not inputs:
            sf.addRow(QLabel("(could not read the model's inputs)"))
        # --cut: the model becomes the subgraph ending at these tensors (e.g. a detector's head convs).
        self.cut_edit = QLineEdit(rem.get("cut") if isinstance(rem.get("cut"), str) else "")
        self.cut_edit.setPlaceholderText("whole model (or TENSOR,TENSOR...)")
        self.cut_edit.setToolTip("Cut the graph at these tensors, comma-separated: they become the outputs,\n"
                                 "the inputs stay, and the nodes after them are dropped (like --cut).")
        self.cut_edit.setEnabled(shapes_editable if cut_editable is None else cut_editable)
        sf.addRow("Cut at:", self.cut_edit)
        lay.addWidget(shapes_box)

        cal = {**CALIB_DEFAULTS, **rem.get("calib", {})}
        cbox = QGroupBox("Calibration data")
        cf = QFormLayout(cbox)
        self.source_kind = QComboBox()
        self.source_kind.addItems(["Synthetic (seeded random)", "Image folder", ".npy / .npz file or folder"])
        src = cal["source"]
        self.source_path = QLineEdit("" if src == SYNTHETIC else src)
        self.source_kind.setCurrentIndex(0 if src == SYNTHETIC else (2 if str(src).endswith((".npy", ".npz"))
                                                                        else 1))
        row = path_row(self.source_path, self._browse)
        self.count = QSpinBox()
        self.count.setRange(1, 100000)
        self.count.setValue(int(cal["count"]))
        self.holdout = QLineEdit()
        try:
            self.holdout.setText(holdout_text(cal.get("holdout")))
        except BadInputError:  # a damaged remembered value: fall back to the default, visibly
            self.holdout.setText("auto")
        self.holdout.setPlaceholderText("auto")
        self.holdout.setMaximumWidth(90)
        tip = (f"Samples held back from calibration for the fidelity check.\n"
               f"auto: {AUTO_HOLDOUT_FRACTION:.0%} of the samples from {AUTO_HOLDOUT_MIN} samples on; "
               f"below that none, and the check runs in-sample.\n"
               f"A count such as 5 (0 = check in-sample), or a fraction such as 0.2.")
        self.holdout.setToolTip(tip)
        hint = QLabel("auto, a count (0 = in-sample) or a fraction like 0.2")
        hint.setStyleSheet("color: #666")
        hint.setToolTip(tip)
        hrow = QWidget()
        hl = QHBoxLayout(hrow)
        hl.setContentsMargins(0, 0, 0, 0)
        hl.addWidget(self.holdout)
        hl.addWidget(hint, 1)
        self.observer = QComboBox()
        self.observer.addItems(OBSERVERS)
        self.observer.setCurrentText(cal["observer"])
        self.observer.setToolTip("How each tensor's range is chosen from its statistics.\n"
                                 "search: try minmax, percentile, mse and kl on the whole model and keep the one\n"
                                 "whose export measures best on the check samples (the X5 toolchain's default).\n"
                                 "search-per-node: then choose per tensor, within a time budget.")
        cf.addRow("Source:", self.source_kind)
        cf.addRow("Path:", row)
        cf.addRow("Samples:", self.count)
        cf.addRow("Hold-out:", hrow)
        cf.addRow("Observer:", self.observer)
        # A statistics file (qtquant calibrate --stats-out, e.g. from a cluster) replaces calibrating.
        self.stats_path = QLineEdit(rem.get("stats") if isinstance(rem.get("stats"), str) else "")
        self.stats_path.setPlaceholderText("none: calibrate here (or a file from qtquant calibrate --stats-out)")
        self.stats_path.setToolTip("Use calibration statistics computed elsewhere (qtquant calibrate --stats-out)\n"
                                   "instead of calibrating; the data settings above then come from the file.")
        self.stats_path.editingFinished.connect(self._shapes_from_stats)
        cf.addRow("Statistics file:", path_row(self.stats_path, self._browse_stats))
        lay.addWidget(cbox)

        pbox = QGroupBox("Image preprocessing")
        pf = QFormLayout(pbox)
        self.resize_mode = QComboBox()
        self.resize_mode.addItems(["stretch", "letterbox", "center-crop"])
        self.resize_mode.setCurrentText(cal["resize"])
        self.color = QComboBox()
        self.color.addItems(["rgb", "bgr"])
        self.color.setCurrentText(cal["color"])
        self.pixel_range = QComboBox()
        self.pixel_range.addItems(["0-1", "0-255"])
        self.pixel_range.setCurrentText(cal["pixel_range"])
        self.mean = QLineEdit(cal["mean"] or "")
        self.mean.setPlaceholderText("e.g. 0.485,0.456,0.406 (empty: none)")
        self.std = QLineEdit(cal["std"] or "")
        self.std.setPlaceholderText("e.g. 0.229,0.224,0.225")
        self.layout_combo = QComboBox()
        self.layout_combo.addItems(["nchw", "nhwc"])
        self.layout_combo.setCurrentText(cal["layout"])
        for label, w in (("Resize:", self.resize_mode), ("Channels:", self.color), ("Pixel range:", self.pixel_range),
                         ("Mean:", self.mean), ("Std:", self.std), ("Layout:", self.layout_combo)):
            pf.addRow(label, w)
        self.pre_box = pbox
        lay.addWidget(pbox)
        self.error = QLabel(error)  # why remembered settings could not be used, when they were not
        self.error.setStyleSheet("color: #c62828")
        self.error.setWordWrap(True)  # a long message must not widen the dialog
        lay.addWidget(self.error)
        box = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        box.accepted.connect(self._accept)
        box.rejected.connect(self.reject)
        lay.addWidget(box)
        self.source_kind.currentIndexChanged.connect(self._sync)
        self._sync()

    def _sync(self) -> None:
        synthetic = self.source_kind.currentIndex() == 0
        self.source_path.setEnabled(not synthetic)
        self.pre_box.setEnabled(self.source_kind.currentIndex() == 1)

    def _browse(self) -> None:
        if self.source_kind.currentIndex() == 1:
            p = QFileDialog.getExistingDirectory(self, "Calibration images", str(self.path.parent))
        else:
            p, _ = QFileDialog.getOpenFileName(self, "Calibration data", str(self.path.parent),
                                               "NumPy data (*.npy *.npz);;All files (*)")
        if p:
            self.source_path.setText(p)

    def _browse_stats(self) -> None:
        p, _ = QFileDialog.getOpenFileName(self, "Statistics file", str(self.path.parent),
                                           "qtquant statistics (*.npz *.stats);;All files (*)")
        if p:
            self.stats_path.setText(p)
            self._shapes_from_stats()

    def _shapes_from_stats(self) -> None:
        """The input shapes the chosen statistics file was calibrated with, in the shape fields
        (they must match it); a file that cannot be read is said when the dialog is accepted."""
        from ...calib.statsfile import stats_input_shapes

        path = self.stats_path.text().strip()
        try:
            shapes = stats_input_shapes(path) if path else {}
        except QtQuantError:  # missing or not a statistics file
            return
        for name, e in self.shape_edits.items():
            if name in shapes and e.isEnabled():
                e.setText(format_shape(shapes[name]))

    def values(self) -> dict:
        """{"shapes": {name: "1x3x640x640"}, "calib": {...}}; raises BadInputError on bad input."""
        shapes = {}
        for name, e in self.shape_edits.items():
            text = e.text().strip()
            parse_input_shape(f"{name}={text}")  # raises ShapeError with a one-line message
            shapes[name] = text
        kind = self.source_kind.currentIndex()
        src = SYNTHETIC if kind == 0 else self.source_path.text().strip()
        if kind and not src:
            raise BadInputError("choose a calibration folder or file, or use synthetic data")
        if kind and not Path(src).exists():
            raise BadInputError(f"calibration data not found: {src}")
        holdout = holdout_text(self.holdout.text())
        calib = {"source": src, "count": self.count.value(), "holdout": holdout,
                 "observer": self.observer.currentText(), "resize": self.resize_mode.currentText(),
                 "color": self.color.currentText(), "pixel_range": self.pixel_range.currentText(),
                 "mean": self.mean.text().strip(), "std": self.std.text().strip(),
                 "layout": self.layout_combo.currentText()}
        stats = self.stats_path.text().strip()
        if stats and not Path(stats).is_file():
            raise BadInputError(f"statistics file not found: {stats}")
        values = {"shapes": shapes, "calib": calib, "cut": ",".join(parse_cut(self.cut_edit.text())), "stats": stats}
        # (a cut that cannot be edited here is the open model's, kept as it is)
        check_open_values(self._model, values if self.cut_edit.isEnabled() else {**values, "cut": ""})
        return values

    def _accept(self) -> None:
        try:
            self.values()
        except QtQuantError as e:
            self.error.setText(str(e))
            return
        self.accept()
