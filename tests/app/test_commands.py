"""Edit commands on the one command stack (no Qt)."""

import pytest

from builders import RESCALING_MARCH, branchy_concat_model, save
from qtquant.app import CommandStack, Options, open_model
from qtquant.app.commands import (AutoShareCommand, CompoundCommand, RemoveMemberCommand, SetMarchCommand,
                                  SetOptionsCommand, SetPolicyCommand, ShareCommand, UngroupCommand)
from qtquant.quant.domains import Policy
from qtquant.base.errors import QtQuantError, ShareRefused


@pytest.fixture
def session(tmp_path):
    s = open_model(save(branchy_concat_model(gains=(1.0, 1.3, 1.6)), tmp_path / "m.onnx"),
                   options=Options(march=RESCALING_MARCH))
    s.run_calibration()
    return s


@pytest.fixture
def events(session):
    seen = []
    session.events.connect(lambda info: seen.append((info.signal.name, info.args)))
    return seen


def _rescales(s):
    return sum(c.rescales for c in s.concats())


def test_share_undo_redo_restores_numbers(session, events):
    stack = CommandStack(session)
    changes = []
    stack.changed.connect(lambda: changes.append(stack.index))
    before = _rescales(session)
    assert before >= 1
    assert stack.push(ShareCommand(("conv0_out", "conv1_out", "conv2_out", "cat_out")))
    assert _rescales(session) == 0 and len(session.groups) == 1
    assert events == [("groups", ())]
    assert stack.undo_text == "Share 4 tensors" and stack.redo_text == "" and not stack.clean
    stack.undo()
    assert _rescales(session) == before and len(session.groups) == 0
    assert stack.clean and stack.redo_text == "Share 4 tensors"
    stack.redo()
    assert _rescales(session) == 0
    assert stack.texts() == ["Share 4 tensors"] and (stack.index, stack.count) == (1, 1)
    assert changes == [1, 0, 1] and [k for k, _ in events] == ["groups"] * 3


def test_refused_share_changes_nothing(session, events):
    stack = CommandStack(session)
    rev = session.revision
    with pytest.raises(ShareRefused):
        stack.push(ShareCommand(("conv0_out", "conv0.w")))  # a per-channel weight cannot join
    assert len(session.groups) == 0 and not stack.can_undo and stack.count == 0
    assert session.revision == rev and events == []


def test_an_edit_that_changes_nothing_is_not_recorded(session):
    stack = CommandStack(session)
    assert stack.push(ShareCommand(("conv0_out", "conv1_out")))
    rev = session.revision
    assert not stack.push(ShareCommand(("conv1_out", "conv0_out")))  # already one group
    assert not stack.push(SetMarchCommand(session.options.march))
    assert stack.count == 1 and session.revision == rev


def test_ungroup_remove_member_and_options(session):
    stack = CommandStack(session)
    stack.push(ShareCommand(("conv0_out", "conv1_out", "conv2_out")))
    gid = session.groups.groups[0].id
    stack.push(RemoveMemberCommand(gid, "conv2_out"))
    assert session.groups.as_lists() == [("conv0_out", "conv1_out")]
    stack.push(UngroupCommand(gid))
    assert len(session.groups) == 0
    stack.undo()
    stack.undo()
    assert session.groups.as_lists() == [("conv0_out", "conv1_out", "conv2_out")]
    stack.push(SetPolicyCommand("max-input"))  # drops the two undone edits
    assert session.options.policy is Policy.MAX_INPUT and stack.count == 2 and not stack.can_redo
    stack.push(SetMarchCommand("nash-e"))
    assert stack.texts()[1:] == ["Policy: max-input", "March: nash-e"]
    stack.undo()
    stack.undo()
    assert session.options.policy is Policy.UNION and session.options.march == RESCALING_MARCH


def test_options_command_events_and_refusals(session, events):
    stack = CommandStack(session)
    dm = session.domains
    stack.push(SetOptionsCommand(auto_share_max_bits_lost=2.5))
    assert session.options.auto_share_max_bits_lost == 2.5
    assert events == [("options", ({"auto_share_max_bits_lost": 2.5},))]
    assert session.domains is dm  # the threshold is not an input of the domain maps
    assert stack.undo_text == "Auto-share threshold: 2.5 bits"
    stack.push(SetOptionsCommand(float_output_max_bits_lost=3))
    assert session.options.float_output_max_bits_lost == 3.0 and stack.undo_text == "Float-output threshold: 3 bits"
    with pytest.raises(QtQuantError, match="float_output_max_bits_lost"):
        SetOptionsCommand(float_output_max_bits_lost=-1)
    stack.push(SetOptionsCommand(march="nash-e", policy="output"))
    assert events[-1] == ("options", ({"march": "nash-e", "policy": Policy.OUTPUT},))
    assert session.domains is not dm and stack.undo_text == "Options: march, policy"
    with pytest.raises(QtQuantError):
        SetOptionsCommand(colour="red")
    with pytest.raises(QtQuantError):
        SetOptionsCommand(policy="widest")
    stack.undo()
    assert events[-1] == ("options", ({"march": RESCALING_MARCH, "policy": Policy.UNION},))


def test_autoshare_command_is_one_undo_step_and_one_event(session, events):
    stack = CommandStack(session)
    cmd = AutoShareCommand()  # at the session's auto-share threshold (1 bit by default)
    assert stack.push(cmd)
    assert cmd.report.grouped == ["cat"] and events == [("groups", ())]  # auto_share notifies too: one event
    assert _rescales(session) == 0
    stack.undo()
    assert len(session.groups) == 0 and _rescales(session) > 0


def test_compound_command_is_one_step_all_or_nothing(session, events):
    stack = CommandStack(session)
    stack.push(ShareCommand(("conv0_out", "conv1_out")))
    stack.push(ShareCommand(("conv2_out", "cat_out")))
    ids = [g.id for g in session.groups]
    del events[:]
    stack.push(CompoundCommand([UngroupCommand(i) for i in ids], f"Ungroup {len(ids)} groups"))
    assert len(session.groups) == 0 and events == [("groups", ())]
    assert stack.undo_text == "Ungroup 2 groups"
    stack.undo()
    assert len(session.groups) == 2
    with pytest.raises(QtQuantError):
        stack.push(CompoundCommand([UngroupCommand(ids[0]), UngroupCommand(999)], "Ungroup 2 groups"))
    assert len(session.groups) == 2 and stack.count == 3 and stack.index == 2


def test_clean_state(session):
    stack = CommandStack(session)
    assert stack.clean
    stack.push(ShareCommand(("conv0_out", "conv1_out")))
    stack.set_clean()
    assert stack.clean
    stack.undo()
    assert not stack.clean
    stack.push(ShareCommand(("conv1_out", "conv2_out")))  # the saved state is gone for good
    assert not stack.clean
    stack.undo()
    assert not stack.clean
    stack.clear()
    assert stack.clean and stack.count == 0 and not stack.can_undo


def test_scheme_change_recomputes_ranges_without_a_model_run(session):
    from qtquant.model.scales import Scheme

    session.calibration = session.calibration.recompute(observer="percentile")
    sym = dict(session.calibration.ranges)
    (c0,) = session.concats()
    CommandStack(session).push(SetOptionsCommand(scheme="uint8-asym"))
    assert session.options.scheme is Scheme.ASYMMETRIC_UINT8
    assert session.calibration.config.scheme == "asym" and session.options.calib.scheme == "asym"
    asym = session.calibration.ranges
    assert set(asym) == set(sym)
    # Percentile thresholds are taken on |x| for int8-sym and per tail for uint8-asym.
    assert any(asym[t] != sym[t] for t in sym)
    (c,) = session.concats()
    assert c.output.scale != c0.output.scale and session.domains.scheme is Scheme.ASYMMETRIC_UINT8


def test_the_board_clock_is_an_undoable_option_of_the_board_estimate(session):
    """The board's BPU clock (0: the march's) re-prices the board estimate's BPU part, not the static
    estimate; undo puts the march's clock back; a clock that is no number of GHz is refused in one line."""
    from qtquant.perf import simulate_session

    stack = CommandStack(session)
    plain = simulate_session(session)
    stack.push(SetOptionsCommand(board_bpu_ghz=2.0))
    assert session.options.board_bpu_ghz == 2.0 and stack.undo_text == "Board BPU clock: 2 GHz"
    fast = simulate_session(session)
    assert fast.total_us == pytest.approx(plain.total_us)  # the static estimate keeps the march's clock
    assert fast.board_us < plain.board_us
    stack.undo()
    assert session.options.board_bpu_ghz == 0.0 and simulate_session(session).board_us == pytest.approx(plain.board_us)
    for bad in (-1, float("nan"), "fast"):
        with pytest.raises(QtQuantError, match="BPU clock") as e:
            SetOptionsCommand(board_bpu_ghz=bad)
        assert "\n" not in str(e.value)
    with pytest.raises(QtQuantError, match="BPU clock"):
        Options(board_bpu_ghz=float("inf"))
