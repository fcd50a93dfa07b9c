"""The use cases of qtquant.app, as the CLI and the window call them (no Qt): opening a model or a project,
applying a plan, the histogram; and every edit they make is a command on the one stack, so it undoes."""

from __future__ import annotations

import numpy as np
import pytest

from builders import RESCALING_MARCH, branchy_concat_model, save
from qtquant.app import CommandStack, Options, open_model
from qtquant.app.commands import SetPercentileCommand, ShareCommand
from qtquant.app.histograms import clip_range, stored_histogram, tensor_histogram
from qtquant.app.opening import OpenRequest, open_session
from qtquant.app.plans import apply_plan
from qtquant.app.projects import open_project
from qtquant.base.errors import BadInputError, PlanError
from qtquant.calib import CalibConfig
from qtquant.cli import build_parser
from qtquant.files.plan import save_plan
from qtquant.files.project import save_project

PAIR = ["conv0_out", "conv1_out"]


@pytest.fixture
def model(tmp_path):
    return save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")


@pytest.fixture
def session(model):
    s = open_model(model, options=Options(march=RESCALING_MARCH, calib=CalibConfig(count=3)))
    s.run_calibration()
    return s


def _events(session) -> list[str]:
    seen: list[str] = []
    session.events.connect(lambda info: seen.append(info.signal.name))
    return seen


def _plan(session, tmp_path, groups=(PAIR,), precision=None):
    """A plan file with ``groups`` (and ``precision``), written from a copy of ``session``."""
    s = open_model(session.graph.path, options=session.options)
    s.set_calibration(session.calibration)
    for g in groups:
        s.groups.share(s, list(g))
    if precision:
        s.set_options(precision=precision)
    return save_plan(s, tmp_path / "plan.json")


# -- open a model -------------------------------------------------------------------------------

def test_open_request_opens_places_the_log_then_reads_statistics(model, tmp_path):
    from hblogs import render_compile_log
    from qtquant.horizon.log import read_compile_log

    from qtquant.cli import main

    stats = tmp_path / "s.npz"
    assert main(["calibrate", str(model), "--calib-count", "3", "--stats-out", str(stats)]) == 0
    (tmp_path / "hb.log").write_text(render_compile_log(branchy_concat_model(gains=(1.0, 3.0, 8.0))))
    seen = []
    s = open_session(OpenRequest(model, cut="conv0_out,cat_out", stats=stats,
                                 compile_log=read_compile_log(tmp_path / "hb.log"), log_scales=False),
                     opened=lambda s: seen.append((s.compiler_log is not None, s.calibration is None)))
    assert seen == [(True, True)]  # the log placed, the statistics not read yet
    assert s.calibration is not None and s.compiler_log is not None and s.compiler_ranges is None
    assert s.graph.cut == ("conv0_out", "cat_out")  # (--cut text, as names)
    qdq = tmp_path / "q.onnx"
    assert main(["fix", str(model), "--calib-count", "2", "-o", str(qdq), "--no-fidelity"]) == 0
    with pytest.raises(BadInputError, match="already quantized"):
        open_session(OpenRequest(qdq, stats=stats))


# -- apply a plan ---------------------------------------------------------------------------------

def test_a_plan_is_one_command_one_groups_event_and_undoes(session, tmp_path):
    plan = _plan(session, tmp_path, precision={"conv2_out": "int16"})
    stack = CommandStack(session)
    seen = _events(session)
    applied = apply_plan(stack, plan)
    assert session.groups.as_lists() == [tuple(PAIR)] and len(applied.groups) == 1
    assert session.options.precision == {"conv2_out": "int16"}
    assert seen.count("groups") == 1 and seen.count("options") == 1  # at open, the views refresh once
    assert stack.texts() == ["Apply plan plan.json"]
    stack.undo()
    assert len(session.groups) == 0 and session.options.precision == {}
    stack.redo()
    assert session.groups.as_lists() == [tuple(PAIR)] and session.options.precision == {"conv2_out": "int16"}


def test_a_refused_plan_changes_nothing_and_is_not_recorded(session, tmp_path):
    plan = _plan(session, tmp_path)
    doc = plan.read_text().replace('"conv1_out"', '"nosuch"')
    plan.write_text(doc)
    stack = CommandStack(session)
    stack.push(ShareCommand(("conv1_out", "cat_out")))
    before = session.groups.snapshot()
    with pytest.raises(PlanError, match="missing from the model"):
        apply_plan(stack, plan)
    assert session.groups.snapshot() == before and stack.count == 1


def test_cli_plan_and_precision_are_commands_on_the_stack(session, model, tmp_path):
    """``--plan`` and ``--int16``: the CLI opens its session through the app's use cases, on a stack."""
    from qtquant.cli.common import open_stack

    plan = _plan(session, tmp_path)
    args = build_parser().parse_args(["analyze", str(model), "--calib-count", "3", "--plan", str(plan),
                                      "--int16", "conv2"])
    stack = open_stack(args)
    s = stack.session
    assert s.groups.as_lists() == [tuple(PAIR)] and s.options.precision == {"conv2_out": "int16"}
    assert stack.texts() == ["Apply plan plan.json", "Precision: 1 tensor(s) not int8"]
    stack.undo()
    stack.undo()
    assert len(s.groups) == 0 and s.options.precision == {}


# -- the CLI's auto-shares -----------------------------------------------------------------------

def test_cli_auto_share_is_a_command_and_undoes(model):
    from qtquant.cli.common import auto_share_from_args, open_stack

    args = build_parser().parse_args(["fix", str(model), "--calib-count", "3", "-o", "x.onnx", "--auto-share",
                                      "--auto-share-max-bits-lost", "8", "--march", RESCALING_MARCH])
    stack = open_stack(args)
    report = auto_share_from_args(stack, args)
    assert report.grouped and len(stack.session.groups) == 1
    assert stack.undo_text == "Auto-share (≤ 8 bits)"
    stack.undo()
    assert len(stack.session.groups) == 0


def test_cli_accuracy_share_is_a_command_and_undoes(model):
    """``--max-sqnr-drop``: the measured auto-share, installed as the window's "share what accuracy allows"
    installs it."""
    from qtquant.cli.common import open_stack
    from qtquant.cli.fix import sqnr_share_from_args

    args = build_parser().parse_args(["fix", str(model), "--calib-count", "3", "-o", "x.onnx",
                                      "--max-sqnr-drop", "1000", "--march", RESCALING_MARCH])
    stack = open_stack(args)
    rep = sqnr_share_from_args(stack, args)
    s = stack.session
    assert len(s.groups) == 1 and [g.id for g in rep.groups] == [g.id for g in s.groups]
    assert stack.undo_text.startswith("Auto-share by accuracy")
    stack.undo()
    assert len(s.groups) == 0


# -- the export dialog's percentile ---------------------------------------------------------------

def test_percentile_is_a_command_and_undoes(model):
    s = open_model(model, options=Options(calib=CalibConfig(count=3, observer="percentile", percentile=99.0)))
    s.run_calibration()
    old, old_ranges = s.calibration, dict(s.calibration.ranges)
    stack = CommandStack(s)
    seen = _events(s)
    assert stack.push(SetPercentileCommand(90.0))
    assert s.options.calib.percentile == 90.0 and s.calibration.config.percentile == 90.0
    assert s.calibration.ranges != old_ranges and seen.count("calibrated") == 1
    assert stack.undo_text == "Percentile: 90"
    stack.undo()
    assert s.calibration is old and s.options.calib.percentile == 99.0
    stack.redo()
    assert s.calibration.config.percentile == 90.0
    assert not stack.push(SetPercentileCommand(90.0))  # the same percentile: no edit


def test_percentile_needs_the_percentile_observer(session):
    with pytest.raises(BadInputError, match="percentile observer"):
        CommandStack(session).push(SetPercentileCommand(90.0))


# -- open a project ----------------------------------------------------------------------------

def test_a_projects_remap_onto_a_changed_model_is_a_command(session, model, tmp_path):
    session.groups.share(session, PAIR, name="pair")
    session.set_options(precision={"conv2_out": "int16"})
    pp = save_project(session, tmp_path / "p.qtquant")
    s, rep = open_project(pp)  # the model as saved: its groups are the state it opens in, no edit
    assert rep.remap is None and s.groups.as_lists() == [tuple(PAIR)]
    save(branchy_concat_model(gains=(1.0, 3.0)), model)  # conv2 is gone
    s, rep = open_project(pp)
    assert rep.model_changed and rep.remap is not None and s.groups.as_lists() == [tuple(PAIR)]
    assert "conv2_out" in rep.missing and s.options.precision == {}  # its precision went with it
    stack = CommandStack(s)
    stack.record(rep.remap)
    assert stack.undo_text == "Re-map 1 project group(s) onto the changed model" and not stack.clean
    stack.undo()
    assert len(s.groups) == 0
    stack.redo()
    assert s.groups.as_lists() == [tuple(PAIR)]


# -- the histogram ------------------------------------------------------------------------------

def test_histogram_from_the_statistics_and_computed_when_they_have_none(session):
    h = stored_histogram(session, "conv1_out")
    assert h is not None and len(h.edges) == len(h.counts) + 1 and h.counts.sum() > 0
    assert h.clip == clip_range(session, "conv1_out") and h.clip[0] < 0 < h.clip[1]
    del session.calibration.stats["conv1_out"]  # statistics that keep no histogram of it
    assert stored_histogram(session, "conv1_out") is None
    h = tensor_histogram(session, "conv1_out")  # run on the check samples, remembered
    assert h is not None and h.counts.sum() > 0 and "conv1_out" in session.histograms
    assert np.array_equal(stored_histogram(session, "conv1_out").counts, h.counts)
    session.set_options(precision={"conv1_out": "float"})
    assert tensor_histogram(session, "conv1_out").clip is None  # shipped in float: no clipping
