"""Every file format has a declared schema, and a bad file is one line of the project's own error.

Plans, projects, march profiles and the statistics cache's metadata; plus the one atomic writer.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from builders import branchy_concat_model, save
from qtquant.base.errors import BadInputError, CalibrationDataError, MarchError, PlanError, QtQuantError

PLAN = {"format": "qtquant-plan", "version": 1,
        "groups": [{"id": 0, "members": [{"tensor": "conv0_out"}, "conv1_out"]}]}
PROJECT = {"format": "qtquant-project", "version": 2, "model": "m.onnx"}


def _one_line(exc_info, *words):
    msg = str(exc_info.value)
    assert "\n" not in msg and "ValidationError" not in msg and "pydantic" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return str(p)


# -- plans --------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc, words", [
    ({**PLAN, "groups": [{"members": [{"tensor": "a", "bits_lost": "x"}]}]},
     ["p.json: groups[0].members[0].bits_lost must be int or float, not str"]),
    ({**PLAN, "groups": [{"members": [None]}]}, ["groups[0].members[0] must be object, not null"]),
    ({**PLAN, "groups": [{"members": [], "concats": [3]}]}, ["groups[0].concats[0] must be str, not int"]),
    ({**PLAN, "version": 0}, ["version must be 1 or more, got 0"]),
    ({k: v for k, v in PLAN.items() if k != "version"}, ["version is missing"]),
    ({k: v for k, v in PLAN.items() if k != "format"}, ["is not a qtquant plan (format is None"]),
    ({**PLAN, "groups": [{"id": 1, "members": []}, {"members": []}]}, ["groups[1].id 1 is used twice"]),
])
def test_bad_plan_is_one_line(tmp_path, doc, words):
    from qtquant.files.plan import load_plan

    with pytest.raises(PlanError) as e:
        load_plan(_write(tmp_path, "p.json", doc))
    _one_line(e, *words)


def test_plan_schema_reads_short_members_positional_ids_and_ignores_unknown_keys():
    from qtquant.files.plan import parse_plan

    p = parse_plan({**PLAN, "future": {"x": 1}, "policy": 5, "source": "forged",
                    "groups": [{"members": ["a", {"tensor": "b", "producer": None}]}, {"members": ["c"]}]}, "f.json")
    assert [g.id for g in p.groups] == [0, 1]
    assert p.groups[0].tensors == ["a", "b"] and p.groups[0].members[1].producer is None
    assert p.policy is None  # informative fields: a bad one is only absent
    assert p.source == "f.json"  # where it came from, never what the file says


def test_hand_written_plan_may_leave_out_format_and_version():
    """What qtquant.torch accepts: the same schema, minus the envelope."""
    from qtquant.files.plan import VERSION, parse_plan

    p = parse_plan({"groups": [{"members": ["a", "b"]}]}, hand_written=True)
    assert p.version == VERSION and p.groups[0].tensors == ["a", "b"]
    with pytest.raises(PlanError, match="newer"):
        parse_plan({"version": VERSION + 1, "groups": []}, hand_written=True)
    with pytest.raises(PlanError) as e:
        parse_plan({"groups": [{"members": [{"tensor": 1}]}]}, hand_written=True)
    _one_line(e, "groups[0].members[0].tensor must be str")


@pytest.mark.parametrize("data, words", [
    (b"\xff\xfe{}", ["not a plan file (not UTF-8 text)"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
    (b'{"format": "qtquant-plan", "version": ' + b"9" * 5000 + b"}", ["not a readable plan file"]),
])
def test_unreadable_plan_text_is_one_line(tmp_path, data, words):
    from qtquant.files.plan import load_plan

    with pytest.raises(PlanError) as e:
        load_plan(_write(tmp_path, "p.json", data))
    _one_line(e, *words)


# -- projects ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc, words", [
    ({**PROJECT, "model": ""}, ["bad.qtquant: model must not be empty"]),
    ({**PROJECT, "input_shapes": {"x": [1, True]}}, ["input_shapes.x[1] has the wrong type (bool)"]),
    ({**PROJECT, "scheme": "int4"}, ["scheme must be one of int8-sym, uint8-asym, got 'int4'"]),
    ({**PROJECT, "calib": [1]}, ["calib must be object, not list"]),
    ({**PROJECT, "groups": [{"name": 3, "members": []}]}, ["groups[0].name must be str, not int"]),
    ({**PROJECT, "stats_cache": 5}, ["stats_cache must be str, not int"]),
    ({**PROJECT, "format": "qtquant-plan"}, ["is not a qtquant project (format is 'qtquant-plan'"]),
    ({**PROJECT, "version": 7}, ["newer qtquant (project version 7"]),
])
def test_bad_project_is_one_line(tmp_path, doc, words):
    from qtquant.files.project import load_project

    with pytest.raises(PlanError) as e:
        load_project(_write(tmp_path, "bad.qtquant", doc))
    _one_line(e, *words)


def test_project_path_is_where_it_was_read_not_what_it_says(tmp_path):
    from qtquant.files.project import load_project

    p = load_project(_write(tmp_path, "p.qtquant", {**PROJECT, "path": "/elsewhere/x.qtquant"}))
    assert p.path == tmp_path / "p.qtquant" and p.model_path() == tmp_path / "m.onnx"


def test_bad_calibration_settings_in_a_project_are_one_line(tmp_path):
    from qtquant.app.projects import open_project

    save(branchy_concat_model(), tmp_path / "m.onnx")
    with pytest.raises(PlanError) as e:
        open_project(_write(tmp_path, "p.qtquant", {**PROJECT, "calib": {"observer": "median", "future": 1}}))
    _one_line(e, "project calibration settings are invalid", "observer")


# -- march profiles -----------------------------------------------------------------------------------
def _profile(tmp_path, mutate):
    from qtquant.perf.march import load_march

    doc = json.loads(open(load_march("bayes-e").path, encoding="utf-8").read())
    mutate(doc)
    return _write(tmp_path, "mine.json", doc)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["params"]["cores_per_model"].update(value=9), ['"cores_per_model" (9) exceeds "cores"']),
    (lambda d: d["params"].update(ddr_gbps=7.5), ['"ddr_gbps" must be an object with "value"']),
    (lambda d: d["params"]["op_overhead_us"].update(value=-1), ['"op_overhead_us" must be 0 or more']),
    (lambda d: d["params"]["fusion"]["value"].update(lut=[1]), ['"fusion" must be str, not int']),
    (lambda d: d["params"]["sram_mb"].update(value=float("nan")), ['"sram_mb" must be a number, got NaN']),
    (lambda d: d.update(name="  "), ["name must not be blank"]),
    (lambda d: d.update(params=[]), ["params must be object, not list"]),
])
def test_bad_profile_is_one_line(tmp_path, mutate, words):
    from qtquant.perf.march import load_march

    with pytest.raises(MarchError) as e:
        load_march(_profile(tmp_path, mutate))
    _one_line(e, "march profile mine.json", *words)


def test_profile_whole_numbers_may_be_written_as_floats(tmp_path):
    from qtquant.perf.march import load_march

    m = load_march(_profile(tmp_path, lambda d: d["params"]["channel_align"].update(value=16.0)))
    assert m.channel_align == 16 and isinstance(m.channel_align, int)


# -- the statistics cache -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cache_entry(tmp_path_factory):
    from qtquant.calib import CalibConfig
    from qtquant.calib.cache import save_cache
    from qtquant.app import open_model
    from qtquant.app import Options

    d = tmp_path_factory.mktemp("cache")
    s = open_model(save(branchy_concat_model(shape=(1, 3, 8, 8)), d / "m.onnx"), None,
                   Options(calib=CalibConfig(count=2, holdout=1)))
    s.run_calibration()
    return s, save_cache(s.graph, s.calibration, d / "cache")


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d.update(format=1), ["is not a statistics cache of this qtquant (format is 1, expected 3)"]),
    (lambda d: d["tensors"][0].update(min="0"), ["tensors[0].min must be int or float, not str"]),
    (lambda d: d["tensors"][0].update(ma_min=[1, 2]), ["tensors[0].ma_min"]),
    (lambda d: d.update(in_sample=1), ["in_sample must be bool, not int"]),
    (lambda d: d.update(holdout=[{"x": 3}]), ["holdout[0].x must be str, not int"]),
])
def test_bad_cache_metadata_is_one_line_and_a_miss(cache_entry, tmp_path, mutate, words):
    from qtquant.calib.cache import load_cached, read_cache_meta

    s, jpath = cache_entry
    good = jpath.read_text()
    doc = json.loads(good)
    mutate(doc)
    try:
        jpath.write_text(json.dumps(doc))
        with pytest.raises(CalibrationDataError) as e:
            read_cache_meta(jpath)
        _one_line(e, jpath.name, *words)
        assert load_cached(s.graph, s.calibration.config, jpath.parent) is None
    finally:
        jpath.write_text(good)
    assert load_cached(s.graph, s.calibration.config, jpath.parent) is not None


def test_cache_metadata_keeps_infinite_ranges(cache_entry):
    """A tensor that never saw a value has min = inf: written as JSON's Infinity, read back alike."""
    from qtquant.calib.cache import CacheMeta, read_cache_meta

    _, jpath = cache_entry
    meta = read_cache_meta(jpath)
    t = meta.tensors[0].model_copy(update={"min": float("inf"), "max": float("-inf")})
    again = CacheMeta.model_validate(json.loads(json.dumps(meta.model_copy(update={"tensors": (t,)}).model_dump())))
    assert again.tensors[0].min == np.inf and again.tensors[0].max == -np.inf


# -- the one atomic writer ---------------------------------------------------------------------------
def test_atomic_writer_syncs_file_and_folder(tmp_path, monkeypatch):
    import qtquant.base.fileio.atomic as atomic

    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.path.isdir(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else None)
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    out = atomic.atomic_write_text(tmp_path / "a.txt", "hello\n")
    assert out.read_text() == "hello\n"
    assert len(synced) == 2  # the file, then the folder that holds the new name
    if synced[0] is not None:
        assert synced == [False, True]
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]  # no scratch folder left


def test_atomic_writer_refuses_an_input_and_reports_one_line(tmp_path):
    from qtquant.base.fileio import atomic_write_text

    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    with pytest.raises(BadInputError, match="refusing to overwrite the input m.onnx"):
        atomic_write_text(model, "x", inputs=[model], what="report")
    assert model.read_bytes() == b"model"
    with pytest.raises(QtQuantError) as e:
        atomic_write_text(tmp_path / "missing" / "r.html", "x", inputs=[model], what="report")
    _one_line(e, "does not exist")
