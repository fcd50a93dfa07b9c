"""Reading Horizon compile logs and model_info logs (qtquant.horizon.log / modelinfo), rendered by
tests/hblogs.py in the real format for the small models of tests/builders.py."""

from __future__ import annotations

import random

import pytest

from builders import branchy_concat_model
from hblogs import LogSpec, render_compile_log, render_model_info
from qtquant.errors import CompileLogError, QtQuantError
from qtquant.horizon.log import parse_compile_log, qmax, read_compile_log
from qtquant.horizon.match import match_compile_log
from qtquant.horizon.modelinfo import parse_model_info
from qtquant.graph import graph_from_model

MODEL = branchy_concat_model(chain=True)
LONG = "/model.22/cv3.0/cv3.0.1/conv/some_really/long_name_of/a_node/Conv"


def _long_model():
    m = branchy_concat_model(chain=True)
    conv1 = next(n for n in m.graph.node if n.name == "conv1")
    cat = next(n for n in m.graph.node if n.name == "cat")
    conv1.name, conv1.output[0] = LONG, LONG + "_output_0"
    cat.input[1] = LONG + "_output_0"
    return m


def log_bytes(model=MODEL, **kw) -> bytes:
    return render_compile_log(model, LogSpec(**kw)).encode()


def test_reads_rows_requantize_estimate_and_deps(tmp_path):
    p = tmp_path / "hb_mapper_makertbin.log"
    p.write_bytes(log_bytes(requantize=("pool0_out", "conv2_out"), thresholds={"x": 1.11671, "conv0_out": 35.5},
                            cosines={"cat": 0.93}, int16=("final_relu",), estimate=(252.26, 3964.1, 12651904)))
    log = read_compile_log(p)
    names = [n.name for n in log.nodes]
    assert names[0] == "HZ_PREPROCESS_FOR_x" and log.nodes[0].threshold == 127.0
    assert names[1:] == [n.name for n in MODEL.graph.node]
    conv0 = log.nodes[1]
    assert (conv0.on, conv0.subgraph, conv0.op_type, conv0.threshold, conv0.data_type) == \
        ("BPU", 0, "HzSQuantizedConv", 1.11671, "int8")
    assert next(n for n in log.nodes if n.name == "relu0").threshold == 35.5
    assert next(n for n in log.nodes if n.name == "cat").cosine == 0.93
    assert next(n for n in log.nodes if n.name == "final_relu").data_type == "int16"
    assert [(r.tensor, r.consumer) for r in log.requantized] == [("pool0_out", "cat"), ("conv2_out", "cat")]
    assert log.estimate.fps == 252.26 and log.estimate.latency_us == 3964.1 and log.estimate.ddr_bytes == 12651904
    d = log.deps
    assert (d.march, d.input_names, d.input_shapes) == ("bayes-e", ("x",), ((1, 3, 16, 16),))
    assert d.calibration_type == "default" and d.optimization == ("set_Softmax_input_int8", "set_Softmax_output_int8")
    assert (d.optimize_level, d.per_channel, d.hb_mapper_version, d.hbdk_version) == ("O3", False, "1.24.3", "3.49.15")
    assert [o.name for o in log.outputs] == ["y"] and log.outputs[0].cosine == 0.999551
    assert (qmax("int8"), qmax("int16"), qmax("float")) == (127, 32767, None)


def test_cut_names_and_cpu_rows():
    log = parse_compile_log(log_bytes(_long_model(), requantize=(LONG + "_output_0",), cpu=("final_relu",)))
    cut = [n for n in log.nodes if n.cut]
    assert len(cut) == 1 and cut[0].name == "..." + LONG[-47:] and len(cut[0].name) == 50
    assert cut[0].suffix == LONG[-47:]
    r = log.requantized[0]
    assert r.cut and (LONG + "_output_0").endswith(r.tensor)
    cpu = next(n for n in log.nodes if n.name == "final_relu")
    assert (cpu.on, cpu.subgraph, cpu.threshold, cpu.data_type) == ("CPU", None, None, "float")


def test_model_info():
    info = parse_model_info(render_model_info(MODEL).encode(), "info.txt")
    assert info.model_name.endswith("_bayese")
    assert [t.name for t in info.inputs] == ["x"] and info.inputs[0].source == "HB_DNN_INPUT_FROM_PYRAMID"
    out = info.outputs[0]
    assert (out.name, out.valid_shape, out.layout, out.tensor_type, out.quanti_type, out.stride) == \
        ("y", (1, 4, 4, 8), "HB_DNN_LAYOUT_NHWC", "HB_DNN_TENSOR_TYPE_F32", "NONE", (512, 128, 32, 4))


def _cut_after(text: str, marker: str) -> bytes:
    return text[:text.index(marker) + len(marker) + 3].encode()


BAD = {
    "empty": lambda t: b"",
    "blank": lambda t: b"\n \n",
    "binary": lambda t: bytes(range(256)) * 4,
    "latin1": lambda t: t.encode().replace(b"Node", b"N\xe9de", 1),
    "no table": lambda t: "\n".join(ln for ln in t.splitlines() if "print_info_dict" not in ln).encode(),
    "truncated in table": lambda t: _cut_after(t, "HzSQuantizedConv"),
    "truncated before deps": lambda t: t[:t.index("model_deps_info")].encode(),
    "garbled header": lambda t: t.replace("Cosine Similarity  Threshold", "Cosine  Thresh", 1).encode(),
    "garbled row": lambda t: t.replace("id(0)", "id(zero)", 1).encode(),
    "short row": lambda t: t.replace("     HzSQuantizedConv", "", 1).encode(),
    "bad number": lambda t: t.replace("0.990000", "0.99x", 1).encode(),
    "nan threshold": lambda t: t.replace(" 127.0 ", " nan   ", 1).encode(),
    "deps call": lambda t: t.replace("model_deps_info: {", "model_deps_info: __import__('os').system('false') or {",
                                     1).encode(),
    "deps not dict": lambda t: t.replace("model_deps_info: {", "model_deps_info: [{", 1).replace(
        "'compile_mode': 'latency'}", "'compile_mode': 'latency'}]", 1).encode(),
    "deps bad shape": lambda t: t.replace("'1x3x16x16'", "'1x3x16xW'", 1).encode(),
    "deps deep": lambda t: t.replace("model_deps_info: {", "model_deps_info: " + "[" * 100000, 1).encode(),
    "no estimate": lambda t: t.replace("FPS=", "fps=", 1).encode(),
    "two tables": lambda t: t.replace("The quantized model output:", "The main quantized node information:", 1)
    .encode(),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_logs_are_one_line_errors(case):
    text = render_compile_log(MODEL, LogSpec(requantize=("conv2_out",)))
    with pytest.raises(CompileLogError) as e:
        parse_compile_log(BAD[case](text), "bad.log")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("bad.log") and len(msg) < 300


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(CompileLogError, match="cannot read"):
        read_compile_log(tmp_path / "nope.log")


def test_model_info_bad():
    text = render_model_info(MODEL)
    for data in (b"", text[: text.index("tensor layout")].encode(), text.replace("(512,128,32,4,)", "(a,b)").encode(),
                 text.replace("[model name]", "[name]").encode()):
        with pytest.raises(CompileLogError):
            parse_model_info(data, "info.txt")


# -- fuzz: seeded mutations of real-format logs through every reader -------------------------------
def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(7)
        i = rng.randrange(len(b) + 1)
        if kind == 0 and b:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 1:  # truncate
            del b[i:]
        elif kind == 2:  # delete a span
            del b[i:i + rng.randint(1, 400)]
        elif kind == 3 and b:  # duplicate a span
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 400)]
        elif kind == 4:  # insert hostile text
            b[i:i] = rng.choice([b"--", b"...", b"nan", b"1e999", b"-1", b"id(", b"\n", b"  ", b"\x00", b"{'a': (",
                                 b"model_deps_info: ", b"FPS=1, latency = 1 us, DDR = 1 bytes", b"\xff\xfe",
                                 b"_calibrated_Requantize", b"CPU", b"int16"])
        elif kind == 5:  # swap two lines
            lines = bytes(b).split(b"\n")
            x, y = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[x], lines[y] = lines[y], lines[x]
            b = bytearray(b"\n".join(lines))
        elif kind == 6:  # drop a line
            lines = bytes(b).split(b"\n")
            del lines[rng.randrange(len(lines))]
            b = bytearray(b"\n".join(lines))
    return bytes(b)


FUZZ_CASES = 2000


def test_fuzz_readers_one_line_or_success():
    rng = random.Random(49)
    seeds = [log_bytes(requantize=("conv2_out", "pool0_out")),
             log_bytes(_long_model(), requantize=(LONG + "_output_0",)), render_model_info(MODEL).encode()]
    graphs = (graph_from_model(MODEL), graph_from_model(_long_model()))
    ok = errors = 0
    for _ in range(FUZZ_CASES):
        data = _mutate(rng, rng.choice(seeds))
        for reader in (parse_compile_log, parse_model_info, "match"):
            try:
                if reader == "match":  # the readers' output placed on both graphs
                    log = parse_compile_log(data, "fuzz.log")
                    for g in graphs:
                        match_compile_log(g, log, any_shape=rng.random() < 0.5)
                else:
                    reader(data, "fuzz.log")
                ok += 1
            except QtQuantError as e:
                assert "\n" not in str(e) and str(e), repr(e)
                errors += 1
    assert ok + errors == 3 * FUZZ_CASES and ok > 50 and errors > 1000
