"""The shipped-model check on a big graph leaves out onnxruntime's NhwcTransformer: it must not change
a single output bit, and the report must say it ran that way."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from builders import save, synthetic_model
from qtquant.model import runtime
from qtquant.runs import shipped
from qtquant.app import open_model
from qtquant.export.qdq import build_qdq_model
from qtquant.fidelity.measure import measure_session


@pytest.fixture(scope="module")
def conv_session(tmp_path_factory):
    s = open_model(save(synthetic_model(120, seed=3), tmp_path_factory.mktemp("layout") / "syn.onnx"))
    s.run_calibration()
    return s


def _outputs(model, feeds, disabled, optimized=None):
    so = ort.SessionOptions()
    if optimized:
        so.optimized_model_filepath = str(optimized)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled or None)
    return [sess.run(None, f) for f in feeds]


def test_nhwc_transformer_changes_no_output_bit(conv_session, tmp_path):
    model = build_qdq_model(conv_session).model
    feeds = conv_session.calibration.holdout
    on = _outputs(model, feeds, [], tmp_path / "on.onnx")
    off = _outputs(model, feeds, list(shipped.LAYOUT_PASSES), tmp_path / "off.onnx")

    # The pass did act in the default session: channels-last int8 convolutions, none without it.
    def channels_last(path):
        return sum(any(a.name == "channels_last" and a.i == 1 for a in n.attribute)
                   for n in onnx.load(str(path)).graph.node if n.op_type == "QLinearConv")
    assert channels_last(tmp_path / "on.onnx") > 0
    assert channels_last(tmp_path / "off.onnx") == 0
    for a, b in zip(on, off):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


def test_big_graph_check_says_it_left_the_pass_out(conv_session, monkeypatch):
    small = measure_session(conv_session, cross_check=True)
    assert "NhwcTransformer" not in small.runtime and "default session options" in small.runtime
    monkeypatch.setattr(shipped, "LAYOUT_PASS_NODES", 10)  # this graph now counts as big
    seen = []
    real = runtime.make_session

    def spy(model, *a, **k):
        seen.append((k.get("level"), tuple(k.get("disabled", ()))))
        return real(model, *a, **k)

    monkeypatch.setattr("qtquant.fidelity.checkruns.make_session", spy)
    monkeypatch.setattr("qtquant.runs.incremental.make_session", spy)
    monkeypatch.setattr("qtquant.runs.shipped.make_session", spy)  # (shipped.shipped_session's)
    big = measure_session(_recalibrated(conv_session), cross_check=True)
    assert ("default", shipped.LAYOUT_PASSES) in seen
    # the cross-check is the fake-quant reference either way; on a big graph without optimisations
    assert ("disabled", ()) in seen
    assert "but NhwcTransformer" in big.runtime and "bit-identical" in big.runtime
    assert "optimisations off" in big.runtime and "optimisations off" not in small.runtime
    np.testing.assert_equal(big.sqnr_db, small.sqnr_db)  # the same figures
    assert big.findings == small.findings


def _recalibrated(s):
    # A fresh session on the same file and data: nothing cached from the first check.
    other = open_model(s.graph.path)
    other.set_calibration(s.calibration)
    return other
