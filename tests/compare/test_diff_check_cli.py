"""``qtquant diff`` and ``qtquant check`` as a user runs them: small models, QDQ files from
onnxruntime's quantize_static and from qtquant's own export (no Qt: the check's canvas is left out)."""

import json
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import numpy as np
import pytest

from builders import branchy_concat_model, detector_model, save
from ortkit import ort_qdq_file
from qtquant.cli import main


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(float model, qtquant's export, onnxruntime's QDQ file, calibration data) of the detector."""
    d = tmp_path_factory.mktemp("pair")
    src = save(detector_model(), d / "det.onnx")
    data = d / "data.npy"
    np.save(data, np.random.default_rng(3).random((6, 1, 3, 16, 16), dtype=np.float32))
    qt = d / "det_qt.onnx"
    assert main(["fix", src, "--auto-share", "-o", str(qt), "--calib", str(data), "--no-perf", "--no-fidelity",
                 "--plan-out", str(d / "plan.json")]) == 0
    ort = ort_qdq_file(src, str(d / "det_ort.onnx"))
    return src, str(qt), ort, str(data), str(d / "plan.json")


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _analyze_slices(capsys, path, data) -> dict:
    fid = _json(capsys, ["analyze", path, "--calib", data, "--json"])["summary"]["fidelity"]["outputs"]
    out = {}
    for o, v in fid.items():
        out[o] = v["whole"]["sqnr_db"]
        out.update({s["label"]: s["sqnr_db"] for s in v["slices"]})
    return out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.external, self.ids = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.external += [a[k] for k in ("src", "href") if k in a and not a[k].startswith("data:")]
        if "id" in a:
            self.ids.append(a["id"])


def test_diff_of_two_tools_files_matches_analyze_of_each(pair, tmp_path, capsys):
    _, qt, ort, data, _ = pair
    report = tmp_path / "diff.html"
    doc = _json(capsys, ["diff", qt, ort, "--calib", data, "--json", "--report", str(report)])
    # each side's per-slice SQNR is what analyze prints for that file alone
    ref_a, ref_b = _analyze_slices(capsys, qt, data), _analyze_slices(capsys, ort, data)
    assert doc["slices"] and len(doc["slices"]) == len(ref_a)
    for s in doc["slices"]:
        assert s["sqnr_db_a"] == pytest.approx(ref_a[s["slice"]], abs=0.05)
        assert s["sqnr_db_b"] == pytest.approx(ref_b[s["slice"]], abs=0.05)
    t = doc["tensors"]
    assert t["matched"] >= 10 and t["only_a"] == [] and t["only_b"] == []
    assert {c["node"] for c in doc["concats"]} == {"cat1", "cat2", "head", "cat_c"}
    assert doc["a"]["rescales"] == sum(c["a"]["rescales"] for c in doc["concats"])
    # the report: one self-contained page with the sections the text has
    html = report.read_text()
    p = _Links()
    p.feed(html)
    assert p.external == []
    assert {"summary", "slices", "concats", "tensors", "concat-table", "tensor-table", "diff-data"} <= set(p.ids)
    assert "det_qt.onnx" in html and "det_ort.onnx" in html
    # the text form
    assert main(["diff", qt, ort, "--calib", data]) == 0
    text = capsys.readouterr().out
    assert "SQNR per output slice (dB):" in text and "Concats (4 matched):" in text
    assert "tensors: " in text and " matched (" in text
    assert "static estimate (BPU)" in text and "board estimate (1 thread)" in text  # the simulated latency, each side


def test_diff_of_a_model_with_two_plans(pair, capsys):
    src, _, _, data, plan = pair
    doc = _json(capsys, ["diff", src, src, "--plan-b", plan, "--calib", data, "--no-perf", "--json"])
    assert doc["b"]["plan"].endswith("plan.json") and doc["a"]["plan"] is None
    assert doc["tensors"]["only_a"] == [] and doc["tensors"]["changed"] >= 1
    assert doc["b"]["rescales"] <= doc["a"]["rescales"]
    assert any(x["domain_changed"] for x in doc["tensors"]["items"])


def test_diff_refuses_two_models_and_a_plan_for_neither_side(pair, tmp_path, capsys):
    src = pair[0]
    other = save(branchy_concat_model(shape=(1, 3, 8, 8)), tmp_path / "other.onnx")
    assert main(["diff", src, other, "--no-perf", "--no-fidelity"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("qtquant: error: the two files are not one model: inputs x=1x3x16x16") and "\n" not in err
    assert main(["diff", src, src, "--plan", pair[4]]) == 2
    assert "--plan-a and --plan-b" in capsys.readouterr().err
    assert main(["diff", src, str(tmp_path / "missing.onnx")]) == 3
    assert "qtquant: error: B (missing.onnx): no such file" in capsys.readouterr().err


def _budget(tmp_path, text, name="budget.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_check_passes_and_fails_with_junit_json_and_report(pair, tmp_path, capsys, monkeypatch):
    _, qt, ort, data, _ = pair
    monkeypatch.setitem(sys.modules, "qtquant.gui.window.shot", None)  # as without PySide6: no picture
    a = _json(capsys, ["analyze", qt, "--calib", data, "--json"])["summary"]
    ok = _budget(tmp_path, f"max_rescales = {a['rescales']}\nmax_latency_ms = {a['latency_ms'] + 0.001}\n"
                           f'min_sqnr_db = 1.0\nbaseline = "{ort}"\nno_worse_than_baseline = false\n')
    junit, report = tmp_path / "ok.xml", tmp_path / "ok.html"
    assert main(["check", qt, "--calib", data, "--budget", ok, "--junit", str(junit), "--report", str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"max_rescales: {a['rescales']} (limit <= {a['rescales']}): ok"
    assert out[3] == "passed: 3 of 3 limits met"
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    html = report.read_text()
    assert "The canvas picture is unavailable: the desktop app is not installed" in html
    assert "Against the baseline" in html and "Passed" in html  # a baseline shown, not gated
    bad = _budget(tmp_path, f'max_mismatched_concats = 0\nmax_board_latency_ms = 0.0001\nbaseline = "{qt}"\n'
                            'no_worse_than_baseline = true\n', "bad.toml")
    junit = tmp_path / "bad.xml"
    assert main(["check", ort, "--calib", data, "--budget", bad, "--junit", str(junit), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    broken = [r["limit"] for r in doc["limits"] if not r["ok"]]
    assert not doc["passed"] and "max_mismatched_concats" in broken
    board = next(r for r in doc["limits"] if r["limit"] == "max_board_latency_ms")  # the board estimate, measured
    assert not board["ok"] and board["value"] > 0.0001 and board["unit"] == "ms"
    assert doc["analysis"]["summary"]["mismatched_concats"] == doc["figures"]["mismatched_concats"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == str(len(broken)) == str(len(suite.findall("testcase/failure")))
    assert suite.get("tests") == "6"


@pytest.mark.parametrize("text, message", [
    ("max_rescales = 'many'\n", "max_rescales must be a whole number, not \"many\""),
    ("max_rescale = 1\n", "unknown key 'max_rescale'"),
    ('baseline = "nowhere.onnx"\nno_worse_than_baseline = true\n', "baseline 'nowhere.onnx': no such file"),
])
def test_a_bad_budget_is_one_line_exit_3(pair, tmp_path, capsys, text, message):
    assert main(["check", pair[0], "--budget", _budget(tmp_path, text)]) == 3
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_missing_budget_file_is_exit_3(pair, tmp_path, capsys):
    assert main(["check", pair[0], "--budget", str(tmp_path / "none.toml")]) == 3
    assert "budget: no such file" in capsys.readouterr().err


def test_a_project_is_a_side(pair, tmp_path, capsys):
    from qtquant.app import open_model
    from qtquant.files.project import save_project

    src, qt, _, _, _ = pair
    s = open_model(src)
    s.run_calibration()
    s.groups.share(s, ["c0_out", "c1_out"])
    s.groups_changed()
    proj = save_project(s, tmp_path / "det.qtquant")
    doc = _json(capsys, ["diff", str(proj), src, "--no-perf", "--json"])
    by = {t["tensor_a"]: t for t in doc["tensors"]["items"]}
    # A is the project with its group: c1_out shares c0_out's scale there, not in the plain model
    assert "c0_out" in by["c1_out"]["shares_a"] and "c0_out" not in by["c1_out"]["shares_b"]
    assert doc["a"]["model"].endswith("det.qtquant")
