"""Dock contents: model info, the Concat list, groups, the perf summary and the job log."""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel,
                               QPlainTextEdit, QSizePolicy, QTableView, QVBoxLayout, QWidget)

from ..perf import MARCHES
from ..shapes import format_shape
from .groupsdock import GroupsPanel
from ..app.views.perfdata import CHART_ROWS, num, rescale_us_by_concat, top_layers
from .style import fmt_bytes, fmt_ratio, fmt_us, mismatch_color, paint_ended

__all__ = ["ModelInfo", "ConcatTableModel", "ConcatList", "GroupsPanel", "PerfSummary", "BarChart", "JobLog"]

SORT_ROLE = Qt.UserRole + 1


def fixed_width(label: QLabel) -> None:
    """A wrapped label whose text never widens its dock: a dock that grows when a result
    arrives re-lays out the window and repaints the canvas (0.2 s on a 20,000-node graph)."""
    label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)


class ModelInfo(QWidget):
    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.form = QFormLayout(self)
        self.form.setContentsMargins(8, 6, 8, 6)
        self.fields = {}
        for key in ("model", "nodes", "inputs", "quantization", "calibration", "concats"):
            lab = QLabel("—")
            lab.setTextInteractionFlags(Qt.TextSelectableByMouse)
            lab.setWordWrap(True)
            fixed_width(lab)
            self.form.addRow(key.capitalize() + ":", lab)
            self.fields[key] = lab
        relay.on_state_change(self.refresh)

    def refresh(self) -> None:
        s = self.relay.session
        if s is None:
            for lab in self.fields.values():
                lab.setText("—")
            return
        g = s.graph
        f = self.fields
        f["model"].setText(g.path.name if g.path else "(in memory)")
        f["model"].setToolTip(str(g.path) if g.path else "")
        f["nodes"].setText(f"{len(g.nodes)} ops, {len(g.tensors)} tensors, opset {g.opset}")
        f["inputs"].setText(", ".join(f"{k} {format_shape(v)}" for k, v in g.input_shapes.items()) or "—")
        f["quantization"].setText(("QDQ file, " if s.quantized_file else "float model, ")
                                  + f"{s.options.scheme.value}, policy {s.options.policy.value}")
        cal = s.calibration
        if s.quantized_file:
            f["calibration"].setText("scales read from the file")
        elif cal is None:
            f["calibration"].setText("not calibrated yet")
        else:
            f["calibration"].setText(f"{cal.config.observer} on {cal.batches} samples ({cal.config.source})")
        cs = self.relay.concats()
        if cs is None:
            f["concats"].setText(f"{len(g.concat_nodes())} (analysis after calibration)")
        else:
            f["concats"].setText(f"{len(cs)}, {sum(1 for c in cs if c.rescales)} mismatched, "
                                 f"{sum(c.rescales for c in cs)} rescales")


class ConcatTableModel(QAbstractTableModel):
    """The Concat rows, sorted here (not by a proxy: a proxy asks Python for every row's sort
    key on each reset and comparison, seconds on a 2,000-Concat graph).  Row tuples are built
    per refresh; the cells a view shows are formatted on first request."""

    HEADERS = ["Concat", "In", "Ratio", "Resc.", "Bits", "Gain"]
    TIPS = ["Concat node", "number of inputs", "largest scale / smallest scale over inputs and output",
            "rescale ops the compiler inserts", "worst bits an input loses if all inputs share one scale",
            "latency saved if the inputs share one scale (rescale cost)"]

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.rows: list[tuple] = []  # (name, inputs, ratio, rescales, worst bits, gain, ConcatInfo)
        self._cells: dict[str, dict] = {}
        self._sort = (2, Qt.DescendingOrder)

    @staticmethod
    def _key(row, col):
        v = row[col]
        if v is None:
            return -1.0
        return v if not isinstance(v, float) or math.isfinite(v) else 1e30

    def _sorted(self, rows):
        col, order = self._sort
        return sorted(rows, key=lambda r: self._key(r, col), reverse=order == Qt.DescendingOrder)

    def refresh(self) -> None:
        """Rows for the current analysis, gains from the latest simulation."""
        cs = self.relay.concats() or []
        gains = rescale_us_by_concat(self.relay.perf())
        self._install([(c.node, len(c.inputs), c.ratio, c.rescales,
                        max((m.bits_lost_if_shared for m in c.inputs if not m.constant), default=0.0),
                        gains.get(c.node), c) for c in cs])

    def show_perf(self) -> None:
        """A new simulation: only the Gain column changes (and the order, when sorted by it)."""
        gains = rescale_us_by_concat(self.relay.perf())
        self._install([r[:5] + (gains.get(r[0]), r[6]) for r in self.rows])

    def _install(self, rows) -> None:
        """Same Concats as before (an edit, a new perf result): dataChanged, which keeps the
        view's sort and selection; other Concats: a reset."""
        rows = self._sorted(rows)
        same = len(rows) == len(self.rows) and {r[0] for r in rows} == {r[0] for r in self.rows}
        if not same:
            self.beginResetModel()
            self.rows, self._cells = rows, {}
            self.endResetModel()
            return
        if [r[0] for r in rows] != [r[0] for r in self.rows]:  # new values re-sort the rows
            self.layoutAboutToBeChanged.emit()
            self._move(rows)
            self.layoutChanged.emit()
        else:
            self.rows = rows
        self._cells = {}
        if rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(self.HEADERS) - 1))

    def _move(self, rows) -> None:
        """Install ``rows`` (a permutation of the current ones) and carry persistent indexes
        (the selection) along."""
        new_at = {r[0]: i for i, r in enumerate(rows)}
        old = self.persistentIndexList()
        names = [self.rows[i.row()][0] for i in old]
        self.rows = rows
        self.changePersistentIndexList(old, [self.index(new_at[n], i.column()) for n, i in zip(names, old)])

    def sort(self, column, order=Qt.AscendingOrder):
        self._sort = (column, order)
        rows = self._sorted(self.rows)
        if [r[0] for r in rows] == [r[0] for r in self.rows]:
            return
        self.layoutAboutToBeChanged.emit()
        self._move(rows)
        self.layoutChanged.emit()

    def _cell(self, row) -> dict:
        name, n_in, ratio, rescales, worst, gain, c = row
        cell = self._cells.get(name)
        if cell is None:
            right = int(Qt.AlignRight | Qt.AlignVCenter)
            display = [name, str(n_in), fmt_ratio(ratio), str(rescales),
                       "∞" if not math.isfinite(worst) else f"{worst:.2f}",
                       fmt_us(gain) if gain is not None else "—"]
            tip = "\n".join(f"in {m.index}: {m.tensor}  scale {m.scale:.4g}"
                            + ("  (rescale)" if m.needs_rescale else "") for m in c.inputs if m.scale) or name
            cell = self._cells[name] = {
                Qt.DisplayRole: display, SORT_ROLE: [self._key(row, i) for i in range(6)],
                Qt.DecorationRole: [mismatch_color(ratio, rescales)] + [None] * 5,
                Qt.TextAlignmentRole: [None] + [right] * 5, Qt.ToolTipRole: [tip] * 6}
        return cell

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()):
        return len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return self.HEADERS[section]
        if orientation == Qt.Horizontal and role == Qt.ToolTipRole:
            return self.TIPS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        by_role = self._cell(self.rows[index.row()]).get(role)
        return by_role[index.column()] if by_role is not None else None


class ConcatList(QWidget):
    """Sortable table of Concats; clicking a row emits ``nodeActivated`` (select + centre)."""

    nodeActivated = Signal(str)

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.model = ConcatTableModel(relay, self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setWordWrap(False)  # else Qt wraps at '/' and elides the wrong end
        self.table.setTextElideMode(Qt.ElideLeft)  # names differ at their end: …/model.22/Concat_5
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(0, QHeaderView.Stretch)
        for i in range(1, len(ConcatTableModel.HEADERS)):
            hh.setSectionResizeMode(i, QHeaderView.ResizeToContents)
        # Size columns from the rows on screen: the default reads 1,000 rows per column, each a
        # Python call, on every reset (0.5 s with 2,000 Concats).
        hh.setResizeContentsPrecision(0)
        self.table.sortByColumn(2, Qt.DescendingOrder)
        self.table.clicked.connect(self._clicked)
        self.table.activated.connect(self._clicked)
        self.status = QLabel("")
        self.status.setStyleSheet("color: #555; padding: 2px 4px")
        self.status.setWordWrap(True)
        fixed_width(self.status)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.table)
        lay.addWidget(self.status)
        relay.on_state_change(self.refresh)
        relay.perfChanged.connect(self.model.show_perf)

    def refresh(self) -> None:
        self.model.refresh()
        cs = self.relay.concats()
        if self.relay.session is None:
            self.status.setText("")
        elif cs is None:
            self.status.setText("Concat scales appear when calibration finishes.")
        else:
            self.status.setText(f"{len(cs)} Concats, {sum(1 for c in cs if c.rescales)} mismatched, "
                                f"{sum(c.rescales for c in cs)} rescales. Click a row to jump to it.")

    def row_of(self, name: str) -> int:
        return next((r for r, row in enumerate(self.model.rows) if row[0] == name), -1)

    def _clicked(self, index) -> None:
        name = self.model.index(index.row(), 0).data()
        if name:
            self.nodeActivated.emit(name)

    def select_name(self, name: str) -> None:
        r = self.row_of(name)
        if r >= 0:
            self.table.blockSignals(True)
            self.table.selectRow(r)
            self.table.blockSignals(False)
        else:
            self.table.clearSelection()


class BarChart(QWidget):
    """Horizontal bars: the slowest layers.  Clicking a bar emits its name."""

    barClicked = Signal(str)
    ROWS = CHART_ROWS
    PITCH = (13, 19)  # row pitch in px: shrinks to fit the height

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[tuple[str, str, float]] = []
        # Fixed, whatever the rows: a chart growing with its rows resized the whole window's
        # layout when the first simulation arrived (and repainted a 20,000-node canvas).
        self.setMinimumHeight(22 + self.ROWS * self.PITCH[0])
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)

    @property
    def _pitch(self) -> float:
        lo, hi = self.PITCH
        return max(lo, min(hi, (self.height() - 22) / max(len(self.rows), 1)))

    def set_rows(self, rows) -> None:
        self.rows = list(rows)[:self.ROWS]
        self.update()

    def _label_w(self) -> float:
        return min(300.0, self.width() * 0.42)

    def paintEvent(self, ev):
        paint_ended(self, ev, self._paint)

    def _paint(self, p, ev):
        p.setRenderHint(QPainter.Antialiasing)
        p.fillRect(self.rect(), QColor("#ffffff"))
        f = p.font()
        f.setPixelSize(11)
        p.setFont(f)
        if not self.rows:
            p.setPen(QColor("#777"))
            p.drawText(self.rect(), Qt.AlignCenter, "Layer latencies appear after simulation.")
            return
        p.setPen(QColor("#333"))
        p.drawText(QRectF(6, 2, self.width() - 12, 16), Qt.AlignLeft, f"Slowest {len(self.rows)} layers")
        vmax = max(r[2] for r in self.rows) or 1.0
        lw = self._label_w()
        fm = p.fontMetrics()
        pitch = self._pitch
        bar_h = pitch - 3
        for i, (name, op, us) in enumerate(self.rows):
            y = 20 + i * pitch
            label = fm.elidedText(name, Qt.ElideMiddle, int(lw - 10))
            p.setPen(QColor("#333"))
            p.drawText(QRectF(4, y, lw - 8, bar_h), Qt.AlignRight | Qt.AlignVCenter, label)
            bw = (self.width() - lw - 80) * us / vmax
            col = QColor("#e53935") if "rescale" in name.lower() else QColor("#5b8cc0")
            p.setPen(Qt.NoPen)
            p.setBrush(col)
            p.drawRoundedRect(QRectF(lw, y + 2, max(bw, 1.0), bar_h - 4), 3, 3)
            p.setPen(QColor("#333"))
            p.drawText(QRectF(lw + bw + 4, y, 76, bar_h), Qt.AlignLeft | Qt.AlignVCenter, fmt_us(us))

    def mousePressEvent(self, ev):
        i = int((ev.position().y() - 20) // self._pitch)
        if 0 <= i < len(self.rows):
            self.barClicked.emit(self.rows[i][0])


class PerfSummary(QWidget):
    """Totals, a march selector and the top-N layer chart."""

    marchChanged = Signal(str)
    nodeActivated = Signal(str)

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        left = QWidget()
        form = QFormLayout(left)
        form.setContentsMargins(8, 6, 8, 6)
        self.march = QComboBox()
        self.march.addItems(MARCHES)
        self.march.currentTextChanged.connect(self.marchChanged)
        form.addRow("March:", self.march)
        self.values = {}
        for key, label in (("latency", "Latency:"), ("fps", "FPS:"), ("ddr", "DDR / frame:"),
                           ("rescales", "Rescales:"), ("rescale_us", "Rescale cost:"), ("sqnr", "Output SQNR:")):
            lab = QLabel("—")
            lab.setTextInteractionFlags(Qt.TextSelectableByMouse)
            f = lab.font()
            f.setBold(key in ("latency", "fps"))
            lab.setFont(f)
            lab.setWordWrap(key == "sqnr")  # one entry per model output
            if key == "sqnr":
                # Room for three lines from the start: a result that arrives later must not grow
                # the dock (that re-lays out the window and repaints the canvas).
                lab.setMinimumHeight(3 * lab.fontMetrics().lineSpacing())
                lab.setAlignment(Qt.AlignLeft | Qt.AlignTop)
            form.addRow(label, lab)
            self.values[key] = lab
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #777")
        form.addRow(self.note)
        left.setMinimumWidth(260)
        left.setMaximumWidth(340)
        self.chart = BarChart()
        self.chart.barClicked.connect(self._bar)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(left)
        lay.addWidget(self.chart, 1)
        relay.on_state_change(self.refresh)
        relay.perfChanged.connect(self.show_perf)
        relay.fidelityChanged.connect(self.show_fidelity)

    def _bar(self, name: str) -> None:
        base = name.split("_rescale_")[0]
        self.nodeActivated.emit(base)

    def set_march(self, march: str) -> None:
        self.march.blockSignals(True)
        if self.march.findText(march) < 0:
            self.march.addItem(march)
        self.march.setCurrentText(march)
        self.march.blockSignals(False)

    def refresh(self) -> None:
        """Totals for the current revision, each with its change against the unedited model."""
        v = self.values
        cs, bcs = self.relay.concats(), self.relay.concats(baseline=True)
        if cs is not None:
            n, m = sum(c.rescales for c in cs), sum(1 for c in cs if c.rescales)
            text = f"{n} in {m} Concats"
            if bcs is not None:
                was, was_m = sum(c.rescales for c in bcs), sum(1 for c in bcs if c.rescales)
                if (was, was_m) != (n, m):  # a share can move a rescale to another Concat
                    text += _delta(f"was {was} in {was_m}", (n - was) or (m - was_m), lower_better=True)
            v["rescales"].setText(text)
        else:
            v["rescales"].setText("—")
        self._show_totals()
        self._show_sqnr()

    def show_perf(self) -> None:
        """A new simulation: only its totals and chart change."""
        self._show_totals()

    def show_fidelity(self) -> None:
        """A new fidelity check: only the SQNR line changes."""
        self._show_sqnr()

    def _show_totals(self) -> None:
        """The simulation's totals and chart ("updating…" while an edit's result is on its way)."""
        from ..app.views.perfdata import simulator

        s, v = self.relay.session, self.values
        perf, base = self.relay.perf(), self.relay.perf(baseline=True)
        stale = s is not None and s.is_stale(s.perf)
        if perf is None:
            for k in ("latency", "fps", "ddr", "rescale_us"):
                v[k].setText("—")
            self.chart.set_rows([])
            self.note.setText("" if simulator() is not None else "The perf simulator is not installed.")
        else:
            def metric(key, attr, fmt, lower_better, dfmt):
                now = num(getattr(perf, attr, None))
                was = num(getattr(base, attr, None)) if base is not None else None
                text = fmt(now) if now is not None else "—"
                if now is not None and was is not None and abs(now - was) > 1e-9 * max(1.0, abs(was)):
                    text += _delta(dfmt(now - was), now - was, lower_better)
                v[key].setText(text)

            metric("latency", "total_ms", lambda x: f"{x:.3f} ms", True, lambda d: f"{d:+.3f} ms")
            metric("fps", "fps", lambda x: f"{x:.1f}", False, lambda d: f"{d:+.1f}")
            metric("ddr", "ddr_bytes", fmt_bytes, True, lambda d: ("+" if d > 0 else "−") + fmt_bytes(abs(d)))
            metric("rescale_us", "rescale_us", fmt_us, True, lambda d: ("+" if d > 0 else "−") + fmt_us(abs(d)))
            self.chart.set_rows(top_layers(perf))
            grouped = s is not None and len(s.groups) > 0
            self.note.setText("updating…" if stale else "(…): change against the unedited model" if grouped else "")

    def _show_sqnr(self) -> None:
        s, v = self.relay.session, self.values
        fid = s.fidelity.value if s is not None and s.fidelity is not None else None
        if fid is not None and getattr(fid, "after", None):
            v["sqnr"].setText(_fidelity_html(fid))
            v["sqnr"].setToolTip(fid.text().replace("&", "&amp;").replace("<", "&lt;").replace("\n", "<br>"))
        else:
            v["sqnr"].setText("—")
            v["sqnr"].setToolTip("")


def _fidelity_html(fid) -> str:
    """Each output's headline (its worst slice, named), the change, and the sample count."""
    parts = []
    for o in fid.outputs:
        a, w = fid.after[o].headline, fid.before[o].headline
        name = _esc(a.label)
        if a.no_signal:
            parts.append(f"{name}: <i>no signal</i>")
            continue
        t = f"{name}: {a.sqnr_db:.1f} dB" if math.isfinite(a.sqnr_db) else f"{name}: {a.sqnr_db}"
        if not w.no_signal and math.isfinite(a.sqnr_db) and math.isfinite(w.sqnr_db) \
                and abs(a.sqnr_db - w.sqnr_db) >= 0.005:
            t += _delta(f"{a.sqnr_db - w.sqnr_db:+.2f} dB", a.sqnr_db - w.sqnr_db, lower_better=False)
        parts.append(t)
    text = "; ".join(parts)
    kind = "in-sample" if fid.in_sample else "held-out"
    text += f' <span style="color:#777">({fid.samples} {kind} sample{"s" if fid.samples != 1 else ""}'
    if any(fid.after[o].slices for o in fid.outputs):
        text += ", worst slice"
    text += ")</span>"
    if any(fid.after[o].headline.no_signal for o in fid.outputs):
        text += ' <span style="color:#b26a00">no signal on these samples: use representative data</span>'
    if fid.findings:
        text += f' <span style="color:#c62828">{len(fid.findings)} finding(s), see tooltip</span>'
    return text


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _delta(text: str, d: float, lower_better: bool) -> str:
    """A coloured bracketed change: green when it is an improvement, red otherwise."""
    good = (d < 0) == lower_better
    col = "#2e7d32" if good else "#c62828"
    return f' <span style="color:{col}">({text.replace("-", "−")})</span>'


class JobLog(QPlainTextEdit):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setMaximumBlockCount(2000)
        self.entries: list[str] = []

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')}  {text}"
        self.entries.append(line)
        self.appendPlainText(line)
