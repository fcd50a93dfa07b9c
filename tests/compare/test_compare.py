"""qtquant.compare: tensors matched across files, the side-by-side figures, the budget (no Qt)."""

import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from onnx import helper

from builders import RESCALING_MARCH, branchy_concat_model, detector_model, save
from qtquant.app import Options, open_model
from qtquant.compare import DifferentModelsError, Side, diff_sides, match_tensors
from qtquant.compare.budget import Budget, BudgetError, check_budget
from qtquant.compare.match import MatchedBy


def _renamed(model: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    """``model`` with tensor ``old`` called ``new``, as a quantizer renames what it touches."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        n.input[:] = [new if t == old else t for t in n.input]
        n.output[:] = [new if t == old else t for t in n.output]
    return m


def test_a_renamed_tensor_is_matched_by_its_producer_structure(tmp_path):
    a = open_model(save(detector_model(), tmp_path / "a.onnx")).graph
    b = open_model(save(_renamed(detector_model(), "cat1_out", "cat1_out_QuantizeLinear_Input"),
                        tmp_path / "b.onnx")).graph
    m = match_tensors(a, b, a.observed_tensors, b.observed_tensors)
    by_structure = [(p.a, p.b) for p in m.pairs if p.by is MatchedBy.STRUCTURE]
    assert by_structure == [("cat1_out", "cat1_out_QuantizeLinear_Input")]
    assert m.only_a == [] and m.only_b == []
    assert len(m.pairs) == len(a.observed_tensors)


def test_an_identity_copy_does_not_make_a_signature_ambiguous(tmp_path):
    # B: the Concat's output renamed and copied by an Identity under the old name (onnxruntime's
    # quantize_static does this to a model output): the renamed tensor still pairs.
    mb = _renamed(detector_model(), "head_out", "head_q")
    mb.graph.node.append(helper.make_node("Identity", ["head_q"], ["head_copy"], name="head_id"))
    mb.graph.output.append(helper.make_tensor_value_info("head_copy", onnx.TensorProto.FLOAT, None))
    a = open_model(save(detector_model(), tmp_path / "a.onnx")).graph
    b = open_model(save(mb, tmp_path / "b.onnx")).graph
    m = match_tensors(a, b, ["head_out"], ["head_q", "head_copy"])
    assert [(p.a, p.b, p.by) for p in m.pairs] == [("head_out", "head_q", MatchedBy.STRUCTURE)]
    assert m.only_b == ["head_copy"]


def test_what_cannot_be_matched_is_listed_not_guessed(tmp_path):
    # Two Relus of one input are one signature twice: renamed, neither can be told apart.
    g = lambda names: helper.make_graph(  # noqa: E731
        [helper.make_node("Relu", ["x"], [names[0]], name="r0"), helper.make_node("Relu", ["x"], [names[1]], name="r1"),
         helper.make_node("Concat", list(names), ["y"], name="cat", axis=1)], "twins",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    mk = lambda names: helper.make_model(g(names), opset_imports=[helper.make_opsetid("", 17)])  # noqa: E731
    a = open_model(save(mk(("a0", "a1")), tmp_path / "a.onnx")).graph
    b = open_model(save(mk(("b0", "b1")), tmp_path / "b.onnx")).graph
    m = match_tensors(a, b, ["a0", "a1", "y"], ["b0", "b1", "y"])
    assert [p.a for p in m.pairs] == ["y"]
    assert m.only_a == ["a0", "a1"] and m.only_b == ["b0", "b1"]


def test_two_different_models_are_refused(tmp_path):
    a = open_model(save(detector_model(), tmp_path / "a.onnx")).graph
    b = open_model(save(branchy_concat_model(shape=(1, 3, 8, 8)), tmp_path / "b.onnx")).graph
    with pytest.raises(DifferentModelsError, match="not one model: inputs x=1x3x16x16 against x=1x3x8x8"):
        match_tensors(a, b, a.observed_tensors, b.observed_tensors)
    c = open_model(save(branchy_concat_model(shape=(1, 3, 16, 16)), tmp_path / "c.onnx")).graph
    with pytest.raises(DifferentModelsError, match="no quantized tensor of one matches the other"):
        match_tensors(a, c, a.observed_tensors, c.observed_tensors)


def _side(tmp_path, label, groups=()):
    s = open_model(save(detector_model(), tmp_path / f"{label}.onnx"), options=Options(march=RESCALING_MARCH))
    s.run_calibration()
    for members in groups:
        s.groups.share(s, list(members))
    if groups:
        s.groups_changed()
    return Side(label=label, path=Path(tmp_path / f"{label}.onnx"), session=s)


def test_the_diff_shows_scale_ratios_domains_and_rescales(tmp_path):
    a = _side(tmp_path, "A")
    b = _side(tmp_path, "B", groups=[("c0_out", "c1_out")])
    d = diff_sides(a, b)
    assert len(d.match.pairs) == len(a.session.graph.observed_tensors)
    by = {t.a: t for t in d.tensors}
    c1 = by["c1_out"]
    assert c1.domain_changed and "c0_out" in c1.shares_b and "c0_out" not in c1.shares_a
    assert c1.ratio == pytest.approx(b.session.domains.scale_of("c1_out") / a.session.domains.scale_of("c1_out"))
    assert c1.ratio > 1.05 and c1.scale_changed  # the narrower input took the shared (wider) scale
    assert not by["score"].changed and by["score"].ratio == pytest.approx(1.0)
    cat1 = next(c for c in d.concats if c.a.node == "cat1")
    assert (cat1.a.rescales, cat1.b.rescales, cat1.change) == (1, 0, -1)
    assert cat1.a.rescaled == ("c1_out",) and cat1.b.rescaled == ()
    head = next(c for c in d.concats if c.a.node == "head")
    assert head.a.output_float and "float" in head.a.why  # why: the rule notes
    rows = {r[0]: r for r in d.summary_rows()}
    assert rows["rescales"][1:] == (str(a.rescales), str(b.rescales), f"{b.rescales - a.rescales:+d}")
    doc = d.to_dict()
    assert doc["tensors"]["changed"] == len(d.changed_tensors) >= 2
    assert {c["node"] for c in doc["concats"]} == {"cat1", "cat2", "head", "cat_c"}
    text = d.text()
    assert "cat1" in text and "c1_out" in text and "moved" in text


def _budget(tmp_path, text: str) -> Path:
    p = tmp_path / "budget.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, message", [
    ("max_rescale = 3\n", "unknown key 'max_rescale' (known: max_rescales,"),
    ("max_rescales = true\n", "max_rescales must be a whole number, not true"),
    ("max_rescales = 2.5\n", "max_rescales must be a whole number, not 2.5"),
    ("max_latency_ms = \"fast\"\n", "max_latency_ms must be a number, not \"fast\""),
    ("min_sqnr_db = [20]\n", "min_sqnr_db must be a number, not an array"),
    ("max_rescales = -1\n", "max_rescales must not be negative"),
    ("no_worse_than_baseline = true\n", "no_worse_than_baseline needs baseline"),
    ("baseline = \"gone.onnx\"\nno_worse_than_baseline = true\n", "baseline 'gone.onnx': no such file"),
    ("max_rescales = \n", "not valid TOML"),
])
def test_a_bad_budget_is_one_line_of_bad_input(tmp_path, text, message):
    with pytest.raises(BudgetError, match=None) as e:
        Budget.load(_budget(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 3


def test_a_budget_checks_every_limit_and_writes_junit(tmp_path):
    side = _side(tmp_path, "model")
    n = side.rescales
    ok = check_budget(side, Budget.load(_budget(tmp_path, f"max_rescales = {n}\nmax_mismatched_concats = 9\n")))
    assert ok.passed and [r.limit for r in ok.results] == ["max_rescales", "max_mismatched_concats"]
    bad = check_budget(side, Budget.load(_budget(tmp_path, f"max_rescales = {n - 1}\nmin_sqnr_db = 10\n"
                                                 "max_latency_ms = 1\n")))
    assert not bad.passed
    lines = bad.lines()
    assert lines[0] == f"max_rescales: {n} (limit <= {n - 1}): BROKEN"
    # no perf simulation and no fidelity check ran on this side: a gate that cannot see does not pass
    assert lines[1] == "max_latency_ms: not measured (limit <= 1.000 ms): BROKEN (no perf simulation ran)"
    assert "min_sqnr_db: not measured" in lines[2] and "BROKEN (no SQNR check ran" in lines[2]
    assert lines[-1] == "FAILED: 0 of 3 limits met"
    root = ET.fromstring(bad.junit_xml().split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "3"
    assert [c.get("name") for c in suite.findall("testcase")] == ["max_rescales", "max_latency_ms", "min_sqnr_db"]
    assert len(suite.findall("testcase/failure")) == 3
    ok_root = ET.fromstring(ok.junit_xml().split("\n", 1)[1])
    assert ok_root.find("testsuite").get("failures") == "0" and not ok_root.findall(".//failure")


def test_no_worse_than_baseline_compares_each_figure(tmp_path):
    grouped = _side(tmp_path, "model", groups=[("c0_out", "c1_out")])
    plain = _side(tmp_path, "base")
    base_file = tmp_path / "base.onnx"
    budget = Budget.load(_budget(tmp_path, f'baseline = "{base_file.name}"\nno_worse_than_baseline = true\n'))
    assert budget.baseline == base_file
    res = check_budget(plain, budget, baseline=grouped)  # the plain model has more rescales than the grouped one
    by = {r.limit: r for r in res.results}
    assert not by["no_worse_than_baseline.rescales"].ok
    assert by["no_worse_than_baseline.mismatched_concats"].value == plain.mismatched_concats
    assert check_budget(grouped, budget, baseline=plain).results[0].ok
    assert res.to_dict()["limits"][0]["limit"] == "no_worse_than_baseline.rescales"
