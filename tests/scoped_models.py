"""Models whose structure is in their node names or local functions, for the module hierarchy tests."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ["scoped_model", "function_model"]


def scoped_model(blocks: int = 3, channels: int = 4, gains=(1.0, 6.0)):
    """``blocks`` blocks ``/model.<b>/...``: two branches (Conv+Mul by a Constant, Conv+Relu) joined by a
    Concat (input scales differ by the gains), then a 1x1 Conv; after them a Shape -> Reshape tail.

    Per block: 7 nodes, one of them a Constant (folded, never drawn)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    c = channels
    for b in range(blocks):
        p = f"/model.{b}"
        outs = []
        for br, gain in zip(("a", "c"), gains):
            w = numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * gain / np.sqrt(c)).astype(np.float32),
                                        f"{p}.{br}.w")
            inits.append(w)
            nodes.append(helper.make_node("Conv", [x, w.name], [f"{p}/{br}/conv"], name=f"{p}/{br}/conv/Conv"))
            if br == "a":
                k = numpy_helper.from_array(np.array(2.0, np.float32), f"{p}/k")
                nodes.append(helper.make_node("Constant", [], [f"{p}/k"], name=f"{p}/a/Constant", value=k))
                nodes.append(helper.make_node("Mul", [f"{p}/a/conv", f"{p}/k"], [f"{p}/a/out"], name=f"{p}/a/Mul"))
            else:
                nodes.append(helper.make_node("Relu", [f"{p}/c/conv"], [f"{p}/c/out"], name=f"{p}/c/Relu"))
            outs.append(f"{p}/{br}/out")
        nodes.append(helper.make_node("Concat", outs, [f"{p}/cat"], name=f"{p}/Concat", axis=1))
        # scaled back so that 100 blocks in a row stay finite
        w = numpy_helper.from_array((rng.standard_normal((c, 2 * c, 1, 1)) / (np.sqrt(2 * c) * max(gains)))
                                    .astype(np.float32), f"{p}.cv.w")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [f"{p}/cat", w.name], [f"{p}/out"], name=f"{p}/cv/Conv"))
        x = f"{p}/out"
    nodes.append(helper.make_node("Shape", [x], ["/head/shape"], name="/head/Shape"))
    nodes.append(helper.make_node("Reshape", [x, "/head/shape"], ["y"], name="/head/Reshape"))
    g = helper.make_graph(nodes, "scoped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def function_model(calls: int = 2, channels: int = 4):
    """``calls`` calls ``stage<i>`` of a local function ``Stage`` (Conv, Relu, Sigmoid, Mul inside); no
    structure in the names of the top-level nodes."""
    rng = np.random.default_rng(1)
    c = channels
    body = [helper.make_node("Conv", ["x", "w"], ["t"], name="conv"),
            helper.make_node("Relu", ["t"], ["r"], name="relu"),
            helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
            helper.make_node("Mul", ["r", "s"], ["y"], name="mul")]
    fn = helper.make_function("local", "Stage", ["x", "w"], ["y"], body, [helper.make_opsetid("", 17)])
    nodes, inits = [], []
    x = "x"
    for i in range(calls):
        w = numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.5).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Stage", [x, w.name], [f"s{i}"], name=f"stage{i}", domain="local"))
        x = f"s{i}"
    nodes.append(helper.make_node("Relu", [x], ["y"], name="tail"))
    g = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[fn])
    m.ir_version = 8
    return m
