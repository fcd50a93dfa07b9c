"""Values that are not tensors (sequences from SplitToSequence, SequenceConstruct ...) are never
quantized, observed or fed as tensors: such models opened, then failed with a traceback
(`_ort_fill_shapes` read a list's .shape) or an onnxruntime type error (a sequence exposed as a
tensor output for calibration)."""

import os
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from qtquant.app import open_model
from qtquant.cli import main
from qtquant.model.nodetable import NOT_TENSOR
from qtquant.base.vocab import TensorKind

ROOT = Path(__file__).resolve().parents[2]


def _split_model(path):
    """x -> Relu -> SplitToSequence -> SequenceAt(1) -> Relu -> y, and the sequence's length n."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("SplitToSequence", ["r"], ["seq"], axis=1),
             helper.make_node("SequenceAt", ["seq", "one"], ["part"]),
             helper.make_node("Relu", ["part"], ["y"]),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    g = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("n", TensorProto.INT64, [])], [one])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_a_sequence_is_not_a_tensor_and_the_model_analyzes(tmp_path, capsys):
    path = _split_model(tmp_path / "split.onnx")
    s = open_model(path)
    seq = s.graph.tensors["seq"]
    assert seq.elem_type == NOT_TENSOR and seq.kind is TensorKind.SHAPE and seq.dtype_name == "not a tensor"
    assert "seq" not in s.graph.quantized and s.graph.tensors["part"].kind is TensorKind.ACTIVATION
    assert main(["analyze", path, "--no-perf", "--calib-count", "2"]) == 0
    out = capsys.readouterr().out
    assert "y " in out and "2/2 equal" in out  # the float output measured, the length by agreement


def test_an_untyped_sequence_found_by_onnxruntime_is_not_quantized(tmp_path):
    """The loader's fallback runs onnxruntime for shapes inference left unknown; a sequence comes
    back as a list, which is marked as not a tensor instead of read for a shape."""
    from qtquant.model.graph import _ort_fill_shapes, load_graph

    g = load_graph(_split_model(tmp_path / "split.onnx"))
    t = g.tensors["seq"]
    t.elem_type, t.kind = 0, TensorKind.ACTIVATION  # as if inference had typed nothing
    g._quantized["seq"] = None
    g._unshaped = ["seq"]
    _ort_fill_shapes(g)
    assert t.elem_type == NOT_TENSOR and t.kind is TensorKind.SHAPE and "seq" not in g.quantized


def test_onnxruntime_failing_on_synthetic_integer_inputs_is_one_line_with_what_to_do(tmp_path):
    """onnxruntime's own log lines stay off stderr (it printed three before qtquant's line), and
    synthetic samples, which give an integer input zeros, are named as the likely cause."""
    from builders import expand_shape_model, save

    p = save(expand_shape_model(), tmp_path / "expand.onnx")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "qtquant", "analyze", str(p), "--no-perf", "--calib-count", "2"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert lines[0].startswith("qtquant: error: ") and "onnxruntime" in lines[0]
    assert "synthetic samples give the integer input(s) shape zeros" in lines[0] and "--calib DATA" in lines[0]


def test_the_fidelity_check_failing_on_synthetic_integer_inputs_says_what_to_do_too(tmp_path, capsys):
    """Calibration observes only the input here (it runs nothing): the fidelity check's run is the
    first to fail, and its error names the synthetic samples as calibration's would."""
    from builders import expand_shape_model, save

    p = save(expand_shape_model(relu=False), tmp_path / "expand_only.onnx")
    assert main(["analyze", p, "--no-perf", "--calib-count", "2"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("qtquant: error: fidelity check failed in onnxruntime: ") and "\n" not in err
    assert err.endswith("calibrate on real values: --calib DATA, or Calibration data in the app)")
    assert main(["accuracy", p, "--calib-count", "2"]) == 3
    assert "synthetic samples give the integer input(s) shape zeros" in capsys.readouterr().err
