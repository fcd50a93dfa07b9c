"""Dock contents: model info, the Concat list, groups, the perf summary and the job log.

What each dock says comes from a view-model of :mod:`qtquant.app.views` (frozen, Qt-free);
the widgets copy it into Qt.  A dock refreshes once per change of what it derives from the
session (``relay.on_state_change``); a result arriving later (a simulation, a fidelity
check) updates only the part that shows it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSignalBlocker, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QTextDocument
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFormLayout, QHBoxLayout, QHeaderView,
                               QLabel, QPlainTextEdit, QSizePolicy, QTableView, QVBoxLayout, QWidget)

from ...app.views.concats import CONCAT_HEADERS, CONCAT_TIPS, concat_rows, concat_status, model_info
from ...app.views.perf import perf_summary
from ...app.views.perfdata import CHART_ROWS, rescale_us_by_concat
from ...perf import MARCHES
from ..widgets import OptionSpinBox, bits_box
from .groups import GroupsPanel
from ..style import fmt_us, paint_ended, qcolor

__all__ = ["ElidedLabel", "ModelInfo", "ConcatTableModel", "ConcatList", "GroupsPanel", "PerfSummary", "BarChart",
           "JobLog"]

SORT_ROLE = Qt.UserRole + 1
_RIGHT = int(Qt.AlignRight | Qt.AlignVCenter)
# Qt asks data() for a dozen roles per cell on every paint and column resize, each call a wait
# for the GIL while a job runs: a role is one dict lookup of plain ints, not a chain of enum
# comparisons (that doubled the cost of a table repaint).
_DISPLAY, _SORT, _DECORATION, _ALIGN, _TIP = (int(r) for r in (Qt.DisplayRole, SORT_ROLE, Qt.DecorationRole,
                                                              Qt.TextAlignmentRole, Qt.ToolTipRole))

_RESCALES = CONCAT_HEADERS.index("Resc.")  # the column that shows both sides in a comparison

def fixed_width(label: QLabel) -> None:
    """A wrapped label whose text never widens its dock: a dock that grows when a result
    arrives re-lays out the window and repaints the canvas (0.2 s on a 20,000-node graph)."""
    label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)


class ElidedLabel(QLabel):
    """One line that never widens its dock: a text too long for the width ends in "…" and the
    whole text goes in the tooltip.  Wrapping instead clipped it (the dock does not grow: see
    :func:`fixed_width`).  Rich text shows as is when it fits, as elided plain text otherwise."""

    def __init__(self, text: str = "—", parent=None):
        super().__init__(parent)
        self._full, self._tip = text, ""
        self.setWordWrap(False)
        self.setTextInteractionFlags(Qt.TextSelectableByMouse)
        fixed_width(self)
        self._fit()

    def set_full_text(self, text: str, tip: str = "") -> None:
        """Show *text* (elided to the width); *tip* is the tooltip, with *text* above it when elided."""
        self._full, self._tip = text, tip
        self._fit()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        rich = "<" in self._full
        if rich:
            doc = QTextDocument()
            doc.setHtml(self._full)
            plain = doc.toPlainText()
        else:
            plain = self._full
        fm = self.fontMetrics()
        avail = self.contentsRect().width() - 2 * self.margin() - 4  # italics/bold spans run a bit wider
        if avail <= 0 or fm.horizontalAdvance(plain) <= avail:
            self.setTextFormat(Qt.RichText if rich else Qt.PlainText)
            super().setText(self._full)
            self.setToolTip(self._tip)
            return
        self.setTextFormat(Qt.PlainText)
        super().setText(fm.elidedText(plain, Qt.ElideRight, avail))
        full = self._full if rich else self._full.replace("&", "&amp;").replace("<", "&lt;")
        self.setToolTip(full + ("<hr>" + self._tip if self._tip else ""))


class ModelInfo(QWidget):
    FIELDS = ("model", "nodes", "inputs", "quantization", "calibration", "concats")
    ONE_LINE = ("quantization",)  # elided on one line: wrapped, the row height would clip its last words

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.form = QFormLayout(self)
        self.form.setContentsMargins(8, 6, 8, 6)
        self.fields = {}
        for key in self.FIELDS:
            if key in self.ONE_LINE:
                lab = ElidedLabel()
            else:
                lab = QLabel("—")
                lab.setTextInteractionFlags(Qt.TextSelectableByMouse)
                lab.setWordWrap(True)
                fixed_width(lab)
            self.form.addRow(key.capitalize() + ":", lab)
            self.fields[key] = lab
        relay.on_state_change(self.refresh)

    def refresh(self) -> None:
        view = model_info(self.relay.session)
        for key in self.FIELDS:
            if key in self.ONE_LINE:
                self.fields[key].set_full_text(getattr(view, key), getattr(view, f"{key}_tip", ""))
            else:
                self.fields[key].setText(getattr(view, key))
        self.fields["model"].setToolTip(view.model_tip)
        self.fields["calibration"].setToolTip(view.calibration_tip)


class ConcatTableModel(QAbstractTableModel):
    """The Concat rows (:class:`~qtquant.app.views.concats.ConcatRow`), sorted here (not by a
    proxy: a proxy asks Python for every row's sort key on each reset and comparison, seconds
    on a 2,000-Concat graph).  A row formats its cells on first request."""

    HEADERS = list(CONCAT_HEADERS)
    TIPS = list(CONCAT_TIPS)

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.rows: list = []
        self._cells: dict[str, dict] = {}  # row name -> role -> one value per column, made on first ask
        self._sort = (2, Qt.DescendingOrder)
        self.comparison: dict[str, tuple[int, int]] = {}  # Concat -> rescales (A, B), File › Compare With…

    def _sorted(self, rows):
        col, order = self._sort
        return sorted(rows, key=lambda r: r.sort_key(col), reverse=order == Qt.DescendingOrder)

    def refresh(self) -> None:
        """Rows for the current analysis, gains from the latest simulation."""
        self._install(concat_rows(self.relay.session))

    def show_perf(self) -> None:
        """A new simulation: only the Gain column changes (and the order, when sorted by it)."""
        gains = rescale_us_by_concat(self.relay.perf())
        self._install([replace(r, gain_us=gains.get(r.name)) for r in self.rows])

    def _install(self, rows) -> None:
        """Same Concats as before (an edit, a new perf result): dataChanged, which keeps the
        view's sort and selection; other Concats: a reset."""
        rows = self._sorted(rows)
        same = len(rows) == len(self.rows) and {r.name for r in rows} == {r.name for r in self.rows}
        self._cells = {}
        if not same:
            self.beginResetModel()
            self.rows = rows
            self.endResetModel()
            return
        if [r.name for r in rows] != [r.name for r in self.rows]:  # new values re-sort the rows
            self.layoutAboutToBeChanged.emit()
            self._move(rows)
            self.layoutChanged.emit()
        else:
            self.rows = rows
        if rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(self.HEADERS) - 1))

    def _move(self, rows) -> None:
        """Install ``rows`` (a permutation of the current ones) and carry persistent indexes
        (the selection) along."""
        new_at = {r.name: i for i, r in enumerate(rows)}
        old = self.persistentIndexList()
        names = [self.rows[i.row()].name for i in old]
        self.rows = rows
        self.changePersistentIndexList(old, [self.index(new_at[n], i.column()) for n, i in zip(names, old)])

    def sort(self, column, order=Qt.AscendingOrder):
        self._sort = (column, order)
        rows = self._sorted(self.rows)
        if [r.name for r in rows] == [r.name for r in self.rows]:
            return
        self.layoutAboutToBeChanged.emit()
        self._move(rows)
        self.layoutChanged.emit()

    def set_comparison(self, diff) -> None:
        """Show each Concat's rescales on both sides ("A→B" in the rescales column); None: A's alone."""
        self.comparison = {c.a.node: (c.a.rescales, c.b.rescales) for c in diff.concats} if diff is not None else {}
        self._cells = {}
        self.headerDataChanged.emit(Qt.Horizontal, _RESCALES, _RESCALES)
        if self.rows:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self.rows) - 1, len(self.HEADERS) - 1))

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()):
        return len(self.HEADERS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return "Resc. A→B" if section == _RESCALES and self.comparison else self.HEADERS[section]
        if orientation == Qt.Horizontal and role == Qt.ToolTipRole:
            return self.TIPS[section]
        return None

    def _roles(self, row) -> dict:
        cell = self._cells.get(row.name)
        if cell is None:
            n = len(self.HEADERS)
            cell = self._cells[row.name] = {
                _DISPLAY: row.cells, _SORT: [row.sort_key(i) for i in range(n)],
                _DECORATION: [qcolor(row.color)] + [None] * (n - 1), _ALIGN: [None] + [_RIGHT] * (n - 1),
                _TIP: [row.tooltip] * n}
            both = self.comparison.get(row.name)
            if both is not None:
                cell[_DISPLAY] = list(cell[_DISPLAY])
                cell[_DISPLAY][_RESCALES] = f"{both[0]}→{both[1]}" if both[0] != both[1] else str(both[0])
        return cell

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        by_role = self._roles(self.rows[index.row()]).get(int(role))
        return by_role[index.column()] if by_role is not None else None


class ConcatList(QWidget):
    """Sortable table of Concats; clicking a row emits ``nodeActivated`` (select + centre).  Above
    it, the float-output threshold (the rule that decides which model-output Concats the table,
    the latency and the export leave in float): choosing one emits ``floatOutputThresholdChosen``
    (the window turns it into a command); :meth:`show_options` mirrors the session without emitting."""

    nodeActivated = Signal(str)
    floatOutputThresholdChosen = Signal(float)

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
        self.float_output = bits_box()
        tip = ("Float-output threshold: a Concat whose output is a model output stays float (its inputs keep "
               "their own scales) when one int8 scale would cost a member more than this many bits. The table, "
               "the latency, the fidelity check and the export follow it; the export dialog can instead put "
               "every model output in float or in int8.")
        self.float_output.setToolTip(tip)
        self.float_output.valueChanged.connect(self.floatOutputThresholdChosen)
        label = QLabel("Output Concat stays float above")
        label.setToolTip(tip)
        label.setBuddy(self.float_output)
        rule = QHBoxLayout()
        rule.setContentsMargins(4, 2, 4, 2)
        rule.addWidget(label)
        rule.addWidget(self.float_output)
        rule.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(rule)
        lay.addWidget(self.table)
        lay.addWidget(self.status)
        relay.on_state_change(self.refresh)
        relay.perfChanged.connect(self.model.show_perf)

    def refresh(self) -> None:
        self.model.refresh()
        self.status.setText(concat_status(self.relay.session))
        # The Log column only with a compile log beside the model: the list keeps its width otherwise.
        s = self.relay.session
        self.table.setColumnHidden(ConcatTableModel.HEADERS.index("Log"), s is None or s.compiler_log is None)

    def show_options(self, options) -> None:
        with QSignalBlocker(self.float_output):
            self.float_output.setValue(options.float_output_max_bits_lost)

    def row_of(self, name: str) -> int:
        return next((r for r, row in enumerate(self.model.rows) if row.name == name), -1)

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
        # Text gets the font's whole height, centred on the bar: a box as tall as the bar clipped
        # the underscores of every other row ("attn/k proj" for attn/k_proj).
        text_h = max(bar_h, fm.height() + 1)
        for i, (name, op, us, on_cpu) in enumerate(self.rows):
            y = 20 + i * pitch
            ty = y + (bar_h - text_h) / 2
            label = fm.elidedText(name, Qt.ElideMiddle, int(lw - 10))
            p.setPen(QColor("#333"))
            p.drawText(QRectF(4, ty, lw - 8, text_h), Qt.AlignRight | Qt.AlignVCenter, label)
            bw = (self.width() - lw - 104) * us / vmax
            col = QColor("#e53935") if "rescale" in name.lower() else QColor("#8d6e63") if on_cpu else QColor("#5b8cc0")
            p.setPen(Qt.NoPen)
            p.setBrush(col)
            p.drawRoundedRect(QRectF(lw, y + 2, max(bw, 1.0), bar_h - 4), 3, 3)
            p.setPen(QColor("#333"))
            p.drawText(QRectF(lw + bw + 4, ty, 100, text_h), Qt.AlignLeft | Qt.AlignVCenter,
                       fmt_us(us) + (" CPU" if on_cpu else ""))

    def mousePressEvent(self, ev):
        i = int((ev.position().y() - 20) // self._pitch)
        if 0 <= i < len(self.rows):
            self.barClicked.emit(self.rows[i][0])


class PerfSummary(QWidget):
    """Totals, a march selector and the top-N layer chart (a
    :class:`~qtquant.app.views.perf.PerfSummaryView`)."""

    marchChanged = Signal(str)
    boardClockChanged = Signal(float)  # GHz; 0: the march's own
    nodeActivated = Signal(str)
    PERF_FIELDS = ("latency", "board", "fps", "ddr", "rescale_us")
    PRICE_TIP = ("The board latency (1 thread) each kind of edit adds (red) or saves (green) against the model "
                 "as opened: "
                 "sharing (groups) at int8, then precision (int16 on the BPU, float on the CPU) on top")

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        left = QWidget()
        form = QFormLayout(left)
        form.setContentsMargins(8, 4, 8, 4)
        form.setVerticalSpacing(2)  # the totals, the note and both choices fit the dock's default height
        self.march = QComboBox()
        self.march.addItems(MARCHES)
        self.march.currentTextChanged.connect(self.marchChanged)
        form.addRow("March:", self.march)
        # The board's BPU clock, when it differs from the march's (the zoo overclocks the X5's BPU to 1.2 GHz
        # for some tables): it prices the board estimate's BPU part; 0 reads as the march's own.
        self.board_clock = OptionSpinBox()
        self.board_clock.setRange(0.0, 5.0)
        self.board_clock.setDecimals(2)
        self.board_clock.setSingleStep(0.1)
        self.board_clock.setSuffix(" GHz")
        self.board_clock.setToolTip("The BPU clock of your board, when it runs the BPU faster or slower than the "
                                    "march (the model zoo overclocks the X5's to 1.2 GHz for some tables): the "
                                    "board estimate's compute, vector, on-chip and per-op time scale with it, its "
                                    "DDR time does not; the static estimate keeps the march's clock. Undoable; "
                                    "saved in the project.")
        self.board_clock.valueChanged.connect(self._board_clock_edited)
        form.addRow("Board BPU clock:", self.board_clock)
        self.values = {}
        for key, label in (("latency", "Static (BPU):"), ("board", "Board, 1 thread:"), ("fps", "FPS (static):"),
                           ("ddr", "DDR / frame:"), ("rescales", "Rescales:"), ("rescale_us", "Rescale cost:"),
                           ("price", "Edits cost:"), ("sqnr", "Output SQNR:"), ("sqnr_basis", "Measured on:")):
            # SQNR (one entry per model output) is one elided line with the whole report in its tooltip:
            # wrapped, its third line would be clipped; and a later result cannot grow the dock.
            lab = ElidedLabel() if key == "sqnr" else QLabel("—")
            lab.setTextInteractionFlags(Qt.TextSelectableByMouse)
            f = lab.font()
            f.setBold(key in ("latency", "board"))
            lab.setFont(f)
            form.addRow(label, lab)
            self.values[key] = lab
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #777")
        form.addRow(self.note)
        # One width: between 260 and 340 it grew when the "(−0.003 ms)" deltas appeared and the
        # chart beside it jumped.
        left.setFixedWidth(340)
        self.left = left
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

    def _board_clock_edited(self, ghz: float) -> None:
        self.boardClockChanged.emit(0.0 if ghz <= 0 else float(ghz))

    def set_board_clock(self, ghz: float, march_ghz: float) -> None:
        """Show the options' board clock (0: the march's, ``march_ghz``) without emitting an edit."""
        with QSignalBlocker(self.board_clock):
            self.board_clock.setSpecialValueText(f"march's ({march_ghz:g} GHz)" if march_ghz else "march's")
            self.board_clock.setValue(ghz)

    def set_march(self, march: str) -> None:
        self.march.blockSignals(True)
        if self.march.findText(march) < 0:
            self.march.addItem(march)
        self.march.setCurrentText(march)
        self.march.blockSignals(False)

    def refresh(self) -> None:
        """Totals for the current revision, each with its change against the model as opened."""
        view = perf_summary(self.relay.session)
        self.values["rescales"].setText(view.rescales.html())
        self._show_totals(view)
        self._show_sqnr(view)

    def show_perf(self) -> None:
        """A new simulation: only its totals, note and chart change."""
        self._show_totals(perf_summary(self.relay.session))

    def show_fidelity(self) -> None:
        """A new fidelity check: only the SQNR line changes."""
        self._show_sqnr(perf_summary(self.relay.session))

    def _show_totals(self, view) -> None:
        for key in self.PERF_FIELDS:
            self.values[key].setText(getattr(view, key).html())
        self.values["price"].setText(view.price)
        self.values["price"].setToolTip(self.PRICE_TIP)
        # What each latency is, and how sure (the fit's leave-one-out error on the nearest figures).
        self.values["latency"].setToolTip("The BPU static estimate: what the compiler prints (latency = … us). "
                                          + view.latency_tip)
        self.values["board"].setToolTip("The board estimate for one thread: the static estimate plus the "
                                        "runtime's CPU work on the inputs and outputs. " + view.board_tip)
        self.chart.set_rows(view.chart)
        self.note.setText(view.note)

    def _show_sqnr(self, view) -> None:
        self.values["sqnr"].set_full_text(view.sqnr_html, view.sqnr_tip)
        self.values["sqnr_basis"].setText(view.sqnr_basis)


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
