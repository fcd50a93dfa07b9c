"""Integer outputs (an ArgMax's class) in the accuracy check: compared by agreement, not SQNR, and
never silently left out (they were: a classifier ending in ArgMax got an empty fidelity table)."""

import json

import numpy as np
import onnxruntime as ort

from builders import tied_classifier
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.export.qdq import export_qdq
from qtquant.fidelity.measure import measure_session
from qtquant.fidelity.metrics import AgreementSums, ErrorSums, sums_for
from qtquant.base.vocab import Blank


def test_agreement_counts():
    a = AgreementSums()
    a.add(np.array([1, 2, 3]), np.array([1, 2, 0]))
    a.add(np.array([4, 5, 6]), np.array([4, 5, 6]))
    f = a.figure("cls")
    assert f.blank is Blank.AGREEMENT and not f.measured and f.sqnr_db is None
    assert f.equal_samples == 1 and f.samples == 2 and abs(f.agreement - 5 / 6) < 1e-12
    assert f.word == "1/2 equal" and "83.3% of its elements" in f.no_signal and "says little" not in f.no_signal
    d = f.to_dict()
    assert d["agreement"] == f.agreement and d["equal_samples"] == 1 and d["no_signal"] is False
    one = AgreementSums()
    one.add(np.array([7]), np.array([7]))
    one.add(np.array([7]), np.array([7]))
    assert "one value on every sample, so agreement says little" in one.figure("cls").no_signal
    assert isinstance(sums_for(np.array([True])), AgreementSums)
    assert isinstance(sums_for(np.zeros(2, np.float32)), ErrorSums)


def test_an_argmax_output_is_measured_by_agreement_with_the_shipped_file(tmp_path):
    path = tied_classifier(tmp_path / "tied.onnx")
    s = open_model(path)
    s.run_calibration()
    fid = measure_session(s)
    assert fid.outputs == ["logits", "cls"]
    cls = fid.after["cls"].whole
    assert cls.blank is Blank.AGREEMENT and fid.after["cls"].headline is cls
    # The same count, worked out here: the exported file and the float model in onnxruntime on the
    # check samples.
    out = tmp_path / "tied.qdq.onnx"
    export_qdq(s, out)
    feeds = list(s.calibration.holdout)
    shipped = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    flt = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    same = [int(shipped.run(["cls"], f)[0][0] == flt.run(["cls"], f)[0][0]) for f in feeds]
    assert cls.samples == len(feeds) and cls.equal_samples == sum(same)
    assert 0 < sum(same) < len(feeds)  # the model is built so that quantization flips some classes
    # The float output still has its SQNR, and is the headline the summary compares.
    assert fid.after["logits"].whole.measured and np.isfinite(fid.sqnr_db["logits"])
    assert np.isnan(fid.sqnr_db["cls"])
    row = next(line.split() for line in fid.text().splitlines() if line.startswith("cls "))
    assert row == ["cls", f"{sum(same)}/{len(feeds)}", "equal", f"{sum(same)}/{len(feeds)}", "equal"]


def test_an_argmax_only_model_reports_agreement_in_the_cli(tmp_path, capsys):
    path = tied_classifier(tmp_path / "cls_only.onnx", with_logits=False)
    assert main(["analyze", path, "--no-perf", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cls = doc["summary"]["fidelity"]["outputs"]["cls"]
    assert cls["sqnr_db"] is None and cls["no_signal"] is False
    assert 0 < cls["equal_samples"] < cls["samples"] and 0 < cls["agreement"] < 1
    assert doc["summary"]["sqnr_db"] == {"cls": None}
    assert main(["accuracy", path]) == 0
    out = capsys.readouterr().out
    # the integer output is said, and the sensitivity does not claim a finding about a slice that is not there
    assert "worst slice: none: cls " in out and "equal (integer outputs have no SQNR" in out
    assert "the loss is not one node's" not in out


def test_a_qdq_file_with_an_argmax_output_is_compared_by_agreement(tmp_path, capsys):
    from ortkit import ort_qdq_file

    src = ort_qdq_file(tied_classifier(tmp_path / "tied.onnx"), str(tmp_path / "tied.ort.onnx"), shape=(1, 8))
    assert main(["fix", src, "-o", str(tmp_path / "out.onnx"), "--no-perf", "--calib-count", "4", "--json"]) == 0
    cls = json.loads(capsys.readouterr().out)["against_input"]["outputs"]["cls"]
    # the files' classes counted, not an SQNR of class numbers cast to float
    assert cls["sqnr_db"] is None and cls["equal_samples"] <= cls["samples"] == 4
    assert "it equals the output of the input file on" in cls["reason"]
    assert "the output of the input file's float view" in cls["input_vs_float_view"]["reason"]


def test_an_argmax_only_model_is_ranked_by_agreement_as_the_shipped_file_measures_it(tmp_path, capsys):
    """With no float output there is no SQNR to rank nodes by: the ranking counts, in percentage
    points, how many of the class's elements equal the float model's; the measured figure is the
    one an export with that node in float gives in onnxruntime."""
    from qtquant.fidelity.accuracy import analyze_accuracy
    from qtquant.quant.precision import PrecisionMap
    from qtquant.base.vocab import Precision, RankedBy

    path = tied_classifier(tmp_path / "cls_only.onnx", with_logits=False)
    s = open_model(path)
    s.run_calibration()
    rep = analyze_accuracy(s, top=2)
    assert rep.ranked_by is RankedBy.AGREEMENT and rep.base.worst_agreement[0] == "cls"
    feeds = list(s.calibration.holdout)
    flt = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = [flt.run(["cls"], f)[0] for f in feeds]

    def percent_equal(file):
        sess = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        got = [sess.run(["cls"], f)[0] for f in feeds]
        return 100.0 * sum(int((a == b).sum()) for a, b in zip(got, want)) / sum(a.size for a in want)

    export_qdq(s, tmp_path / "now.onnx")
    now = percent_equal(tmp_path / "now.onnx")
    assert abs(rep.base.worst_agreement[1] - now) < 1e-9 and now < 100.0
    gemm = next(r for r in rep.sensitivity if r.node == "Gemm_0" and r.precision is Precision.FLOAT)
    assert not gemm.estimate and gemm.ranked_by is RankedBy.AGREEMENT
    export_qdq(s, tmp_path / "gemm_float.onnx", precision=PrecisionMap({t: Precision.FLOAT for t in gemm.tensors}))
    after = percent_equal(tmp_path / "gemm_float.onnx")
    assert abs(gemm.worst - after) < 1e-9 and abs(gemm.gain - (after - now)) < 1e-9 and gemm.gain > 0
    assert rep.sensitivity[0].node == "Gemm_0"  # the logits' rounding is what flips the classes
    # The CLI says the unit: a column in percentage points, the JSON's gain_points and ranked_by
    assert main(["accuracy", path, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "gain pp" in out and "% equal" in out and "ranks nodes by how many of cls's elements" in out
    assert main(["accuracy", path, "--top", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranked_by"] == "agreement" and doc["worst_agreement"]["output"] == "cls"
    top = doc["sensitivity"][0]
    assert top["gain_db"] is None and top["gain_points"] > 0 and top["ranked_by"] == "agreement"


def test_auto_share_by_accuracy_on_integer_outputs_only_is_refused_in_one_line(tmp_path, capsys):
    """Its budget is in dB of the worst float slice; with none, every step would be judged on NaN
    (it printed "nan -> nan dB" and shared nothing without saying why)."""
    path = tied_classifier(tmp_path / "cls_only.onnx", with_logits=False)
    out = tmp_path / "out.onnx"
    assert main(["fix", path, "-o", str(out), "--max-sqnr-drop", "0.5", "--no-perf"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "outputs are all integer (least agreeing: cls)" in err
    assert "auto-share by bits lost" in err and not out.exists()


def test_both_accumulators_name_the_programs_they_compare():
    """One call for either kind of output (the file comparison asked which kind it had, and wrote
    the identical sentence again after the fact)."""
    same = ErrorSums()
    for _ in range(2):
        same.add(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    f = same.figure("y", None, "the input file", "the written file")
    assert f.blank is Blank.IDENTICAL and f.no_signal == \
        "identical: the written file's output equals the input file's on the 2 sample(s)"
    assert "no quantization reaches it" in same.figure("y").no_signal  # the quantized model against float
    flat = ErrorSums()
    flat.add(np.array([3.0, 3.0]), np.array([3.0, 2.9]))
    assert flat.figure("y", None, "the input file's float view").no_signal.startswith(
        "no signal: the input file's float view's output is constant (3)")
    cls = AgreementSums()
    cls.add(np.array([1, 2]), np.array([1, 0]))
    assert "it equals the output of the input file on 0 of the 1" in cls.figure("c", None, "the input file",
                                                                               "the written file").no_signal
