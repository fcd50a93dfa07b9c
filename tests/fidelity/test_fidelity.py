"""Fidelity: SQNR/cosine arithmetic, before/after, per-member SQNR, caching, analyze output."""

import json
import math

import numpy as np
import pytest

from qtquant.cli import main
from qtquant.base.errors import BadInputError
from qtquant.export import qdq as qdq_mod
from qtquant.fidelity.measure import cosine, measure_session, sqnr_db
from qtquant.quant.groups import share, unshare
from qtquant.app import open_model


def test_metrics_arithmetic():
    assert sqnr_db(np.array([3.0, 4.0]), np.array([3.0, 3.0])) == pytest.approx(10 * math.log10(25.0))
    assert sqnr_db(np.ones(4), np.ones(4)) == math.inf
    assert cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0 and cosine(np.zeros(3), np.ones(3)) == 0.0


def test_sharing_the_head_shows_in_member_sqnr(session):
    share(session, ["box", "score"])  # what auto-share refuses to do (the output, which ships in float, cannot join)
    fid = measure_session(session)
    assert fid.outputs == ["boxes", "scores", "scored", "feat"] and fid.samples >= 1
    score = next(m for m in fid.members if m.tensor == "score")
    assert score.before_sqnr_db > 30 and score.sqnr_db < 15  # the class scores are destroyed
    assert score.bits_lost > 5
    box = next(m for m in fid.members if m.tensor == "box")
    assert box.sqnr_db == pytest.approx(box.before_sqnr_db, abs=0.5)
    # an output whose path the group does not touch is identical before and after
    assert fid.sqnr_db["feat"] == pytest.approx(fid.before_sqnr_db["feat"])
    assert 0.9 < fid.cosine["feat"] <= 1.0
    # 'scored' reads the score through cat_c: sharing the head's scale drops it
    assert fid.sqnr_db["scored"] < fid.before_sqnr_db["scored"] - 3
    json.dumps(fid.to_dict(), allow_nan=False)
    text = fid.text()
    assert "boxes" in text and "own scale -> shared scale" in text and "score" in text
    # An output measured under 10 dB is said to be lost, in words, and only such an output
    low = {o for o in fid.outputs if fid.sqnr_db[o] < 10}
    said = {ln.split()[1] for ln in text.splitlines() if ln.startswith("low: ")}
    assert said == {fid.after[o].headline.label.split("[")[0] for o in low}
    fid.after["feat"].whole.sqnr_db = 3.25  # (feat has no slices: its whole tensor is its headline)
    assert "low: feat at 3.25 dB is under 10 dB: its error is more than a tenth of its signal" in fid.text()


def test_results_are_cached_between_edits(session, monkeypatch):
    calls = []
    real = qdq_mod.build_qdq_model

    def counting(s, dm=None, **kw):
        if dm is None or dm is s.domains or dm is s.baseline_domains:  # not the reuse check's moved copy
            calls.append(dm)
        return real(s, dm, **kw)

    monkeypatch.setattr(qdq_mod, "build_qdq_model", counting)
    share(session, ["c0_out", "c1_out", "cat1_out"])
    f1 = measure_session(session)
    assert len(calls) == 2  # before and after
    f2 = measure_session(session)
    assert len(calls) == 2 and f2.sqnr_db == f1.sqnr_db  # nothing changed: nothing rebuilt
    unshare(session, session.groups.groups[0].id)
    f3 = measure_session(session)
    # no groups: the session's domains equal the baseline's, so the baseline run is reused
    assert session.domains == session.baseline_domains and len(calls) == 2
    assert f3.sqnr_db == f3.before_sqnr_db
    assert f3.revision == session.revision
    share(session, ["c0_out", "c1_out"])
    measure_session(session)
    assert len(calls) == 3 and calls[-1] is session.domains  # only the 'after' model is rebuilt after an edit


def test_needs_holdout(det_path):
    s = open_model(det_path)
    with pytest.raises(BadInputError, match="held-back"):
        measure_session(s)


def test_analyze_shows_fidelity(det_path, capsys):
    assert main(["analyze", det_path, "--no-perf", "--calib-count", "2"]) == 0
    out = capsys.readouterr().out
    assert "SQNR dB" in out and "feat" in out
    assert main(["analyze", det_path, "--no-perf", "--calib-count", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["summary"]["sqnr_db"]) == {"boxes", "scores", "scored", "feat"}


def test_float_outputs_measured_separately(session):
    q = measure_session(session)
    f = measure_session(session, quantize_outputs=False)
    # 'feat' is a Relu output: without its own Q/DQ it can only get closer to float
    assert f.sqnr_db["feat"] >= q.sqnr_db["feat"] - 1e-9
    assert f.sqnr_db["feat"] != q.sqnr_db["feat"]


def test_a_map_measured_before_is_not_run_again_and_gives_the_same_figures(session, monkeypatch):
    calls = []
    real = qdq_mod.build_qdq_model
    monkeypatch.setattr(qdq_mod, "build_qdq_model", lambda s, dm=None, **kw: (
        calls.append(dm) if dm is s.domains or dm is s.baseline_domains else None) or real(s, dm, **kw))
    share(session, ["box", "score"])
    f1 = measure_session(session)
    share(session, ["c0_out", "c1_out", "cat1_out"])
    f2 = measure_session(session)
    n = len(calls)
    unshare(session, session.groups.group_of("c0_out").id)  # an undo: a new map equal to the first one
    dm = session.domains
    f3 = measure_session(session)
    assert len(calls) == n and all(c is not dm for c in calls)
    assert f3.to_dict() == f1.to_dict() != f2.to_dict()
    # and what a cold check of that state gives (no caches: another graph object)
    cold = open_model(session.graph.path, options=session.options)
    cold.run_calibration()
    share(cold, ["box", "score"])
    assert measure_session(cold).to_dict() == f3.to_dict()


def test_member_sqnr_is_the_same_with_or_without_scratch_reuse(monkeypatch):
    """Members above the scratch limit get fresh arrays (nothing that big stays held per thread);
    the figure must not depend on which way a member went, and equals the plain formula."""
    from types import SimpleNamespace

    import qtquant.fidelity.measure as fid_mod
    from qtquant.model.scales import QParams
    from qtquant.base.vocab import Scheme

    rng = np.random.default_rng(0)
    parts = [rng.normal(0, 2, (3, 40)).astype(np.float32) for _ in range(4)]
    qp = QParams(scale=0.05, zero_point=0, scheme=Scheme.SYMMETRIC_INT8)

    def figure():
        cache = SimpleNamespace(tensors={"t": parts}, member_sqnr={}, member_signal={})
        return fid_mod._member_sqnr(cache, "t", qp)

    x = np.concatenate([p.ravel() for p in parts]).astype(np.float64)
    q = np.clip(np.rint(x / 0.05), -128, 127) * 0.05
    expect = 10 * math.log10(np.sum(x ** 2) / np.sum((x - q) ** 2))
    reused = figure()
    monkeypatch.setattr(fid_mod, "_SCRATCH_MAX", 0)  # every member above the limit
    monkeypatch.setattr(fid_mod, "_scratches", __import__("threading").local())
    fresh = figure()
    assert fresh == reused and fresh == pytest.approx(expect, rel=1e-6)
    assert getattr(fid_mod._scratches, "bufs", None) is None  # nothing was kept
