"""Issue 2: the CLI contract for analyze and demo, exit codes, JSON schema, and no Qt in the core."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builders import RESCALING_MARCH, branchy_concat_model, save
from qtquant.cli import main
from qtquant.base.vocab import DEFAULT_MARCH


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_analyze_json_schema(tmp_path, capsys):
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    rc, out, err = _run(capsys, "analyze", p, "--json", "--calib", "synthetic", "--calib-count", "4",
                        "--march", RESCALING_MARCH)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    (c,) = doc["concats"]
    assert c["node"] == "cat"
    for key in ("ratio", "rescales", "rescale_cost_us", "inputs", "output"):
        assert key in c
    for m in c["inputs"] + [c["output"]]:
        for key in ("tensor", "scale", "absmax", "domain", "bits_lost", "bits_lost_if_shared"):
            assert key in m
        assert m["scale"] > 0
    s = doc["summary"]
    for key in ("concats", "mismatched_concats", "rescales", "latency_ms", "fps", "sqnr_db"):
        assert key in s
    assert s["concats"] == 1 and s["mismatched_concats"] == 1 and s["rescales"] == c["rescales"] >= 1
    assert c["ratio"] > 1.5


def test_analyze_text(tmp_path, capsys):
    p = save(branchy_concat_model(), tmp_path / "m.onnx")
    rc, out, _ = _run(capsys, "analyze", p, "--calib-count", "2")
    assert rc == 0
    assert "cat" in out and "Concats" in out and "rescales" in out


@pytest.mark.parametrize("case", ["missing", "corrupt", "text", "shape", "name", "nan", "percentile", "demo_count"])
def test_bad_input_exits_3_with_one_line(tmp_path, capsys, case):
    """Bad input exits 3; a command line that cannot run as given (the last two) exits 2 (DESIGN §6)."""
    p = save(branchy_concat_model(dynamic=True), tmp_path / "m.onnx")
    args = ["analyze", p, "--input-shape", "x=1x3x16x16"]
    if case == "missing":
        args[1] = str(tmp_path / "nope.onnx")
    elif case == "corrupt":
        (tmp_path / "c.onnx").write_bytes(Path(p).read_bytes()[:100])
        args[1] = str(tmp_path / "c.onnx")
    elif case == "text":
        (tmp_path / "t.onnx").write_text("hello, I am not a model\n")
        args[1] = str(tmp_path / "t.onnx")
    elif case == "shape":
        args[3] = "x=1x3x16"
    elif case == "name":
        args[3] = "images=1x3x16x16"
    elif case == "percentile":  # a percentile without the percentile observer used to be ignored
        args += ["--percentile", "90"]
    elif case == "demo_count":
        args = ["demo", str(tmp_path / "d"), "--count", "0"]
    elif case == "nan":
        a = np.random.default_rng(0).random((1, 3, 16, 16)).astype(np.float32)
        a[0, 0, 0, 0] = np.nan
        np.save(tmp_path / "bad.npy", a)
        args += ["--calib", str(tmp_path / "bad.npy")]
    rc, out, err = _run(capsys, *args)
    assert rc == (2 if case in ("percentile", "demo_count") else 3)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("qtquant: error:"), err
    assert "Traceback" not in err


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--no-such-flag"])
    assert e.value.code == 2


def test_help_names_subcommands():
    r = subprocess.run([sys.executable, "-m", "qtquant", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for cmd in ("analyze", "fix", "perf", "screenshot", "demo"):
        assert cmd in r.stdout


def test_quick_exit_prints_everything_and_runs_exit_handlers(tmp_path, capsys):
    """``python -m qtquant analyze`` ends without the interpreter's teardown (cli.entry): its output
    is main()'s to the byte, its exit code main()'s, and exit handlers still run; a failing command
    keeps its exit code."""
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    args = ["analyze", p, "--json", "--calib", "synthetic", "--calib-count", "2"]
    rc, out, _ = _run(capsys, *args)
    assert rc == 0
    mark = tmp_path / "atexit-ran"
    code = ("import atexit, os, pathlib; atexit.register(lambda: pathlib.Path(os.environ['MARK']).write_text('x')); "
            "from qtquant.cli import entry; entry()")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env={**os.environ, "MARK": str(mark)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == out
    assert mark.read_text() == "x"
    bad = subprocess.run([sys.executable, "-m", "qtquant", "analyze", str(tmp_path / "missing.onnx")],
                         capture_output=True, text=True)
    assert bad.returncode == 3 and "missing.onnx" in bad.stderr


def test_demo_writes_models_and_data(tmp_path, capsys):
    rc, out, _ = _run(capsys, "demo", str(tmp_path / "d"), "--count", "3")
    assert rc == 0
    att = tmp_path / "d" / "multiscale_attention.onnx"
    assert att.exists() and (tmp_path / "d" / "yolo_neck.onnx").exists()
    assert len(list((tmp_path / "d" / "multiscale_attention_calib").glob("*.npz"))) == 3
    assert _run(capsys, "demo", str(tmp_path / "d"), "--count", "2")[0] == 0  # again, fewer: no stale sample
    assert len(list((tmp_path / "d" / "multiscale_attention_calib").glob("*.npz"))) == 2
    assert _run(capsys, "demo", str(tmp_path / "d"), "--count", "3")[0] == 0
    from qtquant.app import Options, open_model

    for march in (DEFAULT_MARCH, RESCALING_MARCH):  # producers-write and widest-input alike
        s = open_model(att, options=Options(march=march))
        s.run_calibration()
        cats = {c.node: c for c in s.concats()}
        assert set(cats) == {"attn/k_cat", "attn/v_cat"}
        for c in cats.values():
            assert c.rescales == 2 and 1.2 < c.ratio < 12, march


CORE_IMPORT_CHECK = r"""
import importlib, pathlib, sys
import qtquant
root = pathlib.Path(qtquant.__file__).parent
for f in sorted(root.rglob("*.py")):
    rel = f.relative_to(root)
    if rel.parts[0] in ("gui", "torch") or f.name == "__main__.py":
        continue
    parts = ["qtquant", *rel.with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    importlib.import_module(".".join(parts))
bad = [k for k in sys.modules if k.split(".")[0] in ("PySide6", "PyQt5", "PyQt6", "shiboken6", "torch")]
print("LOADED:" + ",".join(bad))
"""


def test_core_imports_without_qt():
    r = subprocess.run([sys.executable, "-c", CORE_IMPORT_CHECK], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "LOADED:", r.stdout


def test_no_qt_import_statements_in_core():
    root = Path(__file__).resolve().parents[2] / "qtquant"
    offenders = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root)
        if rel.parts[0] in ("gui",):
            continue
        for line in f.read_text().splitlines():
            s = line.strip()
            if s.startswith(("import PySide6", "from PySide6", "import PyQt", "from PyQt", "import shiboken")):
                offenders.append(str(rel))
    assert offenders == []


def _two_input_model():
    from onnx import TensorProto, helper

    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, "h", "w"]) for n, c in (("a", 3), ("b", 2))]
    nodes = [helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
             helper.make_node("Relu", ["b"], ["rb"], name="relu_b"),
             helper.make_node("Concat", ["ra", "rb"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "two", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_input_shapes_separated_by_commas_in_one_flag(tmp_path, capsys):
    from qtquant.model.shapes import parse_input_shapes

    assert parse_input_shapes(["a=1x3x8x8,b=1,2,8,8", "c=4"]) == {"a": (1, 3, 8, 8), "b": (1, 2, 8, 8), "c": (4,)}
    p = save(_two_input_model(), tmp_path / "two.onnx")
    rc, out, err = _run(capsys, "analyze", p, "--input-shape", "a=1x3x8x8,b=1x2x8x8", "--calib-count", "2")
    assert rc == 0, err
    assert "a=1x3x8x8, b=1x2x8x8" in out
    rc, out, err = _run(capsys, "analyze", p, "--input-shape", "a=1x3x8x8,b", "--calib-count", "2")
    assert rc == 3 and err.strip().count("\n") == 0 and "bad input shape 'a=1x3x8x8,b'" in err


def test_analyze_names_both_latencies_and_takes_the_board_flags(tmp_path, capsys):
    """analyze says which latency is which (the BPU's static estimate, the board's for one thread) in text
    and JSON, and prices the board as deployed with perf's flags."""
    import json

    p = save(branchy_concat_model(), tmp_path / "m.onnx")
    rc, out, _ = _run(capsys, "analyze", p, "--calib-count", "2")
    assert rc == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("static estimate "))
    assert "(BPU, " in line and "board estimate " in line and "(1 thread) on bayes-e" in line
    docs = []
    for extra in ((), ("--board-bpu-ghz", "2")):
        rc, out, _ = _run(capsys, "analyze", p, "--calib-count", "2", "--json", *extra)
        assert rc == 0
        docs.append(json.loads(out)["summary"])
    plain, fast = docs
    assert plain["board_latency_ms"] > plain["latency_ms"] > 0
    assert fast["latency_ms"] == plain["latency_ms"] and fast["board_latency_ms"] < plain["board_latency_ms"]
