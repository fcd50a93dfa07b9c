"""Placing a compile log on a graph (qtquant.horizon.match): cut names by unique suffix,
ambiguous and missing names listed, another model's log refused, thresholds per tensor."""

from __future__ import annotations

import onnx
import pytest

from builders import branchy_concat_model, detector_model
from hblogs import LogSpec, render_compile_log
from qtquant.errors import CompileLogError
from qtquant.graph import graph_from_model
from qtquant.horizon.log import parse_compile_log
from qtquant.horizon.match import MissKind, match_compile_log

END = "/a_rather/long/module/path/that_the/compiler_cuts/Conv"


def _named(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """``model`` with nodes renamed (old -> new) and their outputs named ``<new>_output_0``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    renamed = {}
    for n in m.graph.node:
        if n.name in names:
            new = names[n.name]
            renamed[n.output[0]] = new + "_output_0"
            n.name, n.output[0] = new, new + "_output_0"
    for n in m.graph.node:
        for i, t in enumerate(n.input):
            if t in renamed:
                n.input[i] = renamed[t]
    return m


def _match(model, spec=None, graph_model=None, **kw):
    log = parse_compile_log(render_compile_log(model, spec or LogSpec()).encode(), "hb.log")
    return match_compile_log(graph_from_model(graph_model or model), log, **kw)


def test_exact_names_thresholds_and_requantize():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(requantize=("conv1_out",), thresholds={"x": 1.1, "relu0_out": 9.0, "pool0_out": 4.0,
                                                                      "cat_out": 6.0}))
    assert set(m.nodes) == {n.name for n in model.graph.node} and not m.unmatched
    assert m.compiler_rows == ("HZ_PREPROCESS_FOR_x",) and not m.shape_differs
    assert m.requantized == ("conv1_out",) and dict(m.requantized_for) == {"cat": ("conv1_out",)}
    th = m.thresholds
    assert th["x"].threshold == 1.1 and th["x"].node == "conv0" and th["x"].scale == pytest.approx(1.1 / 127)
    assert th["relu0_out"].threshold == 9.0 and th["pool0_out"].threshold == 4.0  # the Concat prints its first input
    assert "conv0_out" not in th  # fused into its Relu: not a quantized tensor
    assert th["cat_out"].range == (-6.0, 6.0)
    assert "conv2_out" not in th  # read only as a Concat's second input: the log has no threshold for it
    assert m.ranges()["relu0_out"] == (-9.0, 9.0)
    ranked = m.cosine_ranking()
    assert [c for _, c in zip(range(3), (r.cosine for _, r in ranked))] == sorted(r.cosine for _, r in ranked)[:3]


def test_int16_bits_from_the_producer():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(int16=("relu0",), thresholds={"relu0_out": 9.0}))
    assert m.thresholds["relu0_out"].bits == 16 and m.thresholds["relu0_out"].scale == pytest.approx(9.0 / 32767)
    assert m.int16_tensors == ("relu0_out",) and m.thresholds["pool0_out"].bits == 8


def test_cut_names_match_by_unique_suffix():
    model = _named(branchy_concat_model(chain=True), {"conv1": "/model.22" + END})
    m = _match(model, LogSpec(requantize=("/model.22" + END + "_output_0",)))
    assert "/model.22" + END in m.nodes and m.nodes["/model.22" + END].cut
    assert m.requantized == ("/model.22" + END + "_output_0",) and not m.unmatched


def test_ambiguous_cut_names_are_listed_not_guessed():
    base = branchy_concat_model(chain=True)
    model = _named(base, {"conv1": "/model.22" + END, "conv2": "/model.23" + END})
    # The log of a model whose two names differ only before the cut: both rows print the same end.
    m = _match(model, LogSpec(requantize=("/model.22" + END + "_output_0",)))
    amb = [u for u in m.unmatched if u.kind is MissKind.AMBIGUOUS]
    assert {u.what for u in amb} == {"node", "requantize"}
    assert all(set(u.candidates) >= {"/model.22" + END, "/model.23" + END} or
               set(u.candidates) == {"/model.22" + END + "_output_0", "/model.23" + END + "_output_0"} for u in amb)
    assert "/model.22" + END not in m.nodes and m.requantized == ()
    assert "ambiguous" in amb[0].describe()


def test_a_missing_name_is_listed():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(rename={"final_relu": "/compiler/made_this"}))
    assert [(u.printed, u.kind) for u in m.unmatched] == [("/compiler/made_this", MissKind.MISSING)]
    assert "not in the model" in m.unmatched[0].describe()


def test_another_models_log_is_refused():
    ours = branchy_concat_model(chain=True)
    other = detector_model()
    other.graph.input[0].name = "x"
    with pytest.raises(CompileLogError, match="another model"):
        _match(other, graph_model=ours)
    with pytest.raises(CompileLogError, match="inputs images"):
        _match(ours, LogSpec(input_names=("images",)))


def test_another_input_shape_is_refused_unless_asked():
    model = branchy_concat_model(chain=True)
    spec = LogSpec(input_shape=(1, 3, 32, 32))
    with pytest.raises(CompileLogError, match=r"1x3x32x32 in the log but 1x3x16x16 here.*--compiler-log-any-shape"):
        _match(model, spec)
    m = _match(model, spec, any_shape=True)
    assert m.shape_differs and len(m.thresholds) > 3
