"""The inspector dock: the selected node's attributes, tensors, histogram and Concat table."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QHeaderView, QLabel, QScrollArea, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from ...quant.concat import rescale_node_names
from ...quant.precision import float_nodes
from ...model.shapes import format_shape
from ...app.commands import SetOptionsCommand
from ...app.histograms import clip_range, export_qparams, stored_histogram
from ...app.views.fmt import distinct_parts, in_scope, scope_of
from ...app.views.perfdata import placed_on_cpu, rescale_us_by_concat, rescale_us_for_input
from ...app.scene import INPUT_PREFIX, OUTPUT_PREFIX, constant_inputs, shape_text
from ..style import fmt_ratio, fmt_scale, fmt_us, mismatch_color
from .histogram import HistogramWidget

__all__ = ["Inspector"]

INT_OUTPUT_TIP = ("The deployed model hands this output over as int32 with its scales (its Dequantize removed from "
                  "the .bin, as with hb_model_modifier -r), and the application dequantises it: the board estimate "
                  "converts nothing on the CPU for it. Undoable; saved in the project.")
FLOAT_OUTPUT_TIP = ("Its node is kept in float: it runs on the CPU and writes this output as float32, so there is "
                    "nothing to dequantise (the board estimate converts nothing for it).")


def _fmt_range(r) -> str:
    if r is None or not all(math.isfinite(v) for v in r):
        return "—"
    return f"[{r[0]:.3g}, {r[1]:.3g}]"


NAME_COLUMNS = ("tensor", "producer")  # shown as the part that tells their rows apart


def _table(headers, stretch: tuple = ()) -> QTableWidget:
    """A compact read-only table; ``stretch`` columns take the width left by the others, long
    text is elided in the middle (full text in the tooltip), and every column can be dragged wider.

    Names differ at both ends (``/model.6/m.1/Add_output_0``): eliding on the left showed
    "…utput_0" for every row.
    """
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().setVisible(False)
    t.verticalHeader().setDefaultSectionSize(21)
    t.setEditTriggers(QAbstractItemView.NoEditTriggers)
    t.setSelectionBehavior(QAbstractItemView.SelectRows)
    t.setSelectionMode(QAbstractItemView.SingleSelection)
    hh = t.horizontalHeader()
    hh.setSectionResizeMode(QHeaderView.Interactive)  # the user can resize any column
    hh.setStretchLastSection(False)
    t.stretch = tuple(stretch)
    t.setTextElideMode(Qt.ElideMiddle)
    t.setWordWrap(False)
    t.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
    # A dock narrower than the columns scrolls them (a clipped last column read "total 4.60"
    # for "total 4.60 µs"); the table's height then makes room for the bar (_fit_height).
    t.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)
    return t


def _fill(t: QTableWidget, rows) -> None:
    """The rows; a name column (a ``stretch`` one) shows the part that tells its rows apart
    (:func:`~qtquant.app.views.fmt.distinct_parts`), the whole name in the tooltip."""
    t.setRowCount(len(rows))
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            it = v if isinstance(v, QTableWidgetItem) else QTableWidgetItem(str(v))
            if not it.toolTip():
                it.setToolTip(it.text())
            t.setItem(i, j, it)
    for j in t.stretch:
        if t.horizontalHeaderItem(j).text() not in NAME_COLUMNS:
            continue
        items = [t.item(i, j) for i in range(t.rowCount())]
        full = [it.toolTip() or it.text() for it in items]  # the whole name is the tooltip
        if len(items) > 1 and not any("\n" in f for f in full):
            for it, short in zip(items, distinct_parts(full)):
                if len(short) < len(it.text()):
                    it.setText(short)
    _fit_columns(t)


def _fit_height(t: QTableWidget) -> None:
    """Every row in view (the inspector scrolls, not its tables), and the horizontal bar's
    height when the columns are wider than the table."""
    head = t.horizontalHeader()
    wide = sum(t.columnWidth(i) for i in range(t.columnCount()) if not t.isColumnHidden(i)) > \
        t.width() - 2 * t.frameWidth()
    bar = t.horizontalScrollBar().sizeHint().height() if wide else 0
    h = head.height() + sum(t.rowHeight(i) for i in range(t.rowCount())) + 4 + bar
    t.setFixedHeight(max(h, head.height() + 6))


def _fit_columns(t: QTableWidget) -> None:
    """Columns to their contents; the ``stretch`` ones share what is left of the width (at least
    80 px each, eliding in the middle below their contents)."""
    t.resizeColumnsToContents()
    if t.stretch:
        avail = t.width() - 2 * t.frameWidth()
        fixed = sum(t.columnWidth(i) for i in range(t.columnCount()) if i not in t.stretch and not t.isColumnHidden(i))
        share = max(80, (avail - fixed) // len(t.stretch))
        for i in t.stretch:
            t.setColumnWidth(i, share)
    _fit_height(t)


class Inspector(QScrollArea):
    """Shows the selected node; asks the controller for a histogram when stats lack one."""

    tensorActivated = Signal(str)
    histogramWanted = Signal(str)  # tensor whose histogram is not in the calibration stats

    def resizeEvent(self, ev):
        super().resizeEvent(ev)
        for t in (self.attrs, self.tensors, self.concat):
            _fit_columns(t)

    def __init__(self, relay, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.node: str | None = None
        self.tensor: str | None = None
        self._others = 0
        # A collapsed block's summary (title, name, text); the window sets it (hierarchy).
        self.describe_block = lambda name: None
        self.setWidgetResizable(True)
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(8, 8, 8, 8)
        self.title = QLabel("Nothing selected")
        tf = QFont(self.title.font())
        tf.setPointSize(tf.pointSize() + 4)
        tf.setBold(True)
        self.title.setFont(tf)
        self.name_label = QLabel("")
        self.name_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.name_label.setWordWrap(True)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        # A model output the deployment hands over as integers (perf/board.py): an option of the session.
        self.int_output = QCheckBox("Dequantised by the application")
        self.int_output.setToolTip(INT_OUTPUT_TIP)
        self.int_output.toggled.connect(self._int_output_toggled)
        self.attrs = _table(["attribute", "value"], stretch=(1,))
        self.tensors = _table(["", "tensor", "shape", "range", "scale", "zp"], stretch=(1,))
        self.tensors.itemSelectionChanged.connect(self._tensor_row_selected)
        self.hist = HistogramWidget()
        # The accuracy check's two figures for the tensor shown (cumulative and local SQNR).
        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setObjectName("tensor_error")
        self.concat_title = QLabel("<b>Concat inputs</b>")
        # Two-line headers: one word wide, where the values are (a wide header squeezed the names)
        self.concat = _table(["#", "producer", "scale", "ratio", "bits if\nshared", "rescale\ncost"], stretch=(1,))
        # What a compile log opened beside the model says of this node (qtquant.horizon).
        self.compiler_label = QLabel("")
        self.compiler_label.setWordWrap(True)
        self.compiler_label.setObjectName("compiler_log")
        self.compiler_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.notes = QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #8a4b00")
        self._sections = {}
        for key, w in (("title", self.title), ("name", self.name_label), ("summary", self.summary),
                       ("int_output", self.int_output),
                       ("attrs_label", QLabel("<b>Attributes</b>")), ("attrs", self.attrs),
                       ("tensors_label", QLabel("<b>Tensors</b>")), ("tensors", self.tensors),
                       ("hist", self.hist), ("error", self.error_label),
                       ("concat_title", self.concat_title), ("concat", self.concat),
                       ("compiler", self.compiler_label), ("notes", self.notes)):
            lay.addWidget(w)
            self._sections[key] = w
        lay.addStretch(1)
        self.setWidget(body)
        self._show_node_sections(False)
        for sig in (relay.calibrated, relay.optionsChanged, relay.groupsChanged, relay.compilerLogChanged):
            sig.connect(self.refresh)
        relay.perfChanged.connect(self.show_perf)
        relay.accuracyChanged.connect(lambda *_: self._show_error(self.tensor))
        relay.sessionReplaced.connect(self._session_replaced)

    def _show_node_sections(self, on: bool, concat: bool = False) -> None:
        self.int_output.setVisible(False)  # a graph output's own (show_node)
        for key in ("attrs_label", "attrs", "tensors_label", "tensors", "hist"):
            self._sections[key].setVisible(on)
        if not on:
            self.error_label.setVisible(False)
            self.compiler_label.setVisible(False)
        self.concat_title.setVisible(on and concat)
        self.concat.setVisible(on and concat)

    def _int_output_toggled(self, on: bool) -> None:
        s = self.relay.session
        name = self.node or ""
        if s is None or not name.startswith(OUTPUT_PREFIX):
            return
        t = name.split(":", 1)[1]
        now = set(s.options.int_outputs)
        if (t in now) != on:
            self.relay.stack.push(SetOptionsCommand(int_outputs=tuple(sorted(now ^ {t}))))

    def _session_replaced(self) -> None:
        self.show_node(None)

    # -- public ---------------------------------------------------------------------------
    comparison = None  # a ModelDiff while the window compares with a second file

    def set_comparison(self, diff) -> None:
        self.comparison = diff
        self.refresh()

    def show_node(self, name: str | None, others: int = 0) -> None:
        """Inspect ``name``; with ``others`` > 0 a multi-selection is summarised instead."""
        self.node = name
        self.tensor = None
        self._others = others
        self.refresh()

    def refresh(self) -> None:
        s = self.relay.session
        name = self.node
        if s is not None and name is None and getattr(self, "_others", 0) > 1:
            self.title.setText(f"{self._others} nodes selected")
            self.name_label.setText("Select a single node to inspect it.")
            self.summary.setText("")
            self.notes.setText("")
            self._show_node_sections(False)
            return
        if s is None or name is None:
            self.title.setText("Nothing selected")
            self.name_label.setText("Click a node on the canvas, or a row in the Concat list.")
            self.summary.setText("")
            self.notes.setText("")
            self._show_node_sections(False)
            return
        g = s.graph
        if name.startswith((INPUT_PREFIX, OUTPUT_PREFIX)):
            t = name.split(":", 1)[1]
            kind = "Graph input" if name.startswith(INPUT_PREFIX) else "Graph output"
            self.title.setText(kind)
            self.name_label.setText(t)
            self.summary.setText(g.describe_tensor(t) if t in g.tensors else "")
            self._show_node_sections(True)
            self._sections["attrs_label"].setVisible(False)
            self.attrs.setVisible(False)
            self._fill_tensors([("in" if kind == "Graph input" else "out", t)])
            self.notes.setText("")
            if kind == "Graph output" and t in g.outputs:
                blocked = self.int_output.blockSignals(True)
                self.int_output.setChecked(t in s.options.int_outputs)
                self.int_output.blockSignals(blocked)
                # An output a node kept in float computes is float32 on the CPU: nothing to dequantise.
                producer = g.producer(t)
                floated = producer is not None and producer.name in float_nodes(g, s.options.precision)
                self.int_output.setEnabled(not floated)
                self.int_output.setToolTip(FLOAT_OUTPUT_TIP if floated else INT_OUTPUT_TIP)
                self.int_output.setVisible(True)
            return
        block = self.describe_block(name) if name not in g.nodes else None
        if block is not None:
            self.title.setText(block[0])
            self.name_label.setText(block[1])
            self.summary.setText(block[2])
            self.notes.setText("")
            self._show_node_sections(False)
            return
        node = g.nodes.get(name)
        if node is None:
            self.show_node(None)
            return
        info = self.relay.concat(name) if node.op_type == "Concat" else None
        self.title.setText(node.op_type)
        self.name_label.setText(node.name)
        h = node.handler
        role = h.role.value + ("" if h.known else ", unknown op")
        bits = [f"category {h.category}", f"role {role}", f"#{node.index} in topological order"]
        if info is not None:
            bits.append(f"mismatch ratio {fmt_ratio(info.ratio)}, {info.rescales} rescale(s)")
        self.summary.setText(" · ".join(bits))
        self._show_node_sections(True, concat=info is not None)
        self._sections["attrs_label"].setVisible(bool(node.attrs))
        self.attrs.setVisible(bool(node.attrs))
        _fill(self.attrs, [(k, self._attr_text(v)) for k, v in node.attrs.items()])
        rows = [("in", t) for t in node.inputs if t] + [("out", t) for t in node.outputs if t]
        self._fill_tensors(rows)
        notes = []
        if info is not None:
            self._fill_concat(info)
            notes += list(info.notes)
            for m in info.inputs:
                if m.other_consumers:
                    notes.append(f"{m.tensor} also feeds {m.other_consumers} other op(s): sharing changes their "
                                 f"input scale too")
            if info.feeds_output:
                notes.append("this Concat feeds a graph output")
        elif node.op_type == "Concat" and not self.relay.ready:
            notes.append("Scales appear when calibration finishes.")
        for t in node.outputs:
            gr = s.groups.group_of(t) if t else None
            if gr is not None:
                sc = s.domains.scale_of(t) if s.ready else None
                notes.append(f"{t} is in group {gr.id} with {len(gr.members) - 1} other tensor(s)"
                             + (f": shared scale {fmt_scale(sc)}" if sc else ""))
        placed = placed_on_cpu(self.relay.perf()).get(name)
        if placed is not None:
            notes.append(f"Runs on the CPU ({fmt_us(placed[1])}): {placed[0]}. The compiler places it there "
                         "whatever its precision, and the latency prices it so.")
        consts = constant_inputs(g, name)  # not drawn on the canvas: listed here
        if consts:
            notes.append("Constant inputs (not drawn): " + ", ".join(f"{t} ({src})" for t, src in consts))
        if self.comparison is not None:  # File › Compare With…: both sides of this node
            from ...compare.live import concat_text, node_text

            notes += [x for x in (concat_text(self.comparison, name) if info is not None else "",
                                  node_text(self.comparison, [t for t in node.outputs if t])) if x]
        self.notes.setText("\n".join(notes))
        self.notes.setVisible(bool(notes))
        self._show_compiler(name, info)

    def _show_compiler(self, name: str, info) -> None:
        """The compile log's row of the node and, for a Concat, both requantize lists."""
        from html import escape

        from ...app.views.compiler import compiler_reconciliation, log_inspector_lines

        s = self.relay.session
        match = s.compiler_log if s is not None else None
        row = match.nodes.get(name) if match is not None else None
        if row is None:
            self.compiler_label.setVisible(False)
            return
        rows = [("Log row", f"{row.op_type} on {row.on}" + (f", cosine {row.cosine:.6f}" if row.cosine is not None
                                                           else "") + (f", input threshold {row.threshold:g}"
                                                                        if row.threshold is not None else ""))]
        if info is not None:
            rec = compiler_reconciliation(s, [info])
            rows += log_inspector_lines(rec.of(name) if rec is not None else None)
        self.compiler_label.setText("<b>Compile log</b><br>" + "<br>".join(
            f"<i>{escape(k)}</i>: {escape(v)}" for k, v in rows))
        self.compiler_label.setVisible(True)

    @staticmethod
    def _attr_text(v) -> str:
        if isinstance(v, np.ndarray):
            return f"tensor {format_shape(v.shape)} {v.dtype}" if v.size > 8 else np.array2string(v.ravel())
        s = str(v)
        return s if len(s) < 80 else s[:77] + "..."

    # -- tensors and histogram ---------------------------------------------------------------
    def _tensor_info(self, t: str):
        s = self.relay.session
        g = s.graph
        tt = g.tensors.get(t)
        shape = shape_text(tt.shape) if tt is not None else "?"
        if tt is not None and tt.kind == "weight":
            return shape, "weight", "per-channel", ""
        if tt is None or not g.is_quantized(t):
            return shape, "—", "not quantized", ""
        if not s.ready:
            return shape, "—", "—", ""
        dm = s.domains
        own = dm.member_range.get(t)
        q = export_qparams(s, t)
        if q is None:  # the export leaves it in float: no scale to show, and none to clip at
            return shape, _fmt_range(own), "float", ""
        # int16 said in three letters: " int16" after a full scale widened the column past the dock
        scale = f"{q.scale:.3g} i16" if q.bits == 16 else fmt_scale(q.scale)
        return shape, _fmt_range(own), scale, str(q.zero_point)

    def _fill_tensors(self, rows) -> None:
        self._tensor_rows = [t for _, t in rows]
        scope = scope_of(self.node or "")  # names read inside the node's module (full in the tooltip)
        out = []
        for d, t in rows:
            shape, rng, scale, zp = self._tensor_info(t)
            name = QTableWidgetItem(in_scope(t, scope))
            name.setToolTip(t)
            out.append((d, name, shape, rng, scale, zp))
        self.tensors.blockSignals(True)
        # The zero point column only where one is not 0 (asymmetric uint8): else a column of zeros
        self.tensors.setColumnHidden(5, all(zp in ("", "0") for *_, zp in out))
        _fill(self.tensors, out)
        self.tensors.blockSignals(False)
        # Default histogram: the first quantized output, else the first quantized input.
        g = self.relay.session.graph
        pick = self.tensor if self.tensor in self._tensor_rows else None
        if pick is None:
            outs = [t for d, t in rows if d == "out" and g.is_quantized(t)]
            ins = [t for d, t in rows if d == "in" and g.is_quantized(t)]
            pick = (outs or ins or [None])[0]
        if pick is not None:
            self.tensors.blockSignals(True)
            self.tensors.selectRow(self._tensor_rows.index(pick))
            self.tensors.blockSignals(False)
        self.show_tensor(pick)

    def _tensor_row_selected(self) -> None:
        rows = self.tensors.selectionModel().selectedRows()
        if rows:
            t = self._tensor_rows[rows[0].row()]
            self.show_tensor(t)
            self.tensorActivated.emit(t)

    def _show_error(self, t: str | None) -> None:
        from ...app.views.accuracy import tensor_error_text

        text = tensor_error_text(self.relay.accuracy(), t) if t else ""
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    def show_tensor(self, t: str | None) -> None:
        self.tensor = t
        self._show_error(t)
        s = self.relay.session
        if t is None or s is None:
            self.hist.clear("This node has no quantized tensor.")
            return
        if not s.graph.is_quantized(t):
            self.hist.clear(f"{t} is not quantized.")
            return
        if not s.ready:
            self.hist.clear("The histogram appears when calibration finishes.")
            return
        h = stored_histogram(s, t)
        if h is not None:
            self.hist.set_data(t, h.counts, h.edges, h.clip)
            return
        self.hist.set_data(t, None, None, clip_range(s, t), "computing histogram from held-out samples…")
        self.histogramWanted.emit(t)

    # -- concat table ------------------------------------------------------------------------
    def show_perf(self) -> None:
        """A new simulation changes only the rescale costs in the Concat table."""
        info = self.relay.concat(self.node) if self.node and not self.concat.isHidden() else None
        if info is not None:
            self._fill_concat(info)

    def _fill_concat(self, info) -> None:
        perf = self.relay.perf()
        # An output the export leaves in float has no scale in the file that ships (its domain's
        # scale is only what sharing would give it): shown as float, as the tensor table shows it.
        float_out = info.output if info.export_float else None
        members = [m for m in info.members() if m.scale and m is not float_out]
        smin = min((m.scale for m in members if not m.constant), default=None)
        total = rescale_us_by_concat(perf).get(info.node) if perf is not None else None
        per = {}  # input index -> its rescale's µs
        for m in info.members():
            if m.index >= 0 and m.needs_rescale:
                c = rescale_us_for_input(perf, info.node, m.index)
                if c is None and total is not None and info.rescales:
                    c = total / info.rescales  # simulator lists only the total: split evenly
                per[m.index] = c
        known = [c for c in per.values() if c is not None]
        # "1.80 µs per input × 3, total 9.60 µs" needs its last term: a mismatched channel Concat
        # cannot be written in place, so the rescales force a copy of the whole output.
        copy = total - sum(known) if total is not None and known else None
        rows = []
        for m in info.members():
            ratio = fmt_ratio(m.scale / smin) if (m.scale and smin and m is not float_out) else "—"
            if m.index < 0:
                cost = QTableWidgetItem(f"total {fmt_us(total)}" if total is not None else "—")
                if copy is not None and copy > 0.005:
                    cost.setText(f"total {fmt_us(total)} (incl. copy {fmt_us(copy)})")
                    cost.setToolTip(f"{len(known)} rescale(s) {fmt_us(sum(known))} + the copy of the output "
                                    f"they force {fmt_us(copy)}: with matched scales the inputs are written in "
                                    "place and the Concat costs nothing")
                resc = "Concat output, left in float by the export" if m is float_out else "Concat output"
            elif m.needs_rescale:
                cost = fmt_us(per.get(m.index))
                resc = "needs a rescale, named " + " / ".join(rescale_node_names(info.node, m.tensor, m.index))
            else:
                cost = "constant" if m.constant else "no rescale"
                resc = "requantized offline" if m.constant else (
                    "the output takes this scale (the target's Concat rule)" if m.index == info.reference_input
                    and not info.output_float else "its own scale: the export keeps the output in float"
                    if info.export_float else "written at the output's scale by its producer (the target's Concat rule)"
                    if m.index in info.written else "same scale as the output")
            bits = f"{m.bits_lost_if_shared:.2f}" if math.isfinite(m.bits_lost_if_shared) else "∞"
            idx = QTableWidgetItem("out" if m.index < 0 else str(m.index))
            if m.needs_rescale:
                idx.setBackground(mismatch_color(info.ratio, info.rescales))
            t_item = QTableWidgetItem(in_scope(m.producer or m.tensor, scope_of(info.node)))
            t_item.setToolTip(f"tensor {m.tensor}\nproduced by {m.producer or '—'}\n{resc}")
            rows.append((idx, t_item, "float" if m is float_out else fmt_scale(m.scale), ratio, bits, cost))
        _fill(self.concat, rows)
