"""What the canvas shows of the session: the scene built in slices, overlay looks, group hulls,
and the module hierarchy (expanding and collapsing blocks).

:class:`CanvasPresenter` takes the session relay and the scene/view pair.  It re-colours the
items (no re-layout) when the analysis changes (statistics, options, groups) and, in the
latency overlay, when a simulation arrives; it redraws the hulls when the groups change.
The view of the hierarchy is an app-layer :class:`~qtquant.app.scene.view.SceneModel`; the
presenter applies its changes to the items (:meth:`GraphScene.morph`) and, after the first
calibration, centres the worst Concat (:meth:`reveal` opens the blocks on the way).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from ...app.scene.view import ISOLATE_MIN_UNITS
from ...app.views.blocks import fill_block_looks, node_sqnr, worst_concat
from ...app.views.looks import Looks, fill_looks
from ...app.views.perfdata import placed_on_cpu
from ...base.vocab import OVERLAYS, Overlay
from .. import collector

__all__ = ["CanvasPresenter", "BUILD_SLICE_MS"]

BUILD_SLICE_MS = 12  # the scene is built in slices this long, events handled in between (Qt's
# dirty-item pass and repaint after each slice cost about as much again)


class CanvasPresenter(QObject):
    built = Signal(object)  # the SceneSpec, once every item is on the scene
    buildProgress = Signal(int, int)  # items on the scene, items in all: a big scene's slices
    viewChanged = Signal()  # a block expanded or collapsed (the items changed in place)

    def __init__(self, relay, scene, view, parent=None):
        super().__init__(parent)
        self.relay, self.scene, self.view = relay, scene, view
        self.overlay = Overlay.NONE
        self.error_local = False  # the Error overlay: local SQNR instead of cumulative (a toggle)
        self.comparison = None  # a ModelDiff (File › Compare With…): its looks replace the overlay's
        self.group_focus: int | None = None  # the group selected in the Groups dock
        self._placed: frozenset[str] = frozenset()  # the nodes last shown with the compiler's CPU badge
        self.spec = None  # the layout shown (or being built)
        # True while the structure drawn from the file shows (the model still loads): no looks,
        # no hulls; blocks open and close on it, and the loaded graph's view does the same again.
        self.provisional = False
        self._early_spec = None  # that structure's first spec
        # Expand / collapse asked for while a scene is still being built: done once it is there.
        self._pending: list = []
        self._keep_view = False  # the next build keeps the zoom and position (same boxes as shown)
        self._focus_after = None  # (a graph node, the transform) the next build centres on (Expand all)
        self.model = None  # the SceneModel: the hierarchy and what of it is open
        self.jobs = None  # the window's JobManager: big Expand all layouts run there
        view.fit_focus = self._worst_home  # Fit on a tall graph centres on the worst Concat
        # Per node its SQNR in dB where accuracy figures exist: collapsed blocks show the worst of theirs.
        self.node_sqnr = lambda: node_sqnr(self.relay.accuracy())
        self._opened_on = None  # the Concat centred after the first calibration, and the view then
        self._build = None  # generator of a scene being built in slices
        self._build_timer = QTimer(self, singleShot=True, interval=0)
        self._build_timer.timeout.connect(self._build_more)
        for sig in (relay.calibrated, relay.optionsChanged, relay.groupsChanged):
            sig.connect(self.apply_looks)
        relay.calibrated.connect(self.update_hulls)
        relay.groupsChanged.connect(self.update_hulls)
        relay.perfChanged.connect(self._perf_changed)
        relay.calibrated.connect(self._open_on_worst)
        relay.accuracyChanged.connect(self._accuracy_changed)

    @property
    def busy(self) -> bool:
        """Sliced work left: a scene half built, looks not yet applied."""
        return self._build is not None or self.scene.looks_pending

    # -- building -------------------------------------------------------------------------------
    def model_opened(self, graph) -> None:
        self.group_focus = None
        self._opened_on = None
        if self.provisional:  # the structure from the file stays until the laid-out graph replaces it
            return
        self._pending = []
        self._build = None  # a half-built scene of the previous model is dropped
        self.spec = None
        self.model = None
        self.scene.units = {}
        self.view.viewport().setUpdatesEnabled(True)
        self.scene.reset(f"Laying out {len(graph.nodes)} nodes…")

    def show_structure(self, spec) -> None:
        """The first view of a big model drawn from its file while the model loads."""
        self.provisional = True
        self.group_focus = None
        self._opened_on = None
        self._pending = []
        self._early_spec = spec
        self.show_layout(spec, provisional=True)

    def load_failed(self) -> None:
        if self.provisional:
            self.provisional = False
            self._pending = []
            self._build = None
            self.spec = self.model = None
            self.view.viewport().setUpdatesEnabled(True)
            self.view.graph_scroll_bars(False)
            self.scene.reset("The model could not be opened.")

    def show_layout(self, spec, provisional: bool = False) -> None:
        """Build the scene in slices of BUILD_SLICE_MS (20,000 items take over a second)."""
        # The laid-out graph with the very boxes the structure shows now: same view, no jump.
        early = getattr(spec, "early", None)
        self._keep_view = (self.provisional and early is not None and early is self._early_spec
                           and self.model is not None and spec.model.pos == self.model.pos)
        if self._keep_view:
            self._kept_at = (self.view.transform(), self.view.horizontalScrollBar().value(),
                             self.view.verticalScrollBar().value())
        self.provisional = provisional
        self.spec = spec
        self.model = getattr(spec, "model", None) or self.model
        self.scene.units = self.model.unit_of if self.model is not None else {}
        self.view.graph_scroll_bars(True)
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
                # The canvas does not paint while it is built (seconds on 20,000 nodes): say how far
                spec = self.spec
                self.buildProgress.emit(len(self.scene.nodes) + len(self.scene.edges),
                                        len(spec.nodes) + len(spec.edges) if spec is not None else 0)
                return
        self._build = None
        collector.long_lived()  # the scene's 50,000 items live as long as the model
        self.view.viewport().setUpdatesEnabled(True)
        if self._keep_view:
            tr, h, v = self._kept_at
            self.view.setTransform(tr)
            self.view.horizontalScrollBar().setValue(h)
            self.view.verticalScrollBar().setValue(v)
            self.view._zoom_changed()
        elif self._focus_after is not None and self.model is not None \
                and (home := self.model.home(self._focus_after[0])) in self.scene.nodes:
            # Expand all: the same zoom, on what the view showed (not back to the top)
            self.view.setTransform(self._focus_after[1])
            self.view.centerOn(self.scene.nodes[home])
            self.view._zoom_changed()
        else:
            self.view.resetTransform()
            self.view.fit_top()
        self._keep_view = False
        self._focus_after = None
        if not self.provisional:
            self._store_state()
            self.apply_looks()
            self.update_hulls()
            # Scales and latency can be in before the scene is (statistics from a file, a
            # project's cache): the view they would have moved is only here now.
            self._open_on_worst()
        self.view.minimap.schedule_refresh()  # in its own slice of the event loop, not this one
        self.built.emit(self.spec)
        pending, self._pending = self._pending, []
        for request in pending:  # asked for while it was being built
            request()

    # -- looks ---------------------------------------------------------------------------------
    def apply_looks(self) -> None:
        """Re-colour the canvas for the current overlay and analysis (no re-layout)."""
        s = self.relay.session
        if s is None or self.provisional or self.scene.spec is None or self.scene.spec is not self.spec:
            return
        if self.comparison is not None:
            from ...compare.live import compare_looks

            looks = compare_looks(s.graph, self.comparison)
            lg = looks.legend
            self.view.legend.set_overlay(lg.mode, lg.title, lg.lo, lg.hi)
            self.scene.apply_looks(looks.nodes, looks.edges, looks.edge_default)
            return
        looks = Looks()

        model, concats, perf = self.model, self.relay.concats(), self.relay.perf()

        def finish():
            lg = looks.legend
            self.view.legend.set_overlay(lg.mode, lg.title, lg.lo, lg.hi)
            if model is not None:
                fill_block_looks(looks, model, self.overlay, concats, perf, self.node_sqnr())
            return looks.nodes, looks.edges, looks.edge_default

        # Computed in slices: a heat overlay of 20,000 nodes is ~80 ms of Python.
        self.scene.compute_looks(fill_looks(looks, s.graph, self.overlay, concats, perf,
                                            precision=s.options.precision, accuracy=self.relay.accuracy(),
                                            local=self.error_local, compiler=s.compiler_log), finish)

    def _perf_changed(self) -> None:
        placed = frozenset(placed_on_cpu(self.relay.perf()))  # their CPU badge shows in every overlay
        if self.overlay == Overlay.LATENCY or placed != self._placed:
            self._placed = placed
            self.apply_looks()
        self._open_on_worst()

    def _accuracy_changed(self, *_) -> None:
        if self.overlay == Overlay.ERROR or (self.model is not None and not self.model.h.flat):
            self.apply_looks()  # the Error colours, or the blocks' worst-SQNR badges

    def set_error_local(self, on: bool) -> None:
        """The Error overlay's toggle: local SQNR (True) or cumulative (False)."""
        self.error_local = bool(on)
        if self.overlay == Overlay.ERROR:
            self.apply_looks()

    def set_comparison(self, diff) -> None:
        """Colour what ``diff``'s B changes (None: back to the overlay)."""
        self.comparison = diff
        self.apply_looks()

    def set_overlay(self, mode) -> None:
        if mode not in OVERLAYS:
            raise ValueError(f"unknown overlay {mode!r}; choose from {', '.join(OVERLAYS)}")
        self.overlay = Overlay(mode)
        self.apply_looks()

    # -- hulls ---------------------------------------------------------------------------------
    def update_hulls(self) -> None:
        if self._build is not None or self.provisional:  # half built / not the graph yet: done again later
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

    # -- the module hierarchy ----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """A view to change: built, and no full relayout under way."""
        return self.changeable and not self.provisional

    @property
    def changeable(self) -> bool:
        """Blocks can open and close now: the loaded graph's view or the structure drawn from the
        file, built (what is done on the latter, the loaded view does again)."""
        return (self.model is not None and self.spec is not None and self._build is None
                and self.scene.spec is self.spec)

    def _later(self, request) -> bool:
        """Keep ``request`` for when the scene being built is there; False: nothing to wait for."""
        if self.model is None and not self.provisional and self._build is None:
            return False
        self._pending.append(request)
        return True

    def _do(self, op: str, *args) -> bool:
        """``op`` on the view model (recorded while the view is the file's structure)."""
        if not self.changeable:
            return self._later(lambda: self._do(op, *args)) and False
        if self.provisional:
            self.model.log.append((op, *args))
        return self._changed(getattr(self.model, op)(*args))

    def expand(self, name: str, deep: bool = False) -> bool:
        """Open the block ``name`` (a canvas name ``block:/a/b`` or a block id ``/a/b``); ``deep``:
        every block inside it too.  Asked for while the scene is still being built: done once it
        is there (False now)."""
        if not self.changeable:
            return self._later(lambda: self.expand(name, deep)) and False
        bid = self.model.visible_block(name) or name
        return self._do("expand", bid, deep)

    def collapse(self, name: str) -> bool:
        """Close the block ``name`` is in (a node, or a block id); a collapsed block: its parent."""
        if not self.changeable:
            return self._later(lambda: self.collapse(name)) and False
        m = self.model
        bid = m.h.resolve(name) if not m.shows(name) else m.enclosing(name)
        if bid is not None and bid not in m.expanded:
            bid = m.enclosing(name)
        if bid is None or not self._do("collapse", bid):
            return False
        self._focus_block(bid)
        return True

    def _focus_block(self, bid: str) -> None:
        """A block just collapsed stays the selection (so Shift+E walks on up) and in view."""
        from ...app.scene.hierarchy import block_name

        item = self.scene.nodes.get(block_name(bid))
        if item is None:
            return
        self.scene.clearSelection()
        item.setSelected(True)
        self.view.ensureVisible(item, 40, 40)

    def toggle(self, name: str) -> bool:
        """Double-click on ``name``: a collapsed block opens; a node's enclosing block closes."""
        return self._do("toggle", name)

    def reveal(self, node: str) -> str | None:
        """Open the blocks around ``node`` (a graph node, terminal or block id); the canvas name
        that shows it afterwards (None: not on the canvas, e.g. a folded constant).

        What a row click in any list should call before centring (search, Concats, sensitivity,
        inspector links)."""
        if self.model is None:
            return node if node in self.scene.nodes else None
        if self.changeable:
            self._do("reveal", node)
        home = self.model.home(node)
        return home if home in self.scene.nodes else None

    def expand_all(self) -> bool:
        if self.provisional or not self.changeable:  # a new view in full: of the loaded graph
            return self._later(self.expand_all) and False
        return self._relayout(self.model.expand_all_set())

    def collapse_all(self) -> bool:
        if self.provisional or not self.changeable:
            return self._later(self.collapse_all) and False
        return self._relayout(self.model.collapse_all_set())

    def set_hide_shapes(self, on: bool) -> bool:
        if self.provisional or not self.changeable:
            return self._later(lambda: self.set_hide_shapes(on)) and False
        if self.model.state.hide_shapes == bool(on):
            return False
        self.model.set_hide_shapes(on)
        return self._relayout(self.model.expanded, force=True)

    def _relayout(self, expanded, force: bool = False) -> bool:
        """A new view laid out in full: in place when small, else in a job and rebuilt in slices."""
        m = self.model
        if not force and set(expanded) == m.expanded:
            return False
        m.set_expanded(expanded)
        if len(m.units) < ISOLATE_MIN_UNITS or self.jobs is None:
            m.layout_all(isolate=False)
            return self._changed(True)
        self._focus_after = self._focus_node()
        self.scene.reset(f"Laying out {len(m.units)} boxes…")
        self.spec = None
        gen = self.relay.session

        def done(spec):
            if self.relay.session is gen and self.model is m:
                spec.model = m
                self.show_layout(spec)

        self.jobs.submit("layout", "layout", lambda progress, cancelled: m.layout_all(isolate=True), done,
                         stale_key=lambda: id(self.relay.session))
        return True

    def _focus_node(self):
        """(a graph node, the view's transform): the selection, else what is at the view's centre;
        a collapsed block stands for its first node.  None when the scene shows nothing."""
        from ...app.scene.hierarchy import block_id

        names = self.scene.selected_names()
        if not names:
            c = self.view.mapToScene(self.view.viewport().rect().center())
            near = [it for it in self.scene.items(c) if getattr(it, "name", None) in self.scene.nodes]
            names = [near[0].name] if near else []
        if not names or self.model is None:
            return None
        bid = block_id(names[0])
        node = self.model.h.members(bid)[0] if bid is not None and self.model.h.members(bid) else names[0]
        return node, self.view.transform()

    def _changed(self, changed: bool) -> bool:
        if not changed:
            return False
        self.spec = spec = self.model.spec()
        spec.model = self.model
        self.scene.morph(spec)
        self.scene.units = self.model.unit_of
        if not self.provisional:  # the session is not this model's yet
            self._store_state()
        self.scene.hulls.invalidate()
        self.apply_looks()
        self.update_hulls()
        self.view.minimap.schedule_refresh()
        if not self.provisional:
            self.viewChanged.emit()
        return True

    def _store_state(self) -> None:
        s = self.relay.session
        if s is not None and self.model is not None:
            s.view_state = self.model.view_state()

    def _open_on_worst(self) -> None:
        """After calibration: centre the worst Concat (once per model; again when the simulated
        cost names another one and the view was not moved meanwhile)."""
        s = self.relay.session
        if s is None or not self.ready or not self.relay.ready:
            return
        if self._opened_on is not None:
            name, centre = self._opened_on
            if self.view.mapToScene(self.view.viewport().rect().center()) != centre or s.perf is None:
                return
        worst = worst_concat(s)
        if worst is None or (self._opened_on is not None and self._opened_on[0] == worst):
            return
        home = self.reveal(worst)
        if home is None:
            return
        visible = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
        if not visible.contains(self.scene.nodes[home].sceneBoundingRect()):  # in view already: nothing moves
            self.view.center_on(home, select=False, min_zoom=0.0)  # the zoom fit_top chose is readable
        self._opened_on = (worst, self.view.mapToScene(self.view.viewport().rect().center()))

    def _worst_home(self) -> str | None:
        """What shows the worst Concat on the canvas now (the Concat, or its collapsed block), or None."""
        s = self.relay.session
        if s is None or not self.relay.ready or self.model is None:
            return None
        worst = worst_concat(s)
        if worst is None:
            return None
        home = self.model.home(worst)
        return home if home in self.scene.nodes else None

    def describe_block(self, name: str):
        """(title, name, summary) of collapsed block ``name`` for the inspector; None: not a block."""
        m = self.model
        bid = m.visible_block(name) if m is not None else None
        if bid is None:
            return None
        from ...app.views.blocks import block_summaries

        b = m.h.blocks[bid]
        s = block_summaries(m, self.relay.concats(), self.relay.perf(), self.node_sqnr()).get(name)
        bits = [f"{b.size} nodes", f"{len(b.blocks)} blocks inside" if b.blocks else ""]
        if s is not None and s.concats:
            bits.append(f"{s.concats} Concat(s), {s.rescales} rescale(s)")
        if s is not None and s.latency_us:
            from ...app.views.fmt import fmt_us

            bits.append(f"{fmt_us(s.latency_us)} simulated")
        bits.append("double-click or E to expand")
        return "Block", bid, " · ".join(b for b in bits if b)
