"""Auto-share: cheap Concats shared, the box/score head flagged with a reason, nested merges."""

from builders import RESCALING_MARCH, detector_model, save
from qtquant.quant.autoshare import auto_share, plan_auto_share
from qtquant.quant.domains import Policy
from qtquant.app import open_model
from qtquant.model.scales import bits_lost
from qtquant.app import Options


def _session(tmp_path, options=Options(march=RESCALING_MARCH), **kw):
    s = open_model(save(detector_model(**kw), tmp_path / "det.onnx"), options=options)
    s.run_calibration()
    return s


def _by_node(concats):
    return {c.node: c for c in concats}


def test_cheap_concats_shared_head_flagged(tmp_path):
    s = _session(tmp_path)
    before = _by_node(s.concats())
    assert before["cat1"].rescales
    # the export leaves the head's output (boxes next to scores) in float: nothing is rescaled there
    assert before["head"].export_float and before["head"].rescales == 0
    rep = auto_share(s)
    after = _by_node(s.concats())
    assert {"cat1", "cat2"} <= set(rep.grouped)
    for name in rep.grouped:
        assert after[name].rescales == 0
    # the head is left alone, with the widest and narrowest member and the bits in the reason
    reasons = dict(rep.skipped)
    assert "head" in reasons and after["head"].rescales == before["head"].rescales
    why = reasons["head"]
    assert "'box' (Mul" in why and "'score' (Sigmoid" in why and "bits > 1" in why
    dm = s.baseline_domains
    expect = bits_lost(dm.member_range["score"], (dm.member_range["box"][0], dm.member_range["box"][1]), dm.scheme)
    assert f"{expect:.1f} bits" in why and expect > 5
    head = next(d for d in rep.decisions if d.concat == "head")
    assert head.widest == "box" and head.narrowest == "score"
    # no "could share within N bits" suggestion: the report names no share it does not make
    assert "could share" not in rep.text() and "split:" not in rep.text()
    # feeding the model outputs is noted
    assert any(c == "head" and "model output" in n for c, n in rep.notes)
    assert "FLAGGED  head" in rep.text()


def test_nested_concats_merge_transitively(tmp_path):
    s = _session(tmp_path)
    rep = auto_share(s)
    dm = s.domains
    nested = {dm.of[t] for t in ("c0_out", "c1_out", "cat1_out", "c2_out", "p2_out", "cat2_out")}
    assert len(nested) == 1
    # one group holds both Concats' members
    g = next(g for g in rep.groups if "cat2_out" in g.members)
    assert {"c0_out", "c1_out", "cat1_out", "p2_out", "cat2_out"} <= set(g.members)


def test_merge_that_would_hurt_earlier_members_is_refused(tmp_path):
    # c2 is 40x wider: joining cat2 would cost cat1's members (not only cat2's) many bits.
    s = _session(tmp_path, gains=(1.0, 1.3, 40.0))
    rep = auto_share(s)
    assert "cat1" in rep.grouped
    reasons = dict(rep.skipped)
    assert "cat2" in reasons and "p2_out" not in s.groups.group_of("c0_out").members
    assert s.domains.of["c0_out"] != s.domains.of["c2_out"]


def test_threshold_controls_the_head(tmp_path):
    s = _session(tmp_path)
    rep = auto_share(s, max_bits_lost=20.0)
    assert "head" in rep.grouped and not rep.skipped
    assert _by_node(s.concats())["head"].rescales == 0


def test_default_threshold_comes_from_options(tmp_path):
    s = _session(tmp_path, options=Options(march=RESCALING_MARCH, auto_share_max_bits_lost=20.0))
    assert "head" in auto_share(s).grouped


def test_idempotent_and_dry_run(tmp_path):
    s = _session(tmp_path)
    rep0, groups = plan_auto_share(s)
    assert len(s.groups) == 0 and groups  # planning changes nothing
    auto_share(s)
    snap = s.groups.snapshot()
    rep2 = auto_share(s)
    assert not rep2.grouped and set(rep2.already) >= set(rep0.grouped)
    assert s.groups.snapshot()[0] == snap[0]


def test_other_policies_still_flag_the_head(tmp_path):
    # Under 'output' the head's shared range is the output's own (already the box range),
    # under 'max-input' the widest input: either way the score member still loses > 1 bit.
    for policy in (Policy.OUTPUT, Policy.MAX_INPUT):
        s = _session(tmp_path, options=Options(march=RESCALING_MARCH, policy=policy))
        rep = auto_share(s)
        assert "head" in dict(rep.skipped)
        assert "cat1" in rep.grouped


def test_clipping_policies_are_refused(tmp_path):
    # uint8 + max-input: the shared range is one input's range; a member lying mostly outside it
    # would be clipped, which 'bits lost' does not show.  Auto-share must refuse and say so.
    from qtquant.model.scales import Scheme

    s = _session(tmp_path,
                 options=Options(march=RESCALING_MARCH, policy=Policy.MAX_INPUT, scheme=Scheme.ASYMMETRIC_UINT8))
    dm = s.domains
    s.calibration.ranges["c1_out"] = (-9.0, -1.0)  # all negative, narrower span than c0
    s.calibration.ranges["c0_out"] = (0.0, 12.0)
    s.calibration.ranges["cat1_out"] = (-9.0, 12.0)
    s.set_calibration(s.calibration)
    rep = auto_share(s)
    reasons = dict(rep.skipped)
    assert "cat1" in reasons and "would clip 'c1_out'" in reasons["cat1"] and "span" in reasons["cat1"]
    assert dm is not s.domains
