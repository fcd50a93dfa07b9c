"""One owner per rule: "feeds a model output" and Concat membership are asked in one place."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import RESCALING_MARCH, conv_node
from qtquant.quant.autoshare import plan_auto_share
from qtquant.quant.concat import concat_members
from qtquant.model.graph import graph_from_model
from qtquant.app import Options, Session


def _concat_then(tail, *, gains=(1.0, 8.0), also=(), options=None):
    """x → Conv×len(gains) → Concat → ``tail`` (nodes reading "cat_out" and writing "y").

    ``also(inits)`` returns nodes whose outputs become further Concat inputs."""
    inits, nodes = [], []
    for i, g in enumerate(gains):
        nodes.append(conv_node(inits, "x", 3, 4, 3, f"conv{i}", gain=g, seed=i))
    cat_in = [n.output[0] for n in nodes]
    for extra in also:
        made = extra(inits)
        nodes += made
        cat_in.append(made[-1].output[0] if made else inits[-1].name)
    nodes.append(helper.make_node("Concat", cat_in, ["cat_out"], name="cat", axis=1))
    nodes += tail(inits)
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    s = Session(graph_from_model(m), options if options is not None else Options(march=RESCALING_MARCH))
    s.run_calibration()
    return s


def _conv_tail(inits):
    head = conv_node(inits, "cat_out", 8, 4, 1, "head")
    head.output[0] = "y"
    return [head]


def _reshape_transpose_tail(inits):
    inits.append(numpy_helper.from_array(np.array([1, 8, 64], np.int64), "shape"))
    return [helper.make_node("Reshape", ["cat_out", "shape"], ["flat"], name="flat"),
            helper.make_node("Transpose", ["flat"], ["y"], name="tr", perm=[0, 2, 1])]


def _linear_resize_tail(inits):
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    return [helper.make_node("Resize", ["cat_out", "", "scales"], ["y"], name="up", mode="linear")]


def _output_notes(session):
    report, _ = plan_auto_share(session, 100.0)
    return [n for _, n in report.notes if "model output" in n]


@pytest.mark.parametrize("tail,feeds", [(_conv_tail, False), (_reshape_transpose_tail, True),
                                        (_linear_resize_tail, False)])
def test_analysis_and_auto_share_agree_on_feeding_an_output(tail, feeds):
    s = _concat_then(tail)
    (info,) = s.concats()
    assert info.feeds_output is feeds
    assert bool(_output_notes(s)) is feeds


def test_concat_members_leave_out_constants_and_note_unquantized_inputs():
    def const(inits):
        inits.append(numpy_helper.from_array(np.ones((1, 2, 8, 8), np.float32), "const"))
        return []

    def cast(inits):  # a float value no observer sees: a Cast to another type is never quantized
        # (a Cast to the type its input has already is an Identity: it would pass x's scale on)
        return [helper.make_node("Cast", ["x"], ["x_f64"], name="to_double", to=TensorProto.DOUBLE),
                helper.make_node("Cast", ["x_f64"], ["x_cast"], name="cast", to=TensorProto.FLOAT)]

    s = _concat_then(lambda inits: [helper.make_node("Relu", ["cat_out"], ["y"])], also=(const, cast))
    g = s.graph
    notes = []
    assert concat_members(g, "cat", notes) == ["conv0_out", "conv1_out", "cat_out"]
    assert notes == ["input 3 (x_cast) is not quantized and stays out of the group"]
    assert concat_members(g, g.nodes["cat"]) == concat_members(g, "cat")
    report, groups = plan_auto_share(s, 100.0)
    assert groups == [["conv0_out", "conv1_out", "cat_out"]]
    assert notes[0] in report.decisions[0].notes


def test_cost_classes_are_declared_in_the_registry_which_no_one_mutates(session):
    from qtquant.model.ops import REGISTRY, handler_for
    from qtquant.perf import simulate_session
    from qtquant.base.vocab import CostClass

    before = dict(REGISTRY)
    simulate_session(session)
    assert dict(REGISTRY) == before and all(REGISTRY[k] is v for k, v in before.items())
    with pytest.raises(TypeError):
        REGISTRY["Conv"] = handler_for("Relu")
    assert handler_for("Conv").cost_class is CostClass.COMPUTE
    assert handler_for("Reshape").cost_class is CostClass.VIEW
    assert handler_for("Dropout").cost_class is CostClass.VIEW and not handler_for("Dropout").known
    assert handler_for("NoSuchOp").cost_class is CostClass.MEMORY


def test_one_open_path_load_graph_refuses_qdq_files(tmp_path):
    import qtquant
    from qtquant.base.errors import ModelError
    from qtquant.model.graph import load_graph

    from builders import save

    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("Relu", ["xd"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = save(m, tmp_path / "qdq.onnx")
    with pytest.raises(ModelError, match="open_model"):
        load_graph(path)
    s = qtquant.open_model(path)
    assert s.quantized_file and "QuantizeLinear" not in {n.op_type for n in s.graph.nodes.values()}
    assert "open_model" in qtquant.__all__ and "load_graph" not in qtquant.__all__


def test_auto_share_says_float_only_where_the_export_keeps_float():
    """The output note and the export ask one rule (outputs.float_output_tensors): a MaxPool passes
    the scale on, but the export relabels only value-moving ops, so it quantizes this output."""
    from qtquant.quant.outputs import OutputMode, float_output_tensors

    def pool_tail(inits):
        return [helper.make_node("MaxPool", ["cat_out"], ["y"], name="pool", kernel_shape=[1, 1])]

    for tail, kept in ((_reshape_transpose_tail, True), (pool_tail, False)):
        s = _concat_then(tail, gains=(0.01, 50.0))
        _, why = float_output_tensors(s.graph, s.baseline_domains, OutputMode.AUTO, 1.0)
        (note,) = [n for _, n in plan_auto_share(s, 1.0)[0].notes if "model output" in n]
        assert ("keeps this output in float" in note) is kept, note
        assert [w.concat for w in why] == (["cat"] if kept else [])


def test_a_float_kept_output_concat_is_what_ships_in_analysis_perf_and_export(tmp_path):
    """Boxes-next-to-scores: the export leaves the output Concat in float, its inputs at their own
    scales, with no requantize in the file.  The analysis counts no rescale for it and the simulator
    prices none (a copy into the float output instead)."""
    import onnx

    from qtquant.export.qdq import export_qdq
    from qtquant.quant.outputs import OutputMode, float_output_tensors
    from qtquant.perf import simulate_session

    s = _concat_then(_reshape_transpose_tail, gains=(0.01, 50.0))
    (info,) = s.concats()
    assert s.export_float() == {"cat_out", "flat", "y"}
    assert info.export_float and info.rescales == 0 and info.rescale_inputs == [] and info.ratio > 100
    res = simulate_session(s)
    assert res.rescale_count == 0 and res.rescale_cost_by_concat() == {"cat": 0.0}
    assert "left in float by the export" in res.layer("cat").note and res.layer("cat").total_us > 0

    keep, _ = float_output_tensors(s.graph, s.baseline_domains, OutputMode.AUTO, s.options.float_output_max_bits_lost)
    out = export_qdq(s, tmp_path / "fixed.onnx", float_tensors=keep).path
    m = onnx.load(str(out))
    prod = {o: n for n in m.graph.node for o in n.output}
    cat = next(n for n in m.graph.node if n.op_type == "Concat")
    assert [prod[i].op_type for i in cat.input] == ["DequantizeLinear", "DequantizeLinear"]
    assert prod[cat.input[0]].input[1] != prod[cat.input[1]].input[1]  # each input at its own scale
    assert not any(n.op_type == "QuantizeLinear" and cat.output[0] in n.input for n in m.graph.node)


def test_the_output_mode_is_one_fact_for_the_concat_table_the_simulator_and_the_check():
    """--quantize-outputs ships the output Concat in int8 with a requantize per mismatched input:
    the table and the simulator count it.  --float-outputs takes Q/DQ off the model output only;
    a Concat before a Reshape/Transpose tail still ships in int8, and is counted so."""
    from qtquant.app import Options
    from qtquant.fidelity.measure import measure_session
    from qtquant.quant.outputs import OutputMode
    from qtquant.perf import simulate_session

    counts = {}
    for mode in OutputMode:
        s = _concat_then(_reshape_transpose_tail, gains=(0.01, 50.0),
                         options=Options(march=RESCALING_MARCH, output_mode=mode))
        (info,) = s.concats()
        counts[mode] = (info.rescales, simulate_session(s).rescale_count, bool(info.export_float))
        assert (measure_session(s).float_outputs != []) is (mode is OutputMode.AUTO)
    assert counts[OutputMode.AUTO] == (0, 0, True)
    assert counts[OutputMode.QUANTIZE] == counts[OutputMode.FLOAT] == (1, 1, False)
