"""The accuracy debugger: per-tensor SQNR against numpy, the sensitivity ranking, the JSON shape,
and auto-share by measured accuracy."""

import json

import numpy as np
import pytest

from builders import save, spiky_chain_model as _chain_model
from qtquant.fidelity.accuracy import analyze_accuracy
from qtquant.fidelity.accuracy.check import Bench
from qtquant.fidelity.accuracy.share import plan_sqnr_share
from qtquant.fidelity.accuracy.tensors import tensor_errors
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.fidelity.measure import fake_quant
from qtquant.fidelity.metrics import sqnr_db

@pytest.fixture
def chain(tmp_path):
    s = open_model(save(_chain_model(), tmp_path / "chain.onnx"))
    s.run_calibration()
    return s


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_cumulative_and_local_sqnr_match_numpy(chain):
    dm = chain.domains
    feeds = chain.calibration.holdout
    fq = {t: (lambda v, t=t: fake_quant(v, dm.qparams_of(t))) for t in ("x", "s", "m", "b", "c", "out")}
    ref = {t: [] for t in fq}
    quant = {t: [] for t in fq}
    for feed in feeds:
        x = np.asarray(feed["x"], np.float32)
        f = {"x": x}
        f["s"] = _sigmoid(f["x"]).astype(np.float32)
        f["m"] = f["s"] * np.float32(3)
        f["b"] = f["m"]  # spike 0
        f["c"] = f["b"]
        f["out"] = np.tanh(f["c"]).astype(np.float32)
        q = {"x": fq["x"](x)}
        q["s"] = fq["s"](_sigmoid(q["x"]).astype(np.float32))
        q["m"] = fq["m"](q["s"] * np.float32(3))
        q["b"] = fq["b"](q["m"])
        q["c"] = fq["c"](q["b"])
        q["out"] = fq["out"](np.tanh(q["c"]).astype(np.float32))
        for t in fq:
            ref[t].append(f[t])
            quant[t].append(q[t])
    errs = {e.tensor: e for e in tensor_errors(Bench(chain), dm)}
    assert set(errs) == set(fq)
    for t in fq:
        r, q = np.concatenate([a.ravel() for a in ref[t]]), np.concatenate([a.ravel() for a in quant[t]])
        assert errs[t].sqnr_db == pytest.approx(sqnr_db(r, q), abs=0.05), t
        assert errs[t].local_sqnr_db == pytest.approx(sqnr_db(r, fq[t](r)), abs=0.05), t
        assert errs[t].precision.value == "int8" and errs[t].node == (None if t == "x" else errs[t].node)
    # cumulative error only grows along the chain; the output's figure is below its local one
    assert errs["out"].sqnr_db < errs["out"].local_sqnr_db
    assert errs["m"].node == "mul3"


def test_chunks_do_not_change_the_figures(chain):
    bench = Bench(chain)
    whole = {e.tensor: e.sqnr_db for e in tensor_errors(bench)}
    parts = {e.tensor: e.sqnr_db for e in tensor_errors(bench, chunk_bytes=1)}  # one tensor per run
    assert parts == pytest.approx(whole)


def test_ranking_finds_the_node_whose_rounding_dominates(tmp_path):
    s = open_model(save(_chain_model(spike=4000.0), tmp_path / "spiky.onnx"))
    s.run_calibration()
    rep = analyze_accuracy(s, top=2)
    top = rep.sensitivity[0]
    # b = m + spike has a scale ~1000x too coarse for m: keeping add_spike in float fixes the output
    assert top.node == "add_spike" and not top.estimate and top.gain > 10
    assert "b" in top.tensors
    per = [r.gain_per_us for r in rep.sensitivity if r.worth and not r.estimate]
    assert per == sorted(per, reverse=True)  # the measured by gain per µs of latency
    # the estimate put it first too: it was measured (top=2 measures two units, as int16 and as float)
    assert sum(1 for r in rep.sensitivity if not r.estimate) == 4
    # the damage shows in the cumulative figure after it: c = b - spike has lost m's values
    assert rep.tensor("c").sqnr_db < rep.tensor("m").sqnr_db - 20


def test_accuracy_json_shape(tmp_path, capsys):
    path = save(_chain_model(spike=4000.0), tmp_path / "spiky.onnx")
    assert main(["accuracy", path, "--top", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"samples", "outputs", "tensors", "sensitivity"} <= set(doc)
    assert doc["samples"] == 16 and doc["held_out"] is False
    assert doc["outputs"] and all({"output", "slice", "sqnr_db"} <= set(o) for o in doc["outputs"])
    assert all({"tensor", "node", "precision", "sqnr_db", "local_sqnr_db"} <= set(t) for t in doc["tensors"])
    sens = doc["sensitivity"]
    assert sens and all({"node", "precision", "gain_db", "latency_delta_us"} <= set(r) for r in sens)
    per = [r["gain_per_us"] for r in sens if r["gain_db"] is not None and r["gain_db"] >= 0.05 and not r["estimate"]]
    assert per == sorted(per, reverse=True)
    assert sens[0]["node"] == "add_spike"
    kept_float = next(r for r in sens if r["node"] == "add_spike" and r["precision"] == "float")
    assert kept_float["latency_delta_us"] > 0  # a CPU node costs time
    # a measured row has its worst part after; an estimate none (its figure is on another basis)
    assert not sens[0]["estimate"] and sens[0]["worst_sqnr_db"] is not None
    est = [r for r in sens if r["estimate"]]
    assert est and all(r["worst_sqnr_db"] is None and r["worst_slice"] is None for r in est)
    assert main(["accuracy", path, "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "add_spike" in text and "16 samples in-sample" in text and "measured" in text


def test_accuracy_bad_input_is_one_line(tmp_path, capsys):
    assert main(["accuracy", str(tmp_path / "missing.onnx")]) == 3
    assert main(["accuracy", save(_chain_model(), tmp_path / "c.onnx"), "--top", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("qtquant: error:") == 2


def test_sqnr_share_respects_the_budget(session):
    rep, groups = plan_sqnr_share(session, 0.5)
    assert rep.steps[0].concat == "" and rep.candidates
    s0 = rep.start.worst_db
    for st in rep.steps[1:]:
        assert (s0 - st.worst_db <= 0.5) == st.accepted
    assert all(st.accepted for st in rep.steps[:-1])  # only the last step can be the refused one
    assert rep.final.removed == sum(c.rescales for c in session.concats()) - rep.final.rescales
    assert session.groups.as_lists() == []  # planning changes nothing
    # a huge budget shares every candidate that saves latency; the curve ends where sharing ends
    from qtquant.app import CommandStack
    from qtquant.app.sharing import share_by_accuracy

    big = share_by_accuracy(CommandStack(session), 1000.0)
    dm = session.domains
    assert big.accepted and big.groups
    assert all(len({dm.of[m] for m in c.members}) == 1 for c in big.candidates if c.gain_us > 0)
    assert big.final.removed > 0 and session.groups.as_lists()
    text = big.text()
    assert "trade-off curve" in text and "start" in text and "change dB" in text
    # signed as a change of SQNR: negative where sharing cost dB, positive where it gained
    s0 = big.start.worst_db
    assert [r[6] for r in big.curve_rows()] == [f"{st.worst_db - s0:+.2f}" for st in big.steps]
    c = big.candidates[0]
    assert f"{c.concat} {c.gain_us:.1f} µs, {-c.loss_db:+.2f} dB" in text
    json.dumps(big.to_dict(), allow_nan=False)


def test_fix_max_sqnr_drop_prints_the_curve(det_path, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    assert main(["fix", det_path, "--max-sqnr-drop", "0.2", "-o", str(out), "--no-perf"]) == 0
    text = capsys.readouterr().out
    assert "auto-share by measured accuracy" in text and "trade-off curve" in text and out.exists()
    assert main(["fix", det_path, "--max-sqnr-drop", "0.2", "--auto-share", "-o", str(out)]) == 2  # a usage error
    assert main(["analyze", det_path, "--max-sqnr-drop", "0.2", "--no-perf", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    curve = doc["sqnr_share"]["curve"]
    assert curve[0]["concat"] is None and all(s["drop_db"] <= 0.2 for s in curve if s["accepted"])


def test_a_ranking_without_information_says_so_and_the_collapse_is_located():
    """Gains that are all rounding noise get a sentence instead of a ranking to trust, and a lost
    output gets the first tensor in graph order where the cumulative SQNR falls under 10 dB."""
    from types import SimpleNamespace

    from qtquant.fidelity.accuracy.report import AccuracyReport
    from qtquant.fidelity.accuracy.sensitivity import Sensitivity
    from qtquant.fidelity.accuracy.tensors import TensorError
    from qtquant.app.views.accuracy import status_text
    from qtquant.base.vocab import Precision

    tensors = [TensorError("x", None, Precision.INT8, 40.0, 40.0), TensorError("a", "A", Precision.INT8, 22.0, 27.0),
               TensorError("b", "B", Precision.INT8, 7.5, 30.8), TensorError("y", "Y", Precision.INT8, 0.0, 61.0)]
    flat = [Sensitivity("A", Precision.FLOAT, 0.01, False), Sensitivity("B", Precision.FLOAT, -0.02, False),
            Sensitivity("Y", Precision.FLOAT, 3.0, True)]  # an estimate does not count
    rep = AccuracyReport(7, True, "rt", SimpleNamespace(worst_db=0.0, worst_label="y", worst_agreement=None), tensors,
                         flat)
    assert rep.no_single_fix.startswith("no node in int16 or float alone moves the worst slice")
    assert "(2 measured)" in rep.no_single_fix
    assert rep.collapse_text.startswith(
        "cumulative SQNR first falls under 10 dB at b (7.50 dB, 30.80 dB local; tensor 3 of 4")
    assert rep.no_single_fix in status_text(rep)
    helps = flat[:1] + [Sensitivity("B", Precision.FLOAT, 2.5, False)]
    fine = AccuracyReport(7, True, "rt", SimpleNamespace(worst_db=12.5, worst_label="y", worst_agreement=None),
                          tensors, helps)
    assert fine.no_single_fix == "" and fine.collapse_text == "" and "alone" not in status_text(fine)


def test_accuracy_shows_its_progress_on_a_terminal(tmp_path, capsys, monkeypatch):
    """PP-OCR's ranking ran four minutes without a word: on a terminal each stage counts up on
    stderr (stdout keeps the report alone); a pipe gets no progress line."""
    import sys

    path = save(_chain_model(spike=4000.0), tmp_path / "spiky.onnx")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["accuracy", path, "--top", "1"]) == 0
    cap = capsys.readouterr()
    assert "accuracy (estimate): " in cap.err and "nodes estimated" in cap.err
    assert "accuracy (measure): 2/2 candidates measured" in cap.err  # one unit, as int16 and as float
    assert "accuracy (" not in cap.out
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert main(["accuracy", path, "--top", "1"]) == 0
    assert "accuracy (" not in capsys.readouterr().err
