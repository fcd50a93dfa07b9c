"""``--compiler-log`` on analyze, fix, perf and accuracy: the compiler's scales, the requantize
reconciliation, the cosine ranking, the static estimate; bad and foreign logs exit 3 in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

from builders import branchy_concat_model, detector_model
from hblogs import LogSpec, render_compile_log
from qtquant.cli import main

# x -> conv0 -> relu0 -> pool0 ┐
#   -> conv1 ----------------- cat -> final_relu -> y
#   -> conv2 ----------------- ┘
THRESHOLDS = {"x": 1.0, "relu0_out": 4.0, "pool0_out": 4.0, "cat_out": 4.0}


@pytest.fixture
def files(tmp_path):
    model = branchy_concat_model(chain=True)
    onnx.save(model, tmp_path / "m.onnx")
    # The compiler requantizes conv1_out in front of cat; the cat output's threshold (4.0, printed by
    # final_relu) is pool0_out's: that input stays.
    spec = LogSpec(thresholds=THRESHOLDS, requantize=("conv1_out",), cosines={"conv2": 0.5, "cat": 0.7},
                   estimate=(2018.43, 495.4, 2682784))
    (tmp_path / "hb.log").write_text(render_compile_log(model, spec))
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_analyze_json_carries_both_lists(files, capsys):
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "hb.log", "--json",
                         "--no-fidelity", "--calib-count", "4")
    assert code == 0, err
    doc = json.loads(out)["compiler_log"]
    assert doc["scales_used"] and doc["march"] == "bayes-e" and doc["input_shapes"] == [[1, 3, 16, 16]]
    assert doc["thresholds"]["relu0_out"]["scale"] == pytest.approx(4.0 / 127)
    (cat,) = doc["concats"]
    assert cat["node"] == "cat" and cat["compiler"] == ["conv1_out"]
    verdicts = {i["tensor"]: i for i in cat["inputs"]}
    assert verdicts["conv1_out"]["compiler"] and verdicts["conv1_out"]["compiler_threshold"] is None
    assert not verdicts["pool0_out"]["compiler"] and verdicts["pool0_out"]["compiler_threshold"] == 4.0
    # On the compiler's scales the output (4.0) and pool0_out (4.0) agree: qtquant requantizes no such input.
    assert not verdicts["pool0_out"]["qtquant"] and verdicts["pool0_out"]["verdict"] == "agree"
    assert cat["compiler_output_threshold"] == 4.0 and cat["qtquant_output_threshold"] == pytest.approx(4.0)
    assert doc["totals"]["compiler"] == 1
    # conv2_out: no row prints it and the log leaves it alone: on cat's output threshold, said so
    assert verdicts["conv2_out"]["inferred"] and verdicts["conv2_out"]["compiler_threshold"] == 4.0
    assert doc["totals"]["inferred_inputs"] == 1 and doc["thresholds"]["conv2_out"]["inferred"]
    assert [c["node"] for c in doc["cosine"][:2]] == ["conv2", "cat"]
    est = doc["estimate"]
    assert est["log_latency_us"] == 495.4 and est["sim_latency_us"] > 0
    assert est["latency_error"] == pytest.approx(est["sim_latency_us"] / 495.4 - 1)


def test_own_scales_keep_qtquants(files, capsys):
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "hb.log", "--json",
                         "--no-fidelity", "--calib-count", "4", "--own-scales")
    assert code == 0, err
    doc = json.loads(out)
    assert not doc["compiler_log"]["scales_used"]
    cat = doc["compiler_log"]["concats"][0]
    # qtquant's own calibration of random-weight convs: pool0_out's range is not 4.0
    assert cat["qtquant_output_threshold"] != pytest.approx(4.0)


def test_text_forms(files, capsys):
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "hb.log", "--no-fidelity",
                         "--calib-count", "4")
    assert code == 0, err
    assert "compile log hb.log: the compiler's thresholds fix" in out
    assert "requantize per Concat: compiler (the log) 1" in out
    assert "static estimate: log 0.495 ms, simulator" in out
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("lowest cosine"))
    assert lines[i + 3].split()[0] == "conv2" and lines[i + 4].split()[0] == "cat"
    code, out, err = run(capsys, "perf", files / "m.onnx", "--compiler-log", files / "hb.log", "--calib-count", "4")
    assert code == 0, err
    assert "static estimate: log 0.495 ms" in out and "tensors' scales the compile log's thresholds" in out
    code, out, err = run(capsys, "fix", files / "m.onnx", "--compiler-log", files / "hb.log", "--calib-count", "4",
                         "-o", files / "out.onnx", "--no-fidelity", "--json")
    assert code == 0, err
    assert json.loads(out)["compiler_log"]["totals"]["compiler"] == 1


def test_fix_exports_the_compilers_scales(files, capsys):
    code, out, err = run(capsys, "fix", files / "m.onnx", "--compiler-log", files / "hb.log", "--calib-count", "4",
                         "-o", files / "out.onnx", "--no-fidelity", "--no-perf")
    assert code == 0, err
    m = onnx.load(files / "out.onnx")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "relu0_out")
    assert float(inits[q.input[1]]) == pytest.approx(4.0 / 127)


def test_accuracy_json(files, capsys):
    code, out, err = run(capsys, "accuracy", files / "m.onnx", "--compiler-log", files / "hb.log", "--json",
                         "--calib-count", "4", "--top", "0")
    assert code == 0, err
    assert json.loads(out)["compiler_log"]["cosine"][0]["node"] == "conv2"


def test_dynamic_model_opens_at_the_logs_shape(tmp_path, capsys):
    onnx.save(branchy_concat_model(chain=True, dynamic=True), tmp_path / "d.onnx")
    (tmp_path / "hb.log").write_text(render_compile_log(branchy_concat_model(chain=True, shape=(1, 3, 24, 24))))
    code, out, err = run(capsys, "analyze", tmp_path / "d.onnx", "--compiler-log", tmp_path / "hb.log", "--json",
                         "--no-fidelity", "--no-perf", "--calib-count", "4")
    assert code == 0, err
    assert json.loads(out)["input_shapes"]["x"] == [1, 3, 24, 24]


def _one_line_exit3(code, out, err):
    assert code == 3, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qtquant: error: ") and "Traceback" not in err


def test_shape_mismatch_is_an_error_unless_asked(files, capsys):
    (files / "big.log").write_text(render_compile_log(branchy_concat_model(chain=True, shape=(1, 3, 32, 32))))
    _one_line_exit3(*run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "big.log", "--no-perf",
                         "--no-fidelity"))
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "big.log", "--no-perf",
                         "--no-fidelity", "--compiler-log-any-shape", "--calib-count", "4")
    assert code == 0, err
    assert "applied by name" in out


def test_another_models_log_exits_3(files, capsys):
    other = detector_model()
    other.graph.input[0].name = "x"
    (files / "other.log").write_text(render_compile_log(other))
    _one_line_exit3(*run(capsys, "perf", files / "m.onnx", "--compiler-log", files / "other.log"))


@pytest.mark.parametrize("data", [b"", b"\x00\x01junk" * 100, b"2025-07-22 hb_mapper log without a table\n"])
def test_bad_logs_exit_3(files, capsys, data):
    (files / "bad.log").write_bytes(data)
    for cmd in ("analyze", "fix", "perf", "accuracy"):
        extra = ["-o", files / "o.onnx"] if cmd == "fix" else []
        _one_line_exit3(*run(capsys, cmd, files / "m.onnx", "--compiler-log", files / "bad.log", *extra))


def test_usage_errors(files, capsys):
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--own-scales")
    assert code == 2 and "go with --compiler-log" in err
    code, out, err = run(capsys, "analyze", files / "m.onnx", "--compiler-log", files / "hb.log", "--scheme", "asym",
                         "--no-perf", "--no-fidelity")
    assert code == 2 and "symmetric" in err


def test_truncated_logs_through_the_cli_process(files):
    """A few cuts of a real-format log through the real CLI process: exit 0 or 3, one line, no traceback."""
    text = (files / "hb.log").read_bytes()
    for k, cut in enumerate((len(text) // 7, len(text) // 2, len(text) - 40)):
        p = files / f"cut{k}.log"
        p.write_bytes(text[:cut])
        r = subprocess.run([sys.executable, "-m", "qtquant", "perf", str(files / "m.onnx"), "--compiler-log", str(p),
                            "--calib-count", "2"], capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 3) and "Traceback" not in r.stderr
        if r.returncode == 3:
            assert len(r.stderr.strip().splitlines()) == 1


def test_a_log_without_ddr_traffic_prints_no_ddr_error(tmp_path, capsys):
    # A log whose estimate moves no DDR bytes: the DDR error has no denominator ("n/a"), not a crash.
    model = branchy_concat_model(chain=True)
    onnx.save(model, tmp_path / "m.onnx")
    spec = LogSpec(thresholds=THRESHOLDS, requantize=("conv1_out",), estimate=(2018.43, 495.4, 0))
    (tmp_path / "hb.log").write_text(render_compile_log(model, spec))
    code, out, err = run(capsys, "analyze", tmp_path / "m.onnx", "--compiler-log", tmp_path / "hb.log",
                         "--no-fidelity", "--calib-count", "4")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("static estimate: log 0.495 ms"))
    assert "DDR: log 0.00 MB" in line and "(n/a %)" in line
