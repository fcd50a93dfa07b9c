"""Every action of the main window, its toolbar and its menus, built in one place.

Each key is bound once: :func:`key_conflicts` lists the sequences two actions (or one action
twice) claim, which Qt would otherwise resolve by doing nothing ("Ambiguous shortcut
overload").  Undo and Redo present the session's one :class:`~qtquant.app.CommandStack`.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QComboBox, QLabel

from ...quant.domains import Policy
from ..widgets import bits_box
from ...perf import MARCHES
from ...base.vocab import Overlay

__all__ = ["WindowActions", "OptionWidgets", "redo_keys", "key_conflicts"]

# name -> (text, shortcut, tip); the slot comes from the window.
SPECS: dict[str, tuple[str, object, str]] = {
    "open": ("Open…", QKeySequence.Open, "Open an ONNX model"),
    "demo": ("Open demo model", None, "The bundled multi-scale attention demo"),
    "compare": ("Compare With…", None, "Open a second file of this model (another tool's QDQ file, a project) "
                "and colour what it changes"),
    "clear_compare": ("Clear Comparison", None, "Back to the open model alone"),
    "calibrate": ("Calibrate…", "Ctrl+K", "Choose calibration data and run it"),
    "share": ("Share", "Ctrl+G", "Tie the selected nodes' outputs to one shared observer (a lone Concat: its "
                                 "inputs and output)"),
    "ungroup": ("Ungroup", "Ctrl+Shift+G", "Dissolve the group selected in the Groups dock, or the groups of the "
                                           "selected nodes"),
    "autoshare": ("Auto-share", None, "Share every Concat whose sharing costs at most the auto-share threshold "
                                      "(bits lost)"),
    "export": ("Export…", "Ctrl+E", "Write the fixed QDQ model, plan, overrides, perf report and a PNG of the canvas"),
    "open_project": ("Open Project…", "Ctrl+Shift+O", "Open a .qtquant project"),
    "open_compiler_log": ("Open Compile Log…", None, "Open the Horizon hb_mapper makertbin log of this model: its "
                                                     "thresholds become the scales, its requantize list and cosine "
                                                     "similarity show beside qtquant's"),
    "save_project": ("Save Project", "Ctrl+S", "Save model, options, groups and statistics as a .qtquant project"),
    "save_project_as": ("Save Project As…", "Ctrl+Shift+S", ""),
    "find": ("Find…", QKeySequence.Find, "Find a node or tensor"),
    "fit": ("Fit to view", "F", "Show the whole graph"),
    "zoom_in": ("Zoom in", QKeySequence.ZoomIn, ""),
    "zoom_out": ("Zoom out", QKeySequence.ZoomOut, ""),
    "resimulate": ("Re-simulate", "F5", "Run the perf simulator again"),
    "expand": ("Expand block", "E", "Open the selected collapsed block (also: double-click it)"),
    "collapse": ("Collapse block", "Shift+E", "Close the block around the selected node (also: double-click "
                                              "a node in an open block)"),
    "expand_all": ("Expand all", "Ctrl+Shift+E", "Open every block of the module hierarchy (a flat view)"),
    "collapse_all": ("Collapse all", None, "Close the module hierarchy to its top levels"),
    "hide_shapes": ("Hide shape computations", None, "Hide the nodes that only compute shapes (Shape, Gather, "
                                                     "Concat of sizes...)"),
    "quit": ("Quit", QKeySequence.Quit, ""),
}
NEEDS_SESSION = ("save_project", "save_project_as", "open_compiler_log", "compare", "clear_compare")
NEEDS_SCALES = ("autoshare", "export")


def redo_keys() -> list[QKeySequence]:
    """The platform's Redo keys plus Ctrl+Shift+Z and Ctrl+Y, each once: on Linux the platform's
    first Redo key can itself be Ctrl+Shift+Z, and binding it twice leaves redo by keyboard dead."""
    keys: list[QKeySequence] = []
    for k in QKeySequence.keyBindings(QKeySequence.Redo) + [QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")]:
        if not k.isEmpty() and k not in keys:
            keys.append(k)
    return keys


def key_conflicts(actions) -> dict[str, list[str]]:
    """Key sequence -> the texts of the actions binding it, for every sequence bound more than once."""
    seen: dict[str, list[str]] = {}
    for a in actions:
        for k in a.shortcuts():
            if not k.isEmpty():
                seen.setdefault(k.toString(QKeySequence.PortableText), []).append(a.text())
    return {k: v for k, v in seen.items() if len(v) > 1}


class OptionWidgets(QObject):
    """The toolbar's option controls.  They only say what the user chose (the window turns it
    into commands); :meth:`show_options` mirrors the session without emitting."""

    overlayChosen = Signal(str)
    marchChosen = Signal(str)
    policyChosen = Signal(str)
    thresholdChosen = Signal(float)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.overlay = QComboBox()
        for m in Overlay:
            self.overlay.addItem(m.label, m.value)
        self.overlay.currentIndexChanged.connect(lambda i: self.overlayChosen.emit(self.overlay.itemData(i)))
        self.march = QComboBox()
        self.march.addItems(MARCHES)
        self.march.currentTextChanged.connect(self.marchChosen)
        self.policy = QComboBox()
        for p in Policy:
            self.policy.addItem(p.value, p.value)
        self.policy.setToolTip("How a shared range is chosen: union of the members (default), the Concat "
                               "output's, the widest input's, or a pooled-histogram percentile")
        self.policy.currentIndexChanged.connect(lambda i: self.policyChosen.emit(self.policy.itemData(i)))
        self.bits = bits_box("≤ ")
        self.bits.setToolTip("Auto-share threshold: Auto-share shares a Concat when no member loses more than "
                             "this many bits of precision")
        self.bits.valueChanged.connect(self.thresholdChosen)

    def commit(self) -> None:
        """A threshold typed but not yet entered counts as chosen (Auto-share reads the option)."""
        self.bits.interpretText()

    def show_options(self, options) -> None:
        self.show_march(options.march)
        _quietly(self.bits, lambda: self.bits.setValue(options.auto_share_max_bits_lost))
        _quietly(self.policy, lambda: self.policy.setCurrentIndex(max(0, self.policy.findData(options.policy.value))))

    def show_march(self, march: str) -> None:
        def put():
            if self.march.findText(march) < 0:
                self.march.addItem(march)
            self.march.setCurrentText(march)

        _quietly(self.march, put)

    def show_overlay(self, mode: str) -> None:
        _quietly(self.overlay, lambda: self.overlay.setCurrentIndex(max(0, self.overlay.findData(str(mode)))))


def _quietly(widget, fn) -> None:
    blocked = widget.blockSignals(True)
    try:
        fn()
    finally:
        widget.blockSignals(blocked)


class WindowActions(QObject):
    """The window's QActions by name (``by_name``), its toolbar and its menus."""

    def __init__(self, window, slots: dict[str, Callable], relay, history_dock):
        super().__init__(window)
        self.window = window
        self.relay = relay
        self.options = OptionWidgets(self)
        A = self.by_name = {}
        for name, (text, key, tip) in SPECS.items():
            a = A[name] = QAction(text, window)
            a.triggered.connect(slots[name])
            if key is not None:
                a.setShortcut(QKeySequence(key))
            if tip:
                a.setToolTip(tip)
                a.setStatusTip(tip)
        A["hide_shapes"].setCheckable(True)
        A["hide_shapes"].setChecked(True)
        A["undo"] = QAction("Undo", window)
        A["undo"].setShortcut(QKeySequence(QKeySequence.Undo))
        A["undo"].triggered.connect(relay.stack.undo)
        A["redo"] = QAction("Redo", window)
        A["redo"].setShortcuts(redo_keys())
        A["redo"].triggered.connect(relay.stack.redo)
        A["history"] = history_dock.toggleViewAction()
        A["history"].setText("Undo History")
        A["history"].setShortcut("Ctrl+H")
        for k in ("share", "ungroup") + NEEDS_SCALES + NEEDS_SESSION:
            A[k].setEnabled(False)
        relay.stackChanged.connect(self.show_stack)
        self.show_stack()

    def show_stack(self) -> None:
        st, A = self.relay.stack, self.by_name
        A["undo"].setEnabled(st.can_undo)
        A["undo"].setText(f"Undo {st.undo_text}" if st.can_undo else "Undo")
        A["redo"].setEnabled(st.can_redo)
        A["redo"].setText(f"Redo {st.redo_text}" if st.can_redo else "Redo")
        # The toolbar keeps the short words (the menu and the tooltip say what): a button whose
        # text follows the history moved Overlay/March/Policy/Export by ~100 px on every edit.
        for k, word in (("undo", "Undo"), ("redo", "Redo")):
            A[k].setIconText(word)
            A[k].setToolTip(A[k].text())

    def update_enabled(self, *, selection: bool, ungroup: bool) -> None:
        s, A = self.relay.session, self.by_name
        A["share"].setEnabled(selection)
        A["ungroup"].setEnabled(ungroup)
        for k in NEEDS_SCALES:
            A[k].setEnabled(s is not None and s.ready)
        for k in NEEDS_SESSION:
            A[k].setEnabled(s is not None)

    # -- bars ---------------------------------------------------------------------------------
    def build_toolbar(self):
        A, o = self.by_name, self.options
        tb = self.window.addToolBar("Main")
        tb.setObjectName("toolbar_main")
        tb.setToolButtonStyle(Qt.ToolButtonTextOnly)
        for key in ("open", "calibrate", None, "autoshare"):
            tb.addSeparator() if key is None else tb.addAction(A[key])
        tb.addWidget(o.bits)
        for key in ("share", "ungroup", None, "undo", "redo", None):
            tb.addSeparator() if key is None else tb.addAction(A[key])
        for label, w in ((" Overlay: ", o.overlay), ("  March: ", o.march), ("  Policy: ", o.policy)):
            tb.addWidget(QLabel(label))
            tb.addWidget(w)
        tb.addSeparator()
        tb.addAction(A["fit"])
        tb.addAction(A["export"])
        return tb

    def build_menus(self, docks) -> None:
        """File, Edit, View (overlays, docks) and Analysis (policy) menus."""
        A, o = self.by_name, self.options
        mb = self.window.menuBar()
        fm = mb.addMenu("&File")
        fm.addAction(A["open"])
        fm.addAction(A["open_project"])
        fm.addAction(A["open_compiler_log"])
        self.recent_menu = fm.addMenu("Open &Recent")
        for key in ("demo", None, "compare", "clear_compare", None, "save_project", "save_project_as", None, "export",
                    None, "quit"):
            fm.addSeparator() if key is None else fm.addAction(A[key])
        em = mb.addMenu("&Edit")
        for key in ("undo", "redo", "history", None, "find", None, "share", "ungroup", "autoshare"):
            em.addSeparator() if key is None else em.addAction(A[key])
        vm = mb.addMenu("&View")
        for key in ("fit", "zoom_in", "zoom_out", None, "expand", "collapse", "expand_all", "collapse_all",
                    "hide_shapes"):
            vm.addSeparator() if key is None else vm.addAction(A[key])
        vm.addSeparator()
        self.overlay_actions = self._choice_group(vm, [(f"Overlay: {m.label}", m.value) for m in Overlay],
                                                  o.overlayChosen.emit)
        self.show_overlay(Overlay.NONE)
        vm.addSeparator()
        # The floating minimap and legend cover nodes: each can be switched off.
        view = self.window.view
        for key, text, widget in (("minimap", "&Minimap", view.minimap), ("legend", "&Legend", view.legend)):
            a = A[key] = QAction(text, self.window, checkable=True, checked=True)
            a.toggled.connect(widget.set_wanted)
            vm.addAction(a)
        vm.addSeparator()
        for d in docks:
            vm.addAction(d.toggleViewAction())
        am = mb.addMenu("&Analysis")
        am.addAction(A["calibrate"])
        am.addAction(A["resimulate"])
        pm = am.addMenu("Shared-range &policy")
        self.policy_actions = self._choice_group(pm, [(o.policy.itemText(i), o.policy.itemData(i))
                                                      for i in range(o.policy.count())], o.policyChosen.emit)
        pm.aboutToShow.connect(lambda: self._check(self.policy_actions, o.policy.currentData()))

    def _choice_group(self, menu, items, chosen) -> QActionGroup:
        group = QActionGroup(self.window)
        for text, value in items:
            a = QAction(text, self.window, checkable=True)
            a.setData(value)
            a.triggered.connect(lambda checked=False, v=value: chosen(v))
            group.addAction(a)
            menu.addAction(a)
        return group

    @staticmethod
    def _check(group: QActionGroup, value) -> None:
        for a in group.actions():
            a.setChecked(a.data() == value)

    def show_overlay(self, mode) -> None:
        self.options.show_overlay(mode)
        self._check(self.overlay_actions, str(mode))
