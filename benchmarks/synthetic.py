"""Synthetic graphs of a chosen size for benchmarks: repeated C2f-like blocks (Conv, Split, Concat)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def synthetic_model(n_nodes: int = 10_000, channels: int = 8, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    w = numpy_helper.from_array((rng.standard_normal((channels, channels, 1, 1)) * 0.3).astype(np.float32), "w")
    inits.append(w)
    split = numpy_helper.from_array(np.array([channels // 2, channels // 2], np.int64), "split")
    inits.append(split)
    x = "x"
    i = 0
    while len(nodes) < n_nodes - 6:
        c = f"b{i}"
        nodes.append(helper.make_node("Conv", [x, "w"], [f"{c}_conv"], name=f"{c}/conv"))
        nodes.append(helper.make_node("Relu", [f"{c}_conv"], [f"{c}_relu"], name=f"{c}/relu"))
        nodes.append(helper.make_node("Split", [f"{c}_relu", "split"], [f"{c}_s0", f"{c}_s1"], name=f"{c}/split",
                                      axis=1))
        nodes.append(helper.make_node("Sigmoid", [f"{c}_s1"], [f"{c}_sig"], name=f"{c}/sig"))
        nodes.append(helper.make_node("Concat", [f"{c}_s0", f"{c}_sig"], [f"{c}_cat"], name=f"{c}/cat", axis=1))
        nodes.append(helper.make_node("Add", [f"{c}_cat", x], [f"{c}_out"], name=f"{c}/add"))
        x = f"{c}_out"
        i += 1
    g = helper.make_graph(nodes, "synthetic",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def block_cnn(n_nodes: int = 20_000, channels: int = 8, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A CNN of 9-node blocks with ``channels x size x size`` activations that stay finite at any
    depth: Conv, Relu, Split, Sigmoid, Tanh, Concat, a 1x1 Conv, the residual Add and a Mul by 0.5
    (:func:`synthetic_model`'s plain residual doubles per block and overflows float32 past ~700)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    for name, arr in (("w", rng.standard_normal((channels, channels, 1, 1)) * 0.3),
                      ("w2", rng.standard_normal((channels, channels, 1, 1)) * 0.3),
                      ("split", np.array([channels // 2, channels // 2])), ("half", np.array(0.5))):
        inits.append(numpy_helper.from_array(arr.astype(np.int64 if name == "split" else np.float32), name))
    x, i = "x", 0
    while len(nodes) + 9 <= n_nodes:
        c = f"b{i}"
        nodes += [helper.make_node("Conv", [x, "w"], [f"{c}_conv"], name=f"{c}/conv"),
                  helper.make_node("Relu", [f"{c}_conv"], [f"{c}_relu"], name=f"{c}/relu"),
                  helper.make_node("Split", [f"{c}_relu", "split"], [f"{c}_s0", f"{c}_s1"], name=f"{c}/split",
                                   axis=1),
                  helper.make_node("Sigmoid", [f"{c}_s1"], [f"{c}_sig"], name=f"{c}/sig"),
                  helper.make_node("Tanh", [f"{c}_s0"], [f"{c}_tanh"], name=f"{c}/tanh"),
                  helper.make_node("Concat", [f"{c}_tanh", f"{c}_sig"], [f"{c}_cat"], name=f"{c}/cat", axis=1),
                  helper.make_node("Conv", [f"{c}_cat", "w2"], [f"{c}_proj"], name=f"{c}/proj"),
                  helper.make_node("Add", [f"{c}_proj", x], [f"{c}_add"], name=f"{c}/add"),
                  helper.make_node("Mul", [f"{c}_add", "half"], [f"{c}_out"], name=f"{c}/half")]
        x = f"{c}_out"
        i += 1
    g = helper.make_graph(nodes, "block_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
