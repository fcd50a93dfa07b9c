"""The scene spec and its layout, computed without Qt."""

from builders import branchy_concat_model
from qtquant.app.scene import INPUT_PREFIX, NODE_W, OUTPUT_PREFIX, TERM_W, layout_scene, scene_spec
from qtquant.model.graph import graph_from_model


def test_scene_spec_draws_ops_and_terminals_not_weights():
    g = graph_from_model(branchy_concat_model(gains=(1.0, 2.0)))
    spec = scene_spec(g)
    kinds = [n.kind for n in spec.nodes]
    assert kinds.count("input") == 1 and kinds.count("output") == 1 and kinds.count("op") == len(g.nodes)
    names = [n.name for n in spec.nodes]
    assert INPUT_PREFIX + "x" in names and OUTPUT_PREFIX + "y" in names
    assert not any(e.tensor.endswith((".w", ".b")) for e in spec.edges)  # weights are not drawn
    assert {e.tensor for e in spec.edges} >= {"x", "conv0_out", "conv1_out", "cat_out", "y"}


def test_layout_places_every_node_and_spreads_shared_ends():
    g = graph_from_model(branchy_concat_model(gains=(1.0, 2.0, 3.0)))
    spec = layout_scene(scene_spec(g), g)
    assert len(spec.layout.pos) == len(spec.nodes) and len(spec.routes) == len(spec.edges)
    at = {n.name: i for i, n in enumerate(spec.nodes)}
    ys = {name: spec.layout.pos[i][1] for name, i in at.items()}
    assert ys[INPUT_PREFIX + "x"] < ys["conv0"] < ys["cat"] < ys["final_relu"] < ys[OUTPUT_PREFIX + "y"]
    ends = [spec.routes[k][-1][0] for k, e in enumerate(spec.edges) if e.dst == at["cat"]]
    assert len(set(ends)) == 3  # three inputs: three distinct ports along the Concat's top
    cx = spec.layout.pos[at["cat"]][0]
    assert all(abs(x - cx) < NODE_W / 2 for x in ends)
    starts = [spec.routes[k][0][0] for k, e in enumerate(spec.edges) if e.src == at[INPUT_PREFIX + "x"]]
    assert all(abs(x - spec.layout.pos[at[INPUT_PREFIX + "x"]][0]) < TERM_W / 2 for x in starts)
