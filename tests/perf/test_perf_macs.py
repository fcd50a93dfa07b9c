"""MAC counting per op type and on the reference architectures (DESIGN §4)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import googlenet, mobilenet_v1, mobilenet_v2, resnet18, resnet50, synthetic_model, yolov8n
from qtquant.model.graph import graph_from_model
from qtquant.perf import macs_of, model_macs


def _single(op, x_shape, w_shape=None, extra_inits=(), out_shape=None, **attrs):
    inits = []
    ins = ["x"]
    if w_shape is not None:
        inits.append(numpy_helper.from_array(np.zeros(w_shape, np.float32), "w"))
        ins.append("w")
    for name, arr in extra_inits:
        inits.append(numpy_helper.from_array(arr, name))
        ins.append(name)
    node = helper.make_node(op, ins, ["y"], name="n", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = graph_from_model(m, ort_fallback=False)
    return graph, graph.nodes["n"]


def test_conv_plain():
    g, n = _single("Conv", [1, 16, 32, 32], [32, 16, 3, 3], pads=[1, 1, 1, 1])
    assert macs_of(n, g) == 32 * 32 * 32 * 16 * 9


def test_conv_stride_and_dilation():
    # stride 2: output 16x16; dilation 2 with pad 2 keeps 32x32 but does not change MACs per output
    g, n = _single("Conv", [1, 8, 32, 32], [8, 8, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert g.tensors["y"].shape == (1, 8, 16, 16)
    assert macs_of(n, g) == 8 * 16 * 16 * 8 * 9
    g, n = _single("Conv", [1, 8, 32, 32], [8, 8, 3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])
    assert g.tensors["y"].shape == (1, 8, 32, 32)
    assert macs_of(n, g) == 8 * 32 * 32 * 8 * 9
    g, n = _single("Conv", [1, 8, 32, 32], [8, 8, 3, 3], dilations=[2, 2])  # no pad: 28x28
    assert macs_of(n, g) == 8 * 28 * 28 * 8 * 9


def test_conv_groups_and_depthwise():
    g, n = _single("Conv", [1, 32, 16, 16], [64, 8, 3, 3], group=4, pads=[1, 1, 1, 1])
    assert macs_of(n, g) == 64 * 16 * 16 * 8 * 9  # each output sees Cin/group = 8 channels
    g, n = _single("Conv", [1, 32, 16, 16], [32, 1, 3, 3], group=32, pads=[1, 1, 1, 1])
    assert macs_of(n, g) == 32 * 16 * 16 * 9  # depthwise: one input channel per output


def test_conv_1d_and_batch():
    g, n = _single("Conv", [2, 4, 100], [6, 4, 5])
    assert macs_of(n, g) == 2 * 6 * 96 * 4 * 5


def test_conv_transpose():
    # Cin=16, Cout=8 (weight is Cin x Cout/group x k x k), stride 2: every input pixel x Cout x k²
    g, n = _single("ConvTranspose", [1, 16, 10, 10], [16, 8, 4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
    assert g.tensors["y"].shape == (1, 8, 20, 20)
    assert macs_of(n, g) == 16 * 10 * 10 * 8 * 16
    g, n = _single("ConvTranspose", [1, 16, 10, 10], [16, 2, 3, 3], group=4)
    assert macs_of(n, g) == 16 * 10 * 10 * 2 * 9


def test_matmul_and_gemm():
    g, n = _single("MatMul", [4, 10, 64], [64, 32])
    assert macs_of(n, g) == 4 * 10 * 32 * 64
    g, n = _single("Gemm", [8, 128], [1000, 128], transB=1)
    assert macs_of(n, g) == 8 * 1000 * 128
    g, n = _single("Gemm", [128, 8], [128, 1000], transA=1)
    assert macs_of(n, g) == 8 * 1000 * 128


def test_non_mac_ops_count_zero():
    g, n = _single("Relu", [1, 8, 4, 4])
    assert macs_of(n, g) == 0


def _gmacs(model):
    return model_macs(graph_from_model(model, ort_fallback=False)) / 1e9


def test_resnet50_v15_is_4_09_gmacs():
    assert _gmacs(resnet50(weights="zeros")) == pytest.approx(4.09, abs=0.005)


def test_mobilenet_v2_is_0_30_gmacs():
    assert _gmacs(mobilenet_v2(weights="zeros")) == pytest.approx(0.30, abs=0.005)


def test_other_references():
    # torchvision: ResNet-18 1.81, MobileNetV1 0.57 (paper: 569M mult-adds)
    assert _gmacs(resnet18(weights="zeros")) == pytest.approx(1.814, abs=0.005)
    assert _gmacs(mobilenet_v1(weights="zeros")) == pytest.approx(0.569, abs=0.002)
    assert _gmacs(googlenet(weights="zeros")) == pytest.approx(1.58, abs=0.01)


def test_yolov8n_640_is_4_35_gmacs():
    # Ultralytics quotes 8.7 GFLOPs = 2 x MACs for the 80-class model at 640.
    assert _gmacs(yolov8n(640, nc=80, weights="zeros")) == pytest.approx(4.35, rel=0.01)
    # MACs scale with the input area.
    assert _gmacs(yolov8n(320, nc=80, weights="zeros")) == pytest.approx(4.372 / 4, rel=0.01)


def test_zoo_models_are_valid_onnx():
    m = mobilenet_v2(weights="zeros")
    onnx.checker.check_model(m)
    m = synthetic_model(200, seed=1)
    onnx.checker.check_model(m)
    g = graph_from_model(m, ort_fallback=False)
    assert 200 <= len(g.nodes) < 215
    assert g.concat_nodes()
