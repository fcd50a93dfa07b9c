"""Models quantized in a form qtquant does not read are refused in one line: onnxruntime's dynamic
quantization (a YOLOv8n from quantize_dynamic was analyzed as if float, its reference quantized
too) and its operator form (QLinearConv ...: refused before, but naming a QuantizeLinear)."""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static

from builders import branchy_concat_model, save
from qtquant.app import open_model
from qtquant.cli import main as cli_main
from qtquant.base.errors import ModelError
from qtquant.model.graph import load_graph


class _Reader(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(0)
        self._it = iter([{"x": rng.random((1, 3, 16, 16), dtype=np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self._it, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    d = tmp_path_factory.mktemp("forms")
    src = save(branchy_concat_model(), d / "float.onnx")
    quantize_dynamic(src, str(d / "dynamic.onnx"))
    quantize_static(src, str(d / "operator.onnx"), _Reader(), quant_format=QuantFormat.QOperator)
    return d


@pytest.mark.parametrize("name, words", [
    ("dynamic.onnx", "is dynamically quantized (3 ConvInteger"),
    ("operator.onnx", "is quantized in operator form ("),
])
def test_refused_in_one_line(quantized, capsys, name, words):
    path = str(quantized / name)
    rc = cli_main(["analyze", path, "--calib", "synthetic", "--calib-count", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1
    assert f"{name} {words}" in err[0] and "open the float model it was made from" in err[0]
    with pytest.raises(ModelError, match=words.replace("(", r"\(")):
        open_model(path)
    with pytest.raises(ModelError, match=words.replace("(", r"\(")):
        load_graph(path)


def test_the_float_model_still_opens(quantized):
    s = open_model(str(quantized / "float.onnx"))
    assert len(s.graph.concat_nodes()) == 1
