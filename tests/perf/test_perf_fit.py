"""The fitter (qtquant/perf/fit.py), the board estimate (perf/board.py), how sure an estimate is
(perf/confidence.py) and ``qtquant perf --fit MODEL=LOG ... --march-out``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from builders import detector_model, mobilenet_v2, resnet18, save, yolov8n
from hblogs import LogSpec, render_compile_log
from qtquant.cli import main
from qtquant.model.graph import graph_from_model
from qtquant.perf import load_march, simulate
from qtquant.perf.confidence import NO_FIGURE, confidence, family_of
from qtquant.perf.fit import Figure, _with, fit, fit_with_loo, predict
from qtquant.perf.march import FigureKind, FitError, profile_from_dict
from qtquant.quant.precision import PrecisionMap
from qtquant.base.vocab import Precision


def _graph(model):
    return graph_from_model(model, ort_fallback=False)


@pytest.fixture(scope="module")
def graphs():
    return {"resnet18": _graph(resnet18(size=64)), "mobilenet_v2": _graph(mobilenet_v2(size=64)),
            "yolov8n": _graph(yolov8n(size=128))}


def test_the_reduced_layers_give_the_simulators_own_total(graphs):
    """The fit evaluates a figure from its layers' work and bytes, not a new simulation: at any
    parameters it must give what the simulator gives."""
    m = load_march("bayes-e")
    rng = np.random.default_rng(0)
    for name, g in graphs.items():
        for kind in FigureKind:
            f = Figure(name, kind, 1000.0, g)
            for _ in range(3):
                vals = {"utilization": rng.uniform(0.1, 0.9), "ddr_gbps": rng.uniform(2, 20),
                        "weight_gbps": rng.uniform(2, 20), "copy_efficiency": rng.uniform(0.3, 3),
                        "op_overhead_us": rng.uniform(0.1, 3), "depthwise_efficiency": rng.uniform(0.3, 3),
                        "pool_efficiency": rng.uniform(0.1, 3), "lut_efficiency": rng.uniform(0.05, 3),
                        "board_call_us": rng.uniform(10, 900), "board_ns_per_element": rng.uniform(0.1, 5)}
                res = simulate(g, _with(m, vals))
                want = res.board_us if kind is FigureKind.BOARD else res.total_us
                assert predict(f, m, vals) == pytest.approx(want, rel=1e-9)


def test_a_precision_figure_reprices_only_its_nodes_as_the_simulator_does(graphs):
    g = graphs["mobilenet_v2"]
    q = [t for t in g.tensors if g.is_quantized(t) and g.producer(t) is not None]
    pm = PrecisionMap({q[5]: Precision.INT16, q[9]: Precision.FLOAT, q[-3]: Precision.INT16})
    m = load_march("bayes-e")
    f = Figure("p", FigureKind.BOARD, 1000.0, g, precision=pm)
    for vals in ({}, {"utilization": 0.2, "ddr_gbps": 3.0, "weight_gbps": 9.0, "precision.cpu_elementwise_flops": 60.0,
                      "board_ns_per_element": 3.5, "precision.int16_vector_factor": 7.0, "op_overhead_us": 2.0}):
        assert predict(f, m, vals) == pytest.approx(f.simulate(_with(m, vals)).board_us, rel=1e-9)


def test_board_estimate_adds_the_call_and_each_output_element(graphs):
    g = graphs["yolov8n"]
    m = _with(load_march("bayes-e"), {"board_call_us": 200.0, "board_ns_per_element": 2.5})
    res = simulate(g, m)
    outs = sum(math.prod(g.tensors[t].shape) for t in g.outputs)
    assert res.board_us == pytest.approx(res.total_us + 200.0 + 2.5 * outs / 1000)
    # The 3-channel image input is NV12, converted by the BPU: not the CPU's work.
    image = [io for io in res.board_io if io.tensor in g.inputs]
    assert image and not image[0].on_cpu
    s = res.summary()
    assert s["board_latency_ms"] == pytest.approx(res.board_ms) and s["latency_ms"] == pytest.approx(res.total_ms)


def test_a_fit_recovers_the_parameters_that_made_the_figures(graphs):
    """Figures simulated at known parameters: the fit finds parameters that give them back, in and
    out of sample, and fits nothing no figure depends on."""
    base = load_march("bayes-e")
    truth = _with(base, {"utilization": 0.3, "ddr_gbps": 5.0, "op_overhead_us": 1.5})
    figs = [Figure(n, FigureKind.STATIC, simulate(g, truth).total_us, g) for n, g in graphs.items()]
    res = fit_with_loo(figs, base, alignments=(base.channel_align,), prior=1e-3)
    assert set(res.fitted) <= {"utilization", "ddr_gbps", "weight_gbps", "op_overhead_us", "depthwise_efficiency",
                               "pool_efficiency", "lut_efficiency", "resize_efficiency", "eltwise_efficiency"}
    assert len(res.fitted) <= len(figs)  # never more parameters than figures
    for f in figs:
        assert res.in_sample[f.name] == pytest.approx(f.public_us, rel=0.03)
    assert "matmul_efficiency" in res.not_fitted  # no attention in these graphs
    assert res.loo.keys() == {f.name for f in figs}


def test_weights_are_fitted_apart_only_where_the_profile_states_their_bandwidth(graphs):
    base = load_march("bernoulli2")
    assert base.weight_gbps == 0 and base.weight_bytes_per_s == base.ddr_bytes_per_s
    figs = [Figure(n, FigureKind.STATIC, 1.3 * simulate(g, base).total_us, g) for n, g in graphs.items()]
    res = fit(figs, base, alignments=(base.channel_align,))
    assert "weight_gbps" not in res.fitted and "ddr_gbps" in res.fitted
    assert res.not_fitted["weight_gbps"] == "the profile does not state it: it is ddr_gbps"


def test_one_figure_fits_one_parameter(graphs):
    g = graphs["resnet18"]
    base = load_march("bayes-e")
    res = fit([Figure("r", FigureKind.STATIC, 2 * simulate(g, base).total_us, g)], base, alignments=(16,))
    assert len(res.fitted) == 1
    assert res.in_sample["r"] == pytest.approx(2 * simulate(g, base).total_us, rel=0.05)


def test_confidence_is_the_nearest_familys_leave_one_out_error(graphs):
    g = graphs["yolov8n"]
    fam = family_of(g)
    assert fam == "conv dense" and family_of(graphs["resnet18"]) == "conv classifier"
    m = load_march("bayes-e")
    assert confidence(m, fam, FigureKind.STATIC).text == NO_FIGURE or m.fit_errors
    errs = (FitError(figure="a", kind="static", family=fam, public_us=100, fitted_us=101, loo_us=110),
            FitError(figure="b", kind="static", family=fam, public_us=100, fitted_us=99, loo_us=96),
            FitError(figure="c", kind="board", family="conv classifier", public_us=100, fitted_us=99, loo_us=80))
    import dataclasses

    m2 = dataclasses.replace(m, fit_errors=errs)
    c = confidence(m2, fam, FigureKind.STATIC)
    assert c.median_loo == pytest.approx(0.07) and c.figures == 2 and "±7%" in c.text
    assert confidence(m2, fam, FigureKind.BOARD).text == NO_FIGURE


# -- qtquant perf --fit ------------------------------------------------------------------------------

def _logs(tmp_path, lat_scale=1.7):
    """Three small models and their compile logs, whose static estimates are the simulator's at a
    lower utilization (so a fit has something to find)."""
    base = load_march("bayes-e")
    slow = _with(base, {"utilization": base.utilization / lat_scale})
    pairs = []
    for name, model in (("det", detector_model(shape=(1, 3, 64, 64))), ("res", detector_model(shape=(1, 3, 96, 96))),
                        ("mob", detector_model(shape=(1, 3, 160, 160)))):
        mp = save(model, tmp_path / f"{name}.onnx")
        us = round(simulate(_graph(model), slow).total_us, 1)
        lp = tmp_path / f"{name}.log"
        lp.write_text(render_compile_log(model, LogSpec(estimate=(round(1e6 / us, 2), us, 1000000))))
        pairs.append(f"{mp}={lp}")
    return pairs


def test_perf_fit_writes_a_profile_that_names_its_logs(tmp_path, capsys):
    pairs = _logs(tmp_path)
    out = tmp_path / "my.json"
    args = ["perf", "--calib-count", "2", "--march-out", str(out)]
    for p in pairs:
        args += ["--fit", p]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "leave-one-out" in text and "in-sample" in text and "det.log" in text
    doc = json.loads(out.read_text())
    fitted = doc["fit"]["params"]
    assert 0 < len(fitted) <= 3  # never more parameters than logs
    for k in fitted:
        assert "res.log" in doc["params"][k]["fitted"] and doc["params"][k]["fitted"].startswith("fitted to")
    assert {e["figure"] for e in doc["fit"]["errors"]} == {"det", "res", "mob"}
    # The logs are not what the bundled profile says; the fit brings each within 10% in sample.
    for e in doc["fit"]["errors"]:
        assert abs(e["fitted_us"] / e["public_us"] - 1) < 0.10
    assert profile_from_dict(doc).fit_errors
    # The fitted profile is a march everywhere a march is used, with its ±N% beside the totals.
    assert main(["perf", pairs[1].split("=")[0], "--calib-count", "2", "--march-file", str(out)]) == 0
    text = capsys.readouterr().out
    assert "static estimate (BPU): ±" in text


@pytest.mark.parametrize("fit_arg, code, words", [
    ("nologhere", 2, "MODEL=LOG"),
    ("{model}={missing}", 3, "missing.log"),
    ("{model}={other_march}", 3, "compiled for march bernoulli2"),
])
def test_perf_fit_bad_input_is_one_line(tmp_path, capsys, fit_arg, code, words):
    model = save(detector_model(shape=(1, 3, 32, 32)), tmp_path / "m.onnx")
    other = tmp_path / "other.log"
    other.write_text(render_compile_log(detector_model(shape=(1, 3, 32, 32)), LogSpec(march="bernoulli2")))
    arg = fit_arg.format(model=model, missing=tmp_path / "missing.log", other_march=other)
    rc = main(["perf", "--fit", arg, "--march-out", str(tmp_path / "o.json"), "--calib-count", "2"])
    err = capsys.readouterr().err
    assert rc == code
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def test_perf_fit_needs_march_out_and_no_model(tmp_path, capsys):
    model = save(detector_model(shape=(1, 3, 32, 32)), tmp_path / "m.onnx")
    assert main(["perf", "--fit", f"{model}=x.log"]) == 2
    assert "--march-out" in capsys.readouterr().err
    assert main(["perf", str(model), "--march-out", str(tmp_path / "o.json")]) == 2
    assert "--fit" in capsys.readouterr().err


# -- the attention and transformer pricing rules of bayes-e ------------------------------------------

def _gelu_softmax_model():
    """x -> Conv -> GELU (as torch exports it at opset 11: Div, Erf, Add, Mul, Mul) -> Softmax -> y."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8, 1, 1)).astype(np.float32), "w")
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Div", ["c", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["c", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["g"], name="gelu"),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, *consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_an_exported_gelu_is_one_pass_and_a_softmax_five_on_bayes_e():
    g = _graph(_gelu_softmax_model())
    m = load_march("bayes-e")
    assert m.fusion.vector_regions and m.fusion.softmax_passes == 5
    res = simulate(g, m)
    gelu = res.layer("gelu")
    assert set(gelu.fused) == {"div", "erf", "add", "mul"} and gelu.elems == 5 * 8 * 32 * 32
    assert gelu.op_class == "region" and gelu.efficiency == m.region_efficiency
    assert gelu.bytes == 2 * 8 * 32 * 32  # reads the conv's output once, writes its result once
    assert gelu.overhead_us == pytest.approx(5 * m.op_overhead_us)  # its five pieces run one after another
    assert all(res.layer(n).fused_into == "gelu" and res.layer(n).total_us == 0 for n in ("div", "erf", "mul"))
    sm = res.layer("softmax")
    assert sm.elems == 5 * 8 * 32 * 32 and sm.bytes == 8 * 8 * 32 * 32  # five reads, three writes
    import dataclasses

    # The fit's reduced layers count each lowered op's overhead as the simulator does.
    vals = {"op_overhead_us": 3.0, "region_efficiency": 0.5, "reduce_efficiency": 2.0}
    assert predict(Figure("g", FigureKind.STATIC, 100.0, g), m, vals) == pytest.approx(
        simulate(g, _with(m, vals)).total_us, rel=1e-9)
    plain = dataclasses.replace(m, fusion=dataclasses.replace(m.fusion, vector_regions=False, softmax_passes=1))
    res1 = simulate(g, plain)
    assert res1.layer("erf").total_us > 0 and res1.layer("softmax").bytes == 2 * 8 * 32 * 32


def test_perf_json_and_report_carry_both_latencies_and_how_sure(tmp_path, capsys):
    model = save(detector_model(shape=(1, 3, 32, 32)), tmp_path / "m.onnx")
    assert main(["perf", str(model), "--calib-count", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s = doc["after"]["summary"]
    assert s["board_latency_ms"] > s["latency_ms"] > 0 and s["board_cpu_us"] > 0
    assert set(doc["confidence"]) == {"static", "board"}
    assert doc["confidence"]["static"]["family"] == "conv dense"
    report = tmp_path / "r.html"
    assert main(["perf", str(model), "--calib-count", "2", "--report", str(report)]) == 0
    html = report.read_text()
    assert "board estimate (1 thread)" in html and "static estimate (BPU)" in html and 'class="meta confidence"' in html


def test_int_outputs_leave_the_cpu_nothing_to_convert(graphs, tmp_path, capsys):
    """An output whose Dequantize the deployment removes (hb_model_modifier -r) is the application's to
    dequantise: the board estimate converts nothing for it, and a name that is no output is one line."""
    from qtquant.app import Options, open_model
    from qtquant.base.errors import BadInputError
    from qtquant.perf import simulate_session
    from qtquant.perf.board import board_io

    g = graphs["yolov8n"]
    out = g.outputs[0]
    ios = {io.tensor: io for io in board_io(g, frozenset({out}))}
    assert not ios[out].on_cpu and ios[out].output and all(ios[t].on_cpu for t in g.outputs[1:])
    with pytest.raises(BadInputError, match="not an output"):
        board_io(g, frozenset({"nope"}))
    path = save(yolov8n(size=128), tmp_path / "y.onnx")
    s = open_model(path, None, Options())
    s.run_calibration()
    plain = simulate_session(s)
    m = load_march("bayes-e")
    s.options = Options(int_outputs=(out,))
    raw = simulate_session(s)
    elems = math.prod(g.tensors[out].shape)
    assert raw.total_us == pytest.approx(plain.total_us)  # the BPU part is the same
    assert plain.board_us - raw.board_us == pytest.approx(m.board_ns_per_element * elems / 1000)
    rc = main(["perf", str(path), "--calib-count", "2", "--int-outputs", out, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and [io["on_cpu"] for io in doc["after"]["board_io"] if io["tensor"] == out] == [False]
    assert main(["perf", str(path), "--calib-count", "2", "--int-outputs", out]) == 0
    assert "1 int output(s) left to the application" in capsys.readouterr().out
    assert main(["perf", str(path), "--calib-count", "2", "--int-outputs", "nope"]) == 3
    err = capsys.readouterr().err.strip()
    assert "'nope' is not an output of the model" in err and "\n" not in err


def test_the_board_clock_speeds_all_but_the_ddr_time(graphs):
    """A board whose BPU runs faster than the clock of the static estimate (the zoo overclocks the X5's BPU
    to 1.2 GHz for some tables): compute, vector, on-chip and per-op time shrink by the ratio, DDR time not;
    the fit's reduced layers give the simulator's board estimate at that clock too."""
    import dataclasses

    from qtquant.perf.board import board_layer_us

    m = load_march("bayes-e")
    fast = dataclasses.replace(m, board_bpu_ghz=2 * m.frequency_ghz)
    g = graphs["resnet18"]
    res, same = simulate(g, fast), simulate(g, m)
    assert res.total_us == pytest.approx(same.total_us)  # the static estimate keeps the nominal clock
    bpu = res.board_us - res.board_cpu_us
    assert bpu == pytest.approx(sum(board_layer_us(lc, fast) for lc in res.layers))
    assert res.total_us / 2 < bpu < res.total_us
    for lc in res.layers:
        if lc.total_us > 0 and lc.ddr_bytes == 0:  # all on chip: exactly twice as fast
            assert board_layer_us(lc, fast) == pytest.approx(lc.total_us / 2)
        if lc.total_us > 0 and lc.bound == "memory" and lc.ddr_bytes == lc.bytes:  # all DDR: the same time
            assert board_layer_us(lc, fast) >= lc.memory_us
    f = Figure("r", FigureKind.BOARD, 1000.0, g, board_bpu_ghz=1.2, int_outputs=frozenset(g.outputs))
    vals = {"utilization": 0.4, "ddr_gbps": 3.0, "op_overhead_us": 2.0, "board_call_us": 150.0}
    assert predict(f, m, vals) == pytest.approx(f.simulate(_with(m, vals)).board_us, rel=1e-9)
    assert predict(f, m, vals) < predict(Figure("r", FigureKind.BOARD, 1000.0, g), m, vals)
