"""Issue 53's rough edges that need no window: an input shape that does not fit says which
dimensions and what fits; one unreadable image in a calibration folder is skipped with a warning."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qtquant.cli import main


def _strided_model(path):
    """x -> Conv s2 (a) -> Conv s2 -> Resize x2 -> Concat with a: the sides must be multiples of 4."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Conv", ["a", "w2"], ["b"], name="c2", kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Resize", ["b", "", "scales"], ["u"], name="up", mode="nearest"),
             helper.make_node("Concat", ["a", "u"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "strided", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2, scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def test_an_input_shape_that_does_not_fit_names_the_dimensions_and_what_fits(tmp_path, capsys):
    path = _strided_model(tmp_path / "strided.onnx")
    assert main(["perf", path, "--input-shape", "x=1x3x30x30", "--calib-count", "1"]) == 3
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "dimensions 2 and 3 must be a multiple of 4 (1x3x28x28 or 1x3x32x32 fits)" in err
    assert main(["perf", path, "--input-shape", "x=1x3x32x32", "--calib-count", "1"]) == 0


def _photos(folder, n=3, bad=("broken.jpg",)):
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    for b in bad:
        (folder / b).write_bytes(b"not an image at all")
    return folder


def test_one_unreadable_image_is_skipped_with_a_warning(tmp_path, capsys):
    from builders import branchy_concat_model, save

    path = save(branchy_concat_model(), tmp_path / "m.onnx")
    folder = _photos(tmp_path / "photos")
    assert main(["analyze", path, "--calib", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "skipped unreadable image" in out and "broken.jpg" in out
    assert "3 samples" in out  # the three readable photos


def test_a_folder_without_a_readable_image_fails_in_one_line(tmp_path, capsys):
    from builders import branchy_concat_model, save

    path = save(branchy_concat_model(), tmp_path / "m.onnx")
    folder = _photos(tmp_path / "photos", n=0, bad=("a.jpg", "b.png"))
    assert main(["analyze", path, "--calib", str(folder)]) == 3
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no readable image" in err and "2 could not be read" in err


def test_analyze_of_a_fixed_file_says_why_its_rescale_count_differs_from_fix(tmp_path, capsys):
    from builders import detector_model, save

    path = save(detector_model(), tmp_path / "det.onnx")
    out = str(tmp_path / "det_fixed.onnx")
    assert main(["fix", path, "--auto-share", "-o", out]) == 0
    capsys.readouterr()
    assert main(["analyze", out]) == 0
    text = capsys.readouterr().out
    line = next(t for t in text.splitlines() if "Concats," in t and "mismatched" in t)
    assert "1 rescales" in line  # the file's count; fix said 0 after its export
    assert "qtquant fix and the app count it as none" in text and "this file's count is 0 by theirs" in text


def test_model_info_accounts_for_every_held_back_sample(tmp_path):
    from builders import branchy_concat_model, save
    from qtquant.app import Options, open_model
    from qtquant.app.views.concats import model_info
    from qtquant.calib import CalibConfig

    s = open_model(save(branchy_concat_model(), tmp_path / "m.onnx"), options=Options(calib=CalibConfig(count=4,
                                                                                                      holdout=40)))
    s.run_calibration()
    assert s.calibration.check_samples == 32 and s.calibration.held_back == 40
    assert "4 samples + 40 held out (check on 32)" in model_info(s).calibration


def test_an_output_that_fires_on_almost_nothing_is_said(tmp_path, capsys):
    """PP-OCR's detector on photos without text: its probability map is ~0 but for a few false
    positives; the report says so and asks for representative data."""
    k = numpy_helper.from_array(np.array(0.9995, np.float32), "t")
    nodes = [helper.make_node("Sub", ["x", "t"], ["d"], name="sub"),
             helper.make_node("Relu", ["d"], ["prob"], name="relu")]
    g = helper.make_graph(nodes, "sparse", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 64])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1, 64, 64])], [k])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "sparse.onnx")
    assert main(["analyze", str(tmp_path / "sparse.onnx")]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("sparse: "))
    assert "prob: the float model fires on only" in line and "representative data" in line
