"""Each bits-lost rule has its own option: the auto-share threshold moves auto-share only; the
float-output threshold decides which model-output Concats the Concat table, the latency and the
export leave in float."""

import onnx
import pytest
from builders import RESCALING_MARCH, detector_model, save

from qtquant.app import CommandStack, Options, Session
from qtquant.app.commands import AutoShareCommand, SetOptionsCommand
from qtquant.base.errors import BadInputError
from qtquant.cli import main
from qtquant.model.graph import graph_from_model
from qtquant.perf import simulate_session


@pytest.fixture
def session():
    # detector_model's "head" joins box coordinates (x300) with sigmoid scores and feeds the model
    # outputs: one scale would cost the scores ~8.8 bits, so by default its output stays float.
    s = Session(graph_from_model(detector_model()), Options(march=RESCALING_MARCH))
    s.run_calibration()
    return s


def _table(s):
    return [(c.node, c.ratio, c.rescales, c.export_float) for c in s.concats()]


def _state(s):
    return _table(s), s.export_float(), simulate_session(s).total_us


def test_the_auto_share_threshold_moves_nothing_without_auto_share(session):
    stack = CommandStack(session)
    before = _state(session)
    head = next(r for r in before[0] if r[0] == "head")
    assert head[2] == 0 and head[3] and "head_out" in before[1]  # float: none of its inputs rescaled
    stack.push(SetOptionsCommand(auto_share_max_bits_lost=20.0))
    assert _state(session) == before
    assert len(session.groups) == 0


def test_the_float_output_threshold_decides_the_output_concat(session):
    stack = CommandStack(session)
    before = _state(session)
    stack.push(SetOptionsCommand(float_output_max_bits_lost=20.0))
    table, floats, latency = _state(session)
    head = next(r for r in table if r[0] == "head")
    assert head[2] == 1 and not head[3] and floats == frozenset() and latency != before[2]
    stack.undo()
    assert _state(session) == before


def test_auto_share_reads_its_own_threshold(session):
    CommandStack(session).push(SetOptionsCommand(float_output_max_bits_lost=20.0))
    cmd = AutoShareCommand()
    CommandStack(session).push(cmd)
    assert cmd.report.max_bits_lost == 1.0 and "head" not in cmd.report.grouped
    session.set_options(auto_share_max_bits_lost=20.0)
    cmd = AutoShareCommand()
    CommandStack(session).push(cmd)
    assert cmd.report.max_bits_lost == 20.0 and "head" in cmd.report.grouped


@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), "many", None, True])
def test_a_bad_threshold_is_one_line(value):
    for name in ("auto_share_max_bits_lost", "float_output_max_bits_lost"):
        with pytest.raises(BadInputError) as e:
            Options(**{name: value})
        assert str(e.value).startswith(f"{name} (the ") and "\n" not in str(e.value)


def test_the_exported_file_follows_the_float_output_threshold_only(tmp_path):
    """``fix`` without --auto-share: the auto-share threshold leaves the file byte for byte as it
    was; the float-output threshold quantizes the head's outputs."""
    model = save(detector_model(), tmp_path / "det.onnx")

    def fix(name, *flags):
        out = tmp_path / f"{name}.onnx"
        assert main(["fix", model, "-o", str(out), "--calib-count", "4", "--no-fidelity", "--no-perf",
                     "--march", RESCALING_MARCH, *flags]) == 0
        return out.read_bytes()

    default = fix("default")
    assert fix("share20", "--auto-share-max-bits-lost", "20") == default
    quantized = fix("out20", "--float-output-max-bits-lost", "20")
    assert quantized != default
    assert _quantized(quantized) - _quantized(default) >= {"head_out", "boxes_prequant", "scores_prequant"}


def _quantized(data: bytes) -> set[str]:
    """The tensors a QuantizeLinear of the file reads."""
    m = onnx.load_from_string(data)
    return {n.input[0] for n in m.graph.node if n.op_type == "QuantizeLinear"}
