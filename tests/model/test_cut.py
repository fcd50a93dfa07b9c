"""``--cut``: the model becomes the subgraph that ends at the named tensors (as
``onnx.utils.extract_model`` does), in analyze/fix/perf, plans, projects and export."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from builders import RESCALING_MARCH, branchy_concat_model, save
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.base.errors import ModelError, PlanError
from qtquant.export.qdq import export_qdq
from qtquant.model.graph import cut_model, graph_from_model, parse_cut
from qtquant.files.plan import apply_plan, load_plan, parse_plan, plan_dict, save_plan
from qtquant.app.projects import open_project
from qtquant.files.project import save_project

CUT = ("conv0_out", "conv2_out")


@pytest.fixture
def model_file(tmp_path):
    return save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")


def test_parse_cut():
    assert parse_cut(" a, b ,,a ") == ("a", "b")
    assert parse_cut(["a,b", "c"]) == ("a", "b", "c")
    assert parse_cut(None) == () and parse_cut("") == ()


def test_cut_model_keeps_only_what_the_cut_needs():
    m = branchy_concat_model(gains=(1.0, 3.0, 8.0))
    inputs = [i.SerializeToString() for i in m.graph.input]
    cut_model(m, ["conv1_out"])
    assert [o.name for o in m.graph.output] == ["conv1_out"]
    assert [n.name for n in m.graph.node] == ["conv1"]
    assert sorted(t.name for t in m.graph.initializer) == ["conv1.b", "conv1.w"]
    assert [i.SerializeToString() for i in m.graph.input] == inputs  # inputs unchanged


def test_cut_graph_computes_the_same_values_as_the_whole_model():
    full = branchy_concat_model(gains=(1.0, 3.0, 8.0))
    g = graph_from_model(full, cut=",".join(CUT))
    assert g.cut == CUT and g.outputs == list(CUT)
    assert set(g.nodes) == {"conv0", "conv2"} and not g.concat_nodes()
    assert g.tensors["conv0_out"].shape == (1, 4, 16, 16)  # typed by shape inference
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = full.__class__()
    want.CopyFrom(full)
    want.graph.output.extend([onnx.ValueInfoProto(name=t) for t in CUT])
    ref = ort.InferenceSession(want.SerializeToString(), providers=["CPUExecutionProvider"]).run(list(CUT), {"x": x})
    got = ort.InferenceSession(g.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,match", [
    ("conv0_otu", r"cannot cut at 'conv0_otu': the model has no tensor of that name \(did you mean 'conv0_out'\?\)"),
    ("zzz", r"^cannot cut at 'zzz': the model has no tensor of that name$"),
    ("conv0.w", r"it is a weight of the model"),
])
def test_bad_cut_names_are_one_line_errors(name, match):
    with pytest.raises(ModelError, match=match) as e:
        graph_from_model(branchy_concat_model(), cut=["conv1_out", name])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("command", ["analyze", "fix", "perf", "accuracy"])
def test_cli_bad_cut_exits_3_with_one_line(model_file, tmp_path, capsys, command):
    argv = [command, model_file, "--cut", "conv1_outt", "--calib-count", "2"]
    if command == "fix":
        argv += ["-o", str(tmp_path / "out.onnx")]
    assert main(argv) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["qtquant: error: cannot cut at 'conv1_outt': the model has no tensor of that name "
                   "(did you mean 'conv1_out'?)"]
    assert not (tmp_path / "out.onnx").exists()


def test_analyze_and_perf_on_a_cut(model_file, capsys):
    assert main(["analyze", model_file, "--cut", "conv0_out,cat_out", "--calib-count", "4", "--json",
                 "--no-fidelity"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cut"] == ["conv0_out", "cat_out"] and [c["node"] for c in doc["concats"]] == ["cat"]
    assert main(["perf", model_file, "--cut", "conv0_out", "--calib-count", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cut"] == ["conv0_out"]
    assert {r["name"] for r in doc["after"]["layers"]} == {"conv0"}
    assert main(["perf", model_file, "--cut", "conv0_out", "--calib-count", "2"]) == 0
    assert "cut at 1 tensor (--cut)" in capsys.readouterr().out


def test_fix_exports_the_cut_graph_and_says_so(model_file, tmp_path, capsys):
    out = tmp_path / "q.onnx"
    assert main(["fix", model_file, "--cut", ",".join(CUT), "--calib-count", "4", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "the cut graph (--cut): it ends at conv0_out, conv2_out" in text
    m = onnx.load(str(out))
    assert [o.name for o in m.graph.output] == list(CUT)
    assert not any(n.op_type == "Concat" for n in m.graph.node)


def test_export_text_names_the_cut(model_file, tmp_path):
    s = open_model(model_file, cut=CUT)
    s.run_calibration()
    res = export_qdq(s, tmp_path / "e.onnx")
    assert "the cut graph (--cut)" in res.text() and res.build.cut == CUT
    whole = open_model(model_file)
    whole.run_calibration()
    assert "--cut" not in export_qdq(whole, tmp_path / "w.onnx").text()


def test_plan_records_the_cut_and_warns_on_another(model_file, tmp_path):
    s = open_model(model_file, cut="conv0_out,cat_out")
    s.run_calibration()
    s.groups.share(s, ["conv0_out", "conv1_out"], name="pair")
    s.groups_changed()
    p = save_plan(s, tmp_path / "plan.json")
    assert json.loads(p.read_text())["cut"] == ["conv0_out", "cat_out"]
    plan = load_plan(p)
    assert plan.cut == ("conv0_out", "cat_out")
    same = open_model(model_file, cut="conv0_out,cat_out")
    assert apply_plan(same, plan).warnings == []
    whole = open_model(model_file)
    res = apply_plan(whole, plan)
    assert [w for w in res.warnings if "cut at 'conv0_out', 'cat_out'" in w and "the whole model" in w]
    assert whole.groups.as_lists() == [("conv0_out", "conv1_out")]
    # A cut without the plan's tensors: the error says the plan was made on another cut.
    small = open_model(model_file, cut="conv2_out")
    with pytest.raises(PlanError, match=r"missing from the model: .*; it was made on the model cut at 'conv0_out'"):
        apply_plan(small, plan)
    # Plans of the whole model (no "cut" key, as older files) read as made on the whole model.
    old = {k: v for k, v in plan_dict(whole).items() if k != "cut"}
    assert parse_plan(old).cut == ()


def test_project_reopens_with_its_cut(model_file, tmp_path):
    s = open_model(model_file, {"x": (1, 3, 16, 16)}, cut=CUT)
    s.run_calibration()
    pp = save_project(s, tmp_path / "p.qtquant")
    assert json.loads(pp.read_text())["cut"] == list(CUT)
    s2, rep = open_project(pp)
    assert s2.graph.cut == CUT and s2.graph.outputs == list(CUT) and not rep.model_changed
    whole = open_model(model_file)
    pw = save_project(whole, tmp_path / "w.qtquant")
    assert open_project(pw)[0].graph.cut == ()


def test_cut_calibration_cache_key_differs(model_file):
    from qtquant.calib.cache import cache_key
    from qtquant.calib import CalibConfig

    whole, cut = open_model(model_file), open_model(model_file, cut=CUT)
    assert cache_key(whole.graph, CalibConfig()) != cache_key(cut.graph, CalibConfig())


def test_model_info_says_the_model_is_cut(model_file):
    from qtquant.app.views.concats import model_info

    info = model_info(open_model(model_file, cut=CUT))
    assert info.model == "m.onnx (cut at 2 tensors)" and "cut at: conv0_out, conv2_out" in info.model_tip
    # bayes-e: the X5 compile logs' rule (docs/perf-model.md)
    assert "Concat output: its own scale, written by inputs made for it alone" in info.quantization
    assert model_info(open_model(model_file)).model == "m.onnx"


def test_cli_says_a_plan_was_made_on_another_cut(model_file, tmp_path, capsys):
    plan = tmp_path / "p.json"
    # (on a march that rescales its conv branches, so auto-share has a Concat to share)
    assert main(["fix", model_file, "--cut", "conv0_out,cat_out", "--calib-count", "4", "--auto-share",
                 "--auto-share-max-bits-lost", "8", "-o", str(tmp_path / "q.onnx"), "--plan-out", str(plan),
                 "--march", RESCALING_MARCH]) == 0
    assert json.loads(plan.read_text())["cut"] == ["conv0_out", "cat_out"]
    capsys.readouterr()
    assert main(["analyze", model_file, "--calib-count", "4", "--plan", str(plan), "--no-fidelity", "--json",
                 "--march", RESCALING_MARCH]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["groups"]  # applied
    assert "qtquant: warning: p.json: it was made on the model cut at 'conv0_out', 'cat_out', this is the whole model" \
        in err
