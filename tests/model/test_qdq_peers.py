"""QDQ files as other tools write them: NVIDIA ModelOpt, NNCF, onnxruntime (DESIGN §2, §3).

Each model mimics one writer's layout, built with onnx.helper:
- ModelOpt: float weight initializer (or Constant) → QuantizeLinear → DequantizeLinear → Conv;
- NNCF: int8 weights as onnxruntime writes them, activations quantized per channel (axis 1)
  before a depthwise conv and into a Concat, and Concats left with a float output while their
  inputs are quantized;
- onnxruntime: int8 weight initializer → DequantizeLinear → Conv.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import save
from qtquant.cli import main
from qtquant.app import open_model


class _B:
    """A graph under construction, with helpers for each writer's Q/DQ layout."""

    def __init__(self):
        self.nodes, self.inits = [], []
        self.rng = np.random.default_rng(0)
        self.k = 0

    def _name(self, stem):
        self.k += 1
        return f"{stem}_{self.k}"

    def init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def qdq(self, x, scale, zp=None, axis=None, dtype=np.int8):
        """Activation Q → DQ; a list of scales makes it per channel on ``axis``."""
        n = self._name("qdq")
        s = np.asarray(scale, np.float32)
        z = np.zeros(s.shape, dtype) if zp is None else np.asarray(zp, dtype)
        self.init(f"{n}.s", s)
        self.init(f"{n}.z", z)
        kw = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node("QuantizeLinear", [x, f"{n}.s", f"{n}.z"], [f"{n}.q"], name=f"{n}_Q", **kw))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{n}.q", f"{n}.s", f"{n}.z"], [f"{n}.dq"],
                                           name=f"{n}_DQ", **kw))
        return f"{n}.dq"

    def weight(self, name, cout, cin, k, layout, per_channel=True):
        """The Conv weight input as ``layout`` writes it: 'modelopt', 'modelopt-const' or 'ort'."""
        w = (self.rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)
        amax = np.abs(w).reshape(cout, -1).max(1) if per_channel else np.array(np.abs(w).max())
        s = (amax / 127.0).astype(np.float32)
        kw = {"axis": 0} if per_channel else {}
        if layout == "ort":
            sb = s.reshape(-1, 1, 1, 1) if per_channel else s
            self.init(f"{name}_q", np.clip(np.rint(w / sb), -127, 127).astype(np.int8))
            self.init(f"{name}_s", s)
            self.init(f"{name}_z", np.zeros(s.shape, np.int8))
            self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"],
                                               [f"{name}_dq"], name=f"{name}_DQ", **kw))
            return f"{name}_dq"
        if layout == "modelopt-const":
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const",
                                               value=numpy_helper.from_array(w, name)))
        else:
            self.init(name, w)
        self.init(f"{name}_s", s)
        self.init(f"{name}_z", np.zeros(s.shape, np.int8))
        self.nodes.append(helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"],
                                           name=f"{name}_Q", **kw))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"],
                                           [f"{name}_dq"], name=f"{name}_DQ", **kw))
        return f"{name}_dq"

    def conv(self, x, cin, cout, name, layout, k=3, group=1, per_channel=True):
        w = self.weight(f"{name}.weight", cout, cin // group, k, layout, per_channel)
        b = self.init(f"{name}.bias", np.zeros(cout, np.float32))
        self.nodes.append(helper.make_node("Conv", [x, w, b], [f"{name}_out"], name=name, kernel_shape=[k, k],
                                           pads=[k // 2] * 4, group=group))
        return f"{name}_out"

    def op(self, op, ins, name, **kw):
        self.nodes.append(helper.make_node(op, ins, [f"{name}_out"], name=name, **kw))
        return f"{name}_out"

    def model(self, cin, outputs):
        g = helper.make_graph(self.nodes, "peer", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, cin, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def modelopt_model():
    """ModelOpt's layout: every weight float and quantized by its own Q → DQ, activations per tensor."""
    b = _B()
    x = b.qdq("x", 0.02)
    a0 = b.conv(x, 3, 4, "model.0.conv", "modelopt")
    a1 = b.conv(x, 3, 4, "model.1.conv", "modelopt-const")
    a2 = b.conv(x, 3, 4, "model.2.conv", "modelopt", per_channel=False)
    cat = b.op("Concat", [b.qdq(a0, 0.05), b.qdq(a1, 0.1), b.qdq(a2, 0.05)], "model.3.cat", axis=1)
    y = b.conv(b.qdq(cat, 0.1), 12, 4, "model.4.conv", "modelopt")
    b.op("Identity", [y], "y")
    return b.model(3, ["y_out"])


def nncf_model():
    """NNCF's layout: int8 weights → DQ, per-channel activation Q/DQ, and Concats with a float output."""
    b = _B()
    x = b.qdq("x", 0.02)
    a = b.conv(x, 4, 4, "conv_a", "ort")
    # a depthwise conv's input quantized per channel
    dw = b.conv(b.qdq(a, [0.01, 0.02, 0.04, 0.03], axis=1), 4, 4, "dw", "ort", group=4)
    e = b.conv(x, 4, 4, "conv_e", "ort")
    f = b.conv(x, 4, 4, "conv_f", "ort")
    # output float, inputs 2.8x apart: the compiler gives the output the widest (input 1)
    cat_float = b.op("Concat", [b.qdq(dw, 0.1), b.qdq(e, 0.28), b.qdq(f, 0.1)], "cat_float", axis=1)
    # a per-channel input whose channels all equal the output's scale
    h = b.conv(x, 4, 4, "conv_h", "ort")
    cat_same = b.op("Concat", [b.qdq(h, [0.1] * 4, axis=1), b.qdq(f, 0.1)], "cat_same", axis=1)
    # one channel of a per-channel input differs from the output
    g = b.conv(x, 4, 4, "conv_g", "ort")
    cat_diff = b.op("Concat", [b.qdq(g, [0.1, 0.1, 0.05, 0.1], axis=1), b.qdq(f, 0.1)], "cat_diff", axis=1)
    same_q = b.qdq(cat_same, 0.1)
    diff_q = b.qdq(cat_diff, 0.1)
    return b.model(4, [cat_float, same_q, diff_q])


def ort_model():
    """onnxruntime's layout: int8 weights dequantized by a lone DequantizeLinear."""
    b = _B()
    x = b.qdq("x", 0.02)
    a0 = b.conv(x, 3, 4, "conv0", "ort")
    a1 = b.conv(x, 3, 4, "conv1", "ort", per_channel=False)
    cat = b.op("Concat", [b.qdq(a0, 0.05), b.qdq(a1, 0.2)], "cat", axis=1)
    b.op("Relu", [b.qdq(cat, 0.2)], "y")
    return b.model(3, ["y_out"])


@pytest.mark.parametrize("build", [modelopt_model, nncf_model, ort_model])
def test_peer_models_run(build):
    import onnxruntime as ort

    m = build()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    cin = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    outs = sess.run(None, {"x": np.random.default_rng(1).random((1, cin, 8, 8), dtype=np.float32)})
    assert all(np.isfinite(o).all() for o in outs)


def _cats(session):
    return {c.node: c for c in session.concats()}


def _json(path, capsys, *extra):
    capsys.readouterr()
    assert main(["analyze", path, "--json", *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    return doc, {c["node"]: c for c in doc["concats"]}


# -- ModelOpt ---------------------------------------------------------------------------------------------


def test_modelopt_float_weights_are_weights_not_activations(tmp_path):
    s = open_model(save(modelopt_model(), tmp_path / "mo.onnx"))
    info = s.qdq
    assert info.weights == 4 and info.float_weights == 4
    for w in ("model.0.conv.weight", "model.1.conv.weight", "model.2.conv.weight", "model.4.conv.weight"):
        assert w not in info.scales and w not in info.ranges and w not in info.channels
        assert s.graph.tensors[w].kind == "weight"
        assert not s.graph.is_quantized(w)
    # the float view keeps the float original, wired straight into the Conv
    conv = s.graph.nodes["model.0.conv"]
    assert conv.inputs[1] == "model.0.conv.weight"
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in s.graph.nodes.values())
    assert info.pairs == 5 and not info.channels


def test_modelopt_concat_rescales(tmp_path):
    s = open_model(save(modelopt_model(), tmp_path / "mo.onnx"))
    (c,) = s.concats()
    assert [m.scale for m in c.inputs] == pytest.approx([0.05, 0.1, 0.05], rel=1e-6)
    assert c.output.scale == pytest.approx(0.1, rel=1e-6)
    assert c.rescales == 2 and c.rescale_inputs == [0, 2]
    assert c.ratio == pytest.approx(2.0, rel=1e-5)
    assert not c.output_float and c.worst_channel_ratio is None


def test_modelopt_cli_exit_0(tmp_path, capsys):
    path = save(modelopt_model(), tmp_path / "mo.onnx")
    doc, cats = _json(path, capsys)
    assert doc["quantized_input"] is True
    assert cats["model.3.cat"]["rescales"] == 2
    assert doc["summary"]["rescales"] == 2 and doc["summary"]["mismatched_concats"] == 1
    assert main(["analyze", path, "--no-perf"]) == 0
    assert "model.3.cat" in capsys.readouterr().out


# -- NNCF -------------------------------------------------------------------------------------------------


def test_nncf_per_channel_activations_are_read(tmp_path):
    s = open_model(save(nncf_model(), tmp_path / "nncf.onnx"))
    ch = s.qdq.channels
    assert set(ch) == {"conv_a_out", "conv_h_out", "conv_g_out"}
    assert ch["conv_a_out"].axis == 1
    assert ch["conv_a_out"].scales == pytest.approx((0.01, 0.02, 0.04, 0.03), rel=1e-6)
    # the envelope range covers the widest channel
    assert s.qdq.ranges["conv_a_out"] == pytest.approx((-127 * 0.04, 127 * 0.04), rel=1e-6)
    assert s.domains.scale_of("conv_a_out") == pytest.approx(0.04, rel=1e-6)


def test_nncf_float_output_concat_compares_inputs(tmp_path):
    s = open_model(save(nncf_model(), tmp_path / "nncf.onnx"))
    c = _cats(s)["cat_float"]
    assert c.output.scale is None and c.output_float
    assert c.reference_input == 1  # the widest input
    assert c.rescales == 2 and c.rescale_inputs == [0, 2]
    assert c.ratio == pytest.approx(2.8, rel=1e-5)
    assert any("not quantized in the file" in n and "input 1" in n for n in c.notes)


@pytest.mark.parametrize("scales, rescales, reference", [((0.1, 0.28, 0.1), 2, 1), ((0.1, 0.1, 0.1), 0, 0)])
def test_nncf_float_output_per_tensor(tmp_path, scales, rescales, reference):
    """Per-tensor inputs only: today's reader takes the file, so this is the float-output rule alone."""
    b = _B()
    x = b.qdq("x", 0.02)
    ins = [b.qdq(b.conv(x, 4, 4, f"c{i}", "ort"), s) for i, s in enumerate(scales)]
    b.op("Concat", ins, "cat", axis=1)
    s = open_model(save(b.model(4, ["cat_out"]), tmp_path / "f.onnx"))
    (c,) = s.concats()
    assert c.output.scale is None
    assert c.rescales == rescales
    assert c.ratio == pytest.approx(max(scales) / min(scales), rel=1e-5)
    assert c.output_float and c.reference_input == reference  # the widest, the first of equals
    assert len(c.notes) == 1 and "not quantized in the file" in c.notes[0]


def test_nncf_per_channel_concat_inputs(tmp_path):
    s = open_model(save(nncf_model(), tmp_path / "nncf.onnx"))
    cats = _cats(s)
    same, diff = cats["cat_same"], cats["cat_diff"]
    assert same.inputs[0].per_channel and same.rescales == 0
    assert same.worst_channel_ratio == pytest.approx(1.0)
    assert diff.inputs[0].per_channel and diff.rescales == 1 and diff.rescale_inputs == [0]
    assert diff.worst_channel_ratio == pytest.approx(2.0, rel=1e-5)
    assert diff.ratio == pytest.approx(2.0, rel=1e-5)


@pytest.mark.parametrize("dtype, zp", [(np.uint8, 10), (np.int8, 0)])
def test_nncf_per_channel_asymmetric_zero_points(tmp_path, dtype, zp):
    """Zero points are compared in one set of terms whether the file wrote int8 or uint8."""
    b = _B()
    x = b.qdq("x", 0.02, zp=0, dtype=np.uint8)  # an image input: uint8, so the file is asymmetric
    a = b.conv(x, 4, 4, "c0", "ort")
    e = b.conv(x, 4, 4, "c1", "ort")
    g = b.conv(x, 4, 4, "c2", "ort")
    cat = b.op("Concat", [b.qdq(a, [0.1] * 4, zp=[zp] * 4, axis=1, dtype=dtype), b.qdq(e, 0.1, zp=zp, dtype=dtype),
                          b.qdq(g, [0.1, 0.1, 0.1, 0.1], zp=[zp, zp, zp + 1, zp], axis=1, dtype=dtype)],
                "cat", axis=1)
    s = open_model(save(b.model(4, [b.qdq(cat, 0.1, zp=zp, dtype=dtype)]), tmp_path / "asym.onnx"))
    assert s.options.scheme.value == "uint8-asym"
    (c,) = s.concats()
    assert c.rescale_inputs == [2]  # only the input with one channel's zero point off
    assert c.worst_channel_ratio == pytest.approx(1.0)


def test_nncf_cli_json_shows_worst_channel_and_notes(tmp_path, capsys):
    path = save(nncf_model(), tmp_path / "nncf.onnx")
    doc, cats = _json(path, capsys)
    assert cats["cat_diff"]["worst_channel_ratio"] == pytest.approx(2.0, rel=1e-5)
    assert cats["cat_diff"]["inputs"][0]["channel_scales"] == pytest.approx([0.1, 0.1, 0.05, 0.1], rel=1e-6)
    assert cats["cat_diff"]["inputs"][0]["needs_rescale"] is True
    assert cats["cat_same"]["rescales"] == 0 and cats["cat_same"]["worst_channel_ratio"] == pytest.approx(1.0)
    f = cats["cat_float"]
    assert f["output_float"] is True and f["reference_input"] == 1 and f["rescales"] == 2
    assert any("not quantized in the file" in n for n in f["notes"])
    assert doc["summary"]["rescales"] == 3 and doc["summary"]["mismatched_concats"] == 2
    capsys.readouterr()
    assert main(["analyze", path, "--no-perf"]) == 0
    text = capsys.readouterr().out
    assert "worst channel" in text and "note: cat_float: output is not quantized" in text
    row = next(line for line in text.splitlines() if line.startswith("cat_diff"))
    assert "2.00" in row


# -- onnxruntime ------------------------------------------------------------------------------------------


def test_ort_layout_still_works(tmp_path, capsys):
    path = save(ort_model(), tmp_path / "ort.onnx")
    s = open_model(path)
    assert s.qdq.weights == 2 and s.qdq.float_weights == 0
    assert s.graph.tensors["conv0.weight_dq"].kind == "weight"
    (c,) = s.concats()
    assert [m.scale for m in c.inputs] == pytest.approx([0.05, 0.2], rel=1e-6)
    assert c.rescales == 1 and c.rescale_inputs == [0] and not c.output_float
    doc, cats = _json(path, capsys)
    assert cats["cat"]["rescales"] == 1 and cats["cat"]["worst_channel_ratio"] is None
