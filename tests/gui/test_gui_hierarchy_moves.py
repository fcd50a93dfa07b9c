"""The module hierarchy when blocks open and close in sequence: no two boxes on the canvas overlap
after nested expansions and collapses (also of blocks laid out with their surroundings, as in a
graph that opened flat), and a block double-clicked while the structure drawn from the file still
shows is expanded once the model has loaded."""

import threading

import pytest
from PySide6.QtCore import Qt

from qtquant.app.scene.hierarchy import block_name
from tests.gui.guikit import big_blocks, double_click_node as _dclick
from tests.gui.test_gui_edit import press_keys

BIG = big_blocks()


@pytest.fixture
def small_model(scoped_file):
    return scoped_file(4)


def _key(qtbot, win, name, modifiers):
    win.scene.clearSelection()
    win.scene.nodes[name].setSelected(True)
    press_keys(qtbot, win, Qt.Key_E, modifiers)


def overlapping(win) -> list[tuple[str, str]]:
    """Pairs of boxes on the canvas whose bounding rectangles intersect."""
    boxes = sorted(((it.sceneBoundingRect(), n) for n, it in win.scene.nodes.items()), key=lambda b: b[0].left())
    out = []
    for i, (r, n) in enumerate(boxes):
        for r2, n2 in boxes[i + 1:]:
            if r2.left() >= r.right():
                break
            if r.intersects(r2):
                out.append((n, n2))
    return out


def _open(qtbot, win, path):
    win.open_model(path)
    qtbot.waitUntil(lambda: win.canvas.ready and not win.canvas.busy, timeout=20000)
    assert overlapping(win) == []


def test_nested_expand_and_collapse_never_overlap(qtbot, make_win, big_model):
    win = make_win(auto_calibrate=False)
    _open(qtbot, win, big_model)
    A, AB = "/model.3", "/model.3/a"
    steps = [
        ("expand A", lambda: _dclick(win, block_name(A)), "/model.3/Concat"),
        ("expand A/a", lambda: _dclick(win, block_name(AB)), "/model.3/a/Mul"),
        ("expand the next block", lambda: _key(qtbot, win, block_name("/model.4"), Qt.NoModifier), "/model.4/Concat"),
        ("expand its branch", lambda: _dclick(win, block_name("/model.4/c")), "/model.4/c/Relu"),
        ("collapse A", lambda: _key(qtbot, win, "/model.3/Concat", Qt.ShiftModifier), block_name(A)),
        ("expand A again", lambda: _dclick(win, block_name(A)), "/model.3/Concat"),
        ("expand A/a again", lambda: _dclick(win, block_name(AB)), "/model.3/a/Mul"),
        ("collapse A/a", lambda: _dclick(win, "/model.3/a/Mul"), block_name(AB)),
        ("collapse /model.4/c", lambda: _dclick(win, "/model.4/c/Relu"), block_name("/model.4/c")),
        ("collapse A", lambda: _dclick(win, "/model.3/Concat"), block_name(A)),
        ("collapse /model.4", lambda: _dclick(win, "/model.4/Concat"), block_name("/model.4")),
    ]
    for label, act, shows in steps:
        act()
        assert shows in win.scene.nodes, label
        assert overlapping(win) == [], label


def test_collapsing_a_block_laid_out_with_its_neighbours_never_overlaps(qtbot, make_win, small_model):
    # A small graph opens flat, laid out in one piece: the branch /model.1/a shares its rows with
    # the parallel branch /model.1/c, which must not slide under what comes below.
    win = make_win(auto_calibrate=False)
    _open(qtbot, win, small_model)
    assert "/model.1/a/Mul" in win.scene.nodes
    below = win.scene.nodes["/model.1/Concat"].pos().y()
    _dclick(win, "/model.1/a/Mul")  # a node inside: the block around it closes
    assert block_name("/model.1/a") in win.scene.nodes and "/model.1/a/Mul" not in win.scene.nodes
    assert overlapping(win) == []
    assert win.scene.nodes["/model.1/Concat"].pos().y() <= below  # room given back, as far as it goes
    _dclick(win, "/model.2/c/Relu")
    _dclick(win, "/model.1/Concat")  # the whole block, with its closed branch inside
    assert block_name("/model.1") in win.scene.nodes
    assert overlapping(win) == []
    _dclick(win, block_name("/model.1"))
    _dclick(win, block_name("/model.1/a"))
    assert "/model.1/a/Mul" in win.scene.nodes
    assert overlapping(win) == []
    win.actions_by_name["expand_all"].trigger()
    qtbot.waitUntil(lambda: win.canvas.ready and not win.canvas.busy, timeout=20000)
    _key(qtbot, win, "/model.2/Concat", Qt.ShiftModifier)  # after Expand all, a whole block
    assert block_name("/model.2") in win.scene.nodes
    assert overlapping(win) == []


def test_blocks_open_on_the_structure_drawn_before_the_model_has_loaded(qtbot, make_win, big_model, monkeypatch):
    import qtquant.app.opening as app_layer
    from qtquant.app.scene.protograph import ProtoGraph
    from qtquant.app.scene.view import SceneModel

    # The load is held until the test lets it go, and the loaded graph's layout job is held where
    # it takes over the drawn view: what happens in between is the order the test gives.
    loaded, adopting, adopt_go = threading.Event(), threading.Event(), threading.Event()
    real_open, real_adopt = app_layer.open_model, SceneModel.adopt

    def held_open(*args, **kwargs):
        loaded.wait(15)
        return real_open(*args, **kwargs)

    def held_adopt(self, other):
        adopting.set()
        adopt_go.wait(15)
        return real_adopt(self, other)

    monkeypatch.setattr(app_layer, "open_model", held_open)
    monkeypatch.setattr(SceneModel, "adopt", held_adopt)
    win = make_win(auto_calibrate=False)
    win.controller.structure_first_nodes = 100
    built = []
    win.canvas.built.connect(lambda spec: built.append(spec))
    asked = []
    # A double-click that comes before the drawn structure's boxes are all built is kept.
    win.controller.structureShown.connect(lambda _spec: asked.append(win.canvas.toggle(block_name("/model.2"))))
    win.open_model(big_model)
    qtbot.waitUntil(lambda: len(built) == 1, timeout=20000)
    assert asked == [False] and win.canvas.provisional and isinstance(built[0].model.graph, ProtoGraph)
    qtbot.waitUntil(lambda: "/model.2/Concat" in win.scene.nodes, timeout=5000)  # done once built
    _dclick(win, block_name("/model.3"))  # on the drawn structure: opens at once
    assert win.canvas.provisional and "/model.3/Concat" in win.scene.nodes
    assert overlapping(win) == []
    loaded.set()
    qtbot.waitUntil(adopting.is_set, timeout=20000)  # loaded; its view is being made from the drawn one
    _dclick(win, block_name("/model.5"))  # still the drawn structure: done again on the loaded view
    assert win.canvas.provisional and "/model.5/Concat" in win.scene.nodes
    shown = dict(win.canvas.model.pos)
    adopt_go.set()
    qtbot.waitUntil(lambda: len(built) == 2, timeout=20000)
    assert not win.canvas.provisional and win.canvas.model.graph is win.session.graph
    for b in ("/model.2", "/model.3", "/model.5"):
        assert f"{b}/Concat" in win.scene.nodes and b in win.canvas.model.expanded
    assert win.canvas.model.pos == shown  # the same boxes where they were
    assert overlapping(win) == []
    assert win.canvas.collapse("/model.3/Concat") and block_name("/model.3") in win.scene.nodes
    assert win.session.view_state.expanded == win.canvas.model.expanded


def test_shape_labels_follow_the_edges_as_blocks_open_and_close(qtbot, make_win, big_model):
    from qtquant.gui.canvas.items import LABEL_DX, LABEL_DY, LOD_EDGE_LABEL

    win = make_win(auto_calibrate=False)
    _open(qtbot, win, big_model)
    win.view.set_zoom(max(1.0, LOD_EDGE_LABEL))  # labels show

    def check():
        firsts = {}
        for e in win.scene.edges:
            firsts.setdefault(e.tensor, e.points[0])
        made = {lab.tensor: lab for lab in win.scene.labels}
        assert len(made) == len(win.scene.labels) and set(made) == set(firsts)  # one per drawn tensor
        for t, (x, y) in firsts.items():
            assert (made[t].pos().x(), made[t].pos().y()) == pytest.approx((x + LABEL_DX, y + LABEL_DY))
            assert made[t].isVisible()

    check()
    _dclick(win, block_name("/model.3"))
    check()
    _dclick(win, block_name("/model.3/a"))
    check()
    _dclick(win, "/model.3/Concat")
    check()
