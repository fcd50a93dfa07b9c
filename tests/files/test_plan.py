"""Sharing plans: JSON schema, round trip, and every error as a one-line PlanError."""

import json
import pickle

import pytest

from qtquant.quant.autoshare import auto_share
from qtquant.cli import main
from qtquant.base.errors import PlanError, ShareRefused
from qtquant.quant.groups import share
from qtquant.app import open_model
from qtquant.files.plan import VERSION, apply_plan, load_plan, parse_plan, plan_dict, save_plan


def test_schema(session):
    auto_share(session)
    share(session, ["score", "anchor"])  # a constant member: producer null
    doc = plan_dict(session)
    assert doc["format"] == "qtquant-plan" and doc["version"] == VERSION
    assert doc["model"] == "det.onnx" and len(doc["model_sha256"]) == 64
    assert doc["policy"] == "union" and doc["scheme"] == "int8-sym"
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN/Infinity
    dm = session.domains
    for g in doc["groups"]:
        assert isinstance(g["id"], int) and isinstance(g["zero_point"], int)
        assert isinstance(g["scale"], float) and g["scale"] > 0
        assert all(isinstance(c, str) for c in g["concats"])
        for m in g["members"]:
            assert set(m) >= {"tensor", "producer", "producer_op", "bits_lost"}
            assert dm.scale_of(m["tensor"]) == pytest.approx(g["scale"])
            assert m["bits_lost"] >= 0
    nested = next(g for g in doc["groups"] if "cat2_out" in [m["tensor"] for m in g["members"]])
    assert set(nested["concats"]) >= {"cat1", "cat2"}
    c1 = next(m for m in nested["members"] if m["tensor"] == "c1_out")
    assert c1["producer"] == "c1" and c1["producer_op"] == "Conv"
    anchor = next(m for g in doc["groups"] for m in g["members"] if m["tensor"] == "anchor")
    assert anchor["producer"] is None and anchor["producer_op"] == "Constant"


def test_round_trip(session, det_path, tmp_path):
    auto_share(session)
    p = save_plan(session, tmp_path / "plan.json")
    other = open_model(det_path)
    other.run_calibration()
    res = apply_plan(other, load_plan(p))
    assert not res.warnings
    assert sorted(map(sorted, other.groups.as_lists())) == sorted(map(sorted, session.groups.as_lists()))
    assert plan_dict(other)["groups"] == plan_dict(session)["groups"]
    # ... and through the CLI's --plan
    out = tmp_path / "o.onnx"
    assert main(["fix", det_path, "--plan", str(p), "-o", str(out), "--no-fidelity", "--calib-count", "2"]) == 0


def test_apply_replaces_and_is_all_or_nothing(session):
    share(session, ["c0_out", "c1_out"])
    plan = parse_plan({"format": "qtquant-plan", "version": 1,
                       "groups": [{"id": 3, "members": [{"tensor": "box"}, {"tensor": "score"}]},
                                  {"id": 4, "members": [{"tensor": "c0_out"}, {"tensor": "c0.w"}]}]})
    snap = session.groups.snapshot()
    with pytest.raises(PlanError, match=r"group 4: .*weight of 'c0'"):
        apply_plan(session, plan)
    assert session.groups.snapshot() == snap
    ok = parse_plan({"format": "qtquant-plan", "version": 1,
                     "groups": [{"id": 3, "members": ["box", "score"]}]})
    apply_plan(session, ok)
    assert session.groups.as_lists() == [("box", "score")]


def _write(tmp_path, doc, name="p.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


GOOD = {"format": "qtquant-plan", "version": 1, "groups": [{"id": 0, "members": [{"tensor": "c0_out"},
                                                                              {"tensor": "c1_out"}]}]}


@pytest.mark.parametrize("doc, words", [
    ('{"format": "qtquant-plan", "version": 1, "groups": [', "is not valid JSON (line 1"),
    ("[1, 2]", "not a qtquant plan"),
    ({"format": "something-else", "version": 1, "groups": []}, "not a qtquant plan (format is 'something-else'"),
    (dict(GOOD, version=VERSION + 1), f"written by a newer qtquant (plan version {VERSION + 1}"),
    (dict(GOOD, version="1"), "version must be int, not str"),
    (dict(GOOD, version=True), "version has the wrong type"),
    (dict(GOOD, groups={"a": 1}), "groups must be list"),
    ({**GOOD, "groups": [{"id": 0, "members": "c0_out"}]}, "groups[0].members must be list"),
    ({**GOOD, "groups": [{"id": 0, "members": [{"tensor": 5}]}]}, "groups[0].members[0].tensor must be str"),
    ({**GOOD, "groups": [{"id": 0, "members": [{"producer": "c0"}]}]}, "groups[0].members[0].tensor is missing"),
    ({**GOOD, "groups": [{"id": 0, "scale": "big", "members": []}]}, "groups[0].scale must be int or float"),
    ({**GOOD, "groups": [{"id": 0, "members": []}, {"id": 0, "members": []}]}, "id 0 is used twice"),
])
def test_malformed_plans(tmp_path, doc, words):
    with pytest.raises(PlanError) as e:
        load_plan(_write(tmp_path, doc))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_missing_tensors_are_listed(session, tmp_path):
    doc = {**GOOD, "groups": [{"id": 0, "members": [{"tensor": "c0_out"}, {"tensor": "gone_1"},
                                                   {"tensor": "gone_2"}]}]}
    with pytest.raises(PlanError) as e:
        apply_plan(session, load_plan(_write(tmp_path, doc)))
    msg = str(e.value)
    assert "2 tensor(s) missing from the model: 'gone_1', 'gone_2'" in msg
    assert len(session.groups) == 0


def test_not_a_file_and_never_unpickled(tmp_path, session):
    with pytest.raises(PlanError, match="plan file not found"):
        load_plan(tmp_path / "nope.json")
    with pytest.raises(PlanError, match="is a folder"):
        load_plan(tmp_path)
    p = tmp_path / "evil.json"
    p.write_bytes(pickle.dumps(GOOD))
    with pytest.raises(PlanError):
        load_plan(p)


def test_warnings_for_other_model_and_policy(session):
    plan = parse_plan({**GOOD, "model": "other.onnx", "model_sha256": "0" * 64, "policy": "output"})
    res = apply_plan(session, plan)
    assert any("different file" in w for w in res.warnings)
    assert any("policy 'output'" in w for w in res.warnings)
    assert len(session.groups) == 1


def test_cli_bad_plan_is_exit_3_one_line(det_path, tmp_path, capsys):
    p = _write(tmp_path, dict(GOOD, version=9))
    rc = main(["analyze", det_path, "--plan", str(p), "--no-perf", "--no-fidelity", "--calib-count", "1"])
    err = capsys.readouterr().err
    assert rc == 3
    assert "newer qtquant" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_tensor_that_ships_in_float_cannot_join_and_a_tensor_listed_twice_is_said(session):
    """DESIGN §3: a tensor that is not quantized cannot join a domain.  The head's output, which
    the export leaves in float, widened the group it joined while shipping without its scale."""
    assert "head_out" in session.export_float()
    snap = session.groups.snapshot()
    plan = parse_plan({"format": "qtquant-plan", "version": 1,
                       "groups": [{"id": 0, "members": ["c0_out", "head_out"]}]})
    with pytest.raises(PlanError, match=r"group 0: tensor 'head_out' ships in float .*--quantize-outputs"):
        apply_plan(session, plan)
    assert session.groups.snapshot() == snap
    with pytest.raises(ShareRefused, match="ships in float"):
        share(session, ["box", "head_out"])
    twice = parse_plan({"format": "qtquant-plan", "version": 1,
                        "groups": [{"id": 0, "members": ["c0_out", "c1_out"]},
                                   {"id": 1, "members": ["c1_out", "box"]}]})
    res = apply_plan(session, twice)
    assert len(session.groups) == 1
    assert any("group 1 and group 0 both list 'c1_out': they are merged into one" in w for w in res.warnings)


def test_a_plan_carries_no_threshold(session, tmp_path):
    """A plan is groups and precision: the session's thresholds are not in it, and a
    ``max_bits_lost`` key in a plan (no version of the format has one) changes no option."""
    session.set_options(auto_share_max_bits_lost=2.5, float_output_max_bits_lost=4.0)
    assert not any(k.endswith("max_bits_lost") for k in plan_dict(session))
    before = session.options
    apply_plan(session, load_plan(_write(tmp_path, dict(GOOD, max_bits_lost=8.0))))
    assert session.groups.as_lists() == [("c0_out", "c1_out")] and session.options == before
