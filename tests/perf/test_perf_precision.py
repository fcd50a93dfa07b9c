"""The simulator prices precision: int16 costs more on the BPU, a float node runs on the CPU with
its DDR traffic and a fixed cost per BPU<->CPU hand-off."""

import json

import pytest

from qtquant.cli import main
from qtquant.perf import load_march, simulate_session
from qtquant.perf.macs import macs_of, numel, shape_of
from qtquant.perf.precision import DEFAULTS, precision_params, precision_table_text
from qtquant.perf.simulator import latency_delta_us


def test_int16_costs_more_on_the_bpu(session):
    base = simulate_session(session)
    assert base.precision is None
    session.set_precision(["h"], "int16")
    res = simulate_session(session)
    cost = res.precision
    prices = cost.by_node()
    # neck (fused with neck_relu) writes h in int16: only bytes; its readers run their MACs twice
    assert prices["neck"].device == "bpu" and "writes 1 int16" in prices["neck"].note
    b = {lc.name: lc for lc in base.layers}
    a = {lc.name: lc for lc in res.layers}
    h = numel(shape_of(session.graph, "h"))
    assert a["neck"].bytes == b["neck"].bytes + h and a["neck"].compute_us == pytest.approx(b["neck"].compute_us)
    factor = precision_params(load_march("bayes-e")).int16_compute_factor
    assert factor > 1
    for reader in ("boxc", "clsc", "featc"):
        assert a[reader].compute_us == pytest.approx(b[reader].compute_us * factor)
        assert a[reader].total_us > b[reader].total_us
    assert res.total_us == pytest.approx(base.total_us + cost.delta_us) and cost.delta_us > 0
    assert res.ddr_bytes >= base.ddr_bytes
    assert "int16" in precision_table_text(res)


def test_float_node_runs_on_the_cpu_with_hand_offs(session):
    base = simulate_session(session)
    session.set_precision(["h"], "float")
    res = simulate_session(session)
    prices = res.precision.by_node()
    assert set(prices) == {"neck", "neck_relu"}  # the fused chain goes to the CPU together
    neck, relu = prices["neck"], prices["neck_relu"]
    assert neck.device == relu.device == "cpu"
    # neck reads cat2_out from the BPU (1 hand-off); neck_relu's h is read by three BPU convs (1 more)
    assert neck.handoffs == 1 and relu.handoffs == 1 and res.precision.handoffs == 2
    r = precision_params(load_march(session.options.march))  # a march without a precision section
    assert r.fallback and r.cpu_flops_per_s == pytest.approx(1.8e9 * 8 * 1 * 0.3)  # X5 defaults: A55 rate x estimates
    lc = {x.name: x for x in res.layers}["neck"]
    macs = macs_of(session.graph.nodes["neck"], session.graph)
    assert lc.compute_us == pytest.approx(2 * macs / r.cpu_flops_per_s * 1e6)
    assert lc.overhead_us == pytest.approx(r.handoff_us)
    assert lc.total_us == pytest.approx(max(lc.compute_us, lc.memory_us) + r.handoff_us)
    # Off the BPU: the static estimate (what the compiler prints) loses the nodes' BPU cost, and the board
    # latency carries their CPU time instead: it moves by exactly the re-priced nodes' change.
    int8 = sum(n.int8_us for n in prices.values())
    assert res.total_us == pytest.approx(base.total_us - int8) and res.total_us < base.total_us
    assert res.board_us == pytest.approx(base.board_us + res.precision.delta_us)
    assert res.board_cpu_us == pytest.approx(base.board_cpu_us + res.precision.cpu_us)
    assert res.board_us > base.board_us + 2 * r.handoff_us - int8
    assert res.by_node()["neck_relu"] == pytest.approx(relu.total_us)  # the latency overlay shows it


def test_march_profile_section_and_fallback(tmp_path):
    bayes = load_march("bayes-e")
    assert not precision_params(bayes).fallback  # bayes-e.json carries its precision section
    doc = json.loads(open(bayes.path).read())
    assert doc["precision"]["cpu_ghz"]["value"] == DEFAULTS["cpu_ghz"]["value"]
    for k, p in doc["precision"].items():
        assert p.get("source") or p.get("estimate"), k
    del doc["precision"]
    if "fit" in doc:  # what was fitted of the section goes with it
        doc["fit"]["params"] = [k for k in doc["fit"]["params"] if not k.startswith("precision.")]
    own = tmp_path / "mine.json"
    own.write_text(json.dumps(doc))
    assert precision_params(load_march(str(own))).fallback



def test_precision_section_is_read_with_the_profile(tmp_path):
    """The section comes from the one march reader: a profile given as a document has it, and an
    edited file's new numbers are what the next load prices with."""
    from qtquant.base.errors import MarchError
    from qtquant.perf.march import profile_from_dict

    doc = json.loads(open(load_march("bayes-e").path).read())
    doc["precision"]["cpu_ghz"]["value"] = 3.0
    r = precision_params(profile_from_dict(doc))
    assert not r.fallback and r.cpu_flops_per_s == pytest.approx(3.0e9 * 8 * 1 * 0.3)
    own = tmp_path / "mine.json"
    own.write_text(json.dumps(doc))
    assert precision_params(load_march(str(own))).cpu_flops_per_s == pytest.approx(3.0e9 * 8 * 1 * 0.3)
    doc["precision"]["cpu_ghz"]["value"] = 1.0
    doc["description"] = "rewritten"  # another size, so the march cache sees a new file
    own.write_text(json.dumps(doc))
    assert precision_params(load_march(str(own))).cpu_flops_per_s == pytest.approx(1.0e9 * 8 * 1 * 0.3)
    doc["precision"]["cpu_ghz"] = {"value": 1.0}
    with pytest.raises(MarchError, match="precision"):
        precision_params(profile_from_dict(doc))

def test_perf_cli_shows_the_price(det_path, capsys):
    rc = main(["perf", det_path, "--calib-count", "2", "--keep-float", "neck", "--int16", "c0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "mixed precision: 1 int16 tensor(s), 1 kept in float" in out
    assert "CPU" in out and "assumptions:" in out
    rc = main(["perf", det_path, "--calib-count", "2", "--keep-float", "neck", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["after"]["precision"]["handoffs"] == 2
    assert {n["node"] for n in doc["after"]["precision"]["nodes"]} == {"neck", "neck_relu"}


def test_latency_delta_of_a_candidate(session):
    base = simulate_session(session).board_us
    d = latency_delta_us(session, ["h"], "float")
    assert session.precision == {}  # asking changes nothing
    session.set_precision(["h"], "float")
    assert simulate_session(session).board_us - base == pytest.approx(d) and d > 0
    assert latency_delta_us(session, ["h"], "int8") == pytest.approx(-d)


def test_a_softmax_on_the_cpu_pays_its_own_flops_and_the_runtime_conversions(tmp_path):
    """bayes-e prices a float Softmax at cpu_softmax_flops per element and every element crossing the
    BPU<->CPU boundary at the runtime's board_ns_per_element; another op gets cpu_elementwise_flops."""
    from builders import save, yolov8n
    from qtquant.app import Options, open_model

    s = open_model(save(yolov8n(size=64), tmp_path / "y.onnx"), None, Options(march="bayes-e"))
    s.run_calibration()
    g = s.graph
    sm = next(n for n in g.nodes.values() if n.op_type == "Softmax")
    from qtquant.quant.precision import resolve_name

    s.set_precision(resolve_name(g, sm.name), "float")
    res = simulate_session(s)
    lc = res.layer(sm.name)
    m = load_march("bayes-e")
    r = precision_params(m)
    assert r.cpu_softmax_flops != r.cpu_elementwise_flops and m.board_ns_per_element > 0
    elems = numel(shape_of(g, sm.outputs[0]))
    crossing = numel(shape_of(g, sm.inputs[0])) + elems  # in from the BPU, out to the dfl conv on the BPU
    assert lc.compute_us == pytest.approx(r.cpu_softmax_flops * elems / r.cpu_flops_per_s * 1e6
                                          + crossing * m.board_ns_per_element / 1000)
    assert "(de)quantised" in lc.note
    sig = next(n for n in g.nodes.values() if n.op_type == "Sigmoid")
    s.set_precision(resolve_name(g, sig.name), "float")
    lc = simulate_session(s).layer(sig.name)
    out = numel(shape_of(g, sig.outputs[0]))
    assert lc.compute_us >= r.cpu_elementwise_flops * out / r.cpu_flops_per_s * 1e6
    assert lc.compute_us < r.cpu_softmax_flops * out / r.cpu_flops_per_s * 1e6


def test_a_model_output_computed_in_float_is_not_dequantised_again(session):
    """A graph output whose node is kept in float leaves the CPU as float32: the board estimate converts
    nothing for it, where the int8 model's runtime dequantises every element of it."""
    from qtquant.perf.precision import FLOAT_OUTPUT

    g = session.graph
    out = next(t for t in g.outputs if g.producer(t) is not None and g.is_quantized(t))
    elems = numel(shape_of(g, out))
    session.set_options(march="bayes-e")  # a march with a board model: the runtime's conversions cost time
    march = load_march("bayes-e")
    base = simulate_session(session)
    assert [io.on_cpu for io in base.board_io if io.tensor == out] == [True]
    session.set_precision([out], "float")
    res = simulate_session(session)
    (io,) = [io for io in res.board_io if io.tensor == out]
    assert not io.on_cpu and io.what == FLOAT_OUTPUT and io.elems == elems
    # Every output of the node kept in float (a Split writes two of the model's outputs) leaves as float32.
    floats = [x for x in res.board_io if x.what == FLOAT_OUTPUT]
    assert {x.tensor for x in floats} == {t for t in g.outputs if g.producer(t).name == g.producer(out).name}
    saved = sum(x.elems for x in floats) * march.board_ns_per_element / 1000.0
    assert saved > 0
    assert res.board_cpu_us == pytest.approx(base.board_cpu_us + res.precision.cpu_us - saved)
    assert res.board_us == pytest.approx(base.board_us + res.precision.board_us)


def test_an_output_kept_in_float_is_not_called_an_int_output(session):
    """The board line counts the outputs left to the application, not those a float node computes."""
    from qtquant.perf.report import confidence_lines

    g = session.graph
    out = next(t for t in g.outputs if g.producer(t) is not None and g.is_quantized(t))
    session.set_options(march="bayes-e")
    session.set_precision([out], "float")
    res = simulate_session(session)
    assert not any(io.app_dequantises for io in res.board_io)
    assert "int output(s)" not in confidence_lines(res, load_march("bayes-e"))[1]
    session.set_options(int_outputs=(out,))
    assert "int output(s)" not in confidence_lines(simulate_session(session), load_march("bayes-e"))[1]
