"""The fixed QDQ export: valid, runnable, shared scales visible in the file, safe writes."""

import hashlib
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from builders import RESCALING_MARCH, detector_model, save
from ortkit import precise_options
from qtquant.quant.autoshare import auto_share
from qtquant.base.errors import BadInputError
from qtquant.export import qdq as qdq_mod
from qtquant.export.qdq import build_qdq_model, export_qdq
from qtquant.fidelity.measure import fake_quant, sqnr_db
from qtquant.app import open_model
from qtquant.model.runtime import make_session


@pytest.fixture
def shared(det_path):
    from qtquant.app import Options

    s = open_model(det_path, options=Options(march=RESCALING_MARCH))  # a march on which its branches mismatch
    s.run_calibration()
    auto_share(s)
    return s


def _feed(seed=0):
    return {"x": np.random.default_rng(seed).random((1, 3, 16, 16), dtype=np.float32)}


def _ort(path, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, precise=False):
    """``precise``: :func:`ortkit.precise_options`."""
    if precise:
        so = precise_options(level)
    else:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class _File:
    """Read the exported file back with plain onnx, independent of qtquant's bookkeeping."""

    def __init__(self, path):
        self.m = onnx.load(str(path))
        self.inits = {t.name: t for t in self.m.graph.initializer}
        self.producer = {o: n for n in self.m.graph.node for o in n.output}
        self.nodes = {n.name: n for n in self.m.graph.node}

    def value(self, name):
        return numpy_helper.to_array(self.inits[name])

    def dq_scale(self, tensor):
        """(scale initializer name, value) of the DequantizeLinear producing ``tensor``."""
        p = self.producer[tensor]
        assert p.op_type == "DequantizeLinear", f"{tensor} is produced by {p.op_type}"
        return p.input[1], float(self.value(p.input[1]))

    def q_scale_of_output(self, tensor):
        """The QuantizeLinear reading ``tensor`` (a Concat output) and its scale."""
        q = [n for n in self.m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor]
        assert len(q) == 1
        return q[0].input[1], float(self.value(q[0].input[1]))


def test_exported_model_is_valid_and_runs(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    res = export_qdq(shared, out)
    assert res.path == out and res.data_path is None
    m = onnx.load(str(out))
    onnx.checker.check_model(m, full_check=True)
    ops = {n.op_type for n in m.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Concat", "Conv"} <= ops
    sess = _ort(out)
    ref = make_session(shared.graph.model).run(None, _feed())
    got = sess.run(None, _feed())
    assert [o.name for o in sess.get_outputs()] == ["boxes", "scores", "scored", "feat"]
    for r, g in zip(ref, got):
        assert r.shape == g.shape and np.isfinite(g).all()
    assert sqnr_db(ref[3], got[3]) > 20  # the plain feature output survives int8


def test_shared_concats_read_one_scale_in_the_file(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out)
    f = _File(out)
    grouped = {t for g in shared.groups for t in g.members}
    # cat_c has one live input: under the Horizon rule its output takes that input's scale, so
    # auto-share leaves it alone and the file still shows one scale there.
    by_rule = {c.node for c in shared.concats() if c.reference_input is not None and not c.rescales}
    assert "cat_c" in by_rule
    checked = 0
    for node in f.m.graph.node:
        if node.op_type != "Concat":
            continue
        cat_out = node.output[0]
        if cat_out not in grouped and node.name not in by_rule:
            continue
        scales = [f.dq_scale(i) for i in node.input]
        scales.append(f.q_scale_of_output(cat_out))
        names = {n for n, _ in scales}
        values = {v for _, v in scales}
        assert len(names) == 1 and len(values) == 1, (node.name, scales)
        checked += 1
    assert checked == 3  # cat1, cat2 and cat_c (whose constant input is a clone on the shared scale)
    # the flagged head keeps distinct scales: one rescale remains there
    head = f.nodes["head"]
    assert len({f.dq_scale(i)[1] for i in head.input}) == 2


def test_weights_per_channel_and_int32_bias(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out)
    f = _File(out)
    conv = f.nodes["neck"]
    wdq = f.producer[conv.input[1]]
    assert wdq.op_type == "DequantizeLinear"
    axis = next(a.i for a in wdq.attribute if a.name == "axis")
    q, s = f.value(wdq.input[0]), f.value(wdq.input[1])
    w = shared.graph.initializer("neck.w")
    assert axis == 0 and q.dtype == np.int8 and s.shape == (w.shape[0],)
    assert q.min() >= -127 and q.max() <= 127
    assert np.allclose(q * s.reshape(-1, 1, 1, 1), w, atol=float(s.max()) / 2 + 1e-7)
    bdq = f.producer[conv.input[2]]
    b_scale = f.value(bdq.input[1])
    assert f.value(bdq.input[0]).dtype == np.int32
    x_scale = f.dq_scale(conv.input[0])[1]
    assert np.allclose(b_scale, np.float32(x_scale) * s, rtol=1e-6)


def test_opset_raised_for_per_channel(tmp_path):
    s = open_model(save(detector_model(opset=12), tmp_path / "old.onnx"))
    s.run_calibration()
    auto_share(s)
    out = tmp_path / "fixed.onnx"
    res = export_qdq(s, out)
    m = onnx.load(str(out))
    assert res.build.opset == 13 and any("opset raised from 12 to 13" in n for n in res.build.notes)
    assert next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) == 13
    onnx.checker.check_model(m, full_check=True)
    got = _ort(out, precise=True).run(None, _feed())
    ref = make_session(s.graph.model).run(None, _feed())
    assert sqnr_db(ref[3], got[3]) > 20


def test_names_and_metadata_kept(shared, det_path, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out)
    src, m = onnx.load(det_path), onnx.load(str(out))
    assert m.producer_name == src.producer_name and m.doc_string == src.doc_string
    assert m.graph.name == src.graph.name
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["author"] == "tests" and '"scheme": "int8-sym"' in meta["qtquant"]
    assert {n.name for n in src.graph.node} <= {n.name for n in m.graph.node}
    assert [i.name for i in m.graph.input] == ["x"]
    assert [o.name for o in m.graph.output] == [o.name for o in src.graph.output]


def test_constants_are_cloned_not_changed(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out)
    f = _File(out)
    orig = onnx.numpy_helper.to_array(next(t for t in onnx.load(shared.graph.path).graph.initializer
                                            if t.name == "anchor"))
    # the Add still reads the untouched float constant; the Concat reads an int8 clone
    assert np.array_equal(f.value("anchor"), orig)
    assert "anchor" in f.nodes["anchor_add"].input
    clone_dq = f.producer[f.nodes["cat_c"].input[1]]
    assert clone_dq.op_type == "DequantizeLinear" and clone_dq.input[0] != "anchor"
    assert f.value(clone_dq.input[0]).dtype == np.int8
    assert np.array_equal(shared.graph.initializer("anchor"), orig)  # in memory too


def test_refuses_to_overwrite_input(shared, det_path, tmp_path):
    digest = hashlib.sha256(open(det_path, "rb").read()).hexdigest()
    with pytest.raises(BadInputError, match="refusing to overwrite the input"):
        export_qdq(shared, det_path)
    # also through another spelling of the same path
    other = os.path.join(os.path.dirname(det_path), ".", os.path.basename(det_path))
    with pytest.raises(BadInputError):
        export_qdq(shared, other)
    assert hashlib.sha256(open(det_path, "rb").read()).hexdigest() == digest
    with pytest.raises(BadInputError, match="does not exist"):
        export_qdq(shared, tmp_path / "no" / "such" / "dir.onnx")


def test_atomic_write_leaves_old_file_on_failure(shared, tmp_path, monkeypatch):
    out = tmp_path / "fixed.onnx"
    out.write_bytes(b"previous contents")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(qdq_mod.onnx, "save_model", boom)
    with pytest.raises(BadInputError, match="No space left"):
        export_qdq(shared, out)
    assert out.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.onnx"]  # no temp leftovers


def test_external_data_in_and_out(tmp_path):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    m = detector_model()
    onnx.save_model(m, str(src_dir / "big.onnx"), save_as_external_data=True, location="big.onnx.data",
                    size_threshold=64)  # weights outside; the tiny int64 split sizes stay inline
    s = open_model(src_dir / "big.onnx")
    s.run_calibration()
    auto_share(s)
    out = tmp_path / "fixed.onnx"
    res = export_qdq(s, out)
    assert res.data_path.parent == tmp_path and res.data_path.name.startswith("fixed.onnx.")
    assert res.data_path.name.endswith(".data") and res.data_path.is_file()
    first = res.data_path
    res2 = export_qdq(s, out)  # a re-export replaces the pair and removes the old weight file
    assert res2.data_path.is_file() and not first.exists()
    res = res2
    onnx.checker.check_model(str(out), full_check=True)
    got = _ort(out).run(None, _feed())
    sim = make_session(build_qdq_model(s).model, s.graph.base_dir).run(None, _feed())
    for a, b in zip(sim, got):
        assert np.allclose(a, b, atol=1e-5) or sqnr_db(a, b) > 30
    # refuses to clobber the input's weight file
    with pytest.raises(BadInputError):
        export_qdq(s, src_dir / "big.onnx")


def test_large_models_go_external(shared, tmp_path, monkeypatch):
    monkeypatch.setattr(qdq_mod, "EXTERNAL_THRESHOLD", 0)  # stands in for a > 2 GB model
    out = tmp_path / "fixed.onnx"
    res = export_qdq(shared, out)
    assert res.data_path is not None and res.data_path.stat().st_size > 0
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx.load(str(out), load_external_data=False)
               .graph.initializer)
    assert _ort(out).run(None, _feed())[0].shape == (1, 4, 16, 16)


def test_numpy_fake_quant_matches_onnxruntime_qdq():
    """The per-member SQNR uses numpy fake-quant: it must equal onnxruntime's Q→DQ exactly."""
    from onnx import TensorProto, helper

    from qtquant.model.scales import Scheme, qparams_for_range

    x = (np.random.default_rng(3).standard_normal(4096) * 3).astype(np.float32)
    x[:4] = [0.5 * 0.03, 1.5 * 0.03, -2.5 * 0.03, 99.0]  # ties and saturation
    for scheme, dt in ((Scheme.SYMMETRIC_INT8, np.int8), (Scheme.ASYMMETRIC_UINT8, np.uint8)):
        qp = qparams_for_range(-3.0, 3.81, scheme)
        inits = [numpy_helper.from_array(np.array(qp.scale, np.float32), "s"),
                 numpy_helper.from_array(np.array(qp.zero_point, dt), "z")]
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
        g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        y = make_session(m).run(None, {"x": x})[0]
        assert np.array_equal(y, fake_quant(x, qp)), scheme


# Tolerance of qtquant's fake-quant simulation against onnxruntime running the exported file:
# onnxruntime fuses Q/DQ into integer kernels (QLinearConv, QLinearConcat, ...), whose requantize
# rounding can differ from float fake-quant by one step per layer.  Each output must stay within
# 2 quantization steps of the output's scale, with SQNR(simulation, onnxruntime) >= 35 dB.
SIM_MAX_STEPS = 2.0
SIM_MIN_SQNR_DB = 35.0


def test_fake_quant_simulation_agrees_with_onnxruntime(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out)
    real = _ort(out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    sim = make_session(build_qdq_model(shared).model)  # what fidelity runs
    names = [o.name for o in real.get_outputs()]
    dm = shared.domains
    for seed in range(3):
        a = sim.run(names, _feed(seed))
        b = real.run(names, _feed(seed))
        for name, u, v in zip(names, a, b):
            step = dm.scale_of(name)
            assert np.abs(u - v).max() <= SIM_MAX_STEPS * step + 1e-7, name
            if np.abs(u).max() > 10 * step:  # skip outputs that quantize to (almost) nothing
                assert sqnr_db(u, v) >= SIM_MIN_SQNR_DB, name


def test_reexport_of_a_qdq_file_keeps_scales(shared, tmp_path):
    first = tmp_path / "fixed.onnx"
    export_qdq(shared, first)
    s2 = open_model(first)  # read back as an already-quantized model
    assert s2.quantized_file
    second = tmp_path / "again.onnx"
    export_qdq(s2, second)
    f1, f2 = _File(first), _File(second)
    for cat in ("cat1", "cat2", "head"):
        a = [f1.dq_scale(i)[1] for i in f1.nodes[cat].input]
        b = [f2.dq_scale(i)[1] for i in f2.nodes[cat].input]
        assert np.allclose(a, b, rtol=1e-6), cat


def test_float_outputs_option(shared, tmp_path):
    out = tmp_path / "fixed.onnx"
    export_qdq(shared, out, quantize_outputs=False)
    f = _File(out)
    onnx.checker.check_model(f.m, full_check=True)
    for o in f.m.graph.output:
        assert f.producer[o.name].op_type != "DequantizeLinear", o.name
    assert f.producer["feat"].name == "feat_relu"
    # the inside of the model is quantized as before
    assert f.producer[f.nodes["head"].input[0]].op_type == "DequantizeLinear"
    assert _ort(out).run(None, _feed())[3].shape == (1, 4, 16, 16)


def test_asymmetric_uint8_scheme(det_path, tmp_path):
    from qtquant.model.scales import Scheme
    from qtquant.app import Options

    s = open_model(det_path, options=Options(scheme=Scheme.ASYMMETRIC_UINT8))
    s.run_calibration()
    auto_share(s)
    out = tmp_path / "asym.onnx"
    export_qdq(s, out)
    f = _File(out)
    onnx.checker.check_model(f.m, full_check=True)
    cat = f.nodes["cat1"]
    zps = {f.producer[i].input[2] for i in cat.input}
    assert len(zps) == 1 and f.value(zps.pop()).dtype == np.uint8
    assert len({f.dq_scale(i) for i in cat.input}) == 1
    got = _ort(out, precise=True).run(None, _feed())
    ref = make_session(s.graph.model).run(None, _feed())
    assert sqnr_db(ref[3], got[3]) > 20
