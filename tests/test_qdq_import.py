"""Issue 2: reading scales from an already-quantized QDQ model."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from builders import branchy_concat_model, save
from ortkit import ort_qdq_file
from qtquant.app import open_model
from qtquant.quant import Scheme


def _quantize(tmp_path, symmetric: bool):
    src = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "f.onnx")
    return ort_qdq_file(src, str(tmp_path / ("q_sym.onnx" if symmetric else "q_asym.onnx")), symmetric=symmetric)


def _dq_scales_into(model, node_name):
    """Independent read: the DequantizeLinear scale initializer feeding each input of a node."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    prod = {o: n for n in model.graph.node for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    out = []
    for i in node.input:
        dq = prod[i]
        assert dq.op_type == "DequantizeLinear"
        out.append(float(inits[dq.input[1]]))
    return out


@pytest.mark.parametrize("symmetric", [True, False])
def test_qdq_scales_match_dequantize_initializers(tmp_path, symmetric):
    q = _quantize(tmp_path, symmetric)
    s = open_model(q)
    assert s.quantized_file and s.ready
    assert s.options.scheme is (Scheme.SYMMETRIC_INT8 if symmetric else Scheme.ASYMMETRIC_UINT8)
    (c,) = s.concats()
    expected = _dq_scales_into(onnx.load(q), "cat")
    got = [m.scale for m in c.inputs]
    assert got == pytest.approx(expected, rel=1e-6)
    assert len(set(np.round(expected, 9))) > 1  # the test model really has mismatched scales
    assert c.rescales >= 2
    # the float view has no Q/DQ left and keeps the model's output name
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in s.graph.nodes.values())
    assert s.graph.outputs == ["y"]
