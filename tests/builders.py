"""Every model the tests build, with onnx.helper (tests never read ../shared).

- small graphs for the analysis, sharing, export and fidelity tests (``branchy_concat_model``,
  ``detector_model``, ``fp16_model``, ``half_model``, ``mul_relu_model``, ``dead_relu_model``);
- reference architectures with random weights (ResNet, MobileNet, GoogLeNet, YOLOv8n) and a
  synthetic graph of any size, for the perf tests and the benchmarks
  (``benchmarks/perf_accuracy.py`` and ``benchmarks/perf_speed.py`` import this module).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# A march whose Concat rule rescales conv branches made for one Concat (widest-input: the output
# takes the widest branch's scale, the others are rescaled).  bayes-e, the default, writes such
# branches at the Concat's own scale (producers-write, what the RDK X5 compile logs show), so the
# models here would have nothing to rescale there: tests of sharing, rescales and their display on
# these models name this march.
RESCALING_MARCH = "bayes"


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


def save_graph(graph, path) -> str:
    """``graph`` as an opset-17 model saved at ``path`` (what the path-taking builders return)."""
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def mul_branch(nodes, inits, name, k, src="x") -> str:
    """``src * k`` as a Mul node named ``name``; its output's name."""
    inits.append(numpy_helper.from_array(np.array(k, np.float32), f"{name}_k"))
    nodes.append(helper.make_node("Mul", [src, f"{name}_k"], [f"{name}_out"], name=name))
    return f"{name}_out"


def detector_model(gains=(1.0, 1.3, 1.2), box_gain=300.0, shape=(1, 3, 16, 16), opset=17,
                   metadata=True) -> onnx.ModelProto:
    """A small detector-like model for the sharing/export/fidelity tests, with the cases that matter:

    - ``cat1 = Concat(c0, c1)``: two Conv branches of similar range (cheap to share);
    - ``cat2 = Concat(cat1, p2)``: nested, with ``p2 = MaxPool(c2)`` (a pass-through chain);
    - ``head = Concat(box, score)``: box coordinates (a Conv times 300) next to class scores
      (Sigmoid), the Concat that must be flagged; it feeds the outputs ``boxes``/``scores``
      through a Split;
    - ``cat_c = Concat(score, anchor)`` with a constant input ``anchor`` that also feeds an Add;
    - ``feat``: a plain Conv output, a model output that sharing must not touch.
    """
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


def fp16_model(elem=TensorProto.FLOAT16) -> onnx.ModelProto:
    """x → Conv → a; x → Cast(fp16) → Relu (a float16 activation) → Cast(fp32) → Concat(a, ·).
    ``elem``: the type of the Cast branch (TensorProto.DOUBLE: a float64 activation, which stays
    one; a float16 file is widened to float32 on open)."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 3, 3, "c0"))
    nodes.append(helper.make_node("Cast", ["x"], ["x16"], name="to16", to=elem))
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


def half_model() -> onnx.ModelProto:
    """What ``model.half()`` exports behind a float32 input: x → Cast(fp16) → two Conv branches
    (float16 weights, one through a float16 Constant Mul) → Concat → Relu → Cast(fp32) → y, and a
    shape branch that casts an integer to float16 (a Cast that stays one)."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []
    for i, gain in enumerate((1.0, 6.0)):
        w = (rng.standard_normal((4, 3, 3, 3)) * gain / 5).astype(np.float16)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(4, np.float16), f"b{i}")]
        nodes.append(helper.make_node("Conv", ["x16", f"w{i}", f"b{i}"], [f"conv{i}"], name=f"conv{i}",
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes = [helper.make_node("Cast", ["x"], ["x16"], name="to16", to=TensorProto.FLOAT16), *nodes,
             helper.make_node("Constant", [], ["k"], name="k",
                              value=numpy_helper.from_array(np.array(0.5, np.float16))),
             helper.make_node("Mul", ["conv1", "k"], ["half1"], name="mul"),
             helper.make_node("Concat", ["conv0", "half1"], ["cat"], name="cat", axis=1),
             helper.make_node("Relu", ["cat"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["shp"], name="shape"),
             helper.make_node("Cast", ["shp"], ["shp16"], name="shape16", to=TensorProto.FLOAT16),
             helper.make_node("ReduceSum", ["shp16"], ["n16"], name="count", keepdims=0),
             helper.make_node("Cast", ["n16"], ["n"], name="count32", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["r"], ["y"], name="to32", to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8]),
                           helper.make_tensor_value_info("n", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def expand_shape_model(relu: bool = True) -> onnx.ModelProto:
    """x (3x1) -> Relu -> Expand by the int64 input ``shape``: an input holding a shape, which
    synthetic samples (zeros for integer inputs) cannot run.  Without the Relu nothing is observed
    but the input, so calibration runs nothing and the fidelity check is the first run that fails."""
    nodes = [helper.make_node("Relu", ["x"], ["r"])] if relu else []
    nodes.append(helper.make_node("Expand", ["r" if relu else "x", "shape"], ["y"]))
    g = helper.make_graph(nodes, "expand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1]),
                                            helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def mul_relu_model() -> onnx.ModelProto:
    """x [1, 4] -> Mul(3) -> Relu -> y; observed x, m and y."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Mul", ["x", "three"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "tiny", [x], [y], [helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def dead_relu_model(path, shared_fc=False):
    """x -> Conv (tiny weights, negative bias) -> Relu (nearly dead) -> Flatten -> Gemm 'fc' -> y.

    With ``shared_fc`` a second Gemm 'fc2' reads the same weight from an ordinary activation."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 1e-7 / np.sqrt(27)).astype(np.float32)
    fc_b = (rng.choice([-1.0, 1.0], 32) * rng.uniform(0.1, 10.0, 32)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "c1.w"),
             numpy_helper.from_array(np.full(16, -1.5e-7, np.float32), "c1.b"),
             numpy_helper.from_array((rng.standard_normal((32, 1024)) / 32).astype(np.float32), "fc.w"),
             numpy_helper.from_array(fc_b, "fc.b")]
    nodes = [helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1_out"], name="c1", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1_out"], ["h"], name="relu"),
             helper.make_node("Flatten", ["h"], ["hf"], name="flat"),
             helper.make_node("Gemm", ["hf", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])]
    if shared_fc:
        inits.append(numpy_helper.from_array(np.full(32, 0.05, np.float32), "fc2.b"))
        nodes += [helper.make_node("Flatten", ["x"], ["xf0"], name="flat_x"),
                  helper.make_node("Tile", ["xf0", "reps"], ["xf"], name="tile"),
                  helper.make_node("Slice", ["xf", "starts", "ends", "axes"], ["xs"], name="slice"),
                  helper.make_node("Gemm", ["xs", "fc.w", "fc2.b"], ["y2"], name="fc2", transB=1)]
        inits += [numpy_helper.from_array(np.array([1, 6], np.int64), "reps"),
                  numpy_helper.from_array(np.array([0], np.int64), "starts"),
                  numpy_helper.from_array(np.array([1024], np.int64), "ends"),
                  numpy_helper.from_array(np.array([1], np.int64), "axes")]
        outs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 32]))
    g = helper.make_graph(nodes, "dead_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outs, inits)
    return save_graph(g, path)


# -- models the GUI tests open --------------------------------------------------------------------
# Concat name -> (gain of its second input, expected mismatch band)
BAND_CATS = {"cat_equal": (1.0, 0), "cat_yellow": (1.5, 1), "cat_orange": (4.0, 2), "cat_red": (20.0, 3)}


def band_model(path, hw=8, dynamic=False):
    """x -> Mul(x, k) branches -> four Concats with ratios 1, 1.5, 4 and 20."""
    nodes, inits = [], []

    def mul(name, k):
        return mul_branch(nodes, inits, name, k)

    a = mul("mul_a", 1.0)
    outs = []
    for cat, (k, _) in BAND_CATS.items():
        b = mul(f"mul_{cat}", k)
        nodes.append(helper.make_node("Concat", [a, b], [f"{cat}_out"], name=cat, axis=1))
        nodes.append(helper.make_node("Relu", [f"{cat}_out"], [f"{cat}_y"], name=f"{cat}_relu"))
        outs.append(helper.make_tensor_value_info(f"{cat}_y", TensorProto.FLOAT, None))
    dims = [1, 3, "h", "w"] if dynamic else [1, 3, hw, hw]
    g = helper.make_graph(nodes, "bands", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)], outs,
                          inits)
    return save_graph(g, path)


def edit_model(path, k_e: float = 4.0):
    """x -> Mul branches (1, 3, 6) -> Concat cat1; x -> Mul (0.5, ``k_e``) -> Concat cat2 -> Relu -> Reshape."""
    nodes, inits = [], []

    def mul(name, k):
        return mul_branch(nodes, inits, name, k)

    a, b, c = mul("br_a", 1.0), mul("br_b", 3.0), mul("br_c", 6.0)
    nodes.append(helper.make_node("Concat", [a, b, c], ["cat1_out"], name="cat1", axis=1))
    nodes.append(helper.make_node("Relu", ["cat1_out"], ["y1"], name="relu1"))
    d, e = mul("br_d", 0.5), mul("br_e", k_e)
    nodes.append(helper.make_node("Concat", [d, e], ["cat2_out"], name="cat2", axis=1))
    nodes.append(helper.make_node("Relu", ["cat2_out"], ["r2"], name="relu2"))
    nodes.append(helper.make_node("Shape", ["r2"], ["r2_shape"], name="shape"))
    nodes.append(helper.make_node("Reshape", ["r2", "r2_shape"], ["y2"], name="reshape"))
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2")]
    g = helper.make_graph(nodes, "edit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outs, inits)
    return save_graph(g, path)


def other_model(path):
    """x -> Mul(2) -> Relu -> y: a second, unrelated model to open."""
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "k2")]
    nodes = [helper.make_node("Mul", ["x", "k2"], ["m"], name="other_mul"),
             helper.make_node("Relu", ["m"], ["y"], name="other_relu")]
    g = helper.make_graph(nodes, "other", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return save_graph(g, path)


# -- reference architectures ---------------------------------------------------------------------
# Built with `onnx.helper` (random weights), and a synthetic graph.
#
# Used by the perf tests (MAC counts against the published references), by
# `benchmarks/perf_accuracy.py` (latency against public RDK X5 figures) and by speed
# benchmarks that need a graph of a given size.  BatchNorm is folded into the conv bias,
# as `torch.onnx.export` does for a model in eval mode.

OPSET = 17


class _Builder:
    def __init__(self, name: str, seed: int = 0, weights: str = "random"):
        self.name = name
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.weights = weights
        self._n = 0

    def _uid(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def _init(self, name: str, shape, fan_in: int | None = None) -> str:
        if self.weights == "zeros" or fan_in is None:
            arr = np.zeros(shape, np.float32)
        else:  # He-normal keeps activations in a sane range through deep stacks
            arr = (self.rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, inputs, prefix: str | None = None, n_out: int = 1, **attrs):
        name = self._uid(prefix or op.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, dilation=1, bias=True, prefix="conv"):
        name = self._uid(prefix)
        k = (k, k) if isinstance(k, int) else tuple(k)
        if pad is None:
            pad = tuple(dilation * (kk - 1) // 2 for kk in k)
        pad = (pad, pad) if isinstance(pad, int) else tuple(pad)
        w = self._init(f"{name}.weight", (cout, cin // group, *k), fan_in=cin // group * k[0] * k[1])
        ins = [x, w]
        if bias:
            ins.append(self._init(f"{name}.bias", (cout,)))
        out = f"{name}_out"
        self.nodes.append(helper.make_node("Conv", ins, [out], name=name, kernel_shape=list(k),
                                           strides=[stride, stride], pads=[*pad, *pad], group=group,
                                           dilations=[dilation, dilation]))
        return out

    def relu(self, x):
        return self.node("Relu", [x])

    def relu6(self, x):
        if not any(i.name == "relu6_min" for i in self.inits):
            self.inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "relu6_min"))
            self.inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "relu6_max"))
        return self.node("Clip", [x, "relu6_min", "relu6_max"], prefix="relu6")

    def maxpool(self, x, k, stride, pad=0):
        return self.node("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def gap_fc(self, x, cin, classes=1000):
        y = self.node("GlobalAveragePool", [x])
        y = self.node("Flatten", [y], axis=1)
        w = self._init(f"fc{self._n}.weight", (classes, cin), fan_in=cin)
        b = self._init(f"fc{self._n}.bias", (classes,))
        return self.node("Gemm", [y, w, b], prefix="fc", transB=1)

    def model(self, x_name, x_shape, out) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name,
                              [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qtquant.zoo")
        m.ir_version = 8
        # Give the output its inferred type and shape (the checker wants one on graph outputs).
        inferred = onnx.shape_inference.infer_shapes(m)
        if inferred.graph.output[0].type.tensor_type.HasField("shape"):
            m.graph.output[0].CopyFrom(inferred.graph.output[0])
        return m


def _resnet(blocks, bottleneck: bool, size: int, seed: int, weights: str, name: str) -> onnx.ModelProto:
    b = _Builder(name, seed, weights)
    x = b.relu(b.conv("input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool(x, 3, 2, 1)
    cin = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            cout = width * 4 if bottleneck else width
            if bottleneck:  # v1.5: the stride sits on the 3x3 conv
                y = b.relu(b.conv(x, cin, width, 1))
                y = b.relu(b.conv(y, width, width, 3, stride=stride))
                y = b.conv(y, width, cout, 1)
            else:
                y = b.relu(b.conv(x, cin, width, 3, stride=stride))
                y = b.conv(y, width, width, 3)
            sc = b.conv(x, cin, cout, 1, stride=stride, pad=0) if (stride != 1 or cin != cout) else x
            x = b.relu(b.node("Add", [y, sc]))
            cin = cout
    return b.model("input", (1, 3, size, size), b.gap_fc(x, cin))


def resnet18(size: int = 224, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    return _resnet((2, 2, 2, 2), False, size, seed, weights, "resnet18")


def resnet50(size: int = 224, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    """ResNet-50 v1.5 (torchvision): 4.09 GMACs at 224."""
    return _resnet((3, 4, 6, 3), True, size, seed, weights, "resnet50_v1.5")


def mobilenet_v1(size: int = 224, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    b = _Builder("mobilenet_v1", seed, weights)
    x = b.relu(b.conv("input", 3, 32, 3, stride=2))
    cin = 32
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]
    for cout, s in cfg:
        x = b.relu(b.conv(x, cin, cin, 3, stride=s, group=cin, prefix="dw"))
        x = b.relu(b.conv(x, cin, cout, 1, prefix="pw"))
        cin = cout
    return b.model("input", (1, 3, size, size), b.gap_fc(x, cin))


def mobilenet_v2(size: int = 224, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0): about 0.30 GMACs at 224."""
    b = _Builder("mobilenet_v2", seed, weights)
    x = b.relu6(b.conv("input", 3, 32, 3, stride=2))
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = b.relu6(b.conv(x, cin, hid, 1, prefix="expand")) if t != 1 else x
            y = b.relu6(b.conv(y, hid, hid, 3, stride=stride, group=hid, prefix="dw"))
            y = b.conv(y, hid, c, 1, prefix="project")
            x = b.node("Add", [x, y]) if (stride == 1 and cin == c) else y
            cin = c
    x = b.relu6(b.conv(x, cin, 1280, 1))
    return b.model("input", (1, 3, size, size), b.gap_fc(x, 1280))


def googlenet(size: int = 224, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    """Inception v1 as in the paper (5x5 branch; no LRN, no auxiliary heads)."""
    b = _Builder("googlenet", seed, weights)
    x = b.relu(b.conv("input", 3, 64, 7, stride=2, pad=3))
    x = b.maxpool(x, 3, 2, 1)
    x = b.relu(b.conv(x, 64, 64, 1))
    x = b.relu(b.conv(x, 64, 192, 3))
    x = b.maxpool(x, 3, 2, 1)
    cin = 192

    def inception(x, cin, c1, c3r, c3, c5r, c5, pp):
        b1 = b.relu(b.conv(x, cin, c1, 1))
        b2 = b.relu(b.conv(b.relu(b.conv(x, cin, c3r, 1)), c3r, c3, 3))
        b3 = b.relu(b.conv(b.relu(b.conv(x, cin, c5r, 1)), c5r, c5, 5))
        b4 = b.relu(b.conv(b.maxpool(x, 3, 1, 1), cin, pp, 1))
        return b.node("Concat", [b1, b2, b3, b4], prefix="inception", axis=1), c1 + c3 + c5 + pp

    for i, cfg in enumerate([(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), None,
                             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
                             (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
                             (256, 160, 320, 32, 128, 128), None,
                             (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]):
        if cfg is None:
            x = b.maxpool(x, 3, 2, 1)
        else:
            x, cin = inception(x, cin, *cfg)
    return b.model("input", (1, 3, size, size), b.gap_fc(x, cin))


def yolov8n(size: int = 640, nc: int = 80, seed: int = 0, weights: str = "random") -> onnx.ModelProto:
    """Ultralytics YOLOv8n (depth 0.33, width 0.25) with the Detect head up to the DFL conv.

    The box decoding after DFL (anchor arithmetic) is left out: it has no MACs and is
    tiny.  About 4.37 GMACs at 640 for 80 classes (Ultralytics quotes 8.7 GFLOPs).
    """
    b = _Builder(f"yolov8n_{nc}", seed, weights)

    def cbs(x, cin, cout, k=1, s=1):  # Conv + (folded BN) + SiLU, as exported: Sigmoid and Mul
        y = b.conv(x, cin, cout, k, stride=s)
        return b.node("Mul", [y, b.node("Sigmoid", [y])])

    def c2f(x, cin, cout, n, shortcut):
        c = cout // 2
        y = cbs(x, cin, 2 * c)
        parts = list(b.node("Split", [y, _const(b, "split_" + str(c), np.array([c, c], np.int64))], n_out=2, axis=1))
        for _ in range(n):
            z = cbs(cbs(parts[-1], c, c, 3), c, c, 3)
            parts.append(b.node("Add", [parts[-1], z]) if shortcut else z)
        return cbs(b.node("Concat", parts, axis=1), (2 + n) * c, cout)

    def up(x):
        return b.node("Resize", [x, "", _const(b, "up_scales", np.array([1, 1, 2, 2], np.float32))], mode="nearest")

    x = cbs("images", 3, 16, 3, 2)
    x = cbs(x, 16, 32, 3, 2)
    x = c2f(x, 32, 32, 1, True)
    x = cbs(x, 32, 64, 3, 2)
    p3 = c2f(x, 64, 64, 2, True)
    x = cbs(p3, 64, 128, 3, 2)
    p4 = c2f(x, 128, 128, 2, True)
    x = cbs(p4, 128, 256, 3, 2)
    x = c2f(x, 256, 256, 1, True)
    y = cbs(x, 256, 128)  # SPPF
    m1 = b.maxpool(y, 5, 1, 2)
    m2 = b.maxpool(m1, 5, 1, 2)
    m3 = b.maxpool(m2, 5, 1, 2)
    p5 = cbs(b.node("Concat", [y, m1, m2, m3], axis=1), 512, 256)
    h4 = c2f(b.node("Concat", [up(p5), p4], axis=1), 384, 128, 1, False)
    n3 = c2f(b.node("Concat", [up(h4), p3], axis=1), 192, 64, 1, False)
    n4 = c2f(b.node("Concat", [cbs(n3, 64, 64, 3, 2), h4], axis=1), 192, 128, 1, False)
    n5 = c2f(b.node("Concat", [cbs(n4, 128, 128, 3, 2), p5], axis=1), 384, 256, 1, False)
    c2, c3 = max(16, 64 // 4, 64), max(64, min(nc, 100))
    levels = []
    for feat, ch in ((n3, 64), (n4, 128), (n5, 256)):
        box = b.conv(cbs(cbs(feat, ch, c2, 3), c2, c2, 3), c2, 64, 1)
        cls = b.conv(cbs(cbs(feat, ch, c3, 3), c3, c3, 3), c3, nc, 1)
        lvl = b.node("Concat", [box, cls], axis=1)
        levels.append(b.node("Reshape", [lvl, _const(b, f"shape_{nc}", np.array([1, 64 + nc, -1], np.int64))]))
    cat = b.node("Concat", levels, axis=2)
    box, cls = b.node("Split", [cat, _const(b, f"split_head_{nc}", np.array([64, nc], np.int64))], n_out=2, axis=1)
    d = b.node("Reshape", [box, _const(b, "dfl_shape", np.array([1, 4, 16, -1], np.int64))])
    d = b.node("Softmax", [b.node("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    d = b.conv(d, 16, 1, 1, bias=False, prefix="dfl")
    d = b.node("Reshape", [d, _const(b, "dfl_out", np.array([1, 4, -1], np.int64))])
    out = b.node("Concat", [d, b.node("Sigmoid", [cls])], axis=1)
    return b.model("images", (1, 3, size, size), out)


def _const(b: _Builder, name: str, arr) -> str:
    if not any(i.name == name for i in b.inits):
        b.inits.append(numpy_helper.from_array(arr, name))
    return name


ZOO = {
    "yolov8n": yolov8n,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "googlenet": googlenet,
}


def zoo_model(name: str, **kw) -> onnx.ModelProto:
    return ZOO[name](**kw)


def synthetic_model(n_nodes: int, seed: int = 0, channels: int = 8, size: int = 16) -> onnx.ModelProto:
    """A DAG of about ``n_nodes`` nodes mixing conv chains, residual adds and branch Concats.

    Channel count and spatial size stay constant, so weights stay tiny even at 10,000
    nodes; every third block or so ends in a channel Concat whose inputs carry their own
    observers (the mismatches the perf simulator and the GUI must handle).
    """
    b = _Builder(f"synthetic_{n_nodes}", seed)
    rng = np.random.default_rng(seed)
    c = channels
    x = b.relu(b.conv("input", 3, c, 3))
    while len(b.nodes) < n_nodes:
        kind = rng.integers(0, 4)
        if kind == 0:  # conv chain
            x = b.relu(b.conv(x, c, c, 3))
        elif kind == 1:  # residual
            x = b.node("Add", [x, b.conv(b.relu(b.conv(x, c, c, 3)), c, c, 1)])
        elif kind == 2:  # branches into a channel Concat, then a 1x1 conv back to c channels
            k = int(rng.integers(2, 4))
            branches = [b.relu(b.conv(x, c, c, 1 + 2 * j)) for j in range(k - 1)]
            branches.append(b.maxpool(x, 3, 1, 1))
            x = b.relu(b.conv(b.node("Concat", branches, axis=1), k * c, c, 1))
        else:  # SiLU-style activation (Sigmoid * x)
            y = b.conv(x, c, c, 3)
            x = b.node("Mul", [y, b.node("Sigmoid", [y])])
    return b.model("input", (1, 3, size, size), x)


def spiky_chain_model(spike: float = 0.0, shape=(1, 4, 8, 8)) -> onnx.ModelProto:
    """x -> Sigmoid (s) -> Mul 3 (m) -> Add spike (b) -> Sub spike (c) -> Tanh (out).

    No weights, so the quantized model is Q/DQ on each activation and numpy can replay it exactly.
    ``spike`` puts one huge value into ``b`` (a constant added, then subtracted): ``b``'s scale gets
    coarse enough to crush everything else, so its rounding dominates the output's error.
    """
    k = np.full(shape, 0.0, np.float32)
    k.flat[0] = spike
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["s", "three"], ["m"], name="mul3"),
             helper.make_node("Add", ["m", "spike"], ["b"], name="add_spike"),
             helper.make_node("Sub", ["b", "spike"], ["c"], name="sub_spike"),
             helper.make_node("Tanh", ["c"], ["out"], name="tanh")]
    inits = [numpy_helper.from_array(np.array(3.0, np.float32), "three"), numpy_helper.from_array(k, "spike")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def saturating_conv_model(channels: int = 64, out_channels: int = 8) -> onnx.ModelProto:
    """x (uniform [0, 1) in calibration) -> 1x1 Conv -> y, whose int8 program overflows a u8×s8 pair
    path: every weight is ±its output channel's largest (int8 ±127) with equal signs side by side, and
    onnxruntime's x86 kernels shift the int8 activations to u8 (128..255), so two neighbouring products
    reach 2·255·127, far past int16.  (An exact int32 accumulation computes it without harm.)"""
    signs = np.where((np.arange(channels) // 4) % 2 == 0, 1.0, -1.0)
    w = np.stack([signs * (1.0 if k % 2 == 0 else -1.0) for k in range(out_channels)])
    w = (w / channels).astype(np.float32).reshape(out_channels, channels, 1, 1)
    inits = [numpy_helper.from_array(w, "conv.w"),
             numpy_helper.from_array(np.zeros(out_channels, np.float32), "conv.b")]
    node = helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["y"], name="conv", kernel_shape=[1, 1])
    g = helper.make_graph([node], "saturating", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, channels, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def tied_classifier(path, with_logits=True):
    """x (1x8 in [0, 1)) -> Gemm -> logits -> ArgMax -> cls.  Classes 0 and 1 differ by a thousandth
    of x0 - 0.5: far below one int8 step of the logits, so quantization flips some classes."""
    w = np.ones((3, 8), np.float32)
    w[1, 0] += 0.001
    w[2] *= 0.5
    b = np.array([0.0, -0.0005, 0.0], np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1),
             helper.make_node("ArgMax", ["logits"], ["cls"], axis=1, keepdims=0)]
    outs = [helper.make_tensor_value_info("cls", TensorProto.INT64, [1])]
    if with_logits:
        outs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3]))
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])], outs,
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def dynamic_model(meta=None, value_info=None):
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                      ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["images"], ["y"])], "g", [x], [y])
    if value_info:
        g.value_info.append(helper.make_tensor_value_info("images", TensorProto.FLOAT, value_info))
    m = helper.make_model(g)
    for k, v in (meta or {}).items():
        helper.set_model_props(m, {k: v})
    return m


def outlier_model_and_data(tmp_path, op: str, spikes: int, spike: float, noise: float, n=8) -> tuple[str, str]:
    """x -> Mul 2 -> a -> ``op`` -> y, and .npy data: N(0, ``noise``) with ``spikes`` values of +-``spike``
    per sample (of 4096)."""
    shape = [1, 1, 64, 64]
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"), helper.make_node(op, ["a"], ["y"], name="op")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((n, *shape)) * noise).astype(np.float32)
    for i in range(n):
        flat = data[i].reshape(-1)
        flat[rng.choice(flat.size, spikes, replace=False)] = rng.choice([-spike, spike], spikes)
    npy = tmp_path / f"{op}.npy"
    np.save(npy, data)
    return save(m, tmp_path / f"{op}.onnx"), str(npy)


def outlier_case_saturating(tmp_path):
    # One value in 4096 is +-200: MinMax's step (some 3) leaves Sigmoid's input a handful of levels
    # where it varies; a method that clips that one value (which Sigmoid saturates anyway) keeps them.
    return outlier_model_and_data(tmp_path, "Sigmoid", 1, 200.0, 1.0)


def outlier_case_sparse(tmp_path):
    # Two values in 4096 are +-50 among small noise and Identity passes them on: they are nearly all
    # of the output's signal, so a method that clips them loses it.
    return outlier_model_and_data(tmp_path, "Identity", 2, 50.0, 0.05)
