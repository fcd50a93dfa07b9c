"""The calibration method search (--observer search / search-per-node): on built models where a
clipping method must win and where MinMax must win, judged by the exported model's worst slice."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import outlier_case_saturating as _saturating, outlier_case_sparse as _sparse, save
from qtquant.app import Options, open_model
from qtquant.app.calibsearch import needs_search, search_calibration
from qtquant.calib import CalibConfig
from qtquant.calib.methods import CANDIDATES, MINMAX, Method
from qtquant.calib.statsfile import write_stats
from qtquant.cli import main
from qtquant.files.report import calibration_text


def _open(path, observer="search", **kw):
    s = open_model(path, options=Options(calib=CalibConfig(observer=observer, **kw)))
    s.run_calibration()
    return s


def test_a_clipping_method_wins_where_an_outlier_crushes_the_scale(tmp_path):
    model, npy = _saturating(tmp_path)
    s = _open(model, source=npy, count=8)
    assert needs_search(s.calibration)
    minmax_ranges = dict(s.calibration.ranges)  # the starting point: MinMax's
    rep = search_calibration(s)
    assert not needs_search(s.calibration) and s.calibration.search is rep
    assert [sc.method for sc in rep.scores] == list(CANDIDATES)
    figure = {sc.method: sc.worst_db for sc in rep.scores}
    assert rep.choice.model != MINMAX and not rep.choice.per_tensor
    assert figure[rep.choice.model] == max(figure.values())
    assert figure[rep.choice.model] > figure[MINMAX] + 10  # the crushed scale costs most of the signal
    # the session's ranges are the chosen method's now: b is no longer stretched to the spike
    assert s.calibration.ranges["a"][1] < minmax_ranges["a"][1] / 10
    assert rep.runner_up is not None and rep.runner_up.method != rep.choice.model
    assert rep.in_sample and rep.samples == 8 and rep.runs == len(CANDIDATES)
    text = rep.text()
    assert f"chosen: {rep.choice.model.label}" in text and "runner-up" in text and "in-sample" in text
    assert rep.summary() in s.calibration.notes
    assert "(chose " in calibration_text(s)


def test_minmax_wins_where_the_outliers_are_the_signal(tmp_path):
    model, npy = _sparse(tmp_path)
    s = _open(model, source=npy, count=8)
    rep = search_calibration(s)
    figure = {sc.method: sc.worst_db for sc in rep.scores}
    assert rep.choice.model == MINMAX
    # no method does better, and the one that clips the spikes loses them: far below MinMax
    assert all(db <= figure[MINMAX] + 0.01 for db in figure.values())
    assert figure[Method("percentile", 99.9)] < figure[MINMAX] - 10
    assert s.calibration.ranges["a"][1] == pytest.approx(100.0)


def test_per_node_search_keeps_only_steps_that_raise_the_worst_slice(tmp_path):
    model, npy = _saturating(tmp_path)
    s = _open(model, observer="search-per-node", source=npy, count=8)
    rep = search_calibration(s, budget_s=30.0)
    assert rep.per_node
    start = next(sc for sc in rep.scores if sc.method == rep.choice.model).worst_db
    assert rep.final_db >= start
    worst = [st.worst_db for st in rep.steps]
    assert worst == sorted(worst) and all(w >= start for w in worst)  # a kept step never lowers the worst slice
    assert set(rep.choice.per_tensor) == {st.tensor for st in rep.steps}
    assert 0 < rep.tensors_tried <= rep.tensors_open
    # the measured figure of the final choice is what the fidelity check measures on the session
    from qtquant.fidelity.measure import measure_session

    fid = measure_session(s)
    assert min(fid.sqnr_db.values()) == pytest.approx(rep.final_db, abs=1e-3)


def test_per_node_search_stops_at_its_budget(tmp_path):
    model, npy = _saturating(tmp_path)
    s = _open(model, observer="search-per-node", source=npy, count=8)
    rep = search_calibration(s, budget_s=0.0)
    assert rep.tensors_tried == 0 and rep.tensors_open > 0 and not rep.choice.per_tensor
    assert "budget 0 s" in rep.text()


def test_search_runs_on_a_statistics_file(tmp_path):
    path, npy = _saturating(tmp_path)
    s = _open(path, source=npy, count=8)
    stats = tmp_path / "spiky.qtstats.npz"
    write_stats(stats, s.graph, s.calibration)
    s2 = open_model(path, stats=str(stats))
    s2.load_statistics(stats)
    assert needs_search(s2.calibration)
    rep = search_calibration(s2)
    assert rep.choice.model == search_calibration(s).choice.model


def test_cli_prints_and_writes_the_search(tmp_path, capsys):
    path, npy = _saturating(tmp_path)
    assert main(["analyze", path, "--calib", npy, "--observer", "search", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    found = doc["calibration"]["search"]
    assert found["chosen"] != "minmax" and found["runner_up"] and found["held_out"] is False
    assert len(found["methods"]) == len(CANDIDATES) and found["chosen_sqnr_db"] >= found["runner_up_sqnr_db"] - 0.01
    assert main(["analyze", path, "--calib", npy, "--observer", "search"]) == 0
    out = capsys.readouterr().out
    assert "calibration method search" in out and f"chosen: {found['chosen']}" in out
    out_path = tmp_path / "out.onnx"
    assert main(["fix", path, "--calib", npy, "--observer", "search-per-node", "--search-budget", "5",
                 "-o", str(out_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration_search"]["per_node"] is True and onnx.load(str(out_path)).graph.node


def test_search_budget_is_refused_without_a_per_node_search(tmp_path, capsys):
    path, npy = _saturating(tmp_path)
    assert main(["analyze", path, "--search-budget", "5"]) == 2
    assert main(["analyze", path, "--calib", npy, "--observer", "search-per-node", "--search-budget", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("qtquant: error:") == 2


def test_a_minmax_statistics_file_cannot_be_searched(tmp_path, capsys):
    path, npy = _saturating(tmp_path)
    stats = tmp_path / "mm.qtstats.npz"
    assert main(["calibrate", path, "--stats-out", str(stats)]) == 0
    assert main(["analyze", path, "--stats", str(stats), "--observer", "search"]) == 3
    assert "needs full ones" in capsys.readouterr().err


def test_a_project_made_with_the_search_searches_again_on_open(tmp_path):
    from qtquant.app.projects import open_project
    from qtquant.files.project import save_project

    model, npy = _saturating(tmp_path)
    s = _open(model, source=npy, count=8)
    rep = search_calibration(s)
    s2, _ = open_project(save_project(s, tmp_path / "p.qtquant"), calibrate=True)
    assert s2.calibration.search is not None and s2.calibration.choice == rep.choice
    assert s2.calibration.ranges == s.calibration.ranges


def test_better_is_the_worst_slice_first_then_the_next():
    from qtquant.app.calibsearch import _better, _holds

    cur = {"box": 28.0, "cls": 10.0}
    assert _better({"box": 20.0, "cls": 10.5}, cur)  # the worst slice up: better, whatever the rest
    assert not _better({"box": 40.0, "cls": 9.99}, cur)  # the worst slice down: never better
    assert _better({"box": 29.0, "cls": 10.0}, cur)  # the worst kept, the next up
    assert not _better({"box": 28.005, "cls": 10.005}, cur)  # within the noise: no change
    assert _holds({"box": 28.0, "cls": 12.0}, cur) and not _holds({"box": 27.5, "cls": 12.0}, cur)


def test_accuracy_prints_the_search(tmp_path, capsys):
    path, npy = _saturating(tmp_path)
    assert main(["accuracy", path, "--calib", npy, "--observer", "search", "--top", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration_search"]["chosen"] != "minmax"


def test_per_node_does_not_measure_an_alternative_that_leaves_the_export_as_it_was(tmp_path):
    # a = 2x and c = 3x share one scale (a user group: the union of their ranges).  MinMax wins on
    # this data (the spikes are the signal); any other method narrows a's own range, which leaves
    # the union at c's, so the export as it was: nothing to measure.
    shape = [1, 1, 64, 64]
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul2"),
             helper.make_node("Mul", ["x", "three"], ["c"], name="mul3"),
             helper.make_node("Add", ["a", "c"], ["y"], name="add")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                           numpy_helper.from_array(np.array(3.0, np.float32), "three")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    _, npy = _sparse(tmp_path)
    s = _open(save(m, tmp_path / "pair.onnx"), observer="search-per-node", source=npy, count=8)
    s.groups.share(s, ["a", "c"], name="pair")
    s.groups_changed()
    rep = search_calibration(s, budget_s=60.0)
    assert rep.choice.model == MINMAX and rep.tensors_tried == rep.tensors_open
    assert rep.unchanged > 0 and "left the export as it was" in rep.text()


def test_cli_searches_a_statistics_file_made_with_the_search(tmp_path, capsys):
    path, npy = _saturating(tmp_path)
    stats = tmp_path / "s.qtstats.npz"
    assert main(["calibrate", path, "--calib", npy, "--observer", "search", "--stats-out", str(stats)]) == 0
    capsys.readouterr()
    assert main(["analyze", path, "--stats", str(stats), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration"]["observer"] == "search" and doc["calibration"]["search"]["chosen"] != "minmax"
