"""Mixed precision: the per-tensor map, names, the undoable command, plans (and the version-1
migration), projects, the CLI options, and the int16 / float export checked and run in onnxruntime."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from qtquant.app import CommandStack
from qtquant.app.commands import SetPrecisionCommand
from qtquant.cli import main
from qtquant.base.errors import BadInputError, PlanError
from qtquant.export.qdq import INT16_OPSET, export_qdq
from qtquant.fidelity.measure import sqnr_db
from qtquant.files.plan import VERSION, load_plan, parse_plan, apply_plan, save_plan
from qtquant.quant.precision import PrecisionMap, assignments_from_names, float_nodes, node_precision, resolve_name
from qtquant.app.projects import open_project
from qtquant.files.project import save_project
from qtquant.model.runtime import make_session
from qtquant.base.vocab import Precision


def _feed(seed=0):
    return {"x": np.random.default_rng(seed).random((1, 3, 16, 16), dtype=np.float32)}


def test_map_drops_int8_and_is_hashable():
    pm = PrecisionMap({"a": "int16", "b": Precision.FLOAT, "c": "int8"})
    assert dict(pm) == {"a": Precision.INT16, "b": Precision.FLOAT} and pm.of("c") is Precision.INT8
    assert pm == {"a": "int16", "b": "float"} and hash(pm) == hash(PrecisionMap(pm.to_dict()))
    assert pm.with_(["a"], "int8") == {"b": "float"}
    with pytest.raises(BadInputError, match="int8, int16, float"):
        PrecisionMap({"a": "int4"})


def test_names_resolve_to_quantized_outputs(session):
    g = session.graph
    assert resolve_name(g, "h") == ["h"]  # a tensor
    # neck (a Conv) is fused into neck_relu: its name stands for the chain's quantized output
    assert resolve_name(g, "neck") == ["h"]
    assert resolve_name(g, "cls_sigmoid") == ["score"]
    with pytest.raises(BadInputError, match="no node or tensor named 'nope'"):
        resolve_name(g, "nope")
    with pytest.raises(BadInputError, match="not quantized"):
        resolve_name(g, "neck.w")
    with pytest.raises(BadInputError, match="both"):
        assignments_from_names(g, ["h"], ["neck"])
    pm = assignments_from_names(g, ["c0"], ["neck"])
    assert pm == {"c0_out": "int16", "h": "float"}
    assert node_precision(g, pm, g.nodes["neck"]) is Precision.FLOAT
    assert float_nodes(g, pm) == {"neck", "neck_relu"}  # the fused chain runs on the CPU together


def test_command_is_undoable_and_emits(session):
    stack = CommandStack(session)
    got = []
    session.events.options.connect(lambda changed: got.append(changed["precision"]) if "precision" in changed else None)
    assert stack.push(SetPrecisionCommand.for_names(session, ["neck"], "float"))
    assert session.precision == {"h": "float"} and session.snapshot().precision == {"h": "float"}
    assert stack.undo_text == "Keep h in float" and got[-1] == {"h": "float"}
    rev = session.revision
    stack.undo()
    assert session.precision == {} and got[-1] == {} and session.revision > rev
    stack.redo()
    assert session.precision == {"h": "float"}
    # setting what is already there records nothing
    assert not stack.push(SetPrecisionCommand(["h"], "float"))
    # a whole domain at once: share cat1 first, then set one member
    from qtquant.app.commands import ShareCommand
    stack.push(ShareCommand(("c0_out", "c1_out", "cat1_out")))
    stack.push(SetPrecisionCommand.for_domain(session, "c0_out", "int16"))
    assert {t for t, p in session.precision.items() if p == "int16"} >= {"c0_out", "c1_out", "cat1_out"}
    with pytest.raises(BadInputError, match="not a quantized tensor"):
        stack.push(SetPrecisionCommand(["neck.w"], "int16"))


def test_plan_carries_precision_and_version_1_migrates(session, tmp_path):
    session.set_precision(["h"], "float")
    session.set_precision(["c0_out"], "int16")
    p = save_plan(session, tmp_path / "plan.json")
    doc = json.loads(p.read_text())
    assert doc["version"] == VERSION == 2 and doc["precision"] == {"c0_out": "int16", "h": "float"}
    session.set_options(precision={})
    apply_plan(session, load_plan(p))
    assert session.precision == {"c0_out": "int16", "h": "float"}
    # a version-1 plan (what qtquant wrote before) loads: groups as before, everything int8
    v1 = {k: v for k, v in doc.items() if k != "precision"} | {"version": 1}
    plan = parse_plan(v1)
    assert plan.version == 1 and plan.precision == {}
    apply_plan(session, plan)
    assert session.precision == {}
    # a "precision" key was not part of version 1: not read from such a file
    assert parse_plan({**v1, "precision": {"h": "float"}}).precision == {}
    with pytest.raises(PlanError, match="not quantized"):
        apply_plan(session, parse_plan({**doc, "precision": {"neck.w": "float"}}))
    with pytest.raises(PlanError, match="precision"):
        parse_plan({**doc, "precision": {"h": "int4"}})


def test_project_round_trip(session, tmp_path):
    session.set_precision(["h"], "int16")
    pp = save_project(session, tmp_path / "p.qtquant")
    assert json.loads(pp.read_text())["precision"] == {"h": "int16"}
    s2, _ = open_project(pp)
    assert s2.precision == {"h": "int16"}


def _ort(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_int16_export_checks_and_runs(session, tmp_path):
    ref = make_session(session.graph.model).run(None, _feed())
    base = _ort(export_qdq(session, tmp_path / "int8.onnx").path).run(None, _feed())
    session.set_precision(["h", "feat"], "int16")
    res = export_qdq(session, tmp_path / "int16.onnx")
    assert res.build.int16 == 2 and "2 int16" in res.text()
    m = onnx.load(str(res.path))
    onnx.checker.check_model(m, full_check=True)
    assert next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) == INT16_OPSET
    q = {n.input[0]: n for n in m.graph.node if n.op_type == "QuantizeLinear"}
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert inits[q["h"].input[2]].dtype == np.int16
    assert inits[q["c0_out"].input[2]].dtype == np.int8  # the rest stays int8
    # int16 steps are 256x finer over the same range
    h8 = session.domains.domains[session.domains.of["h"]].qparams.scale
    assert np.isclose(inits[q["h"].input[1]] * 32767, h8 * 127, rtol=1e-5)
    # the weights of an int16 node stay int8
    w = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0].startswith("featc.w"))
    assert inits[w.input[0]].dtype == np.int8
    got = _ort(res.path).run(None, _feed())
    assert sqnr_db(ref[3], got[3]) > sqnr_db(ref[3], base[3]) + 1  # 'feat' and its input are int16 now


def test_float_export_leaves_no_qdq_and_float_weights(session, tmp_path):
    session.set_precision(["h"], "float")
    res = export_qdq(session, tmp_path / "float.onnx")
    assert res.build.float_kept == 1 and res.build.int16 == 0
    m = onnx.load(str(res.path))
    onnx.checker.check_model(m, full_check=True)
    assert not [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "h"]
    conv = next(n for n in m.graph.node if n.name == "neck")
    assert conv.input[1] == "neck.w"  # the float weight itself, no DequantizeLinear
    assert next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) == 17  # no raise needed
    got = _ort(res.path).run(None, _feed())
    assert all(np.isfinite(g).all() for g in got)


def _cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_options_on_fix(det_path, tmp_path, capsys):
    out = tmp_path / "fixed.onnx"
    rc, text, _ = _cli(capsys, "fix", det_path, "-o", str(out), "--calib-count", "4", "--int16", "c0",
                       "--keep-float", "neck", "--keep-float", "feat", "--plan-out", str(tmp_path / "p.json"))
    assert rc == 0, text
    assert "precision: 1 int16, 2 kept in float" in text
    assert load_plan(tmp_path / "p.json").precision == {"c0_out": "int16", "h": "float", "feat": "float"}
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    _ort(out).run(None, _feed())


@pytest.mark.parametrize("cmd", ["analyze", "perf", "fix"])
def test_cli_unknown_name_exits_3_with_one_line(det_path, tmp_path, capsys, cmd):
    extra = ["-o", str(tmp_path / "o.onnx")] if cmd == "fix" else []
    rc, _, err = _cli(capsys, cmd, det_path, *extra, "--int16", "no_such_node")
    assert rc == 3 and err.strip().count("\n") == 0 and "no_such_node" in err


def test_fidelity_measures_the_precision_that_ships(session):
    """The check runs the exported program: every activation in float leaves only nothing to lose,
    and the options (with their precision) survive the trip to the fidelity child process."""
    import pickle

    from qtquant.fidelity.measure import measure_session

    int8 = measure_session(session).after["feat"].headline.sqnr_db
    session.set_precision(session.graph.quantized_tensors, "float")
    assert pickle.loads(pickle.dumps(session.snapshot().options)) == session.options
    flt = measure_session(session).after["feat"].headline.sqnr_db
    assert flt > int8 + 40  # float weights and activations: the float model, bar rounding


def test_int16_asymmetric_is_uint16_and_runs(det_path, tmp_path):
    from qtquant.app import Options, open_model

    s = open_model(det_path, options=Options(scheme="asym"))
    s.run_calibration()
    s.set_precision(["h"], "int16")
    res = export_qdq(s, tmp_path / "u16.onnx")
    m = onnx.load(str(res.path))
    onnx.checker.check_model(m, full_check=True)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    q = {n.input[0]: n for n in m.graph.node if n.op_type == "QuantizeLinear"}
    assert inits[q["h"].input[2]].dtype == np.uint16 and inits[q["c0_out"].input[2]].dtype == np.uint8
    assert all(np.isfinite(g).all() for g in _ort(res.path).run(None, _feed()))


def test_qparams_widths_share_one_grid_rule():
    """int16 is a width of QParams: the same range on a 16-bit grid, 8 bits unchanged."""
    from qtquant.model.scales import QParams, Scheme, qparams_for_range, qrange

    sym8, sym16 = (qparams_for_range(-3.0, 2.0, Scheme.SYMMETRIC_INT8, bits=b) for b in (8, 16))
    assert (sym8.qmin, sym8.qmax, sym8.dtype) == (-128, 127, np.int8) and sym8.scale == 3.0 / 127.0
    assert (sym16.qmin, sym16.qmax, sym16.dtype) == (-32768, 32767, np.int16) and sym16.scale == 3.0 / 32767.0
    asym16 = qparams_for_range(-1.0, 3.0, Scheme.ASYMMETRIC_UINT8, bits=16)
    assert (asym16.qmin, asym16.qmax, asym16.dtype) == (0, 65535, np.uint16)
    assert asym16.scale == 4.0 / 65535.0 and asym16.zero_point == round(65535 / 4)
    assert qrange(Scheme.ASYMMETRIC_UINT8) == (0, 255)
    with pytest.raises(ValueError, match="12-bit"):
        QParams(0.1, 0, Scheme.SYMMETRIC_INT8, bits=12)
