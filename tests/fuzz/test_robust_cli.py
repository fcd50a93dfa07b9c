"""Issue 8: hostile models through the command line: exit 3, one line on stderr, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from builders import branchy_concat_model
from test_fuzz_loader import edited_model
from test_fuzz_worker import fuzz_settings, report, run_and_report, worker

ROOT = Path(__file__).resolve().parents[2]


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "bad", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def bad_models() -> dict[str, dict[str, bytes]]:
    """name → files of one hostile case (``model.onnx`` plus any side files)."""
    good = branchy_concat_model(shape=(1, 3, 8, 8)).SerializeToString()
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", T.FLOAT, None)
    cases = {
        "empty": b"",
        "garbage": bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)),
        "text": b"ir_version: 8\ngraph { node { op_type: 'Relu' } }\n",
        "truncated": good[: len(good) // 2],
        "cycle": _model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Add", ["x", "a"], ["b"]),
                         helper.make_node("Relu", ["b"], ["y"])], [x], [y]).SerializeToString(),
        "opset99": branchy_concat_model(opset=99).SerializeToString(),
        "unknown_op": _model([helper.make_node("Frobnicate", ["x"], ["y"], domain="evil.ops")], [x], [y])
        .SerializeToString(),
    }
    out = {k: {"model.onnx": v} for k, v in cases.items()}
    # Non-UTF-8 bytes in a tensor name (protobuf hands them back as bytes, not str).
    out["not_utf8"] = {"model.onnx": good.replace(b"conv0_out", b"conv0\xff\xfeut")}
    # An integer shape hint of length 2**40: onnx's data propagation would walk it forever.
    shp = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])], [x], [y])
    shp.graph.value_info.append(helper.make_tensor_value_info("s", T.INT64, [2**40]))
    out["huge_shape_hint"] = {"model.onnx": shp.SerializeToString()}
    # The same hint declared as float (found by the long CLI fuzz run): onnx allocated for it
    # until memory ran out.
    del shp.graph.value_info[:]
    shp.graph.value_info.append(helper.make_tensor_value_info("s", T.FLOAT, [2**40]))
    out["huge_float_shape_hint"] = {"model.onnx": shp.SerializeToString()}
    big = branchy_concat_model(shape=(1, 3, 8, 8))
    big.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 2**40
    out["huge_input"] = {"model.onnx": big.SerializeToString()}
    # External data: escaping the folder, absolute, missing.
    for case, loc, files in (("escape", "../secret.bin", {}), ("absolute", "/etc/hostname", {}),
                             ("missing_data", "w.bin", {}), ("short_data", "w.bin", {"w.bin": b"\0" * 8})):
        m = branchy_concat_model(shape=(1, 3, 8, 8))
        t = m.graph.initializer[0]
        n = len(t.raw_data) or 4 * int(np.prod(t.dims))
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = T.EXTERNAL
        for k, v in (("location", loc), ("offset", "0"), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        out[case] = {"model.onnx": m.SerializeToString(), **files}
    # A QDQ-looking model whose scale is not a constant.
    q = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                helper.make_node("DequantizeLinear", ["q", "x", "z"], ["y"])], [x], [y],
               [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                numpy_helper.from_array(np.array(0, np.int8), "z")])
    out["qdq_dynamic_scale"] = {"model.onnx": q.SerializeToString()}
    return out


BAD = bad_models()
# Valid once the loader ignores the absurd hint (onnx's data propagation used to walk it
# forever, or allocate for it until memory ran out): they must load, and quickly.
MUST_FINISH = {"huge_shape_hint", "huge_float_shape_hint"}


def _cap_memory():  # a regression must fail the test, not the machine
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def _write(tmp_path: Path, files: dict[str, bytes]) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    for k, v in files.items():
        (d / k).write_bytes(v)
    (tmp_path / "secret.bin").write_bytes(b"\0" * 1024)  # what "../secret.bin" would reach
    return d / "model.onnx"


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qtquant: error: ") and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("case", ["truncated", "escape", "huge_shape_hint", "huge_float_shape_hint", "not_utf8",
                                  "huge_input"])
def test_python_m_qtquant_analyze_bad_model_exits_3(tmp_path, case):
    """The real entry point, in a fresh interpreter."""
    p = _write(tmp_path, BAD[case])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "qtquant", "analyze", str(p)], capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path, preexec_fn=_cap_memory)
    if case in MUST_FINISH:
        assert r.returncode == 0 and time.monotonic() - t0 < 60, r.stderr
        return
    assert r.returncode == 3, (r.returncode, r.stderr)
    line = _one_error_line(r.stderr)
    assert r.stdout == ""
    if case == "escape":
        assert "outside the model folder" in line


@pytest.mark.parametrize("command", ["analyze", "fix", "perf"])
def test_every_bad_model_every_command(command):
    """All hostile cases through ``qtquant.cli.main`` (in the crash-proof worker)."""
    label = f"cli-bad/{command}"
    for case, files in BAD.items():
        argv = [command, "{dir}/model.onnx", "--calib-count", "2"]
        if command == "fix":
            argv += ["-o", "{dir}/out.onnx"]
        o = worker().run("cli", files, {"argv": argv}, label=label).check()
        assert o.status == "ok", (case, o.msg)
        if case in MUST_FINISH:
            assert o.value["rc"] == 0, (case, o.value["stderr"])
            continue
        assert o.value["rc"] == 3, (case, o.value)
        line = _one_error_line(o.value["stderr"])
        assert len(line) < 600, (case, line)
    t = report(label)
    assert t.cases == len(BAD) and t.bad == 0


def test_fuzz_cli_analyze():
    """Semantic edits of valid models through ``qtquant analyze``: exit 0, or 3 with one line."""
    label = "edits/cli-analyze"

    @fuzz_settings(40)
    @given(edited_model())
    def check(case):
        name, data, files, shapes = case
        argv = ["analyze", "{dir}/model.onnx", "--calib-count", "2", "--json"]
        for k, v in (shapes or {}).items():
            argv += ["--input-shape", f"{k}={'x'.join(map(str, v))}"]
        o = worker().run("cli", {"model.onnx": data, **files}, {"argv": argv}, label=label).check()
        assert o.value["rc"] in (0, 3), o.value
        if o.value["rc"] == 3:
            _one_error_line(o.value["stderr"])
        else:
            assert '"concats"' in o.value["stdout"] or o.value["stdout"].rstrip().endswith("}")

    t = run_and_report(check, label)
    assert t.bad == 0
