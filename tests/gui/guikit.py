"""Waiting for the window in the GUI tests (importable from every test module of this folder)."""

from __future__ import annotations

from qtquant.calib import CalibConfig

__all__ = ["settle", "open_settled", "double_click_node", "big_blocks"]


def settle(qtbot, win, timeout=20000):
    """Layout on the canvas, scales ready, no job running or debounced refresh pending."""
    qtbot.waitUntil(lambda: win.controller.spec is not None and win.scene.spec is win.controller.spec
                    and win.relay.ready and not win.controller.busy, timeout=timeout)


def open_settled(qtbot, win, path, count=4, zoom=1.0):
    win.open_model(path, calib=CalibConfig(count=count))
    settle(qtbot, win)
    if zoom is not None:
        win.view.set_zoom(zoom)


def double_click_node(win, name):
    """A real double-click (press, release, double-click, release) on node ``name`` of the canvas."""
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    view = win.view
    view.centerOn(win.scene.nodes[name])
    p = QPointF(view.mapFromScene(win.scene.nodes[name].pos()))
    vp = view.viewport()
    for kind in (QEvent.MouseButtonPress, QEvent.MouseButtonRelease, QEvent.MouseButtonDblClick,
                 QEvent.MouseButtonRelease):
        buttons = Qt.LeftButton if kind in (QEvent.MouseButtonPress, QEvent.MouseButtonDblClick) else Qt.NoButton
        QApplication.sendEvent(vp, QMouseEvent(kind, p, vp.mapToGlobal(p), Qt.LeftButton, buttons, Qt.NoModifier))


def big_blocks() -> int:
    """Blocks of 7 nodes (one folded) over the collapse threshold: the model opens collapsed."""
    from qtquant.app.scene.hierarchy import COLLAPSE_MIN_NODES

    return COLLAPSE_MIN_NODES // 6 + 4
