"""qtquant deploy: each target's files for a small YOLOv8n (auto-share, one int16 node, one float node),
read back and checked the way the done-criteria of issue 50 ask; bad input and what a target cannot state."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import numpy_helper

from builders import save, yolov8n
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.deploy import TARGETS, Target, deploy
from qtquant.deploy.opset11 import LowerError, lower_to_11
from qtquant.deploy.s100 import QTYPES, check_quant_config
from qtquant.deploy.tensorrt import read_cache
from qtquant.deploy.x5_ptq import check_fragment
from qtquant.base.errors import BadInputError

INT16, FLOAT = "mul_9", "mul_6"  # the first C2f's cv1 output (a Concat member) and the stem's second conv


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return save(yolov8n(size=64, nc=4), tmp_path_factory.mktemp("m") / "y8.onnx")


def _argv(model_path, target, out, *extra):
    return ["deploy", model_path, "--target", target, "-o", str(out), "--auto-share", "--auto-share-max-bits-lost", "3",
            "--int16", INT16, "--keep-float", FLOAT, "--calib-count", "4", *extra]


@pytest.fixture(scope="module")
def deployed(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy")
    for t in Target:
        assert main(_argv(model_path, t.value, out / t.value)) == 0
    return out


def _session(model_path):
    s = open_model(model_path)
    s.run_calibration()
    from qtquant.quant.autoshare import auto_share
    from qtquant.quant.precision import assignments_from_names

    auto_share(s, 3)
    s.set_options(precision=assignments_from_names(s.graph, [INT16], [FLOAT]))
    return s


def test_every_target_is_registered_with_a_writer():
    assert {t.value for t in TARGETS} == {"x5-qat", "x5-ptq", "s100", "tensorrt", "ort"}
    for spec in TARGETS.values():
        mod = spec.writer()
        assert callable(mod.notes) and callable(mod.write)


def test_x5_ptq_yaml_uses_documented_keys_and_states_both_choices(deployed):
    path = deployed / "x5-ptq" / "y8.x5_ptq.yaml"
    text = path.read_text()
    assert text.startswith("# hb_mapper YAML fragment") and "experimental" in text
    doc = yaml.safe_load(text)
    check_fragment(doc)
    info = doc["model_parameters"]["node_info"]
    assert info[INT16] == {"ON": "BPU", "OutputType": "int16"}
    assert info[INT16.replace("mul", "sigmoid").replace("_9", "_8")]["OutputType"] == "int16"  # its fused chain
    assert info["split_10"] == {"ON": "BPU", "InputType0": "int16"}  # the reader takes it as int16
    # the DFL Softmax (4-D, one axis) is priced on the BPU; hb_mapper would run it on the CPU unless told
    assert info["softmax_220"] == {"ON": "BPU"}
    assert "each Softmax that qtquant prices on the BPU" in text
    # the float choice's fused chain, and the output Concat the export leaves float (qtquant's output rule)
    assert set(doc["calibration_parameters"]["run_on_cpu"].split(";")) == {"mul_6", "sigmoid_5", "concat_224"}
    with pytest.raises(BadInputError, match="undocumented key 'Precision'"):
        check_fragment({"model_parameters": {"node_info": {"a": {"Precision": "int16"}}}})
    with pytest.raises(BadInputError, match="not documented"):
        check_fragment({"model_parameters": {"node_info": {"a": {"OutputType": "float"}}}})


def test_x5_ptq_load_model_is_opset_11_scalar_qdq_and_runs(deployed, model_path):
    m = onnx.load(str(deployed / "x5-ptq" / "y8.x5_load_qdq.onnx"))
    onnx.checker.check_model(m, full_check=True)
    assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [11]
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert qs and all(inits[n.input[1]].shape == () and inits[n.input[2]].dtype == np.int8
                      and int(inits[n.input[2]]) == 0 for n in qs)
    quantized = {n.input[0].removesuffix("_float") for n in qs}
    assert f"{FLOAT}_out" not in quantized and f"{INT16}_out" not in quantized  # no pair: the choices
    # a group's members read one scale initializer
    s = _session(model_path)
    g = max(s.groups, key=len)
    names = {n.input[1] for n in qs if n.input[0].removesuffix("_float") in g.members}
    assert len(names) == 1
    x = np.random.default_rng(1).random((1, 3, 64, 64), dtype=np.float32)
    qdq = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    ref = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    assert qdq.shape == ref.shape and np.isfinite(qdq).all()


def test_lowering_to_opset_11_keeps_the_float_model_s_values(model_path):
    s = open_model(model_path)
    ranks = {n: len(t.shape) for n, t in s.graph.tensors.items() if t.shape is not None}
    low = lower_to_11(s.graph.model, ranks)
    onnx.checker.check_model(low, full_check=True)
    ops = {n.op_type for n in low.graph.node}
    assert "Transpose" in ops  # (the DFL Softmax on axis 1 is moved to the last axis and back)
    x = np.random.default_rng(2).random((1, 3, 64, 64), dtype=np.float32)
    a = ort.InferenceSession(low.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    b = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    bad = onnx.ModelProto()
    bad.CopyFrom(s.graph.model)
    bad.graph.node[0].op_type = "Einsum"  # (a later op this cannot lower: refused by name)
    with pytest.raises(LowerError, match="Einsum"):
        lower_to_11(bad, ranks)


def test_s100_json_uses_documented_qtypes_and_notes_float(deployed, capsys, model_path, tmp_path):
    doc = json.loads((deployed / "s100" / "y8.quant_config.json").read_text())
    check_quant_config(doc)
    nc = doc["node_config"]
    assert nc[INT16] == {"qtype": "int16"} and nc["split_10"] == {"input0": "int16"}
    assert nc[FLOAT] == {"qtype": "float16"}
    assert {v for cfg in nc.values() for v in cfg.values()} <= set(QTYPES)
    readme = (deployed / "s100" / "README-s100.md").read_text()
    assert "no float32 qtype" in readme and FLOAT in readme  # listed, never dropped
    with pytest.raises(BadInputError, match="float32"):
        check_quant_config({"node_config": {"a": {"qtype": "float32"}}})
    # --strict: the same float choice is a one-line error, exit 3, and nothing is written
    capsys.readouterr()
    assert main(_argv(model_path, "s100", tmp_path / "strict", "--strict")) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "s100 cannot state" in err[0] and "float32" in err[0]
    assert not list((tmp_path / "strict").iterdir())


def test_tensorrt_cache_reads_back_to_the_same_scales(deployed, model_path):
    text = (deployed / "tensorrt" / "y8.calib.cache").read_text()
    header, scales = read_cache(text)
    assert header == "TRT-8601-EntropyCalibration2"
    # the same scales onnxruntime's overrides give (the same command line), the choices left out
    ov = json.loads((deployed / "ort" / "y8.overrides.json").read_text())
    assert scales == {t: v[0]["scale"] for t, v in ov.items() if v[0]["quant_type"] == "QInt8"}
    assert f"{INT16}_out" not in scales and f"{FLOAT}_out" not in scales
    x5 = _x5_module(deployed)
    for g in x5.GROUPS:  # every group's members: one scale, the group's
        assert {scales[m["tensor"]] for m in g["members"] if m["tensor"] in scales} == {g["scale"]}
    assert "int16 has no form" in (deployed / "tensorrt" / "README-tensorrt.md").read_text()
    with pytest.raises(BadInputError, match="line 2"):
        read_cache("TRT-8601-EntropyCalibration2\nx: zz\n")


def test_ort_overrides_state_int16_and_exclude_float(deployed):
    from qtquant.export.overrides import load_overrides

    ov = load_overrides(deployed / "ort" / "y8.overrides.json")
    raw = json.loads((deployed / "ort" / "y8.overrides.json").read_text())
    i16 = [t for t, v in raw.items() if v[0]["quant_type"] == "QInt16"]
    assert len(i16) == 1 and i16[0].startswith(INT16) and ov[i16[0]][0]["zero_point"].dtype == np.int16
    assert json.loads((deployed / "ort" / "y8.nodes_to_exclude.json").read_text()) == \
        ["concat_224", "mul_6", "sigmoid_5"]


def _x5_module(deployed):
    path = next((deployed / "x5-qat").glob("*_x5_qat.py"))
    spec = importlib.util.spec_from_file_location("y8_x5_qat", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # no plugin, no torch needed for the data
    return mod


def test_x5_qat_module_lists_what_it_cannot_map(deployed):
    mod = _x5_module(deployed)
    members = [m["tensor"] for g in mod.GROUPS for m in g["members"]]
    mapped, unmapped = mod.module_names()
    # the builder's nodes have no module scopes: every member is listed, none dropped
    assert set(mapped) | {u["tensor"] for u in unmapped} >= set(members)
    assert all(u["reason"] for u in unmapped)
    if importlib.util.find_spec("horizon_plugin_pytorch") is None:
        with pytest.raises(ImportError, match="horizon_plugin_pytorch is not installed"):
            mod.plugin_qconfig(0.1, "qint8")


def test_bad_input_unknown_target_missing_tensors_and_asym(model_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["deploy", model_path, "--target", "tpu", "-o", str(tmp_path / "x")])
    assert e.value.code == 2
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "qtquant-plan", "version": 2, "groups": [
        {"members": [{"tensor": "ghost"}, {"tensor": "mul_3_out"}]}]}))
    capsys.readouterr()
    assert main(["deploy", model_path, "--target", "ort", "-o", str(tmp_path / "o"), "--plan", str(plan),
                 "--calib-count", "2"]) == 3
    err = capsys.readouterr().err
    assert "missing from the model" in err and "'ghost'" in err and len(err.strip().splitlines()) == 1
    assert main(["deploy", model_path, "--target", "tensorrt", "-o", str(tmp_path / "a"), "--scheme", "asym",
                 "--calib-count", "2"]) == 3
    assert "symmetric" in capsys.readouterr().err
    with pytest.raises(BadInputError, match="unknown deploy target"):
        deploy(_session(model_path), "tpu", tmp_path / "t")


def test_fix_writes_the_deploy_files_beside_its_output(model_path, tmp_path, capsys):
    capsys.readouterr()
    assert main(["fix", model_path, "-o", str(tmp_path / "f.onnx"), "--auto-share", "--deploy", "tensorrt",
                 "--no-fidelity", "--no-perf", "--calib-count", "2"]) == 0
    assert "wrote tensorrt" in capsys.readouterr().out
    assert (tmp_path / "y8.calib.cache").exists()


def test_x5_ptq_from_a_qdq_file_writes_the_yaml_and_says_why_no_load_model(model_path, tmp_path, capsys):
    qdq = tmp_path / "q.onnx"
    assert main(["fix", model_path, "-o", str(qdq), "--auto-share", "--no-fidelity", "--no-perf",
                 "--calib-count", "2"]) == 0
    capsys.readouterr()
    assert main(["deploy", str(qdq), "--target", "x5-ptq", "-o", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "this is a QDQ file" in out and (tmp_path / "d" / "q.x5_ptq.yaml").exists()
    assert not list((tmp_path / "d").glob("*.onnx"))


def test_the_output_folder_is_made_with_its_parents_or_refused_in_one_line(model_path, tmp_path, capsys):
    nested = tmp_path / "out" / "x5" / "v1"
    assert main(["deploy", model_path, "--target", "ort", "-o", str(nested), "--calib-count", "2"]) == 0
    assert nested.is_dir() and any(nested.iterdir())
    (tmp_path / "afile").write_text("x")
    capsys.readouterr()
    assert main(["deploy", model_path, "--target", "ort", "-o", str(tmp_path / "afile" / "sub"),
                 "--calib-count", "2"]) == 3
    err = capsys.readouterr().err.strip()
    assert "cannot make the deploy output folder" in err and len(err.splitlines()) == 1
