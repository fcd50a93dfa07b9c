"""Small detector-like models for the sharing/export/fidelity tests (built with onnx.helper).

``detector_model`` has the cases the issue names:
- ``cat1 = Concat(c0, c1)``: two Conv branches of similar range (cheap to share);
- ``cat2 = Concat(cat1, p2)``: nested, with ``p2 = MaxPool(c2)`` (a pass-through chain);
- ``head = Concat(box, score)``: box coordinates (a Conv times 300) next to class scores
  (Sigmoid), the Concat that must be flagged; it feeds the outputs ``boxes``/``scores``
  through a Split;
- ``cat_c = Concat(score, anchor)`` with a constant input ``anchor`` that also feeds an Add;
- ``feat``: a plain Conv output, a model output that sharing must not touch.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders import conv_node


def detector_model(gains=(1.0, 1.3, 1.2), box_gain=300.0, shape=(1, 3, 16, 16), opset=17,
                   metadata=True) -> onnx.ModelProto:
    inits, nodes = [], []
    c = shape[1]
    for i, g in enumerate(gains):
        nodes.append(conv_node(inits, "x", c, 4, 3, f"c{i}", gain=g, seed=i))
    nodes.append(helper.make_node("Concat", ["c0_out", "c1_out"], ["cat1_out"], name="cat1", axis=1))
    nodes.append(helper.make_node("MaxPool", ["c2_out"], ["p2_out"], name="pool2", kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["cat1_out", "p2_out"], ["cat2_out"], name="cat2", axis=1))
    nodes.append(conv_node(inits, "cat2_out", 12, 8, 3, "neck", seed=7))
    nodes.append(helper.make_node("Relu", ["neck_out"], ["h"], name="neck_relu"))
    nodes.append(conv_node(inits, "h", 8, 4, 1, "boxc", seed=8))
    inits.append(numpy_helper.from_array(np.array(box_gain, np.float32), "box_gain"))
    nodes.append(helper.make_node("Mul", ["boxc_out", "box_gain"], ["box"], name="box_mul"))
    nodes.append(conv_node(inits, "h", 8, 2, 1, "clsc", seed=9))
    nodes.append(helper.make_node("Sigmoid", ["clsc_out"], ["score"], name="cls_sigmoid"))
    nodes.append(helper.make_node("Concat", ["box", "score"], ["head_out"], name="head", axis=1))
    inits.append(numpy_helper.from_array(np.array([4, 2], np.int64), "split_sizes"))
    split_attrs = {} if opset >= 13 else {"split": [4, 2]}
    split_in = ["head_out", "split_sizes"] if opset >= 13 else ["head_out"]
    nodes.append(helper.make_node("Split", split_in, ["boxes", "scores"], name="head_split", axis=1,
                                  **split_attrs))
    anchor = np.linspace(0.0, 0.5, shape[2] * shape[3], dtype=np.float32).reshape(1, 1, shape[2], shape[3])
    inits.append(numpy_helper.from_array(anchor, "anchor"))
    nodes.append(helper.make_node("Concat", ["score", "anchor"], ["cat_c_out"], name="cat_c", axis=1))
    nodes.append(helper.make_node("Add", ["cat_c_out", "anchor"], ["scored"], name="anchor_add"))
    nodes.append(conv_node(inits, "h", 8, 4, 1, "featc", seed=10))
    nodes.append(helper.make_node("Relu", ["featc_out"], ["feat"], name="feat_relu"))
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", "c", "h", "w"])
            for n in ("boxes", "scores", "scored", "feat")]
    g = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="qtquant-tests",
                          doc_string="detector-like test model")
    m.ir_version = 8 if opset <= 17 else 9
    if metadata:
        m.metadata_props.add(key="author", value="tests")
    return m


def fp16_model() -> onnx.ModelProto:
    """x → Conv → a; x → Cast(fp16) → Relu (a float16 activation) → Cast(fp32) → Concat(a, ·)."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 3, 3, "c0"))
    nodes.append(helper.make_node("Cast", ["x"], ["x16"], name="to16", to=TensorProto.FLOAT16))
    nodes.append(helper.make_node("Relu", ["x16"], ["r16"], name="relu16"))
    nodes.append(helper.make_node("Cast", ["r16"], ["r32"], name="to32", to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Concat", ["c0_out", "r32"], ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Shape", ["cat_out"], ["shp"], name="shape"))
    nodes.append(helper.make_node("Reshape", ["cat_out", "shp"], ["y"], name="reshape"))
    g = helper.make_graph(nodes, "fp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_builders_make_valid_models():
    for m in (detector_model(), detector_model(opset=12), fp16_model()):
        onnx.checker.check_model(m, full_check=True)
