"""The Sensitivity dock: the accuracy check (per-tensor error, the ranking), the Error overlay's
local/cumulative toggle, and auto-share by measured accuracy with its trade-off plot.

The check and the measured auto-share run onnxruntime for tens of seconds: both are background
jobs (:class:`AccuracyJobs`); the table, the overlay and the inspector fill when the report comes
back.  A measured auto-share is installed as one undoable command, and so are a ranked candidate
applied from its row (Enter, the Apply button, the context menu) and "reach X dB for the least
latency" (:mod:`qtquant.fidelity.accuracy.reach`).
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QDoubleSpinBox, QHBoxLayout, QHeaderView, QLabel,
                               QMenu, QPushButton, QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from ...fidelity.accuracy.sensitivity import DEFAULT_TOP
from ...app.views.accuracy import (PER_US_COLUMN, SENSITIVITY_HEADERS, sensitivity_headers, sensitivity_rows,
                                   status_text, tradeoff_points)
from ...base.tables import fmt_num

__all__ = ["SensitivityDock", "TradeoffPlot", "AccuracyJobs"]


class _Item(QTableWidgetItem):
    """A cell that sorts by its key (numbers as numbers), not by its text."""

    def __init__(self, text: str, key):
        super().__init__(text)
        self.key = key
        self.setFlags(Qt.ItemIsSelectable | Qt.ItemIsEnabled)

    def __lt__(self, other):
        k = getattr(other, "key", None)
        try:
            return self.key < k
        except TypeError:
            return str(self.key) < str(k)


class TradeoffPlot(QWidget):
    """Rescales removed (x) against worst-slice SQNR (y), one point per step of the measured
    auto-share; the refused step is drawn hollow and red, the budget as a dashed line."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.points = []
        self.budget: float | None = None
        self.setMinimumSize(260, 120)

    def set_report(self, rep) -> None:
        self.points = tradeoff_points(rep) if rep is not None else []
        self.budget = (rep.start.worst_db - rep.max_sqnr_drop) if rep is not None and rep.steps else None
        self.update()

    def paintEvent(self, ev):
        p = QPainter(self)
        try:
            self._paint(p)
        finally:
            p.end()

    def _paint(self, p) -> None:
        p.setRenderHint(QPainter.Antialiasing)
        r = QRectF(self.rect()).adjusted(46, 10, -12, -34)
        p.fillRect(self.rect(), QColor("#ffffff"))
        p.setPen(QPen(QColor("#999"), 1))
        p.drawRect(r)
        pts = [q for q in self.points if math.isfinite(q.worst_db)]
        if not pts:
            p.setPen(QColor("#666"))
            p.drawText(r, Qt.AlignCenter, "Auto-share by accuracy draws its trade-off curve here")
            return
        # The y range spans the accepted steps and the budget: a refused share can fall far below
        # (the head Concat: 0 dB) and would flatten the curve; it is drawn on the bottom edge.
        ys = [q.worst_db for q in pts if q.accepted] + ([self.budget] if self.budget is not None else [])
        lo, hi = min(ys), max(ys)
        if hi - lo < 0.5:
            lo, hi = lo - 0.25, hi + 0.25
        xmax = max(1, max(q.removed for q in pts))

        def at(x, y):
            return QPointF(r.left() + r.width() * x / xmax, r.bottom() - r.height() * (y - lo) / (hi - lo))

        p.setPen(QColor("#333"))
        for y in (lo, hi):
            p.drawText(QRectF(0, at(0, y).y() - 8, 42, 16), Qt.AlignRight | Qt.AlignVCenter, f"{y:.1f}")
        p.drawText(QRectF(r.left(), r.bottom() + 2, r.width(), 14), Qt.AlignLeft, "0")
        p.drawText(QRectF(r.left(), r.bottom() + 2, r.width(), 14), Qt.AlignRight, str(xmax))
        p.drawText(QRectF(r.left(), r.bottom() + 16, r.width(), 16), Qt.AlignCenter,
                   "x: rescales removed · y: worst-slice SQNR dB · dashed: budget")
        if self.budget is not None:
            p.setPen(QPen(QColor("#c62828"), 1, Qt.DashLine))
            p.drawLine(at(0, self.budget), at(xmax, self.budget))
        ok = [q for q in pts if q.accepted]
        p.setPen(QPen(QColor("#0570b0"), 2))
        for a, b in zip(ok, ok[1:]):
            p.drawLine(at(a.removed, a.worst_db), at(b.removed, b.worst_db))
        for q in pts:
            c = at(q.removed, max(q.worst_db, lo))
            if not q.accepted:
                p.setPen(QColor("#c62828"))
                p.drawText(QRectF(c.x() - 80, c.y() - 18, 76, 14), Qt.AlignRight, f"{fmt_num(q.worst_db, 1)} dB")
            if q.accepted:
                p.setPen(QPen(QColor("#0570b0"), 1))
                p.setBrush(QColor("#0570b0"))
            else:
                p.setPen(QPen(QColor("#c62828"), 2))
                p.setBrush(Qt.NoBrush)
            p.drawEllipse(c, 3.5, 3.5)


class SensitivityDock(QWidget):
    nodeActivated = Signal(str)
    measureWanted = Signal(int)  # --top N
    localToggled = Signal(bool)
    shareWanted = Signal(float)  # the dB budget
    applyWanted = Signal(object)  # a SensitivityRow: set its node to its precision
    reachWanted = Signal(float)  # the worst slice's target

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        top = QHBoxLayout()
        self.measure = QPushButton("Measure")
        self.measure.setToolTip("Per-tensor SQNR and the sensitivity ranking on the check samples "
                                "(qtquant accuracy)")
        self.top_n = QSpinBox()
        self.top_n.setRange(0, 200)
        self.top_n.setValue(DEFAULT_TOP)  # units, each measured as int16 and as float
        self.top_n.setPrefix("measure top ")
        self.top_n.setToolTip("How many of the best first-pass estimates are measured by real exports (each node "
                              "twice: in int16 and in float)")
        self.local = QCheckBox("Local SQNR on the Error overlay")
        self.local.setToolTip("Colour by each tensor's own rounding (local) instead of the error reaching it "
                              "(cumulative)")
        top.addWidget(self.measure)
        top.addWidget(self.top_n)
        top.addWidget(self.local)
        top.addStretch(1)
        lay.addLayout(top)
        self.status = QLabel(status_text(None))
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.table = QTableWidget(0, len(SENSITIVITY_HEADERS))
        self.table.setHorizontalHeaderLabels(list(SENSITIVITY_HEADERS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.setSortingEnabled(True)
        self.table.setWordWrap(False)
        self.table.setMinimumHeight(150)  # a handful of rows even when the bottom area is shared
        self.table.cellClicked.connect(self._clicked)
        self.table.setContextMenuPolicy(Qt.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.installEventFilter(self)  # Enter applies the selected row
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.menu = QMenu(self)
        self._rows: dict[tuple[str, str], object] = {}  # (node, precision) -> SensitivityRow
        self._report = None
        self.apply = QPushButton("Apply")
        self.apply.setToolTip("Set the selected row's node to its precision (one undoable edit; also Enter, "
                              "or the row's context menu)")
        self.apply.setEnabled(False)
        self.apply.clicked.connect(self.apply_selected)
        self.target = QDoubleSpinBox()
        self.target.setRange(-100.0, 200.0)
        self.target.setDecimals(1)
        self.target.setSingleStep(1.0)
        self.target.setValue(20.0)
        self.target.setPrefix("reach ")
        self.target.setSuffix(" dB")
        self.reach = QPushButton("Reach for least latency")
        self.reach.setToolTip("Take the ranking's candidates in order of gain per µs, each measured by a real "
                              "export on top of the ones kept, until the worst slice reaches the target; "
                              "installed as one undoable edit")
        self.reach.setEnabled(False)
        self.reach.clicked.connect(lambda: self.reachWanted.emit(self.target.value()))
        left = QVBoxLayout()
        left.addWidget(self.table, 1)
        acts = QHBoxLayout()
        acts.addWidget(self.apply)
        acts.addStretch(1)
        acts.addWidget(self.target)
        acts.addWidget(self.reach)
        left.addLayout(acts)
        body = QHBoxLayout()
        body.addLayout(left, 3)
        right = QVBoxLayout()
        body.addLayout(right, 2)
        lay.addLayout(body, 1)
        share = QHBoxLayout()
        self.budget = QDoubleSpinBox()
        self.budget.setRange(0.0, 60.0)
        self.budget.setDecimals(2)
        self.budget.setSingleStep(0.1)
        self.budget.setValue(0.2)
        self.budget.setSuffix(" dB")
        self.budget.setPrefix("max drop ")
        self.share = QPushButton("Auto-share by accuracy")
        self.share.setToolTip("Share Concats in order of latency gained per dB lost on the worst output slice, "
                              "until the worst slice has dropped by the budget (qtquant fix --max-sqnr-drop)")
        share.addWidget(self.share)
        share.addWidget(self.budget)
        share.addStretch(1)
        right.addLayout(share)
        self.plot = TradeoffPlot()
        right.addWidget(self.plot, 1)
        self.measure.clicked.connect(lambda: self.measureWanted.emit(self.top_n.value()))
        self.local.toggled.connect(self.localToggled.emit)
        self.share.clicked.connect(lambda: self.shareWanted.emit(self.budget.value()))
        relay.accuracyChanged.connect(lambda *_: self.refresh())
        relay.sessionReplaced.connect(lambda *_: (self.refresh(), self.plot.set_report(None)))
        relay.on_state_change(self._maybe_stale)

    def set_busy(self, what: str) -> None:
        self.status.setText(what)

    def _maybe_stale(self, *_) -> None:
        s = self.relay.session
        if s is not None and s.accuracy is not None:
            self.status.setText(status_text(s.accuracy.value, s.is_stale(s.accuracy)))

    def refresh(self) -> None:
        s = self.relay.session
        res = s.accuracy if s is not None else None
        rep = res.value if res is not None else None
        self.status.setText(status_text(rep, s.is_stale(res) if s is not None else False))
        rows = sensitivity_rows(rep)
        self._rows = {(r.node, r.precision.value): r for r in rows}
        headers = sensitivity_headers(rep)
        self.table.setHorizontalHeaderLabels(list(headers))
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            for j, (text, key) in enumerate(zip(row.cells, row.keys)):
                it = _Item(text, key)
                if j == 0:
                    it.setData(Qt.UserRole, row.node)
                    it.setToolTip(row.node)
                if j == 3 and row.measured:
                    it.setForeground(QColor("#0570b0"))
                self.table.setItem(i, j, it)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(PER_US_COLUMN, Qt.DescendingOrder)  # the ranking's order: gain per µs
        for j in range(1, len(SENSITIVITY_HEADERS)):
            self.table.resizeColumnToContents(j)
        self.reach.setEnabled(rep is not None)
        if rep is not None and rep is not self._report:
            # A target a few dB above the worst slice now, in the ranking's unit
            unit = " dB" if headers[2] == "Gain dB" else " % equal"
            self.target.setSuffix(unit)
            worst = rep.base.worst_db if unit == " dB" else (rep.base.worst_agreement or ("", 0.0))[1]
            if math.isfinite(worst):
                self.target.setValue(round(worst + (3.0 if unit == " dB" else 1.0), 1))
        self._report = rep
        self._selection_changed()

    def node_at(self, row: int) -> str | None:
        it = self.table.item(row, 0)
        return it.data(Qt.UserRole) if it is not None else None

    def row_at(self, row: int):
        """The :class:`~qtquant.app.views.accuracy.SensitivityRow` shown at table row ``row`` (or None)."""
        prec = self.table.item(row, 1)
        node = self.node_at(row)
        return self._rows.get((node, prec.text())) if node and prec is not None else None

    def selected_row(self):
        sel = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.row_at(sel[0].row()) if sel else None

    def apply_selected(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.applyWanted.emit(row)

    def _selection_changed(self) -> None:
        row = self.selected_row()
        self.apply.setEnabled(row is not None)
        self.apply.setText(f"Apply: {row.apply_text}" if row is not None else "Apply")

    def context_actions(self, row: int) -> list:
        """The context menu's entries for table row ``row``: apply it, show its node."""
        self.menu.clear()
        r = self.row_at(row)
        if r is None:
            return []
        self.menu.addAction(f"Apply: {r.apply_text}", lambda: self.applyWanted.emit(r))
        self.menu.addAction("Show on the canvas", lambda: self.nodeActivated.emit(r.node))
        return self.menu.actions()

    def _context_menu(self, pos) -> None:
        row = self.table.rowAt(pos.y())
        if row < 0:
            return
        self.table.selectRow(row)
        if self.context_actions(row):
            self.menu.popup(self.table.viewport().mapToGlobal(pos))

    def eventFilter(self, obj, ev) -> bool:
        if obj is self.table and ev.type() == QEvent.KeyPress and ev.key() in (Qt.Key_Return, Qt.Key_Enter):
            self.apply_selected()
            return True
        return super().eventFilter(obj, ev)

    def _clicked(self, row: int, col: int) -> None:
        node = self.node_at(row)
        if node:
            self.nodeActivated.emit(node)


class AccuracyJobs(QObject):
    """Runs the accuracy check and the measured auto-share in the background for one window."""

    shared = Signal(object)  # SqnrShareReport, after its groups were installed

    def __init__(self, relay, jobs, messages, dock: SensitivityDock, parent=None):
        super().__init__(parent)
        self.relay, self.jobs, self.messages, self.dock = relay, jobs, messages, dock
        dock.measureWanted.connect(self.measure)
        dock.shareWanted.connect(self.share)
        dock.applyWanted.connect(self.apply)
        dock.reachWanted.connect(self.reach)
        self.last_share = None
        self.last_reach = None

    def apply(self, row) -> bool:
        """Set a ranked candidate's node to its precision: one command on the window's stack."""
        from ...app.commands import SetPrecisionCommand
        from ...base.errors import QtQuantError

        try:
            done = self.relay.stack.push(SetPrecisionCommand(row.tensors, row.precision, label=row.apply_text))
        except QtQuantError as e:
            self.dock.set_busy(f"{row.apply_text} refused: {e}")
            return False
        self.dock.set_busy(f"{row.apply_text}: applied (Ctrl+Z undoes it); Measure again to rank what is left"
                           if done else f"{row.apply_text}: already so")
        return done

    def reach(self, target: float):
        """Plan "reach ``target`` for the least latency" in the background, install it as one command."""
        s, snap = self._snapshot("Reach for least latency")
        if snap is None:
            return None
        rep = s.accuracy.value if s.accuracy is not None else None
        if rep is None:
            self.dock.set_busy("Reach for least latency needs the ranking: press Measure first")
            return None
        from ...fidelity.accuracy.reach import plan_reach
        from ...app.commands import ReachCommand

        self.dock.set_busy(f"Reaching {target:g}: measuring the ranking's candidates in order of gain per µs…")

        def work(progress, cancelled):
            return plan_reach(snap, target, rep, cancel=cancelled, progress=progress)

        def done(plan):
            if s is not self.relay.session or s.revision != snap.revision:
                self.dock.set_busy("The model changed while reaching: nothing was applied")
                return
            from ...base.errors import QtQuantError

            if plan.kept:
                try:
                    self.relay.stack.push(ReachCommand(plan))
                except QtQuantError as e:
                    self.dock.set_busy(f"Reach refused: {e}")
                    return
            self.last_reach = plan
            self.dock.set_busy(plan.text().splitlines()[0])
            self.messages.log(plan.text())

        return self.jobs.submit("reach", "reach for least latency", work, done, stale_key=self._key,
                                on_error=self._failed("Reach for least latency"))

    def _key(self):
        s = self.relay.session
        return id(s), s.revision if s is not None else -1

    def _snapshot(self, what: str):
        s = self.relay.session
        if s is None or s.calibration is None:
            self.messages.status(f"{what} needs a calibrated model", 6000)
            return None, None
        return s, s.snapshot()

    def measure(self, top: int = 8):
        s, snap = self._snapshot("The accuracy check")
        if snap is None:
            return None
        from ...fidelity.accuracy import analyze_accuracy

        self.dock.set_busy(f"Measuring on {snap.calibration.check_description}…")

        def work(progress, cancelled):
            return analyze_accuracy(snap, top=top, cancel=cancelled,
                                    progress=lambda stage, d, n: progress(d, n))

        def done(rep):
            if not s.set_accuracy(rep, snap.revision):
                self.dock.set_busy("The model changed while measuring: press Measure again")

        return self.jobs.submit("accuracy", "accuracy check", work, done, stale_key=self._key,
                                on_error=self._failed("The accuracy check"))

    def share(self, budget: float):
        s, snap = self._snapshot("Auto-share by accuracy")
        if snap is None:
            return None
        from ...app.sharing import install_accuracy_share
        from ...fidelity.accuracy.share import plan_sqnr_share

        self.dock.set_busy(f"Auto-share by accuracy (≤ {budget:g} dB): measuring each candidate Concat…")

        def work(progress, cancelled):
            return plan_sqnr_share(snap, budget, cancel=cancelled, progress=lambda stage, d, n: progress(d, n))

        def done(res):
            rep, groups = res
            if s is not self.relay.session or s.revision != snap.revision:
                self.dock.set_busy("The model changed while auto-share was measuring: nothing was shared")
                return
            from ...base.errors import QtQuantError

            try:
                install_accuracy_share(self.relay.stack, budget, rep, groups)
            except QtQuantError as e:
                self.dock.set_busy(f"Auto-share by accuracy refused: {e}")
                return
            self.last_share = rep
            self.dock.plot.set_report(rep)
            self.dock.set_busy(rep.text().splitlines()[0])
            self.messages.log(rep.text())
            self.messages.report("Auto-share by accuracy", rep.text())
            self.shared.emit(rep)

        return self.jobs.submit("sqnr-share", "auto-share by accuracy", work, done, stale_key=self._key,
                                on_error=self._failed("Auto-share by accuracy"))

    def _failed(self, what: str):
        """The dock's status after a job failed (it said "measuring…" until then; the dialog has the
        whole message)."""
        def say(e) -> None:
            self.dock.set_busy(f"{what} failed: {e}")
        return say
