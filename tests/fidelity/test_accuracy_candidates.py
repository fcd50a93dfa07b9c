"""The sensitivity ranking proposes int16 and float side by side, priced in µs and sorted by gain per
µs; "reach X dB for the least latency" plans one precision map (issue 53)."""

import json
import math

import pytest

from builders import save, spiky_chain_model
from qtquant.fidelity.accuracy import analyze_accuracy
from qtquant.fidelity.accuracy.reach import plan_reach
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.base.vocab import Precision


@pytest.fixture(scope="module")
def spiky(tmp_path_factory):
    return save(spiky_chain_model(spike=4000.0), tmp_path_factory.mktemp("spiky") / "spiky.onnx")


@pytest.fixture(scope="module")
def ranked(spiky):
    s = open_model(spiky)
    s.run_calibration()
    return s, analyze_accuracy(s, top=1)


def test_int16_and_float_are_ranked_side_by_side(ranked):
    _, rep = ranked
    rows = {(r.node, r.precision): r for r in rep.sensitivity}
    i16, fl = rows[("add_spike", Precision.INT16)], rows[("add_spike", Precision.FLOAT)]
    assert not i16.estimate and not fl.estimate  # the top unit is measured both ways
    assert i16.gain > 10 and fl.gain > 10
    # int16 stays on the BPU: cheaper than the CPU (on this tiny Add the BPU layer's fixed overhead hides its
    # extra bytes, so it may cost nothing measurable)
    assert 0 <= i16.latency_delta_us < fl.latency_delta_us
    assert i16.gain_per_us > fl.gain_per_us
    assert rep.sensitivity[0] is i16  # the cheapest fix per µs first
    worth = [r for r in rep.sensitivity if r.worth]
    for measured in (True, False):  # the measured first, then the estimates: each by gain per µs
        per = [r.gain_per_us for r in worth if r.estimate is not measured and r.gain_per_us is not None]
        assert per == sorted(per, reverse=True)
    assert [r.estimate for r in worth] == sorted(r.estimate for r in worth)
    assert all(not r.worth for r in rep.sensitivity[len(worth):])


def test_accuracy_cli_gives_gain_per_us(spiky, capsys):
    assert main(["accuracy", spiky, "--top", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sens = doc["sensitivity"]
    assert {"int16", "float"} <= {r["precision"] for r in sens}
    assert all("gain_per_us" in r for r in sens)
    assert sens[0]["node"] == "add_spike" and sens[0]["precision"] == "int16"
    assert main(["accuracy", spiky, "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "dB/µs" in text and "int16" in text


def test_reach_takes_the_cheapest_fix_that_gets_there(ranked):
    s, rep = ranked
    start = rep.base.worst_db
    i16 = next(r for r in rep.sensitivity if r.precision is Precision.INT16 and not r.estimate)
    target = start + i16.gain - 1.0  # int16 of add_spike is enough
    plan = plan_reach(s, target, rep)
    assert plan.reached and plan.worst >= target
    assert dict(plan.precision) == {t: Precision.INT16 for t in i16.tensors}
    assert plan.latency_us == pytest.approx(i16.latency_delta_us)
    assert s.options.precision == {}  # planning changes nothing
    assert "reached" in plan.text()
    unreachable = plan_reach(s, 500.0, rep)
    assert not unreachable.reached and math.isfinite(unreachable.worst) and "not reached" in unreachable.text()


def test_accuracy_cli_reach(spiky, capsys):
    assert main(["accuracy", spiky, "--top", "1", "--reach", "20", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reach"]["reached"] and doc["reach"]["options"] == "--int16 add_spike"
    assert doc["reach"]["precision"] == {"b": "int16"}
    assert main(["accuracy", spiky, "--top", "1", "--reach", "20"]) == 0
    assert "as options: --int16 add_spike" in capsys.readouterr().out
