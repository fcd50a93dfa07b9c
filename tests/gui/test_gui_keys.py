"""The whole window: every key bound once, undo/redo by keyboard, and one refresh per dock per edit."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QAction, QKeySequence  # noqa: E402

from builders import edit_model  # noqa: E402
from guikit import open_settled  # noqa: E402
from qtquant.app.views.perfdata import fidelity_measure, simulator  # noqa: E402
from qtquant.gui.canvas import showing as canvasview  # noqa: E402
from qtquant.gui.docks import inspector, panels as docks  # noqa: E402
from qtquant.gui.window.actions import key_conflicts, redo_keys  # noqa: E402

CAT1 = ("br_a_out", "br_b_out", "br_c_out", "cat1_out")


def results_in(qtbot, win):
    """Every background result of the current revision is in, and nothing is pending."""
    def done():
        s = win.session
        return (not win.controller.busy and (simulator() is None or not s.is_stale(s.perf) and s.perf is not None)
                and (fidelity_measure() is None or s.fidelity is not None and not s.is_stale(s.fidelity)))

    qtbot.waitUntil(done, timeout=30000)


def key(qtbot, win, k, modifiers=Qt.NoModifier):
    """A key typed into the window, as a user does (the shortcut map decides what it does)."""
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    qtbot.keyClick(win, k, modifiers)


def groups(win):
    return [g.members for g in win.session.groups]


def test_no_key_is_bound_twice(qtbot, make_win, tmp_path):
    win = make_win()
    assert key_conflicts(win.findChildren(QAction)) == {}
    # The same after a model opened and the canvas' context menu was shown on a Concat (it names
    # Share's key without binding it a second time).
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    win.view.contextRequested.emit("cat1", win.view.viewport().mapToGlobal(win.view.rect().center()))
    win.edits.context_menu.close()
    actions = win.findChildren(QAction)
    assert key_conflicts(actions) == {}
    bound = {k.toString() for a in actions for k in a.shortcuts()}
    assert {"Ctrl+Z", "Ctrl+Shift+Z", "Ctrl+Y", "Ctrl+G", "Ctrl+Shift+G", "Ctrl+S", "Ctrl+E"} <= bound
    assert [k.toString() for k in redo_keys()].count("Ctrl+Shift+Z") == 1


def test_redo_keys_on_a_desktop_whose_redo_is_ctrl_shift_z(qtbot, make_win, monkeypatch):
    """GNOME's Redo is Ctrl+Shift+Z: binding it and Ctrl+Shift+Z made the key ambiguous, and Qt
    then does nothing at all for it."""
    real = QKeySequence.keyBindings
    gnome = [QKeySequence("Ctrl+Shift+Z")]
    monkeypatch.setattr(QKeySequence, "keyBindings",
                        staticmethod(lambda k: list(gnome) if k == QKeySequence.Redo else real(k)))
    assert [k.toString() for k in redo_keys()] == ["Ctrl+Shift+Z", "Ctrl+Y"]
    win = make_win()
    assert key_conflicts(win.findChildren(QAction)) == {}


def test_key_conflicts_names_a_key_bound_twice(qtbot):
    a, b = QAction("Redo"), QAction("Other")
    a.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Shift+Z")])
    b.setShortcut(QKeySequence("Ctrl+Y"))
    c = QAction("Third")
    c.setShortcut(QKeySequence("Ctrl+Y"))
    assert key_conflicts([a, b, c]) == {"Ctrl+Shift+Z": ["Redo", "Redo"], "Ctrl+Y": ["Other", "Third"]}


def test_ctrl_z_then_ctrl_shift_z_redoes(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    win.scene.clearSelection()
    win.scene.nodes["cat1"].setSelected(True)
    key(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    assert groups(win) == [CAT1] and win.isWindowModified()
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier)
    assert groups(win) == [] and not win.isWindowModified()  # back at the saved (unedited) state
    assert win.actions_by_name["redo"].isEnabled() and win.actions_by_name["redo"].text() == "Redo Share 4 tensors"
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier | Qt.ShiftModifier)
    assert groups(win) == [CAT1] and win.isWindowModified()
    key(qtbot, win, Qt.Key_Z, Qt.ControlModifier)
    key(qtbot, win, Qt.Key_Y, Qt.ControlModifier)  # the other spelling of redo
    assert groups(win) == [CAT1]
    # the history dock shows the one stack: the unedited model, then the share, which is current
    view = win.undo_view
    assert view.model().stringList() == ["<unedited model>", "Share 4 tensors"]
    assert view.currentIndex().row() == 1
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.visualRect(view.model().index(0, 0)).center())
    assert groups(win) == [] and win.stack.index == 0  # a click on a row goes back to it
    win.stack.set_clean()


def test_each_dock_refreshes_once_per_edit(qtbot, make_win, tmp_path, monkeypatch):
    """One Ctrl+G on a selected Concat: every view rebuilds once, and a result arriving later
    (simulation, fidelity) updates only its own part.  Before the typed events the Performance
    dock refreshed 3 times and the Groups and Concat docks and the inspector twice."""
    seen = Counter()
    watched = {docks.ModelInfo: ("refresh",), docks.ConcatList: ("refresh",),
               docks.ConcatTableModel: ("show_perf",), docks.GroupsPanel: ("refresh", "show_perf"),
               docks.PerfSummary: ("refresh", "show_perf", "show_fidelity"),
               inspector.Inspector: ("refresh", "show_perf"),
               canvasview.CanvasPresenter: ("apply_looks", "update_hulls")}
    def counting(orig, label):
        def counted(self):  # no other parameter: Qt would pass a signal's argument into it
            seen[label] += 1
            return orig(self)

        return counted

    for cls, names in watched.items():
        for name in names:  # patched before the window connects them
            monkeypatch.setattr(cls, name, counting(getattr(cls, name), f"{cls.__name__}.{name}"))
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    results_in(qtbot, win)
    win.scene.clearSelection()
    win.scene.nodes["cat1"].setSelected(True)  # the inspector shows the Concat being edited
    seen.clear()
    key(qtbot, win, Qt.Key_G, Qt.ControlModifier)
    assert groups(win) == [CAT1]
    refreshes = {k: v for k, v in seen.items() if not k.endswith(("show_perf", "show_fidelity"))}
    assert refreshes == {"ModelInfo.refresh": 1, "ConcatList.refresh": 1, "GroupsPanel.refresh": 1,
                         "PerfSummary.refresh": 1, "Inspector.refresh": 1, "CanvasPresenter.apply_looks": 1,
                         "CanvasPresenter.update_hulls": 1}  # all of it in the key press' own turn
    results_in(qtbot, win)
    after = dict(seen)
    for k, v in refreshes.items():
        assert after.pop(k) == v, k  # no second refresh when the results came in
    expect = {}
    if simulator() is not None:
        expect.update({"ConcatTableModel.show_perf": 1, "GroupsPanel.show_perf": 1, "PerfSummary.show_perf": 1,
                       "Inspector.show_perf": 1})
    if fidelity_measure() is not None:
        expect["PerfSummary.show_fidelity"] = 1
    assert after == expect
    win.stack.set_clean()
