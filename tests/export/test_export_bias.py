"""int32 biases that would not fit at input scale x weight scale (DESIGN §3): the exporter raises
that channel's weight scale, as onnxruntime's quantize_static does, says so, and never clips
silently.

The model is torchvision GoogLeNet's failure in small: a nearly dead ReLU (absmax ~2e-8, so
an input scale ~1.5e-10) in front of a Gemm whose biases are of ordinary size (0.1 to 10).
"""

import json
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import dead_relu_model, save_graph
from ortkit import precise_options
from qtquant.calib import CalibConfig
from qtquant.quant.outputs import OutputMode
from qtquant.quant.domains import Policy
from qtquant.export import weights as weights_mod
from qtquant.export.qdq import INT32_MAX, build_qdq_model, export_qdq
from qtquant.fidelity.measure import sqnr_db
from qtquant.app import open_model
from qtquant.app import Options

N_CALIB, N_CHECK = 16, 8


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(1).random((N_CALIB + N_CHECK, 1, 3, 8, 8), dtype=np.float32)


def _session(tmp_path, data, **kw):
    path = dead_relu_model(tmp_path / "dead.onnx", **kw)
    npz = tmp_path / "calib.npz"
    np.savez(npz, x=data[:N_CALIB].reshape(N_CALIB, 3, 8, 8))
    s = open_model(path, options=Options(calib=CalibConfig(source=str(npz), count=N_CALIB, holdout=0)))
    s.run_calibration()
    return s


def _run(path, data, name="y", precise=False):
    """``name`` on the check data, at default options (``precise``: :func:`ortkit.precise_options`)."""
    so = precise_options() if precise else ort.SessionOptions()
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run([name], {"x": x})[0] for x in data[N_CALIB:]])


def _ort_quantized(src, dst, data):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in data[:N_CALIB]])

        def get_next(self):
            return next(self.it, None)

    logging.getLogger().setLevel(logging.ERROR)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return dst


def test_dead_relu_gemm_bias_fits_and_matches_onnxruntime(tmp_path, data):
    s = _session(tmp_path, data)
    x_scale = s.domains.scale_of("hf")
    assert x_scale < 1e-9  # the premise: a nearly dead ReLU
    res = export_qdq(s, tmp_path / "fixed.onnx")
    ref = _run(s.graph.path, data)
    ours = sqnr_db(ref, _run(res.path, data))
    theirs = sqnr_db(ref, _run(_ort_quantized(s.graph.path, tmp_path / "ort.onnx", data), data))
    assert theirs > 30  # onnxruntime's own adjustment works on this model
    assert ours >= theirs - 1.0, (ours, theirs)

    b = res.build
    [adj] = b.bias_adjusted
    assert (adj.node, adj.op_type, adj.weight, adj.bias, adj.input) == ("fc", "Gemm", "fc.w", "fc.b", "hf")
    assert adj.channels == adj.of_channels == 32 and not adj.per_tensor
    assert adj.bits_lost == pytest.approx(np.log2(adj.max_ratio)) and adj.bits_lost > 7
    assert b.clipped == []
    [w] = b.warnings()
    assert w.startswith(f"bias of Gemm 'fc' did not fit int32 at input scale {x_scale:.2g}: weight scale of 32 "
                        f"of 32 channel(s) raised, worst channel loses {adj.bits_lost:.1f} bits of weight precision")
    assert not any("did not fit" in n for n in b.notes) and "did not fit" not in res.text()
    d = json.loads(json.dumps(b.to_dict()))
    assert d["bias_adjusted"][0]["node"] == "fc" and d["clipped"] == [] and d["warnings"] == [w]

    # In the file: the raised scales are the weight's, the bias fits with the accumulator's headroom.
    m = onnx.load(str(res.path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    fc = next(n for n in m.graph.node if n.name == "fc")
    wq, ws = (inits[i] for i in prod[fc.input[1]].input[:2])
    bq, bs = (inits[i] for i in prod[fc.input[2]].input[:2])
    assert np.allclose(bs, np.float32(x_scale) * ws, rtol=1e-6)
    assert np.abs(bq.astype(np.int64)).max() + 1024 * 128 * int(np.abs(wq).max()) <= INT32_MAX
    assert np.allclose(bq * bs.astype(np.float64), s.graph.initializer("fc.b"), rtol=1e-6)


def test_without_the_adjustment_the_bias_clips_and_is_recorded(tmp_path, data, monkeypatch):
    """The old exporter in effect: the bias saturates at +-2^31 steps of ~1e-13, the output is ~0."""
    s = _session(tmp_path, data)
    monkeypatch.setattr(weights_mod, "_bias_fit_scale", lambda bias, x_scale, w_scale, reserve: w_scale)
    res = export_qdq(s, tmp_path / "old.onnx")
    ref = _run(s.graph.path, data)
    assert sqnr_db(ref, _run(res.path, data)) < 1.0
    assert res.build.bias_adjusted == []
    [c] = res.build.clipped
    assert (c.tensor, c.kind, c.node, c.clipped, c.total) == ("fc.b", "bias", "fc", 32, 32)
    assert c.hi < 1e-3 and abs(c.worst) == pytest.approx(np.abs(s.graph.initializer("fc.b")).max())
    assert res.build.warnings() == [c.message()] and "bias 'fc.b' of 'fc' clipped in 32 of 32" in c.message()


def test_shared_weight_is_copied_for_the_raised_scale(tmp_path, data):
    """'fc' (behind the dead ReLU) and 'fc2' (behind the input) read one weight: 'fc' gets a copy
    at the raised scale, 'fc2' keeps the plain one, so its weights and bias stay precise."""
    s = _session(tmp_path, data, shared_fc=True)
    b = build_qdq_model(s)
    [adj] = b.bias_adjusted
    assert adj.node == "fc" and adj.copied and adj.shared_with == () and "own int8 copy" in adj.message()
    assert b.clipped == []
    inits = {t.name: numpy_helper.to_array(t) for t in b.model.graph.initializer}
    prod = {o: n for n in b.model.graph.node for o in n.output}
    fc, fc2 = (next(n for n in b.model.graph.node if n.name == k) for k in ("fc", "fc2"))
    assert fc.input[1] != fc2.input[1]
    w_fc, w_fc2 = (inits[prod[n.input[1]].input[1]] for n in (fc, fc2))
    w = s.graph.initializer("fc.w")
    assert np.allclose(w_fc2, np.abs(w).max(axis=1) / 127, rtol=1e-6)  # untouched
    assert (w_fc > w_fc2).all()
    bq, bs = (inits[i] for i in prod[fc2.input[2]].input[:2])
    assert np.allclose(bq * bs.astype(np.float64), 0.05, rtol=1e-3)
    p = tmp_path / "shared.onnx"
    onnx.save(b.model, str(p))
    ref = _run(s.graph.path, data, "y2")
    assert sqnr_db(ref, _run(p, data, "y2", precise=True)) > 30


@pytest.mark.parametrize("shared_fc", [False, True])
def test_a_build_after_other_builds_is_the_cold_build(tmp_path, data, shared_fc):
    """The memoised bias fits and int32 biases, and the initializers left out of the copy, change
    no byte: each map built after the others equals its build with every cache of the exporter
    empty (the raised, the copied and the plain weight and bias alike)."""
    from qtquant.export import qdq as qdq_mod
    from qtquant.runs.programs import moved_domains

    s = _session(tmp_path, data, shared_fc=shared_fc)
    maps = [s.domains, moved_domains(s.domains), moved_domains(moved_domains(s.domains))]
    warm = [build_qdq_model(s, dm).model.SerializeToString() for dm in maps + maps]
    assert warm[:3] == warm[3:]
    assert len(set(warm[:3])) == 3  # the maps give three different files
    for dm, got in zip(maps, warm):
        s.graph.derived.drop(weights_mod.WEIGHTS)
        s.graph.derived.drop(qdq_mod.BASES)
        assert build_qdq_model(s, dm).model.SerializeToString() == got


def test_per_tensor_weight_scale_is_raised_once():
    bias = np.array([3.0, -7.0, 0.5])
    out = weights_mod._bias_fit_scale(bias, 1e-10, np.array(1e-3, np.float32), 0)
    assert out.ndim == 0 and float(out) * np.float32(1e-10) * INT32_MAX >= 7.0
    assert float(out) < 1e-3 * 1.0 + 7.0 / (INT32_MAX * 1e-10) * 1.01
    unchanged = weights_mod._bias_fit_scale(bias, 1.0, np.array([1e-3] * 3, np.float32), 0)
    assert np.array_equal(unchanged, np.array([1e-3] * 3, np.float32))


def _concat_model(path):
    """cat = Concat(c1, c2) (range ~ +-2); 'anchors' (+-0.5, 12 outliers up to +-10) feeds an Add."""
    rng = np.random.default_rng(2)
    inits, nodes = [], []
    for name in ("c0", "c1", "c2"):
        inits += [numpy_helper.from_array((rng.standard_normal((4, 3, 1, 1)) * 0.5).astype(np.float32), f"{name}.w"),
                  numpy_helper.from_array(np.full(4, 0.1, np.float32), f"{name}.b")]
        nodes.append(helper.make_node("Conv", ["x", f"{name}.w", f"{name}.b"], [f"{name}_out"], name=name,
                                      kernel_shape=[1, 1]))
    anchors = np.linspace(-0.5, 0.5, 4 * 64, dtype=np.float32).reshape(1, 4, 8, 8)
    anchors.flat[:12] = np.linspace(-10, 10, 12)
    inits.append(numpy_helper.from_array(anchors, "anchors"))
    nodes += [helper.make_node("Concat", ["c1_out", "c2_out"], ["cat_out"], name="cat", axis=1),
              helper.make_node("Add", ["c0_out", "anchors"], ["y0"], name="add")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("cat_out", "y0")]
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outs, inits)
    return save_graph(g, path)


def test_clipped_constant_is_recorded(tmp_path):
    # (output Concat quantized: one the export left in float could not join a group)
    s = open_model(_concat_model(tmp_path / "cat.onnx"), options=Options(policy=Policy.OUTPUT,
                                                                         output_mode=OutputMode.QUANTIZE))
    s.run_calibration()
    s.groups.share(s, ["cat_out", "anchors"])  # 'output' policy: the Concat output's own range
    s.groups_changed()
    b = build_qdq_model(s)
    did = s.domains.of["anchors"]
    hi = s.domains.domains[did].qparams.hi
    assert hi < 9  # the premise: the shared scale cannot hold the anchors' outliers
    [c] = b.clipped
    big = np.abs(s.graph.initializer("anchors")) > hi
    assert (c.tensor, c.kind, c.domain, c.total) == ("anchors", "constant", did, 256)
    assert c.clipped == int(big.sum()) and 0 < c.clipped <= 12
    assert abs(c.worst) == pytest.approx(10.0) and c.hi == pytest.approx(hi)
    assert b.bias_adjusted == []
    [w] = b.warnings()
    assert w.startswith(f"constant 'anchors' clipped in {c.clipped} of 256 values to [") and \
        f"by domain {did}'s scale" in w
    assert json.loads(json.dumps(b.to_dict()))["clipped"][0]["kind"] == "constant"


def test_ordinary_model_has_no_warnings(tmp_path):
    from builders import detector_model, save

    from qtquant.quant.autoshare import auto_share

    s = open_model(save(detector_model(), tmp_path / "det.onnx"))
    s.run_calibration()
    auto_share(s)
    for quantize_outputs in (True, False):
        b = build_qdq_model(s, quantize_outputs=quantize_outputs)
        assert b.bias_adjusted == [] and b.clipped == [] and b.warnings() == [], b.warnings()
        assert b.biases > 0
    s2 = open_model(_concat_model(tmp_path / "cat.onnx"))  # the anchors stay float: nothing clips
    s2.run_calibration()
    assert build_qdq_model(s2).warnings() == []


def test_float_tensors_get_no_qdq_pair(tmp_path):
    s = open_model(_concat_model(tmp_path / "cat.onnx"))
    s.run_calibration()
    b = build_qdq_model(s, float_tensors=frozenset({"cat_out", "c2_out"}))
    prod = {o: n for n in b.model.graph.node for o in n.output}
    assert prod["cat_out"].op_type == "Concat"  # a model output, left float
    cat = prod["cat_out"]
    assert prod[cat.input[0]].op_type == "DequantizeLinear"  # c1 keeps its own scale
    assert cat.input[1] == "c2_out" and prod["c2_out"].op_type == "Conv"  # c2 stays float
    assert prod["y0"].op_type == "DequantizeLinear"
    assert "c2_out" not in b.scale_of and "cat_out" not in b.scale_of
    p = tmp_path / "f.onnx"
    onnx.save(b.model, str(p))
    onnx.checker.check_model(str(p), full_check=True)
    ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 3, 8, 8),
                                                                                          np.float32)})
    # the same as quantize_outputs=False when only outputs are named
    a = build_qdq_model(s, quantize_outputs=False).model
    c = build_qdq_model(s, float_tensors=frozenset({"cat_out", "y0"})).model
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in c.graph.node]
    with pytest.raises(Exception, match="no tensor of that name"):
        build_qdq_model(s, float_tensors=frozenset({"nope"}))


def test_float_input_keeps_float_bias(tmp_path, data):
    s = _session(tmp_path, data)
    b = build_qdq_model(s, float_tensors=frozenset({"hf"}))
    fc = next(n for n in b.model.graph.node if n.name == "fc")
    assert fc.input[0] == "hf" and fc.input[2] == "fc.b"  # float input: float bias, nothing to adjust
    assert b.bias_adjusted == [] and b.clipped == []


def test_clip_record_counts_in_chunks_as_it_did_in_float64(monkeypatch):
    """The out-of-range count is taken chunk by chunk in the array's own float32 (so a 1 GiB
    weight needs no float64 copies): the same record as the float64 masks, nan included."""
    import numpy as np

    from qtquant.export import records

    rng = np.random.default_rng(3)
    v = rng.standard_normal((5, 7)).astype(np.float32)
    v[4, 6], v[3, 1] = 9.0, np.nan  # both past the first chunks
    q = np.rint(v / np.float32(0.05))
    monkeypatch.setattr(records, "_CHUNK", 4)
    rec = records.clip_record(v, q, -127, 127, np.float32(0.05), 0, tensor="w", kind="weight")
    assert rec is not None and rec.clipped == 2 and rec.total == 35 and np.isnan(rec.worst)
    assert records._outside(q[:3], -127, 127) == 0 and records.clip_record(v[:3], q[:3], -127, 127, 0.05, 0) is None
    big = np.full(6, 2.0 ** 31, np.float32)  # int32 bounds are not exact in float32: compared in float64
    assert records._outside(big, -(2 ** 31), 2 ** 31 - 1) == 6
