"""Find (Ctrl+F): nodes and tensors by name or op type; Enter jumps to the next hit."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCompleter, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from ...app.scene import INPUT_PREFIX

__all__ = ["SearchBar", "tensor_home"]


class SearchBar(QWidget):
    """Ctrl+F: find nodes and tensors by name (or op type); Enter jumps to the next hit."""

    jump = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Find node, tensor or op type…  (Enter: next, Esc: close)")
        self.edit.setClearButtonEnabled(True)
        self.count = QLabel("")
        self.count.setMinimumWidth(70)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addWidget(QLabel("Find:"))
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.count)
        lay.addWidget(close)
        self.graph = None
        self._completer_for = None
        self.hits: list[str] = []
        self.pos = -1
        self._last = None
        self.edit.returnPressed.connect(self.next_hit)
        self.edit.textChanged.connect(lambda t: self._reset())
        self.setVisible(False)

    def set_graph(self, graph) -> None:
        self.graph = graph
        self._reset()
        self._completer_for = None  # made when the bar opens: 40,000 names on a big graph

    def _make_completer(self) -> None:
        graph = self._completer_for = self.graph
        words = []
        if graph is not None:
            words = list(graph.nodes) + [t for t, tt in graph.tensors.items() if tt.kind != "weight"]
        comp = QCompleter(words, self)
        comp.setCaseSensitivity(Qt.CaseInsensitive)
        comp.setFilterMode(Qt.MatchContains)
        comp.setMaxVisibleItems(12)
        comp.activated.connect(lambda text: (self.edit.setText(text), self.next_hit()))
        self.edit.setCompleter(comp)

    def _reset(self) -> None:
        self.hits, self.pos, self._last = [], -1, None
        self.count.setText("")

    def find(self, text: str) -> list[str]:
        """Node names matching ``text``: exact name, op type, name substring, then tensors."""
        g = self.graph
        text = text.strip()
        if g is None or not text:
            return []
        low = text.lower()
        out: list[str] = []
        seen = set()

        def add(n):
            if n is not None and n not in seen:
                seen.add(n)
                out.append(n)

        if text in g.nodes:
            add(text)
        if text in g.tensors:
            add(tensor_home(g, text))
        for n in g.nodes.values():
            if n.op_type.lower() == low:
                add(n.name)
        for n in g.nodes:
            if low in n.lower():
                add(n)
        for t, tt in g.tensors.items():
            if tt.kind != "weight" and low in t.lower():
                add(tensor_home(g, t))
        return out

    def next_hit(self) -> str | None:
        text = self.edit.text()
        if text != self._last:
            self.hits, self.pos, self._last = self.find(text), -1, text
        if not self.hits:
            self.count.setText("no match")
            return None
        self.pos = (self.pos + 1) % len(self.hits)
        self.count.setText(f"{self.pos + 1} / {len(self.hits)}")
        self.jump.emit(self.hits[self.pos])
        return self.hits[self.pos]

    def open(self) -> None:
        if self._completer_for is not self.graph:
            self._make_completer()
        self.setVisible(True)
        self.edit.setFocus()
        self.edit.selectAll()

    def keyPressEvent(self, ev):
        if ev.key() == Qt.Key_Escape:
            self.hide()
        else:
            super().keyPressEvent(ev)


def tensor_home(g, t: str) -> str | None:
    """The canvas item that shows tensor ``t``: its producer, or its graph input terminal."""
    tt = g.tensors.get(t)
    if tt is None:
        return None
    if tt.producer:
        return tt.producer
    if t in g.inputs:
        return INPUT_PREFIX + t
    return tt.consumers[0] if tt.consumers else None
