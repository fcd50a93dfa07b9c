"""The module hierarchy on the canvas: collapsed blocks, expand / collapse by mouse, keys and menu,
search and lists opening the path, hulls and drops on collapsed blocks, folded constants, the
state saved in projects, and the view a model opens on."""

import pytest
from PySide6.QtCore import Qt

from qtquant.app.scene.hierarchy import block_name
from qtquant.gui.canvas.items import BlockItem
from qtquant.calib import CalibConfig
from tests.gui.guikit import big_blocks, double_click_node as _dclick, open_settled, settle
from tests.gui.test_gui_edit import drag_node, press_keys

BIG = big_blocks()


@pytest.fixture
def small_model(scoped_file):
    return scoped_file(3)


def test_big_graph_opens_collapsed_small_graph_flat(qtbot, make_win, big_model, small_model):
    win = make_win(auto_calibrate=False)
    win.open_model(big_model)
    qtbot.waitUntil(lambda: win.scene.spec is not None and win.scene.spec is win.canvas.spec, timeout=20000)
    blocks = [it for it in win.scene.nodes.values() if isinstance(it, BlockItem)]
    assert len(blocks) == BIG and len(win.scene.nodes) < BIG + 5
    assert win.scene.nodes[block_name("/model.0")].subtitle.startswith("6 nodes")
    win2 = make_win(auto_calibrate=False)
    win2.open_model(small_model)
    qtbot.waitUntil(lambda: win2.scene.spec is not None and win2.scene.spec is win2.canvas.spec, timeout=20000)
    assert not any(isinstance(it, BlockItem) for it in win2.scene.nodes.values())
    assert "/model.1/Concat" in win2.scene.nodes


def test_double_click_expands_a_block_and_collapses_it_again(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    B = block_name("/model.3")
    below = win.scene.nodes[block_name("/model.4")].pos().y()
    above = win.scene.nodes[block_name("/model.2")].pos()
    _dclick(win, B)
    assert B not in win.scene.nodes and "/model.3/Concat" in win.scene.nodes
    assert win.scene.nodes[block_name("/model.4")].pos().y() > below + 50  # neighbours moved down
    assert win.scene.nodes[block_name("/model.2")].pos() == above  # what is above stays
    edges_in = {e.src for e in win.scene.edges_in.get(block_name("/model.3/a"), [])}
    assert block_name("/model.2") in edges_in
    _dclick(win, "/model.3/Concat")  # a node inside: its block closes
    assert B in win.scene.nodes and "/model.3/Concat" not in win.scene.nodes
    assert win.scene.nodes[block_name("/model.4")].pos().y() == pytest.approx(below)


def test_keys_and_context_menu_expand_and_collapse(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    B = block_name("/model.5")
    win.scene.clearSelection()
    win.scene.nodes[B].setSelected(True)
    press_keys(qtbot, win, Qt.Key_E, Qt.NoModifier)
    assert "/model.5/Concat" in win.scene.nodes
    win.scene.nodes["/model.5/Concat"].setSelected(True)
    press_keys(qtbot, win, Qt.Key_E, Qt.ShiftModifier)
    assert B in win.scene.nodes and "/model.5/Concat" not in win.scene.nodes
    win.scene.clearSelection()
    win.scene.nodes[B].setSelected(True)  # as the right click does
    win.edits.show_context_menu(B, win.view.mapToGlobal(win.view.rect().center()))
    texts = [a.text() for a in win.edits.context_menu.actions()]
    assert "Expand block" in texts
    next(a for a in win.edits.context_menu.actions() if a.text() == "Expand block").trigger()
    assert "/model.5/Concat" in win.scene.nodes
    win.edits.show_context_menu("/model.5/Concat", win.view.mapToGlobal(win.view.rect().center()))
    collapse = [a for a in win.edits.context_menu.actions() if a.text().startswith("Collapse model.5")]
    assert collapse
    collapse[0].trigger()
    assert B in win.scene.nodes


def test_expand_all_and_collapse_all_from_the_view_menu(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    win.actions_by_name["expand_all"].trigger()
    qtbot.waitUntil(lambda: win.scene.spec is win.canvas.spec and not win.canvas.busy, timeout=20000)
    assert not any(isinstance(it, BlockItem) for it in win.scene.nodes.values())
    assert "/model.7/a/Mul" in win.scene.nodes
    win.actions_by_name["collapse_all"].trigger()
    qtbot.waitUntil(lambda: win.scene.spec is win.canvas.spec and not win.canvas.busy, timeout=20000)
    assert block_name("/model.7") in win.scene.nodes
    # The collapsed view is one tall column (4 % to fit whole): Fit shows its width at a readable zoom
    from qtquant.gui.canvas.view import FIT_MIN_ZOOM

    win.view.fit()
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    assert win.view.zoom >= FIT_MIN_ZOOM
    assert all(vis.left() <= it.pos().x() <= vis.right() for it in win.scene.nodes.values())


def test_search_and_concat_list_open_the_path(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    assert "/model.9/a/Mul" not in win.scene.nodes
    hit = win.search("/model.9/a/Mul")
    assert hit == "/model.9/a/Mul"
    assert "/model.9/a/Mul" in win.scene.nodes and win.scene.selected_names() == ["/model.9/a/Mul"]
    assert "/model.11/Concat" not in win.scene.nodes
    win.concat_list.nodeActivated.emit("/model.11/Concat")
    assert win.scene.selected_names() == ["/model.11/Concat"]


def test_canvas_reveal_returns_what_shows_the_node(qtbot, make_win, big_model):
    win = make_win(auto_calibrate=False)
    win.open_model(big_model)
    qtbot.waitUntil(lambda: win.scene.spec is not None and win.scene.spec is win.canvas.spec, timeout=20000)
    assert win.canvas.reveal("/model.4/c/Relu") == "/model.4/c/Relu"
    assert win.canvas.reveal("/model.4/a/Constant") == "/model.4/a/Mul"  # folded: its consumer
    assert win.canvas.reveal("no such node") is None


def test_hulls_follow_collapse_and_expand(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    win.search("/model.6/Concat")
    win.edits.share_selection()  # the Concat's inputs and output: one group
    qtbot.waitUntil(lambda: bool(win.scene.hulls.hulls), timeout=5000)
    (hull,) = win.scene.hulls.hulls.values()
    assert "/model.6/Concat" in hull.nodes
    win.canvas.collapse("/model.6")
    (hull,) = win.scene.hulls.hulls.values()
    assert hull.nodes == (block_name("/model.6"),)
    assert hull.sceneBoundingRect().contains(win.scene.nodes[block_name("/model.6")].pos())
    win.canvas.expand("/model.6")
    (hull,) = win.scene.hulls.hulls.values()
    assert "/model.6/Concat" in hull.nodes and block_name("/model.6") not in hull.nodes


def test_drop_on_a_collapsed_block_targets_its_concat(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    win.canvas.expand("/model.8")
    win.canvas.expand("/model.8/a")
    src = "/model.8/a/Mul"
    target = block_name("/model.9")
    drag_node(win, src, target)
    g = win.session.groups.group_of("/model.8/a/out")
    assert g is not None and "/model.9/cat" in g.members  # joined /model.9's Concat group


def test_constants_are_not_boxes_and_show_in_the_inspector(qtbot, make_win, small_model):
    win = make_win()
    open_settled(qtbot, win, small_model)
    assert not any(n.endswith("/Constant") for n in win.scene.nodes)
    assert "/head/Shape" not in win.scene.nodes
    win.search("/model.1/a/Mul")
    assert "Constant inputs" in win.inspector.notes.text() and "/model.1/k" in win.inspector.notes.text()
    win.actions_by_name["hide_shapes"].trigger()  # off: shape computations drawn
    qtbot.waitUntil(lambda: "/head/Shape" in win.scene.nodes, timeout=10000)


def test_view_state_is_saved_in_the_project(qtbot, make_win, big_model, tmp_path):
    win = make_win()
    open_settled(qtbot, win, big_model)
    win.canvas.expand("/model.2")
    proj = tmp_path / "p.qtquant"
    assert win.projects.save_to(proj)
    win2 = make_win()
    win2.open_project(proj, ask=False)
    settle(qtbot, win2)
    assert "/model.2/Concat" in win2.scene.nodes and block_name("/model.3") in win2.scene.nodes


def test_opens_on_the_worst_concat_after_calibration(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model, zoom=None)
    from qtquant.app.views.blocks import worst_concat

    worst = worst_concat(win.session)
    assert worst is not None
    home = win.scene.item_for(worst)
    centre = win.view.mapToScene(win.view.viewport().rect().center())
    assert (win.scene.nodes[home].pos() - centre).manhattanLength() < 30


def test_big_model_shows_its_structure_before_it_has_loaded(qtbot, make_win, big_model, monkeypatch):
    import threading

    import qtquant.app.opening as app_layer
    from qtquant.app.scene.protograph import ProtoGraph

    # The load is held until something is drawn: on a quiet machine this small model would
    # otherwise finish loading before the file-drawn structure is painted, and on a loaded one
    # after, so the order would depend on the machine instead of the code.
    drawn = threading.Event()
    real_open = app_layer.open_model

    def held_open(*args, **kwargs):
        drawn.wait(15)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(app_layer, "open_model", held_open)
    win = make_win(auto_calibrate=False)
    win.controller.structure_first_nodes = 100
    built = []

    def on_built(spec):
        built.append((spec, win.relay.session))
        drawn.set()

    win.canvas.built.connect(on_built)
    win.open_model(big_model)
    qtbot.waitUntil(lambda: len(built) == 2, timeout=20000)
    (first, session_then), (final, _) = built
    assert isinstance(first.model.graph, ProtoGraph) and session_then is None  # drawn before the load ended
    assert final.model.graph is win.session.graph and final.early is first  # the same boxes, kept
    assert final.layout.pos == first.layout.pos
    assert not win.canvas.provisional and win.canvas.expand("/model.2")
    assert "/model.2/Concat" in win.scene.nodes


def test_opens_on_the_worst_concat_when_scales_come_before_the_scene(qtbot, make_win, big_model, tmp_path,
                                                                   monkeypatch):
    # A statistics file (or a project's cache) makes the session calibrated as it opens: the
    # simulation runs while the scene is still being built, and no later signal moves the view.
    from qtquant.app import open_model
    from qtquant.app.views.blocks import worst_concat
    from qtquant.calib import calibrate
    from qtquant.calib.statsfile import write_stats
    from qtquant.gui.canvas.showing import CanvasPresenter

    graph = open_model(big_model).graph
    stats = write_stats(tmp_path / "big.stats", graph, calibrate(graph, CalibConfig(count=4, holdout=0)))
    real_build_more = CanvasPresenter._build_more
    held = {"on": True}

    def build_more(self):
        if held["on"] and self.relay.session is not None and self.relay.session.perf is None:
            self._build_timer.start(20)  # the scene waits for the simulation
            return
        real_build_more(self)

    monkeypatch.setattr(CanvasPresenter, "_build_more", build_more)
    win = make_win()
    win.open_model(big_model, stats=str(stats))
    settle(qtbot, win)
    assert not win.controller.jobs.active("calibrate")
    worst = worst_concat(win.session)
    assert worst is not None
    home = win.scene.item_for(worst)
    centre = win.view.mapToScene(win.view.viewport().rect().center())
    assert (win.scene.nodes[home].pos() - centre).manhattanLength() < 30
