"""Projects: round trip, atomic save, changed models, bad files."""

import json

import pytest

from builders import branchy_concat_model, save
from qtquant.base.errors import PlanError
from qtquant.app import open_model
from qtquant.app.projects import open_project
from qtquant.files.project import PROJECT_VERSION, load_project, model_matches, save_project


@pytest.fixture
def session(tmp_path):
    p = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    s = open_model(p, {"x": (1, 3, 16, 16)})
    s.run_calibration()
    s.groups.share(s, ["conv0_out", "conv1_out"], name="pair")
    s.groups_changed()
    return s


def test_round_trip(session, tmp_path):
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    assert doc["format"] == "qtquant-project" and doc["model"] == "m.onnx"  # relative to the project
    s2, rep = open_project(pp)
    assert not rep.model_changed
    assert s2.groups.as_lists() == session.groups.as_lists()
    assert s2.graph.input_shapes == session.graph.input_shapes
    assert s2.options == session.options


def test_model_path_relative_in_the_projects_tree_else_absolute(session, tmp_path):
    """Issue 20: a project moved on its own lost its model ("../../m.onnx" from the new place)."""
    apart = tmp_path / "work" / "projects"
    apart.mkdir(parents=True)
    pp = save_project(session, apart / "p.qtquant")
    assert json.loads(pp.read_text())["model"] == str((tmp_path / "m.onnx").resolve())  # not "../../m.onnx"
    moved = pp.rename(tmp_path / "elsewhere.qtquant")
    s2, _ = open_project(moved)  # the project moved, the model did not: still found
    assert s2.groups.as_lists() == session.groups.as_lists()
    # a folder holding both, moved as a whole: relative, so it keeps working
    inner = save_project(session, tmp_path / "proj.qtquant")
    assert json.loads(inner.read_text())["model"] == "m.onnx"


def test_a_located_model_is_checked_by_hash_and_opened(session, tmp_path):
    pp = save_project(session, tmp_path / "proj.qtquant")
    moved = tmp_path / "models"
    moved.mkdir()
    located = (tmp_path / "m.onnx").rename(moved / "renamed.onnx")
    proj = load_project(pp)
    assert not proj.model_path().exists()
    assert model_matches(proj, located)
    other = save(branchy_concat_model(gains=(1.0, 3.0)), tmp_path / "other.onnx")
    assert not model_matches(proj, other)
    s2, rep = open_project(pp, model=located)
    assert not rep.model_changed and s2.graph.path == located
    assert s2.groups.as_lists() == session.groups.as_lists()


def test_changed_model_remaps_groups_by_name(session, tmp_path):
    pp = save_project(session, tmp_path / "proj.qtquant")
    m = branchy_concat_model(gains=(1.0, 3.0))  # conv2 is gone, conv0/conv1 remain
    save(m, tmp_path / "m.onnx")
    s2, rep = open_project(pp)
    assert rep.model_changed and "changed" in rep.message()
    assert s2.groups.as_lists() == [("conv0_out", "conv1_out")]
    s3, rep3 = open_project(pp, remap=False)
    assert len(s3.groups) == 0 and rep3.dropped_groups == 1


@pytest.mark.parametrize("text,match", [
    ("{not json", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"format": "other"}', "format"),
    ('{"format": "qtquant-project", "version": 99, "model": "m.onnx"}', "newer qtquant"),
    ('{"format": "qtquant-project", "version": 1, "model": "m.onnx", "groups": [{"members": [1]}]}', "groups"),
    ('{"format": "qtquant-project", "version": 1, "model": "m.onnx", "input_shapes": {"x": [0]}}', "input_shapes"),
])
def test_bad_project_files(tmp_path, text, match):
    p = tmp_path / "bad.qtquant"
    p.write_text(text)
    with pytest.raises(PlanError, match=match):
        load_project(p)


def test_save_is_atomic_and_keeps_old_on_failure(session, tmp_path, monkeypatch):
    pp = save_project(session, tmp_path / "proj.qtquant")
    before = pp.read_text()
    import qtquant.base.fileio.atomic as atomic

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "commit", boom)
    from qtquant.base.errors import QtQuantError

    with pytest.raises(QtQuantError, match="No space"):
        save_project(session, pp)
    assert pp.read_text() == before
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".qtquant-")] == []


def test_version_1_fixed_holdout_reads_as_auto(session, tmp_path):
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    assert doc["version"] == PROJECT_VERSION
    doc["version"] = 1
    doc["calib"]["holdout"] = 2  # what version 1 always wrote
    pp.write_text(json.dumps(doc))
    s2, _ = open_project(pp)
    assert s2.options.calib.holdout is None  # auto
    doc["version"] = 2
    pp.write_text(json.dumps(doc))
    assert open_project(pp)[0].options.calib.holdout == 2  # chosen in a version-2 file: kept


def test_the_two_thresholds_round_trip_under_their_own_names(session, tmp_path):
    session.set_options(auto_share_max_bits_lost=2.5, float_output_max_bits_lost=4.0)
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    assert (doc["auto_share_max_bits_lost"], doc["float_output_max_bits_lost"]) == (2.5, 4.0)
    assert "max_bits_lost" not in doc
    s2, _ = open_project(pp)
    assert (s2.options.auto_share_max_bits_lost, s2.options.float_output_max_bits_lost) == (2.5, 4.0)


def test_version_3_one_threshold_sets_both(session, tmp_path):
    """Up to version 3 one max_bits_lost was both rules: an old project opens as it was saved."""
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    del doc["auto_share_max_bits_lost"], doc["float_output_max_bits_lost"]
    pp.write_text(json.dumps({**doc, "version": 3, "max_bits_lost": 2.5}))
    o = open_project(pp)[0].options
    assert (o.auto_share_max_bits_lost, o.float_output_max_bits_lost) == (2.5, 2.5)
    pp.write_text(json.dumps({**doc, "version": 3}))  # none given: the defaults
    o = open_project(pp)[0].options
    assert (o.auto_share_max_bits_lost, o.float_output_max_bits_lost) == (1.0, 1.0)
    # a version-4 file's max_bits_lost is not a key of the format: ignored, as any unknown key
    pp.write_text(json.dumps({**doc, "version": 4, "max_bits_lost": 2.5}))
    o = open_project(pp)[0].options
    assert (o.auto_share_max_bits_lost, o.float_output_max_bits_lost) == (1.0, 1.0)


@pytest.mark.parametrize("key,value", [("auto_share_max_bits_lost", -1), ("float_output_max_bits_lost", -0.5),
                                       ("max_bits_lost", -2)])
def test_a_bad_threshold_in_a_project_is_one_line_naming_the_file(session, tmp_path, key, value):
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    if key == "max_bits_lost":
        doc["version"] = 3
    pp.write_text(json.dumps({**doc, key: value}))
    with pytest.raises(PlanError, match=r"^proj\.qtquant: \w+_max_bits_lost \(the [a-z-]+ threshold\) must be"):
        open_project(pp)


def test_the_compile_log_is_saved_and_placed_again(session, tmp_path, capsys):
    """A project remembers the compile log placed on its model (and whether its thresholds are the scales):
    reopened, the log is back; one that went missing leaves the project opening with a one-line warning."""
    from hblogs import LogSpec, render_compile_log
    from qtquant.app.compilerlog import open_compile_log
    from qtquant.cli import main

    log = tmp_path / "logs" / "hb_mapper.log"
    log.parent.mkdir()
    log.write_text(render_compile_log(branchy_concat_model(gains=(1.0, 3.0, 8.0)),
                                      LogSpec(requantize=("conv1_out",))))
    open_compile_log(session, log, scales=False)
    pp = save_project(session, tmp_path / "proj.qtquant")
    doc = json.loads(pp.read_text())
    assert doc["version"] == PROJECT_VERSION == 6
    assert (doc["compiler_log"], doc["compiler_log_scales"], doc["compiler_log_any_shape"]) == \
        ("logs/hb_mapper.log", False, False)
    s2, rep = open_project(pp)
    assert rep.message() == "" and s2.compiler_log is not None and s2.compiler_ranges is None
    assert s2.compiler_log.requantized == session.compiler_log.requantized == ("conv1_out",)
    assert s2.groups.as_lists() == session.groups.as_lists()
    # With its thresholds as the scales, they come back as the scales.
    open_compile_log(session, log, scales=True)
    pp = save_project(session, tmp_path / "proj.qtquant")
    s3, _ = open_project(pp)
    assert s3.compiler_ranges == session.compiler_ranges and s3.compiler_ranges
    # The log moved away: the project opens without it and says so in one line.
    log.rename(tmp_path / "gone.log")
    s4, rep = open_project(pp)
    assert s4.compiler_log is None and "compile log was not placed" in rep.message()
    assert s4.groups.as_lists() == session.groups.as_lists()
    other = tmp_path / "other.onnx"
    save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), other)
    assert main(["diff", str(pp), str(other), "--calib-count", "2"]) in (0, 1)
    err = capsys.readouterr().err
    assert "compile log was not placed" in err and len([ln for ln in err.splitlines() if "compile log" in ln]) == 1
    # A project of an older version has no log: it opens as before.
    doc = json.loads(pp.read_text())
    for k in ("compiler_log", "compiler_log_scales", "compiler_log_any_shape"):
        del doc[k]
    pp.write_text(json.dumps({**doc, "version": 4}))
    s5, rep = open_project(pp)
    assert s5.compiler_log is None and rep.message() == ""


def test_outputs_the_application_dequantises_are_saved(session, tmp_path):
    """``int_outputs`` (perf/board.py) round-trips; one the model no longer has is dropped on open."""
    from qtquant.perf import simulate_session

    out = session.graph.outputs[0]
    plain = simulate_session(session).board_us
    session.set_options(int_outputs=(out,))
    pp = save_project(session, tmp_path / "proj.qtquant")
    assert json.loads(pp.read_text())["int_outputs"] == [out]
    s2, _ = open_project(pp)
    assert s2.options.int_outputs == (out,)
    assert simulate_session(s2).board_us < plain
    doc = json.loads(pp.read_text())
    pp.write_text(json.dumps({**doc, "int_outputs": [out, "gone"]}))
    assert open_project(pp)[0].options.int_outputs == (out,)


def test_the_board_clock_is_saved(session, tmp_path):
    """The board's BPU clock round-trips; one that is no clock is a one-line error naming the file."""
    from qtquant.base.errors import QtQuantError
    from qtquant.perf import simulate_session

    session.set_options(board_bpu_ghz=1.2)
    pp = save_project(session, tmp_path / "proj.qtquant")
    assert json.loads(pp.read_text())["board_bpu_ghz"] == 1.2
    s2, _ = open_project(pp)
    assert s2.options.board_bpu_ghz == 1.2
    fast = simulate_session(s2).board_us
    s2.set_options(board_bpu_ghz=0)
    assert fast < simulate_session(s2).board_us
    doc = json.loads(pp.read_text())
    pp.write_text(json.dumps({**doc, "board_bpu_ghz": -3}))
    with pytest.raises(QtQuantError) as e:
        open_project(pp)
    assert "proj.qtquant" in str(e.value) and "BPU clock" in str(e.value) and "\n" not in str(e.value)
