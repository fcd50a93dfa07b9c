"""Range policies (union / output / max-input / pooled): the arithmetic, on hand-set ranges."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper

from builders import branchy_concat_model, conv_node, save
from qtquant.calib import CalibConfig
from qtquant.quant.domains import Policy
from qtquant.quant.groups import share
from qtquant.app import open_model
from qtquant.model.scales import Scheme
from qtquant.app import Options

# Inputs of the Concat and its output (narrower than the inputs' union, as a percentile
# observer or a QDQ file would give).
RANGES = {"x": (0.0, 1.0), "conv0_out": (-1.0, 2.0), "conv1_out": (-5.0, 1.0), "conv2_out": (-0.5, 4.8),
          "cat_out": (-2.5, 3.5), "y": (0.0, 3.5)}
MEMBERS = ["conv0_out", "conv1_out", "conv2_out", "cat_out"]


def _fake_calibration(ranges, pooled=None):
    # pooled_range: no histograms here (None: the union's range), or the test's own pooling
    return SimpleNamespace(ranges=dict(ranges), stats={}, holdout=[], config=CalibConfig(), batches=1,
                           pooled_range=pooled or (lambda members, percentile: None))


def _session(tmp_path, policy, scheme=Scheme.SYMMETRIC_INT8, pooled=None, model=None, ranges=RANGES):
    path = save(model or branchy_concat_model(), tmp_path / "m.onnx")
    s = open_model(path, options=Options(policy=policy, scheme=scheme))
    s.set_calibration(_fake_calibration(ranges, pooled))
    return s


def _asym(lo, hi):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    return scale, int(round(-lo / scale))


@pytest.mark.parametrize("policy, sym_absmax, asym_range", [
    (Policy.UNION, 5.0, (-5.0, 4.8)),  # min of mins, max of maxes
    (Policy.OUTPUT, 3.5, (-2.5, 3.5)),  # the Concat output's own range
    (Policy.MAX_INPUT, 5.0, (-5.0, 1.0)),  # the input with the largest scale (conv1: absmax 5, width 6)
])
def test_policy_arithmetic(tmp_path, policy, sym_absmax, asym_range):
    s = _session(tmp_path, policy)
    share(s, MEMBERS)
    d = s.domains.domain_of("cat_out")
    assert d.qparams.scale == pytest.approx(sym_absmax / 127.0, rel=1e-12)
    assert d.qparams.zero_point == 0
    # every member now carries that one scale: no rescale left
    cat = s.concats()[0]
    assert cat.rescales == 0 and {m.scale for m in cat.members()} == {d.qparams.scale}
    # bits lost by a member = log2(absmax(domain) / absmax(member))
    m0 = next(m for m in cat.inputs if m.tensor == "conv0_out")
    assert m0.bits_lost_now == pytest.approx(max(0.0, math.log2(sym_absmax / 2.0)), abs=1e-9)

    a = _session(tmp_path, policy, Scheme.ASYMMETRIC_UINT8)
    share(a, MEMBERS)
    qa = a.domains.domain_of("cat_out").qparams
    scale, zp = _asym(*asym_range)
    assert qa.scale == pytest.approx(scale, rel=1e-12) and qa.zero_point == zp


def test_max_input_sym_picks_largest_absmax_not_widest_span(tmp_path):
    # conv0 spans 11 (-1..10) but conv2 has the larger absmax (10.5): symmetric scale follows absmax.
    r = dict(RANGES, conv0_out=(-1.0, 10.0), conv1_out=(-0.2, 0.2), conv2_out=(-10.5, 0.0), cat_out=(-10.5, 10.0))
    s = _session(tmp_path, Policy.MAX_INPUT, ranges=r)
    share(s, MEMBERS)
    assert s.domains.domain_of("cat_out").qparams.scale == pytest.approx(10.5 / 127.0)


def _concat_then_view_model():
    """conv0, conv1 → Concat → Transpose (a pass-through view of the output) → Relu."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 4, 3, "conv0"))
    nodes.append(conv_node(inits, "x", 3, 4, 3, "conv1", seed=1))
    nodes.append(helper.make_node("Concat", ["conv0_out", "conv1_out"], ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Transpose", ["cat_out"], ["cat_t"], name="tr", perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("Relu", ["cat_t"], ["y"], name="relu"))
    g = helper.make_graph(nodes, "view", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_max_input_ignores_views_of_the_concat_output(tmp_path):
    r = {"x": (0.0, 1.0), "conv0_out": (-2.0, 2.0), "conv1_out": (-1.0, 1.0), "cat_out": (-8.0, 8.0), "y": (0, 8)}
    s = _session(tmp_path, Policy.MAX_INPUT, model=_concat_then_view_model(), ranges=r)
    share(s, ["conv0_out", "conv1_out", "cat_t"])  # the view, not the output itself
    d = s.domains.domain_of("cat_out")
    assert d.qparams.scale == pytest.approx(2.0 / 127.0)  # conv0's scale, not the output's 8/127


def test_pooled_uses_calibration_histograms(tmp_path):
    calls = []

    def pooled(members, pct):
        calls.append((sorted(members), pct))
        return (-1.5, 1.5)

    s = _session(tmp_path, Policy.POOLED, pooled=pooled)
    share(s, MEMBERS)
    d = s.domains.domain_of("cat_out")
    assert d.qparams.scale == pytest.approx(1.5 / 127.0)
    # called once, for the shared domain only; singletons keep their observer's range
    assert len(calls) == 1 and set(MEMBERS) <= set(calls[0][0])
    assert calls[0][1] == pytest.approx(s.options.calib.percentile)
    assert s.domains.domain_of("x").hi == pytest.approx(1.0)


def test_pooled_falls_back_to_union_without_histograms(tmp_path):
    s = _session(tmp_path, Policy.POOLED)
    share(s, MEMBERS)
    assert s.domains.domain_of("cat_out").qparams.scale == pytest.approx(5.0 / 127.0)


def test_pooled_real_histograms(tmp_path):
    """With the calibration engine's own pooled_range: the percentile of merged histograms."""
    path = save(branchy_concat_model(gains=(1.0, 1.3, 6.0)), tmp_path / "m.onnx")
    s = open_model(path, options=Options(policy=Policy.POOLED))
    s.run_calibration()
    share(s, MEMBERS)
    d = s.domains.domain_of("cat_out")
    union = max(max(abs(v) for v in s.ranges[m]) for m in ("conv0_out", "conv1_out", "conv2_out"))
    assert 0 < d.absmax <= union * (1 + 1e-6)
    assert np.isfinite(d.qparams.scale)
