"""Share on a selection proposes only what feeds a Concat (issue 20, item 2), without Qt."""

import pytest

from builders import edit_model
from qtquant.app import open_model
from qtquant.app.shareplan import feeders, plan_share
from qtquant.app.views.groups import group_rows
from qtquant.app.demo import build_attention_demo
import onnx
from qtquant.quant.groups import share

# the k branches in graph order: the 3x3 window conv, the 7x7 and 9x9 ones each followed by its Resize
K = ("attn/k_proj/win3x3", "attn/k_proj/win7x7", "attn/k_proj/up7x7", "attn/k_proj/win9x9", "attn/k_proj/up9x9")
K_MEMBERS = tuple(f"{n}_out" for n in K) + ("attn/k_cat_out",)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    p = tmp_path_factory.mktemp("demo") / "attention.onnx"
    onnx.save(build_attention_demo(), str(p))
    s = open_model(p)  # the default march, the app's: the upsampled windows are rescaled there
    s.run_calibration()
    return s


def test_a_rubber_band_over_the_k_branches_leaves_q_flat_out(demo):
    """The README's gesture on the demo: the rectangle over the k convs and their Concat also
    catches attn/q_flat; sharing it too cost q_flat bits for nothing."""
    plan = plan_share(demo, [*K, "attn/k_cat", "attn/q_flat"])
    assert plan.members == K_MEMBERS
    assert plan.concats == ("attn/k_cat",)
    assert [t for t, _ in plan.left_out] == ["attn/q_flat_out"]
    assert "does not feed attn/k_cat" in plan.left_out[0][1]
    # what the proposal says each member loses is what it loses once committed
    assert all(b is not None for b in plan.bits.values()) and plan.worst > 0.5
    share(demo, plan.members)
    row = group_rows(demo)[0]
    assert {m.tensor: m.bits_lost for m in row.members} == pytest.approx(plan.bits)
    assert plan.now["attn/k_proj/win3x3_out"] == 0.0  # before: its own scale
    # the Resize is a view: its output and its conv's lose the same bits, and the 9x9 window the most
    assert plan.bits["attn/k_proj/win9x9_out"] == plan.bits["attn/k_proj/up9x9_out"] == plan.worst
    assert plan.bits["attn/k_proj/win3x3_out"] == 0.0  # the widest branch sets the shared scale
    demo.groups.clear()
    demo.groups_changed()


def test_no_concat_selected_proposes_the_largest_set_feeding_one(demo):
    v2 = ("attn/v_proj/win3x3", "attn/v_proj/win7x7")
    plan = plan_share(demo, [*K, *v2, "attn/q_proj"])
    assert plan.members == K_MEMBERS[:-1] and plan.concats == ("attn/k_cat",)
    assert {t for t, _ in plan.left_out} == {f"{n}_out" for n in v2} | {"attn/q_proj_out"}
    assert plan_share(demo, ["attn/q_proj", "attn/out_proj"]) is None  # neither feeds a Concat


def test_feeders_walk_through_pass_through_ops(tmp_path):
    s = open_model(edit_model(tmp_path / "e.onnx"))
    assert feeders(s.graph, "cat1") == {"br_a_out", "br_b_out", "br_c_out"}
    # cat1's output passes a Relu (which would be fused, not pass-through): no further Concat
    assert plan_share(s, ["br_a", "br_b", "relu1"]).members == ("br_a_out", "br_b_out")
