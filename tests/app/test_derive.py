"""Analyses computed off the GUI thread (derive) are installed only while they still hold."""

from dataclasses import replace

from builders import RESCALING_MARCH, detector_model, save
from qtquant.calib import calibrate
from qtquant.quant.domains import Policy
from qtquant.quant.groups import share
from qtquant.app import Options, open_model
from qtquant.app.session import derive


def test_derived_analyses_are_installed_and_equal_a_fresh_build(tmp_path):
    s = open_model(save(detector_model(), tmp_path / "det.onnx"), options=Options(march=RESCALING_MARCH))
    s.run_calibration()
    share(s, ["c0_out", "c1_out", "cat1_out"])
    res = calibrate(s.graph, s.options.calib)
    d = derive(s.graph, res, s.options, s.groups.as_lists(), s.qdq)
    s.set_calibration(res, d)
    assert s.domains is d.domains and s.baseline_domains is d.baseline
    assert s.concats() is d.concats and s.concats(baseline=True) is d.baseline_concats
    fresh = open_model(s.graph.path, options=Options(march=RESCALING_MARCH))
    fresh.set_calibration(res)
    share(fresh, ["c0_out", "c1_out", "cat1_out"])
    assert ([(c.node, c.ratio, c.rescales) for c in fresh.concats()]
            == [(c.node, c.ratio, c.rescales) for c in d.concats])
    assert [(c.node, c.rescales) for c in fresh.concats(baseline=True)] == \
        [(c.node, c.rescales) for c in d.baseline_concats]
    assert sum(c.rescales for c in d.concats) < sum(c.rescales for c in d.baseline_concats)


def test_stale_derived_analyses_are_ignored(tmp_path):
    s = open_model(save(detector_model(), tmp_path / "det.onnx"))
    res = calibrate(s.graph, s.options.calib)
    d = derive(s.graph, res, s.options, [], s.qdq)
    share(s, ["c0_out", "c1_out", "cat1_out"])  # an edit while it was computed
    s.set_calibration(res, d)
    assert s.domains is not d.domains and s.domains.of["c0_out"] == s.domains.of["cat1_out"]
    d2 = derive(s.graph, res, replace(s.options, policy=Policy.MAX_INPUT), s.groups.as_lists(), s.qdq)
    s.set_calibration(res, d2)  # other options
    assert s.domains is not d2.domains
    other = calibrate(s.graph, s.options.calib)
    d3 = derive(s.graph, res, s.options, s.groups.as_lists(), s.qdq)
    s.set_calibration(other, d3)  # other statistics
    assert s.calibration is other and s.domains is not d3.domains
