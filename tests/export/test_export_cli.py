"""``qtquant fix`` end to end, and the TensorQuantOverrides round trip through quantize_static."""

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qtquant.quant.autoshare import auto_share
from qtquant.cli import main
from qtquant.export.overrides import load_overrides, overrides_dict, write_overrides
from qtquant.app import open_model
from qtquant.files.plan import load_plan


def _row(out, what):
    line = next(line for line in out.splitlines() if line.startswith(what))
    return line[len(what):].split()


def test_fix_prints_before_after_and_writes_everything(det_path, tmp_path, capsys):
    out, plan, ov = tmp_path / "fixed.onnx", tmp_path / "plan.json", tmp_path / "ov.json"
    rc = main(["fix", det_path, "--auto-share", "-o", str(out), "--plan-out", str(plan),
               "--overrides-out", str(ov), "--calib-count", "4"])
    text = capsys.readouterr().out
    assert rc == 0
    before, after, change = _row(text, "rescales")
    assert int(after) < int(before) and int(change) == int(after) - int(before)
    assert int(after) == 0  # the flagged head has none: the export leaves its output in float
    b, a, d = _row(text, "SQNR feat (dB)")
    # Sharing cat1/cat2 moves the neck's scales, which 'feat' reads: a small change, not a collapse.
    assert abs(float(a) - float(b)) < 1.0
    assert "FLAGGED  head" in text and "mismatched Concats" in text
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert len(load_plan(plan).groups) >= 1
    assert json.loads(ov.read_text())["cat1_out"][0]["quant_type"] == "QInt8"


def test_fix_json_and_without_groups(det_path, tmp_path, capsys):
    out = tmp_path / "plain.onnx"
    assert main(["fix", det_path, "-o", str(out), "--json", "--calib-count", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["what"]: r for r in doc["table"]}
    assert rows["rescales"]["before"] == rows["rescales"]["after"] and doc["groups"] == []
    assert out.is_file()
    # the same counts as numbers, with the file's identity
    summ = doc["summary"]
    assert summ["before"]["rescales"] == int(rows["rescales"]["before"]) == summ["after"]["rescales"]
    assert isinstance(summ["after"]["latency_ms"], float) and summ["after"]["latency_ms"] > 0
    assert doc["schema_version"] >= 1 and len(doc["model_sha256"]) == 64 and doc["march"] == "bayes-e"


def test_fix_refuses_to_overwrite_input(det_path, capsys):
    before = open(det_path, "rb").read()
    assert main(["fix", det_path, "--auto-share", "-o", det_path]) == 3
    err = capsys.readouterr().err
    assert "refusing to overwrite the input" in err and err.count("\n") == 1
    assert open(det_path, "rb").read() == before


def test_fix_outputs_never_replace_the_plan_read_or_each_other(det_path, tmp_path, capsys):
    plan = tmp_path / "p.json"
    assert main(["fix", det_path, "--auto-share", "-o", str(tmp_path / "a.onnx"), "--plan-out", str(plan),
                 "--calib-count", "2"]) == 0
    capsys.readouterr()
    kept = plan.read_bytes()
    assert main(["fix", det_path, "--plan", str(plan), "--plan-out", str(plan), "-o", str(tmp_path / "b.onnx")]) == 3
    assert "refusing to overwrite the input p.json" in capsys.readouterr().err and plan.read_bytes() == kept
    out = tmp_path / "c.onnx"
    assert main(["fix", det_path, "-o", str(out), "--plan-out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "plan file c.onnx is also the output model; give each output its own path" in err
    assert main(["perf", det_path, "--report", str(tmp_path / "r.html"), "--csv", str(tmp_path / "r.html")]) == 3
    assert "CSV file r.html is also the report" in capsys.readouterr().err


def test_fix_requires_output(det_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fix", det_path])
    assert e.value.code == 2


def test_overrides_give_quantize_static_the_same_scales(det_path, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    s = open_model(det_path)
    s.run_calibration()
    auto_share(s)
    ov_path = write_overrides(s, tmp_path / "ov.json")
    assert set(json.loads(ov_path.read_text())) == set(overrides_dict(s))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(s.calibration.holdout)

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "ort.onnx"
    quantize_static(det_path, str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": True, "TensorQuantOverrides": load_overrides(ov_path)})
    m = onnx.load(str(out))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    for cat in ("cat1", "cat2"):
        node = next(n for n in m.graph.node if n.op_type == "Concat" and n.name == cat)
        got = {float(inits[producer[i].input[1]]) for i in node.input}
        assert got == {float(np.float32(s.domains.scale_of(node.output[0])))}, cat


def test_fix_says_when_an_output_is_lost(det_path, tmp_path, capsys, monkeypatch):
    """fix prints the fidelity report's 'low:' line as analyze does (with the bar raised, every output is low)."""
    import qtquant.fidelity.metrics as metrics

    monkeypatch.setattr(metrics, "LOW_SQNR_DB", 1000.0)
    assert main(["fix", det_path, "-o", str(tmp_path / "f.onnx"), "--calib-count", "4"]) == 0
    low = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("low: ")]
    assert low and all("is under 1000 dB" in ln for ln in low)


def test_auto_share_on_its_own_export_finds_everything_matched(det_path, tmp_path, capsys):
    """Re-running fix --auto-share on the file it wrote said "N Concats shared … 0 already matched":
    the file's equal scales sit in separate domains.  They count as matched now, and nothing is grouped."""
    first = tmp_path / "first.onnx"
    assert main(["fix", det_path, "--auto-share", "-o", str(first), "--calib-count", "4", "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)["auto_share"]["grouped"]
    assert shared
    assert main(["fix", str(first), "--auto-share", "-o", str(tmp_path / "again.onnx"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["auto_share"]["grouped"] == [] and doc["groups"] == []
    assert any(n["note"] == "the file gives its members one scale already" and n["concat"] in shared
               for n in doc["auto_share"]["notes"])
