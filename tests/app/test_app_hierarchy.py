"""The module hierarchy and the view of it, without Qt: blocks from names, metadata and local
functions; folded constants; expanding and collapsing; aggregated block looks."""

from builders import RESCALING_MARCH
import pytest
from onnx import helper

from qtquant.app import Options, Session
from qtquant.app.scene import SceneModel, ViewState, build_hierarchy, constant_inputs, folded_nodes
from qtquant.app.scene.hierarchy import COLLAPSE_MIN_NODES, block_name
from qtquant.app.views.blocks import block_summaries, fill_block_looks, worst_concat
from qtquant.app.views.looks import compute_looks
from qtquant.calib import CalibConfig
from qtquant.model.graph import graph_from_model
from qtquant.base.vocab import Overlay
from tests.scoped_models import function_model, scoped_model


def _overlap(model):
    """Pairs of boxes on the canvas that overlap."""
    boxes = []
    for u in model.units:
        (x, y), (w, h) = model.pos[u], model._size(u)
        boxes.append((u, x - w / 2, y - h / 2, x + w / 2, y + h / 2))
    bad = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]:
                bad.append((a[0], b[0]))
    return bad


def test_blocks_come_from_the_name_path_and_one_node_blocks_dissolve():
    g = graph_from_model(scoped_model(blocks=3))
    h = build_hierarchy(g, [n for n in g.nodes if n not in folded_nodes(g)])
    assert h.top_blocks == ["/model.0", "/model.1", "/model.2"]
    b = h.blocks["/model.1"]
    # /model.1/a holds Conv and Mul (the Constant is folded); /model.1/c Conv and Relu;
    # the one-node blocks cv and conv dissolve into their parents.
    assert b.blocks == ["/model.1/a", "/model.1/c"]
    assert b.nodes == ["/model.1/Concat", "/model.1/cv/Conv"]
    assert h.blocks["/model.1/a"].nodes == ["/model.1/a/conv/Conv", "/model.1/a/Mul"]
    assert b.size == 6
    assert h.path("/model.1/a/Mul") == ["/model.1", "/model.1/a"]
    assert h.resolve("model.1") == "/model.1"
    # /head holds only the Reshape once the Shape is hidden: no block
    assert "/head" not in h.blocks and "/head/Reshape" in h.top_nodes


def test_names_without_structure_give_a_flat_view():
    m = scoped_model(blocks=2)
    for k, n in enumerate(m.graph.node):
        n.name = f"node_{k}"
    g = graph_from_model(m)
    h = build_hierarchy(g)
    assert h.flat and len(h.top_nodes) == len(g.nodes)
    model = SceneModel(g, ViewState(set()))
    assert all(not u.startswith("block:") for u in model.units)


def test_node_metadata_wins_over_the_name():
    m = scoped_model(blocks=2)
    for n in m.graph.node:
        if n.name.startswith("/model.1/"):
            n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'neck', 'fuse']")
    g = graph_from_model(m)
    h = build_hierarchy(g)
    assert "/neck/fuse" in h.blocks or "/neck" in h.blocks
    assert h.path("/model.1/Concat")[-1].startswith("/neck")
    assert "/model.1" not in h.blocks


def test_local_functions_are_inlined_one_block_per_call():
    g = graph_from_model(function_model(calls=2))
    assert not any(n.op_type == "Stage" for n in g.nodes.values())
    h = build_hierarchy(g)
    assert h.top_blocks == ["/stage0", "/stage1"]
    assert [g.nodes[n].op_type for n in h.blocks["/stage1"].nodes] == ["Conv", "Relu", "Sigmoid", "Mul"]
    # the two calls' inner tensors do not clash, and the call's output keeps its name
    assert "s0" in g.tensors and g.tensors["s0"].producer == "/stage0/mul"
    assert h.top_nodes == ["tail"]


def test_inlined_model_still_runs(tmp_path):
    s = Session(graph_from_model(function_model(calls=2)), Options(march=RESCALING_MARCH, calib=CalibConfig(count=2)))
    s.run_calibration()
    assert s.ready and s.calibration.ranges


def test_constants_are_folded_and_listed_for_their_consumer():
    g = graph_from_model(scoped_model(blocks=2))
    folded = folded_nodes(g)
    assert {"/model.0/a/Constant", "/model.1/a/Constant", "/head/Shape"} <= folded
    assert "/model.0/a/Mul" not in folded
    assert "/head/Shape" not in folded_nodes(g, hide_shapes=False)
    model = SceneModel(g, ViewState(None))
    assert "/model.0/a/Constant" not in model.units and "/head/Shape" not in model.units
    consts = dict(constant_inputs(g, "/model.0/a/Mul"))
    assert consts["/model.0/k"].startswith("Constant node")
    assert dict(constant_inputs(g, "/model.0/a/conv/Conv"))["/model.0.a.w"] == "initializer"


def test_small_graphs_open_flat_big_ones_collapsed():
    g = graph_from_model(scoped_model(blocks=3))
    assert SceneModel(g).expanded == set(SceneModel(g).h.blocks)
    big = graph_from_model(scoped_model(blocks=COLLAPSE_MIN_NODES // 6 + 5))
    model = SceneModel(big)
    assert not model.expanded  # many top blocks: every one collapsed
    assert len(model.units) < 120 and all(u.startswith("block:") or u.startswith(("input:", "output:"))
                                          or u == "/head/Reshape" for u in model.units)


def test_collapsed_block_edges_are_the_tensors_crossing_its_border():
    g = graph_from_model(scoped_model(blocks=3))
    model = SceneModel(g, ViewState(set()))
    model.layout_all()
    B1 = block_name("/model.1")
    ins = {(s, t) for s, d, t in model.edges if d == B1}
    outs = {(d, t) for s, d, t in model.edges if s == B1}
    assert ins == {(block_name("/model.0"), "/model.0/out")}
    assert outs == {(block_name("/model.2"), "/model.1/out")}


def test_expand_lays_out_the_block_and_moves_neighbours_only():
    g = graph_from_model(scoped_model(blocks=4))
    model = SceneModel(g, ViewState(set()))
    model.layout_all()
    before = dict(model.pos)
    B1 = block_name("/model.1")
    assert model.expand("/model.1")
    assert B1 not in model.pos and "/model.1/Concat" in model.pos
    assert block_name("/model.1/a") in model.pos  # its sub-blocks stay collapsed
    # above it: untouched; below it: moved down by the same amount
    assert model.pos[block_name("/model.0")] == before[block_name("/model.0")]
    d2 = model.pos[block_name("/model.2")][1] - before[block_name("/model.2")][1]
    d3 = model.pos[block_name("/model.3")][1] - before[block_name("/model.3")][1]
    assert d2 > 50 and d2 == pytest.approx(d3)
    assert not _overlap(model)
    spec = model.spec()
    assert len(spec.routes) == len(spec.edges) and all(len(r) >= 2 for r in spec.routes)
    # the edge into the block now ends on a node inside it
    assert any(d == "/model.1/a/conv/Conv" or d == block_name("/model.1/a") for s, d, t in model.edges
               if s == block_name("/model.0"))
    model.expand("/model.1/a")
    assert not _overlap(model)
    assert model.collapse("/model.1")
    assert B1 in model.pos and not any(u.startswith("/model.1/") for u in model.units)
    assert model.pos[block_name("/model.2")][1] == pytest.approx(before[block_name("/model.2")][1])
    assert "/model.1/a" not in model.expanded  # closing a block closes what is inside


def test_reveal_expands_the_path_and_home_finds_what_shows_a_node():
    g = graph_from_model(scoped_model(blocks=3))
    model = SceneModel(g, ViewState(set()))
    model.layout_all()
    assert model.home("/model.2/a/Mul") == block_name("/model.2")
    assert model.reveal("/model.2/a/Mul")
    assert model.shows("/model.2/a/Mul") and {"/model.2", "/model.2/a"} <= model.expanded
    assert model.home("/model.0/a/Constant") == block_name("/model.0")  # a folded constant: its consumer
    assert not _overlap(model)


def _calibrated(blocks=3):
    s = Session(graph_from_model(scoped_model(blocks=blocks, gains=(1.0, 9.0))),
                Options(march=RESCALING_MARCH, calib=CalibConfig(count=2)))
    s.run_calibration()
    return s


def test_block_badges_aggregate_rescales_latency_colour_and_sqnr():
    s = _calibrated()
    model = SceneModel(s.graph, ViewState(set()))
    model.layout_all()
    cs = s.concats()
    total = sum(c.rescales for c in cs if c.node.startswith("/model.1/"))
    assert total >= 1
    perf = type("P", (), {})()
    sums = block_summaries(model, cs, None, {"/model.1/a/Mul": 12.5, "/model.1/Concat": 30.0})
    b1 = sums[block_name("/model.1")]
    assert b1.rescales == total and b1.concats == 1 and b1.sqnr_db == 12.5
    looks = compute_looks(s.graph, Overlay.NONE, cs)
    fill_block_looks(looks, model, Overlay.NONE, cs, None, {"/model.1/a/Mul": 12.5})
    look = looks.nodes[block_name("/model.1")]
    texts = [b.text for b in look.badges]
    assert f"+{total} rescale" in texts and "12.5 dB" in texts
    assert look.fill == looks.nodes["/model.1/Concat"].fill  # the worst Concat's mismatch colour
    del perf


def test_block_latency_badge_sums_the_nodes_inside(monkeypatch):
    s = _calibrated()
    model = SceneModel(s.graph, ViewState(set()))
    model.layout_all()
    import qtquant.app.views.blocks as blocks

    members = model.h.members("/model.2")
    monkeypatch.setattr(blocks, "node_us", lambda perf: {m: 1.5 for m in members})
    looks = compute_looks(s.graph, Overlay.LATENCY, s.concats())
    fill_block_looks(looks, model, Overlay.LATENCY, s.concats(), object())
    texts = [b.text for b in looks.nodes[block_name("/model.2")].badges]
    assert any(t.startswith(f"{1.5 * len(members):.1f}") or "9.00" in t or "µs" in t for t in texts)
    assert block_summaries(model, s.concats(), object())[block_name("/model.2")].latency_us == \
        pytest.approx(1.5 * len(members))


def test_worst_concat_is_the_biggest_mismatch():
    s = _calibrated()
    worst = worst_concat(s)
    cs = [c for c in s.concats() if c.rescales]
    assert worst == max(cs, key=lambda c: (c.rescales, c.ratio)).node


def test_view_state_round_trips():
    st = ViewState({"/model.1", "/model.0"}, hide_shapes=False)
    back = ViewState.from_dict(st.to_dict())
    assert back.expanded == st.expanded and back.hide_shapes is False
    assert ViewState.from_dict({}).expanded is None


def test_unknown_block_is_refused():
    g = graph_from_model(scoped_model(blocks=2))
    model = SceneModel(g, ViewState(set()))
    model.layout_all()
    assert not model.expand("/nope")
    assert not model.collapse("/model.0")  # not open


def test_function_scope_metadata_is_set():
    g = graph_from_model(function_model(calls=1))
    protos = {n.name: n for n in g.model.graph.node}
    meta = {p.key: p.value for p in protos["/stage0/relu"].metadata_props}
    assert meta["qtquant.scope"] == "stage0"
    assert helper  # onnx.helper builds every model here


def test_node_sqnr_takes_each_nodes_worst_tensor_from_an_accuracy_report():
    from types import SimpleNamespace as T

    from qtquant.app.views.blocks import node_sqnr

    rep = T(tensors=[T(node="a", sqnr_db=30.0), T(node="a", sqnr_db=12.0), T(node="b", sqnr_db=float("inf")),
                     T(node=None, sqnr_db=1.0)])
    assert node_sqnr(rep) == {"a": 12.0}
    assert node_sqnr(None) is None


def _random_walk(model, seed: int, steps: int) -> list:
    """Expand (sometimes with everything inside), collapse; stops at the first overlap."""
    import random

    rng = random.Random(seed)
    done = []
    for _ in range(steps):
        shown = [u[len("block:"):] for u in model.units if u.startswith("block:")]
        if shown and (not model.expanded or rng.random() < 0.5):
            b, deep = rng.choice(shown), rng.random() < 0.2
            model.expand(b, deep)
            done.append(("expand all of" if deep else "expand", b))
        elif model.expanded:
            b = rng.choice(sorted(model.expanded))
            if model.collapse(b):
                done.append(("collapse", b))
        units, edges, unit_of = list(model.units), list(model.edges), dict(model.unit_of)
        model._remap_all()  # what changed is re-mapped alone: the same as mapping it all again
        assert (units, edges, unit_of) == (model.units, list(model.edges), model.unit_of), done
        if _overlap(model) or set(model.pos) != set(model.units):
            return done
    return []


def test_no_sequence_of_expanding_and_collapsing_overlaps_boxes():
    # Blocks laid out with their surroundings (a graph opened flat; one opened with everything
    # inside it) share rows with parallel branches: collapsing one of them must not pile what is
    # below onto them.  Nested rooms go back innermost first.
    g = graph_from_model(scoped_model(blocks=4))
    flat = SceneModel(g)
    assert flat.h.flat is False and not any(u.startswith("block:") for u in flat.units)
    flat.layout_all()
    for b in sorted(flat.h.blocks):
        m = SceneModel(g)
        m.layout_all()
        assert m.collapse(b) and not _overlap(m), b
    for seed in range(12):
        m = SceneModel(g, ViewState(set()) if seed % 2 else None)
        m.layout_all()
        assert _random_walk(m, seed, 12) == []
