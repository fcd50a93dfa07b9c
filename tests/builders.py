"""Small ONNX models for tests, built with onnx.helper (never read ../shared)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_node(b, x, cin, cout, k, name, gain=1.0, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((cout, cin, k, k)) * gain / np.sqrt(cin * k * k)).astype(np.float32)
    b.append(numpy_helper.from_array(w, f"{name}.w"))
    b.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"{name}.b"))
    return helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}_out"], name=name,
                            kernel_shape=[k, k], pads=[k // 2] * 4)


def branchy_concat_model(gains=(1.0, 3.0, 8.0), shape=(1, 3, 16, 16), dynamic=False, opset=17,
                         chain=False) -> onnx.ModelProto:
    """x → n Conv branches with different gains → Concat → Relu → y.

    With ``chain=True`` branch 0 is Conv → Relu → MaxPool (a pass-through chain into the Concat).
    """
    inits, nodes, cat_in = [], [], []
    for i, g in enumerate(gains):
        n = conv_node(inits, "x", shape[1], 4, 3, f"conv{i}", gain=g, seed=i)
        nodes.append(n)
        out = n.output[0]
        if chain and i == 0:
            nodes.append(helper.make_node("Relu", [out], ["relu0_out"], name="relu0"))
            nodes.append(helper.make_node("MaxPool", ["relu0_out"], ["pool0_out"], name="pool0",
                                          kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
            out = "pool0_out"
        cat_in.append(out)
    nodes.append(helper.make_node("Concat", cat_in, ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat_out"], ["y"], name="final_relu"))
    dims = ["N", shape[1], "H", "W"] if dynamic else list(shape)
    g = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def save(model, path) -> str:
    onnx.save(model, str(path))
    return str(path)
