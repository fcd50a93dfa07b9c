"""What the canvas shows of the session: the scene built in slices, overlay looks, group hulls.

:class:`CanvasPresenter` takes the session relay and the scene/view pair.  It re-colours the
items (no re-layout) when the analysis changes (statistics, options, groups) and, in the
latency overlay, when a simulation arrives; it redraws the hulls when the groups change.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from ..app.views.looks import Looks, fill_looks
from ..vocab import OVERLAYS, Overlay
from . import collector

__all__ = ["CanvasPresenter", "BUILD_SLICE_MS"]

BUILD_SLICE_MS = 12  # the scene is built in slices this long, events handled in between (Qt's
# dirty-item pass and repaint after each slice cost about as much again)


class CanvasPresenter(QObject):
    built = Signal(object)  # the SceneSpec, once every item is on the scene

    def __init__(self, relay, scene, view, parent=None):
        super().__init__(parent)
        self.relay, self.scene, self.view = relay, scene, view
        self.overlay = Overlay.NONE
        self.group_focus: int | None = None  # the group selected in the Groups dock
        self.spec = None  # the layout shown (or being built)
        self._build = None  # generator of a scene being built in slices
        self._build_timer = QTimer(self, singleShot=True, interval=0)
        self._build_timer.timeout.connect(self._build_more)
        for sig in (relay.calibrated, relay.optionsChanged, relay.groupsChanged):
            sig.connect(self.apply_looks)
        relay.calibrated.connect(self.update_hulls)
        relay.groupsChanged.connect(self.update_hulls)
        relay.perfChanged.connect(self._perf_changed)

    @property
    def busy(self) -> bool:
        """Sliced work left: a scene half built, looks not yet applied."""
        return self._build is not None or self.scene.looks_pending

    # -- building -------------------------------------------------------------------------------
    def model_opened(self, graph) -> None:
        self._build = None  # a half-built scene of the previous model is dropped
        self.spec = None
        self.group_focus = None
        self.view.viewport().setUpdatesEnabled(True)
        self.scene.reset(f"Laying out {len(graph.nodes)} nodes…")

    def show_layout(self, spec) -> None:
        """Build the scene in slices of BUILD_SLICE_MS (20,000 items take over a second)."""
        self.spec = spec
        self._build = self.scene.build_steps(spec)
        # No painting of a half-built scene between slices (each paint re-indexes the new items).
        self.view.viewport().setUpdatesEnabled(False)
        self._build_timer.start()  # not in this turn: it also starts the calibration job

    def _build_more(self) -> None:
        if self._build is None:  # superseded: another model replaced the scene
            return
        t = time.perf_counter()
        for _ in self._build:
            if time.perf_counter() - t > BUILD_SLICE_MS / 1000:
                collector.long_lived()  # the items made so far live as long as the scene
                self._build_timer.start()
                return
        self._build = None
        collector.long_lived()  # the scene's 50,000 items live as long as the model
        self.view.viewport().setUpdatesEnabled(True)
        self.view.resetTransform()
        self.view.fit_top()
        self.apply_looks()
        self.update_hulls()
        self.view.minimap.schedule_refresh()  # in its own slice of the event loop, not this one
        self.built.emit(self.spec)

    # -- looks ---------------------------------------------------------------------------------
    def apply_looks(self) -> None:
        """Re-colour the canvas for the current overlay and analysis (no re-layout)."""
        s = self.relay.session
        if s is None or self.scene.spec is None or self.scene.spec is not self.spec:
            return
        looks = Looks()

        def finish():
            lg = looks.legend
            self.view.legend.set_overlay(lg.mode, lg.title, lg.lo, lg.hi)
            return looks.nodes, looks.edges, looks.edge_default

        # Computed in slices: a heat overlay of 20,000 nodes is ~80 ms of Python.
        self.scene.compute_looks(fill_looks(looks, s.graph, self.overlay, self.relay.concats(), self.relay.perf()),
                                 finish)

    def _perf_changed(self) -> None:
        if self.overlay == Overlay.LATENCY:
            self.apply_looks()

    def set_overlay(self, mode) -> None:
        if mode not in OVERLAYS:
            raise ValueError(f"unknown overlay {mode!r}; choose from {', '.join(OVERLAYS)}")
        self.overlay = Overlay(mode)
        self.apply_looks()

    # -- hulls ---------------------------------------------------------------------------------
    def update_hulls(self) -> None:
        if self._build is not None:  # the scene is half built: done again once it is complete
            return
        s = self.relay.session
        self.scene.hulls.update(s.graph if s else None, list(s.groups) if s else [])
        self.scene.hulls.highlight(self.group_focus)

    def focus_group(self, gid: int | None) -> None:
        """Emphasise ``gid``'s hull (None: no group) and scroll it into view."""
        self.group_focus = gid
        self.scene.hulls.highlight(gid)
        if gid is not None:
            r = self.scene.hulls.bounds(gid)
            if not r.isEmpty():
                self.view.ensureVisible(r, 40, 40)
