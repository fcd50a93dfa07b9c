"""``qtquant fix`` on a QDQ file measures the written file against the file it was given: a QDQ file
has no float original, and the fix printed no accuracy figure at all, while the export (the target's
scheme: weights per output channel) computes other numbers than the file even with no edit."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from builders import branchy_concat_model, save
from ortkit import ort_qdq_file
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.fidelity.filecompare import qdq_counts


def _ort_file(tmp_path, per_channel: bool) -> str:
    src = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "f.onnx")
    return ort_qdq_file(src, str(tmp_path / f"q{int(per_channel)}.onnx"), per_channel=per_channel)


def test_fix_of_a_qdq_file_says_how_far_the_written_file_is(tmp_path, capsys):
    src = _ort_file(tmp_path, per_channel=False)
    counts = qdq_counts(src)
    assert counts.weights == 3 and counts.per_channel == 0 and counts.biases == 3 and counts.activations >= 4
    out = tmp_path / "fixed.onnx"
    assert main(["fix", src, "-o", str(out), "--no-perf", "--calib-count", "3"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("against the input file"))
    assert "on 3 synthetic samples" in line
    assert "3 weights (0 per channel)" in line and "3 weights (3 per channel)" in line
    y = next(x for x in text.splitlines() if x.startswith("  y: "))
    db = float(y.split()[1])
    assert 15 < db < 80  # per-channel weights compute other numbers: a figure, not "identical"
    assert "give --calib with representative data" in text
    assert "against the input file's float view: the input file " in text
    # The figure is the two files run in onnxruntime, as a user runs them
    from qtquant.fidelity.metrics import sqnr_db

    rng = np.random.default_rng(7)
    x = rng.random((1, 3, 16, 16), dtype=np.float32)
    a = ort.InferenceSession(src).run(["y"], {"x": x})[0]
    b = ort.InferenceSession(str(out)).run(["y"], {"x": x})[0]
    assert abs(sqnr_db(a, b) - db) < 12  # (one sample of other data: the same order)

    assert main(["fix", src, "-o", str(tmp_path / "f2.onnx"), "--no-perf", "--calib-count", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["against_input"]
    assert doc["samples"] == 3 and doc["data"] == "synthetic" and doc["input"]["weights"] == 3
    assert doc["outputs"]["y"]["sqnr_db"] == float(f"{doc['outputs']['y']['sqnr_db']}")
    view_in, view_out = doc["outputs"]["y"]["input_vs_float_view"], doc["outputs"]["y"]["written_vs_float_view"]
    assert view_in["sqnr_db"] > 15 and view_out["sqnr_db"] > 15  # both files near the float view they came from
    lo, hi = doc["outputs"]["y"]["input_range"]
    assert 0 <= lo < hi and len(doc["outputs"]["y"]["written_range"]) == 2  # (y = Relu: never negative)


def test_a_float_model_gets_no_comparison_and_a_cut_says_why(tmp_path, capsys):
    f = save(branchy_concat_model(), tmp_path / "f.onnx")
    assert main(["fix", f, "-o", str(tmp_path / "o.onnx"), "--no-perf", "--calib-count", "2"]) == 0
    assert "against the input file" not in capsys.readouterr().out
    src = _ort_file(tmp_path, per_channel=True)
    assert main(["fix", src, "-o", str(tmp_path / "c.onnx"), "--no-perf", "--cut", "cat_out"]) == 0
    assert "against the input file: not measured (the written graph is cut" in capsys.readouterr().out
    assert main(["fix", src, "-o", str(tmp_path / "n.onnx"), "--no-perf", "--no-fidelity"]) == 0
    assert "against the input file" not in capsys.readouterr().out
    assert onnx.load(str(tmp_path / "n.onnx")).graph.node


def test_a_qdq_file_with_named_data_is_checked_against_its_float_view(tmp_path, capsys):
    # The app's Calibrate measured a QDQ file; the CLI skipped the data it was given.
    from qtquant.app import open_model
    from qtquant.app.views.perf import perf_summary

    src = _ort_file(tmp_path, per_channel=True)
    data = tmp_path / "data.npy"
    np.save(data, np.random.default_rng(3).random((4, 1, 3, 16, 16), dtype=np.float32))
    assert main(["analyze", src, "--no-perf", "--calib", str(data), "--json"]) == 0
    fid = json.loads(capsys.readouterr().out)["summary"]["fidelity"]
    assert fid["samples"] == 4 and fid["in_sample"] and fid["reference"].startswith("the QDQ file's float view")
    assert main(["analyze", src, "--no-perf", "--calib", str(data)]) == 0
    assert "SQNR dB / cosine vs the QDQ file's float view" in capsys.readouterr().out
    assert main(["analyze", src, "--no-perf", "--json"]) == 0  # no data named: the file's scales, no check
    assert json.loads(capsys.readouterr().out)["summary"].get("fidelity") is None
    assert main(["analyze", src, "--no-perf"]) == 0
    assert "accuracy: not measured: a QDQ file has no float original; --calib DATA" in capsys.readouterr().out
    # The file's scales stand: calibration fills only what it left unquantized
    s = open_model(src)
    before = {t: d.scale for t in s.graph.quantized_tensors if (d := s.domains.domain_of(t)) and d.fixed}
    assert "not measured" in perf_summary(s).sqnr_html and perf_summary(s).sqnr_basis == "Calibrate to measure"
    s.run_calibration()
    after = {t: s.domains.domain_of(t).scale for t in before}
    assert before and after == before


def test_an_input_file_onnxruntime_refuses_is_said_and_the_export_stands(tmp_path, capsys):
    # onnxruntime's quantize_static writes per-channel DequantizeLinear (axis) into an opset-11 model,
    # which its own runtime then refuses (ddddocr's detector): the written file is fine, the comparison says why not.
    src = save(branchy_concat_model(opset=11), tmp_path / "f11.onnx")
    bad = ort_qdq_file(src, str(tmp_path / "q11.onnx"), per_channel=True)

    with pytest.raises(Exception, match="axis"):
        ort.InferenceSession(bad)
    out = tmp_path / "fixed.onnx"
    assert main(["fix", bad, "-o", str(out), "--no-perf", "--calib-count", "2"]) == 0
    assert ("against the input file: not measured (onnxruntime cannot run the input file: it is opset 11 with "
            "per-channel scales in Q/DQ (opset 13 on): not valid ONNX)") in capsys.readouterr().out
    ort.InferenceSession(str(out))  # the export runs
    # Opening it says so, in the report, the JSON and the app's model panel, before any export
    n = sum(1 for nd in onnx.load(bad).graph.node if nd.op_type in ("QuantizeLinear", "DequantizeLinear")
            and any(a.name == "axis" for a in nd.attribute))
    assert n >= 1
    assert main(["analyze", bad, "--no-perf"]) == 0
    text = capsys.readouterr().out
    assert f"note: the file is opset 11, and {n} of its Q/DQ nodes" in text and "not valid ONNX" in text
    assert main(["analyze", bad, "--no-perf", "--json"]) == 0
    assert "per-channel scales" in json.loads(capsys.readouterr().out)["quantized_input_invalid"]
    from qtquant.app.views.concats import model_info

    view = model_info(open_model(bad))
    assert "QDQ file (invalid at opset 11)" in view.quantization and "opset 13" in view.quantization_tip


def test_a_per_tensor_qdq_file_before_opset_13_is_valid_and_said_nothing_of(tmp_path, capsys):
    src = save(branchy_concat_model(opset=11), tmp_path / "f11.onnx")
    ok = ort_qdq_file(src, str(tmp_path / "q11t.onnx"), per_channel=False)
    ort.InferenceSession(ok)  # valid: onnxruntime runs it
    assert main(["analyze", ok, "--no-perf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["quantized_input_invalid"] is None
    assert open_model(ok).graph.qdq_info.breaches == ()


def _half_qdq_file(path) -> str:
    """x (float16) -> Q/DQ -> Relu -> Q/DQ at opset 15 with float16 scales, as onnxruntime's
    quantize_static writes a float16 model's QDQ file (ISNet from @imgly/background-removal-data)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(0.02, np.float16), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(0.01, np.float16), "s2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]), helper.make_node("Relu", ["xd"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "z"], ["y"])]
    g = helper.make_graph(nodes, "h", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)]), str(path))
    return str(path)


def test_a_float16_qdq_file_before_opset_19_is_said_and_what_is_written_is_valid(tmp_path, capsys):
    bad = _half_qdq_file(tmp_path / "h16.onnx")
    with pytest.raises(Exception, match="float16"):
        ort.InferenceSession(bad)
    assert main(["analyze", bad, "--no-perf"]) == 0
    assert ("note: the file is opset 15, and 4 of its Q/DQ nodes have float16 scales, which QuantizeLinear and "
            "DequantizeLinear take only from opset 19: it is not valid ONNX") in capsys.readouterr().out
    out = tmp_path / "fixed.onnx"
    assert main(["fix", bad, "-o", str(out), "--no-perf"]) == 0
    assert ("not measured (onnxruntime cannot run the input file: it is opset 15 with float16 scales in Q/DQ "
            "(opset 19 on): not valid ONNX)") in capsys.readouterr().out
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    ort.InferenceSession(str(out))  # the written file runs
