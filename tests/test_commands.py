"""Edit commands and the core undo stack (no Qt)."""

import pytest

from builders import branchy_concat_model, save
from qtquant.commands import (AutoShareCommand, RemoveMemberCommand, SetMarchCommand, SetPolicyCommand,
                              ShareCommand, UndoStack, UngroupCommand)
from qtquant.domains import Policy
from qtquant.errors import ShareRefused
from qtquant.loader import open_model


@pytest.fixture
def session(tmp_path):
    s = open_model(save(branchy_concat_model(gains=(1.0, 1.3, 1.6)), tmp_path / "m.onnx"))
    s.run_calibration()
    return s


def _rescales(s):
    return sum(c.rescales for c in s.concats())


def test_share_undo_redo_restores_numbers(session):
    events = []
    session.events.connect(lambda kind, **kw: events.append(kind))
    stack = UndoStack(session)
    before = _rescales(session)
    assert before >= 1
    stack.push(ShareCommand(("conv0_out", "conv1_out", "conv2_out", "cat_out")))
    assert _rescales(session) == 0 and len(session.groups) == 1
    assert "groups" in events
    stack.undo()
    assert _rescales(session) == before and len(session.groups) == 0
    stack.redo()
    assert _rescales(session) == 0
    assert stack.history() == ["Share 4 tensors"] and stack.dirty


def test_refused_share_changes_nothing(session):
    stack = UndoStack(session)
    with pytest.raises(ShareRefused):
        stack.push(ShareCommand(("conv0_out", "conv0.w")))  # a per-channel weight cannot join
    assert len(session.groups) == 0 and not stack.can_undo


def test_ungroup_remove_member_and_options(session):
    stack = UndoStack(session)
    stack.push(ShareCommand(("conv0_out", "conv1_out", "conv2_out")))
    gid = session.groups.groups[0].id
    stack.push(RemoveMemberCommand(gid, "conv2_out"))
    assert session.groups.as_lists() == [("conv0_out", "conv1_out")]
    stack.push(UngroupCommand(gid))
    assert len(session.groups) == 0
    stack.undo()
    stack.undo()
    assert session.groups.as_lists() == [("conv0_out", "conv1_out", "conv2_out")]
    stack.push(SetPolicyCommand("max-input"))
    assert session.options.policy is Policy.MAX_INPUT
    stack.push(SetMarchCommand("nash-e"))
    stack.undo()
    stack.undo()
    assert session.options.policy is Policy.UNION and session.options.march == "bayes-e"


def test_autoshare_command_is_one_undo_step(session):
    stack = UndoStack(session)
    cmd = stack.push(AutoShareCommand(max_bits_lost=1.0))
    assert cmd.report.grouped == ["cat"]
    assert _rescales(session) == 0
    stack.undo()
    assert len(session.groups) == 0 and _rescales(session) > 0


def test_scheme_change_recomputes_ranges_without_a_model_run(session):
    from qtquant.quant import Scheme

    session.calibration = session.calibration.recompute(observer="percentile")
    sym = dict(session.calibration.ranges)
    (c0,) = session.concats()
    session.set_options(scheme=Scheme.ASYMMETRIC_UINT8)
    assert session.calibration.config.scheme == "asym" and session.options.calib.scheme == "asym"
    asym = session.calibration.ranges
    assert set(asym) == set(sym)
    # Percentile thresholds are taken on |x| for int8-sym and per tail for uint8-asym.
    assert any(asym[t] != sym[t] for t in sym)
    (c,) = session.concats()
    assert c.output.scale != c0.output.scale and session.domains.scheme is Scheme.ASYMMETRIC_UINT8
