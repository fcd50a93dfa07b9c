"""The application session without Qt: typed events, results tied to revisions, the snapshot."""

import json
import threading

import pytest

from qtquant.app import Options, Result, Session, Snapshot
from qtquant.quant.autoshare import auto_share, plan_auto_share
from qtquant.quant.domains import Policy
from qtquant.quant.groups import share
from qtquant.model.scales import Scheme


@pytest.fixture
def events(session):
    seen = []
    session.events.connect(lambda info: seen.append(info.signal.name))
    return seen


def test_one_signal_per_kind(session, events):
    got = {}
    session.events.groups.connect(lambda: got.setdefault("groups", True))
    session.events.options.connect(lambda changed: got.setdefault("options", changed))
    session.events.calibrated.connect(lambda: got.setdefault("calibrated", True))
    share(session, ["c0_out", "c1_out"])
    session.set_options(march="nash-e")
    session.set_options(march="nash-e")  # the same value: no change, no event
    session.set_calibration(session.calibration)
    assert got == {"groups": True, "options": {"march": "nash-e"}, "calibrated": True}
    assert events == ["groups", "options", "calibrated"]


def test_auto_share_alone_emits_once(session, events):
    auto_share(session, 1.0)
    assert events == ["groups"]


def test_batch_emits_each_kind_once_in_order(session, events):
    with session.batch():
        share(session, ["c0_out", "c1_out"])
        session.set_options(policy="max-input")
        share(session, ["c1_out", "cat1_out"])
        session.set_options(march="nash-e")
        assert events == []
    assert events == ["groups", "options"]
    opts = []
    session.events.options.connect(opts.append)
    with session.batch():
        session.set_options(policy="union")
        session.set_options(march="bayes-e")
    assert opts == [{"policy": Policy.UNION, "march": "bayes-e"}]


def test_results_install_only_for_the_current_revision(session):
    got = []
    session.events.perf.connect(got.append)
    rev = session.revision
    assert session.perf is None and not session.is_stale(session.perf)
    assert session.set_perf("after", rev, baseline="before")
    assert session.perf == Result("after", rev) and session.perf_baseline == Result("before", rev)
    assert got == [Result("after", rev)] and not session.is_stale(session.perf)
    share(session, ["c0_out", "c1_out"])  # an edit: the result is now stale, and kept until replaced
    assert session.is_stale(session.perf) and session.perf.value == "after"
    assert not session.set_perf("late", rev)  # computed for the old revision: dropped
    assert session.perf.value == "after" and len(got) == 1
    assert session.set_perf("new", session.revision)  # no baseline given: the old one stays
    assert session.perf_baseline.value == "before" and not session.is_stale(session.perf)


def test_fidelity_result_and_staleness(session):
    got = []
    session.events.fidelity.connect(got.append)
    rev = session.revision
    assert session.set_fidelity("fid", rev) and got == [Result("fid", rev)]
    session.set_options(float_output_max_bits_lost=2.0)  # fidelity's float-output rule reads the threshold
    assert session.is_stale(session.fidelity)
    assert not session.set_fidelity("old", rev) and session.fidelity.value == "fid"


def test_calibration_clears_histograms_and_bumps_the_revision(session):
    session.histograms["c0_out"] = ([1], [0.0, 1.0])
    rev = session.revision
    session.set_calibration(session.calibration)
    assert session.histograms == {} and session.revision > rev


def test_options_take_any_spelling():
    o = Options(scheme="uint8-asym", policy="max-input", auto_share_max_bits_lost=2, float_output_max_bits_lost="3")
    assert o.scheme is Scheme.ASYMMETRIC_UINT8 and o.policy is Policy.MAX_INPUT
    assert o.auto_share_max_bits_lost == 2.0 and o.float_output_max_bits_lost == 3.0
    assert Options(scheme="sym").scheme is Scheme.SYMMETRIC_INT8
    with pytest.raises(ValueError):
        Options(policy="widest")


def test_snapshot_is_frozen_at_one_revision(session):
    share(session, ["c0_out", "c1_out"])
    cs = session.concats()
    snap = session.snapshot()
    assert isinstance(snap, Snapshot) and snap.revision == session.revision
    assert snap.concats() is cs  # what the session had built comes along
    assert snap.domains is session.domains and snap.baseline_domains is session.baseline_domains
    share(session, ["c1_out", "cat1_out"])  # the next edit
    assert len(snap.groups) == 1 and snap.groups.as_lists() == [("c0_out", "c1_out")]
    assert snap.revision < session.revision and snap.domains is not session.domains
    with pytest.raises(AttributeError):
        snap.revision = 0
    assert not hasattr(snap, "groups_changed")  # read-only: nothing can edit through it
    assert snap.ready and not snap.quantized_file and snap.ranges is session.calibration.ranges


def test_snapshot_concats_are_built_off_the_session(session):
    share(session, ["c0_out", "c1_out"])
    snap = session.snapshot()
    fresh = Session(session.graph, session.options)
    fresh.set_calibration(session.calibration)
    assert session.cached_concats() is None or snap.concats() is session.cached_concats()
    out = []
    t = threading.Thread(target=lambda: out.append(snap.concats(baseline=True)))
    t.start()
    t.join()
    assert [(c.node, c.rescales) for c in out[0]] == [(c.node, c.rescales) for c in fresh.concats()]


def test_core_functions_read_only_what_a_snapshot_has(session, tmp_path):
    """perf, fidelity, export, plan, overrides and auto-share planning run on a Snapshot."""
    from qtquant.export.overrides import write_overrides
    from qtquant.export.qdq import export_qdq
    from qtquant.fidelity.measure import measure_session
    from qtquant.perf import simulate_session
    from qtquant.files.plan import load_plan, plan_dict, save_plan

    share(session, ["c0_out", "c1_out", "cat1_out"])
    snap = session.snapshot()
    live = {"plan": plan_dict(session), "perf": simulate_session(session).total_ms,
            "base": simulate_session(session, baseline=True).total_ms}
    share(session, ["p2_out", "cat2_out"])  # edited meanwhile: the snapshot's answers do not move
    assert plan_dict(snap) == live["plan"]
    assert simulate_session(snap).total_ms == live["perf"]
    assert simulate_session(snap, baseline=True).total_ms == live["base"]
    report, groups = plan_auto_share(snap, 1.0)
    assert report.decisions and all(isinstance(g, list) for g in groups)
    assert [g.tensors for g in load_plan(save_plan(snap, tmp_path / "p.plan.json")).groups] == \
        [["c0_out", "c1_out", "cat1_out"]]
    json.loads(write_overrides(snap, tmp_path / "o.json").read_text())
    res = export_qdq(snap, tmp_path / "fixed.onnx")
    assert res.path.exists()
    fid = measure_session(snap)
    assert fid.revision == snap.revision and fid.outputs


def test_precision_set_from_a_one_pass_iterable(session):
    """The tensors are checked, then set: a generator of names is read once, not checked and lost."""
    session.set_precision((t for t in ["c0_out"]), "int16")
    assert session.options.precision.of("c0_out").value == "int16"
