"""Groups: sharing, merging, every constraint refusal, undo snapshots (DESIGN §3)."""

import pytest
from onnx import TensorProto

from builders import fp16_model, save
from qtquant.base.errors import QtQuantError, ShareRefused
from qtquant.quant.groups import GroupSet, remove_member, restore, share, unshare
from qtquant.app import open_model


def _rescales(s, node):
    return next(c for c in s.concats() if c.node == node).rescales


def test_share_ties_domain_and_notifies(session):
    events = []
    session.events.connect(lambda info: events.append(info.signal.name))
    rev = session.revision
    assert _rescales(session, "cat1") >= 1
    g = share(session, ["c0_out", "c1_out", "cat1_out"])
    assert g.members == ("c0_out", "c1_out", "cat1_out")
    assert events == ["groups"] and session.revision > rev
    dm = session.domains
    assert dm.of["c0_out"] == dm.of["c1_out"] == dm.of["cat1_out"]
    assert _rescales(session, "cat1") == 0
    # union policy: the domain covers both members' ranges
    d = dm.domain_of("c0_out")
    r0, r1 = session.ranges["c0_out"], session.ranges["c1_out"]
    assert d.lo == pytest.approx(min(r0[0], r1[0])) and d.hi >= max(r0[1], r1[1]) - 1e-9


def test_sharing_a_grouped_tensor_merges_groups(session):
    a = share(session, ["c0_out", "c1_out"])
    b = share(session, ["cat1_out", "p2_out"])
    assert len(session.groups) == 2 and a.id != b.id
    m = share(session, ["c1_out", "cat1_out"])  # bridges both groups: union
    assert len(session.groups) == 1
    assert m.id == min(a.id, b.id)
    assert set(m.members) == {"c0_out", "c1_out", "cat1_out", "p2_out"}
    # a tensor is in exactly one group
    assert sum("c1_out" in g.members for g in session.groups) == 1


def test_transitive_domains_through_pass_through(session):
    # p2_out is a MaxPool view of c2_out: sharing p2_out pulls c2_out in too.
    share(session, ["c0_out", "c1_out", "cat1_out"])
    share(session, ["cat1_out", "p2_out", "cat2_out"])
    dm = session.domains
    ids = {dm.of[t] for t in ("c0_out", "c1_out", "cat1_out", "c2_out", "p2_out", "cat2_out")}
    assert len(ids) == 1
    assert _rescales(session, "cat1") == 0 and _rescales(session, "cat2") == 0


@pytest.mark.parametrize("tensors, words", [
    (["c0_out", "nope"], "'nope' is not in the model"),
    (["c0_out", "split_sizes"], "not quantized"),  # int64 constant
    (["c0_out", "c0.w"], "weight of 'c0'"),  # per-channel weight
    (["c0_out"], "at least two"),
    (["c0_out", "c0_out"], "at least two"),
])
def test_refusals_are_clear_and_change_nothing(session, tensors, words):
    share(session, ["c1_out", "cat1_out"])
    snap = session.groups.snapshot()
    rev = session.revision
    with pytest.raises(ShareRefused) as e:
        share(session, tensors)
    msg = str(e.value)
    assert words in msg and "\n" not in msg
    assert isinstance(e.value, QtQuantError)
    assert session.groups.snapshot() == snap and session.revision == rev


def test_refuses_different_dtypes_and_unquantized(tmp_path):
    # float64 stays float64 (a float16 file is widened to float32 on open)
    s = open_model(save(fp16_model(TensorProto.DOUBLE), tmp_path / "f64.onnx"))
    assert s.graph.tensors["r16"].dtype_name == "double"
    with pytest.raises(ShareRefused, match="different dtypes: 'c0_out' is float32 but 'r16' is float64"):
        s.groups.share(s.graph, ["c0_out", "r16"])
    with pytest.raises(ShareRefused, match=r"'r32' is not quantized \(it is produced by Cast"):
        s.groups.share(s.graph, ["c0_out", "r32"])
    with pytest.raises(ShareRefused, match="'shp' is not quantized"):
        s.groups.share(s.graph, ["c0_out", "shp"])
    assert len(s.groups) == 0


def test_constants_can_join_and_are_ranged(session):
    g = share(session, ["score", "anchor"])
    assert "anchor" in g.members
    dm = session.domains
    d = dm.domain_of("anchor")
    assert d is not None and dm.of["score"] == d.id
    # the constant's values (0..0.5) take part in the union range
    assert d.lo <= 0.0 and d.hi >= 0.5 - 1e-6


def test_other_consumers_are_reported(session):
    # 'score' feeds the head Concat and cat_c: sharing it is allowed and said so.
    g = share(session, ["box", "score"])
    assert any("'score' also feeds" in n for n in g.notes)
    head = next(c for c in session.concats() if c.node == "head")
    assert next(m for m in head.inputs if m.tensor == "score").other_consumers == 1


def test_unshare_remove_member_snapshot_restore(session):
    snap0 = session.groups.snapshot()
    g = share(session, ["c0_out", "c1_out", "cat1_out"])
    snap1 = session.groups.snapshot()
    g2 = remove_member(session, g.id, "c0_out")
    assert g2.members == ("c1_out", "cat1_out")
    assert session.domains.of["c0_out"] != session.domains.of["c1_out"]
    assert remove_member(session, g.id, "c1_out") is None  # fewer than two: dissolved
    assert len(session.groups) == 0
    with pytest.raises(ShareRefused, match="no group"):
        unshare(session, g.id)
    restore(session, snap1)
    assert session.groups.get(g.id).members == g.members
    assert session.domains.of["c0_out"] == session.domains.of["cat1_out"]
    unshare(session, g.id)
    assert session.groups.snapshot()[0] == snap0[0]
    # after unshare the id is not handed out again
    assert share(session, ["c0_out", "c1_out"]).id > g.id


def test_snapshot_is_immutable():
    gs = GroupSet()
    snap = gs.snapshot()
    assert snap == ((), 0)
    with pytest.raises(TypeError):
        snap[0][0] = None  # tuples: stored history cannot be mutated by callers
