"""bayes-e's residency and layout rules: streamed tensors, attention matrices in DDR, relayout Reshapes,
lowered Softmax and element-wise regions paying one overhead per op, weights at their own bandwidth."""

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qtquant.model.graph import graph_from_model
from qtquant.perf import load_march, simulate


def _w(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.1, name)


def _shape(name, dims):
    return numpy_helper.from_array(np.array(dims, np.int64), name)


def _graph(nodes, x_shape, inits):
    gp = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)


def _attention():
    """x[1,64,20,20] -> conv -> heads (Reshape [1,2,32,400], a relayout) -> q^T k [1,2,400,400] -> scale -> Softmax
    -> v·attn -> Reshape back -> y; beside it an Unsqueeze-like Reshape that only adds a dimension."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="qkv", kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["c", "heads"], ["h"], name="to_heads"),
             helper.make_node("Transpose", ["h"], ["ht"], name="t", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["ht", "h"], ["a0"], name="qk"),
             helper.make_node("Mul", ["a0", "scale"], ["a"], name="scale"),
             helper.make_node("Softmax", ["a"], ["s"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["h", "s"], ["o"], name="av"),
             helper.make_node("Reshape", ["o", "back"], ["o4"], name="from_heads"),
             helper.make_node("Reshape", ["o4", "one_more"], ["o5"], name="unsqueeze_like"),
             helper.make_node("Reshape", ["o5", "back"], ["y"], name="drop_it")]
    inits = [_w("w", (64, 64, 1, 1)), numpy_helper.from_array(np.array(0.18, np.float32), "scale"),
             _shape("heads", [1, 2, 32, 400]), _shape("back", [1, 64, 20, 20]),
             _shape("one_more", [1, 1, 64, 20, 20])]
    return _graph(nodes, [1, 64, 20, 20], inits)


def test_an_attention_matrix_over_its_share_of_the_buffer_lives_in_ddr():
    g = _attention()
    m = load_march("bayes-e")
    assert m.stream_tiles and m.attention_onchip_share == pytest.approx(0.25)
    n = 2 * 400 * 400  # 320 kB: over a quarter of the 1 MB per-tensor limit
    res = simulate(g, m)
    sm = res.layer("softmax")
    assert sm.ddr_bytes == 8 * n  # five passes read it, three write it: all through DDR
    assert res.layer("qk").ddr_bytes - res.layer("qk").weight_bytes == n  # the MatMul writes it there
    on_chip = simulate(g, dataclasses.replace(m, attention_onchip_share=1.0))
    assert on_chip.layer("softmax").ddr_bytes == 0 and on_chip.total_us < res.total_us


def test_the_scale_after_an_attention_matmul_is_a_pass_of_its_own():
    res = simulate(_attention(), load_march("bayes-e"))
    scale = res.layer("scale")
    assert scale.fused_into is None and scale.total_us > 0 and scale.op_class == "eltwise"
    assert scale.ddr_bytes - scale.weight_bytes == 2 * 2 * 400 * 400  # reads and writes the matrix, in DDR
    assert res.layer("qk").fused == ()


def test_a_lowered_softmax_pays_one_overhead_per_op():
    g = _attention()
    m = load_march("bayes-e")
    sm = simulate(g, m).layer("softmax")
    assert m.fusion.softmax_passes == 5
    assert sm.overhead_us == pytest.approx(6 * m.op_overhead_us)  # max, subtract, exp, sum, reciprocal, scale
    assert "6 ops" in sm.note


def test_a_reshape_that_moves_elements_is_a_copy_and_one_that_adds_a_dimension_is_a_view():
    g = _attention()
    m = load_march("bayes-e")
    res = simulate(g, m)
    heads = res.layer("to_heads")
    assert heads.op_class == "copy" and heads.total_us > 0 and heads.bytes == 2 * 64 * 20 * 20
    assert "relayout" in heads.note
    assert res.layer("unsqueeze_like").total_us == 0 and res.layer("from_heads").total_us > 0
    views = simulate(g, dataclasses.replace(m, relayout_reshape=False))
    assert views.layer("to_heads").total_us == 0 and views.total_us < res.total_us


def _conv_then(act: str, hw=160, k=3):
    """x[1,64,hw,hw] -> conv 3x3 -> act -> conv kxk -> y: the first conv's output is 1.6 MB at 160."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node(act, ["c"], ["a"], name="act"),
             helper.make_node("Conv", ["a", "w2"], ["y"], name="conv2", kernel_shape=[k, k], pads=[k // 2] * 4)]
    return _graph(nodes, [1, 64, hw, hw], [_w("w1", (64, 64, 3, 3)), _w("w2", (8, 64, k, k))])


def test_a_tensor_one_vector_pass_reads_streams_through_the_buffer():
    g = _conv_then("Sigmoid")
    m = load_march("bayes-e")
    n = 64 * 160 * 160
    assert n > m.onchip_tensor_bytes
    res = simulate(g, m)
    conv, act = res.layer("conv"), res.layer("act")
    # The conv writes its output tile by tile into the lookup table's pass: no DDR but the input and weights.
    assert conv.ddr_bytes == n + conv.weight_bytes
    assert act.ddr_bytes == n  # its own output goes to DDR: a 3x3 conv reads it, rows above and below each tile
    by_size = simulate(g, dataclasses.replace(m, stream_tiles=False))
    assert by_size.layer("conv").ddr_bytes == 2 * n + conv.weight_bytes and by_size.total_us > res.total_us


def test_a_tensor_one_pointwise_layer_reads_streams_unless_a_concat_writes_it():
    m = load_march("bayes-e")
    n = 64 * 160 * 160
    # A 1x1 conv needs each position of its input only where it writes: it takes the tiles as they come.
    res = simulate(_conv_then("Sigmoid", k=1), m)
    assert res.layer("act").ddr_bytes == 0
    assert res.layer("conv2").ddr_bytes == res.layer("conv2").weight_bytes + 8 * 160 * 160  # its output: y
    # The same 1x1 conv after a Concat: the halves arrive from two layers one after the other, so DDR.
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_a", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "w1"], ["c2"], name="conv_b", kernel_shape=[1, 1]),
             helper.make_node("Concat", ["c1", "c2"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2", kernel_shape=[1, 1])]
    g = _graph(nodes, [1, 64, 160, 160], [_w("w1", (32, 64, 1, 1)), _w("w2", (8, 64, 1, 1))])
    cat = simulate(g, m)
    assert cat.layer("conv2").ddr_bytes == n + cat.layer("conv2").weight_bytes + 8 * 160 * 160
    # A MatMul by constant weights is pointwise over the tokens too.
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w"], ["y"], name="fc")]
    tok = simulate(_graph(nodes, [1, 160 * 160, 64], [_w("w", (64, 8))]), m)
    assert tok.layer("act").ddr_bytes == n  # reads x, the model's input; writes on chip


def test_weights_stream_at_their_own_bandwidth():
    g = _conv_then("Sigmoid", hw=8)
    m = load_march("bayes-e")
    assert m.weight_gbps != m.ddr_gbps  # fitted apart
    conv = simulate(g, m).layer("conv")
    wb = 64 * 64 * 9
    assert conv.weight_bytes == wb
    act_ddr = conv.ddr_bytes - wb
    onchip = conv.bytes - conv.ddr_bytes
    assert conv.memory_us == pytest.approx((act_ddr / m.ddr_bytes_per_s + wb / m.weight_bytes_per_s
                                            + onchip / m.sram_bytes_per_s) * 1e6)
    same = dataclasses.replace(m, weight_gbps=0.0)  # absent: as the activations
    assert same.weight_bytes_per_s == same.ddr_bytes_per_s


def test_explain_names_the_weights_and_the_ops(tmp_path, capsys):
    import onnx

    from qtquant.cli import main

    path = tmp_path / "attn.onnx"
    onnx.save(_attention().model, str(path))
    assert main(["perf", str(path), "--calib-count", "2", "--explain", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "overhead = 6 ops x" in out and "DDR 2,560,000 B" in out
    assert main(["perf", str(path), "--calib-count", "2", "--explain", "qkv"]) == 0
    assert "weights 4,096 B /" in capsys.readouterr().out  # 64x64 int8 weights, no bias


def test_an_image_input_is_read_as_nv12():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="stem", kernel_shape=[3, 3], pads=[1] * 4)]
    g = _graph(nodes, [1, 3, 64, 64], [_w("w", (16, 3, 3, 3))])
    m = load_march("bayes-e")
    assert m.image_input_nv12
    stem = simulate(g, m).layer("stem")
    rgb = simulate(g, dataclasses.replace(m, image_input_nv12=False)).layer("stem")
    assert rgb.ddr_bytes - stem.ddr_bytes == 3 * 64 * 64 // 2  # 1.5 bytes per pixel where RGB takes 3


def test_an_int16_softmax_pays_two_bytes_in_every_pass_that_moves_int16():
    """A lowered Softmax reads its input in its first two passes (max, subtract) and moves intermediates at
    its own precision, its output's, in the other six moves (subtract's write, exp's read and write, sum's
    read, the scaling's read and write): int16 there doubles those bytes, not just one read and one write."""
    from qtquant.perf.precision import apply_precision
    from qtquant.base.vocab import Precision

    g = _attention()
    m = load_march("bayes-e")
    base = simulate(g, m)
    n = 2 * 400 * 400
    assert g.is_quantized("s") and g.is_quantized("a")
    out16 = apply_precision(base, g, m, {"s": Precision.INT16})
    both = apply_precision(base, g, m, {"s": Precision.INT16, "a": Precision.INT16})
    sm0 = base.layer("softmax")
    assert out16.layer("softmax").ddr_bytes == sm0.ddr_bytes + 6 * n
    assert both.layer("softmax").ddr_bytes == sm0.ddr_bytes + 8 * n  # every move of the matrix at 2 bytes
    assert both.layer("scale").ddr_bytes == base.layer("scale").ddr_bytes + n  # it writes the int16 input
    assert both.total_us > out16.total_us > base.total_us
