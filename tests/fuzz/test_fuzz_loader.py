"""Issue 8: fuzzing the ONNX loader (``qtquant.model.graph.load_graph``, ``qtquant.app.open_model``).

Every case must end in success or in a QtQuantError with a one-line message: never
another exception type, a hang or an interpreter crash.  Cases run in the worker
process of ``test_fuzz_worker`` so a crash inside onnx/onnxruntime C++ fails one test
instead of killing pytest.

Three generators:
- *bytes*: random byte mutations and truncations of real serialized models;
- *graphs*: hostile graphs built from scratch (cycles, dangling inputs, duplicate names,
  unknown ops and domains, opsets out of range, zero/negative/huge dims, non-float
  inputs, bad attributes, missing or escaping external data);
- *edits*: one to three semantic edits of valid models, which get past the first
  checks and exercise shape inference, QDQ import, calibration and the report.

``QTQUANT_FUZZ_EXAMPLES=5000 pytest tests/fuzz/test_fuzz_loader.py -s`` runs a long,
randomized campaign and prints the number of cases tried per target.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from builders import branchy_concat_model
from test_fuzz_worker import fuzz_settings, report, run_and_report, worker

T = TensorProto

# -- seed models ----------------------------------------------------------------------------


def qdq_seed() -> onnx.ModelProto:
    """A hand-built QDQ model: x → Q/DQ → two Convs with int8 weights → Q/DQ → Concat."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.array(s, np.float32), n) for n, s in
             [("s_x", 0.01), ("s_a", 0.05), ("s_b", 0.2), ("s_c", 0.2)]]
    inits.append(numpy_helper.from_array(np.array(0, np.int8), "zp"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "zp"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "s_x", "zp"], ["xd"], name="dqx")]
    for b, s in (("a", "s_a"), ("b", "s_b")):
        inits.append(numpy_helper.from_array(rng.integers(-127, 127, (4, 3, 3, 3)).astype(np.int8), f"w{b}"))
        inits.append(numpy_helper.from_array(np.full(4, 0.01, np.float32), f"ws{b}"))
        inits.append(numpy_helper.from_array(np.zeros(4, np.int8), f"wz{b}"))
        nodes += [helper.make_node("DequantizeLinear", [f"w{b}", f"ws{b}", f"wz{b}"], [f"w{b}d"], axis=0),
                  helper.make_node("Conv", ["xd", f"w{b}d"], [f"c{b}"], name=f"conv{b}", pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"c{b}", s, "zp"], [f"c{b}q"]),
                  helper.make_node("DequantizeLinear", [f"c{b}q", s, "zp"], [f"c{b}d"])]
    nodes += [helper.make_node("Concat", ["cad", "cbd"], ["cat"], name="cat", axis=1),
              helper.make_node("QuantizeLinear", ["cat", "s_c", "zp"], ["catq"]),
              helper.make_node("DequantizeLinear", ["catq", "s_c", "zp"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def shape_seed() -> onnx.ModelProto:
    """Dynamic input, a Shape/Gather/Concat/Reshape subgraph and a MatMul."""
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    ax = numpy_helper.from_array(np.array([0], np.int64), "ax")
    m1 = numpy_helper.from_array(np.array([-1], np.int64), "m1")
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "ax"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "m1"], ["newshape"], axis=0),
             helper.make_node("Reshape", ["x", "newshape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["mm"], name="mm"),
             helper.make_node("Sigmoid", ["mm"], ["sg"]),
             helper.make_node("Concat", ["mm", "sg"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "shp", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], [w, ax, m1])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def external_seed() -> tuple[onnx.ModelProto, bytes]:
    """branchy_concat_model with every initializer in one external file ``w.bin``."""
    m = branchy_concat_model(shape=(1, 3, 8, 8))
    blob = b""
    for t in m.graph.initializer:
        raw = numpy_helper.to_array(t).tobytes()
        off = len(blob)
        blob += raw
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = T.EXTERNAL
        for k, v in (("location", "w.bin"), ("offset", str(off)), ("length", str(len(raw)))):
            e = t.external_data.add()
            e.key, e.value = k, v
    return m, blob


SEEDS = {
    "branchy": (branchy_concat_model(shape=(1, 3, 8, 8), chain=True), {}, None),
    "dynamic": (branchy_concat_model(shape=(1, 3, 8, 8), dynamic=True), {}, {"x": [1, 3, 8, 8]}),
    "qdq": (qdq_seed(), {}, None),
    "shape": (shape_seed(), {}, {"x": [2, 2, 4]}),
}
_ext_model, _ext_blob = external_seed()
SEEDS["external"] = (_ext_model, {"w.bin": _ext_blob}, None)
SEED_BYTES = {k: m.SerializeToString() for k, (m, _, _) in SEEDS.items()}


def run_case(target: str, model_bytes: bytes, extra=None, shapes=None, label=None, **args):
    files = {"model.onnx": model_bytes}
    files.update(extra or {})
    if shapes:
        args["shapes"] = shapes
    return worker().run(target, files, args, label=label or target).check()


def test_seeds_load():
    """The seeds themselves are valid: the fuzzers start from models that work."""
    for name, (m, extra, shapes) in SEEDS.items():
        o = run_case("analyze", SEED_BYTES[name], extra, shapes, label="_seeds")
        assert o.status == "ok", (name, o.msg)
        assert o.value["concats"] >= 1, name


# -- generator 1: byte mutations ------------------------------------------------------------
@st.composite
def mutated_bytes(draw):
    name = draw(st.sampled_from(sorted(SEEDS)))
    data = bytearray(SEED_BYTES[name])
    kind = draw(st.sampled_from(["flip", "flip", "splice", "truncate", "insert", "delete", "zero"]))
    n = len(data)
    if kind == "truncate":
        data = data[: draw(st.integers(0, n - 1))]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, n - 1))
            data[i] = draw(st.integers(0, 255))
    elif kind == "insert":
        i = draw(st.integers(0, n))
        data[i:i] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "delete":
        i = draw(st.integers(0, n - 1))
        del data[i: i + draw(st.integers(1, 32))]
    elif kind == "zero":
        i = draw(st.integers(0, n - 1))
        data[i: i + 8] = bytes(len(data[i: i + 8]))
    else:  # splice in a chunk of another seed: valid-looking protobuf fragments
        other = SEED_BYTES[draw(st.sampled_from(sorted(SEEDS)))]
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, len(other) - 1))
        data[i: i + draw(st.integers(1, 64))] = other[j: j + draw(st.integers(1, 64))]
    return name, bytes(data), SEEDS[name][1], SEEDS[name][2]


@pytest.mark.parametrize("target", ["load_graph", "open_model"])
def test_fuzz_mutated_bytes(target):
    label = f"bytes/{target}"

    @fuzz_settings(150)
    @given(mutated_bytes())
    def check(case):
        name, data, extra, shapes = case
        run_case(target, data, extra, shapes, label=label)

    t = run_and_report(check, label)
    assert t.bad == 0 and t.cases >= 1


def test_truncated_at_every_length():
    """Every prefix length of a small model (strided): truncated downloads, full disks."""
    data = SEED_BYTES["qdq"]
    step = max(1, len(data) // 150)
    for n in list(range(0, len(data), step)) + [len(data) - 1]:
        run_case("open_model", data[:n], label="truncate/open_model")
    t = report("truncate/open_model")
    assert t.bad == 0 and t.cases > 100


# -- generator 2: hostile graphs built from scratch ---------------------------------------------
ELEM = [T.FLOAT] * 6 + [T.FLOAT16, T.DOUBLE, T.BFLOAT16, T.INT64, T.INT32, T.INT8, T.UINT8, T.BOOL,
                        T.STRING, T.COMPLEX64, 0, 1000]
DIM = st.one_of(st.sampled_from([1, 1, 2, 3, 4, 8]), st.sampled_from([0, -1, 2**31 - 1, 2**40, 2**62]),
                st.none())
OPS = {"Conv": (2, 3), "Relu": (1, 1), "Concat": (1, 4), "Add": (2, 2), "Mul": (2, 2), "MatMul": (2, 2),
       "Gemm": (2, 3), "Reshape": (2, 2), "MaxPool": (1, 1), "AveragePool": (1, 1), "Identity": (1, 1),
       "Transpose": (1, 1), "Sigmoid": (1, 1), "Softmax": (1, 1), "Resize": (1, 4), "Split": (1, 2),
       "Gather": (2, 2), "Shape": (1, 1), "Cast": (1, 1), "Slice": (3, 5), "Pad": (1, 3), "Clip": (1, 3),
       "Flatten": (1, 1), "Unsqueeze": (1, 2), "GlobalAveragePool": (1, 1), "QuantizeLinear": (2, 3),
       "DequantizeLinear": (2, 3), "ConvTranspose": (2, 3), "Constant": (0, 0), "If": (1, 1),
       "NotARealOp": (0, 3), "com.x:Custom": (1, 2)}
ATTRS = {
    "axis": st.integers(-6, 6) | st.sampled_from([2**40, -(2**40)]),
    "kernel_shape": st.lists(st.integers(-1, 5), max_size=3),
    "pads": st.lists(st.integers(-2, 3), max_size=6),
    "strides": st.lists(st.integers(-1, 3), max_size=3),
    "dilations": st.lists(st.integers(0, 3), max_size=3),
    "group": st.integers(-1, 4),
    "perm": st.lists(st.integers(-1, 4), max_size=4),
    "to": st.sampled_from(ELEM),
    "mode": st.sampled_from(["nearest", "linear", "constant", "bogus", ""]),
    "transB": st.integers(0, 2),
    "split": st.lists(st.integers(-1, 4), max_size=3),
    "weird": st.floats(allow_nan=True) | st.binary(max_size=8) | st.integers(),
}
EXT_LOCATIONS = ["w.bin", "w.bin", "missing.bin", "../escape.bin", "../../../../etc/passwd", "/etc/passwd",
                 "sub/../../x.bin", "", ".", "sub", "w.bin\x00.txt", "C:\\x.bin", "~/x.bin"]


def _vi(draw, name):
    et = draw(st.sampled_from(ELEM))
    shape = draw(st.none() | st.lists(DIM, max_size=5))
    if shape is not None:
        shape = [d if d is not None else "N" for d in shape]
    return helper.make_tensor_value_info(name, et, shape)


def _tensor(draw, name, files):
    et = draw(st.sampled_from([T.FLOAT, T.FLOAT, T.INT64, T.INT8, T.FLOAT16]))
    dims = draw(st.lists(st.integers(0, 4), max_size=4))
    count = int(np.prod(dims)) if dims else 1
    dtype = helper.tensor_dtype_to_np_dtype(et)
    arr = np.arange(count).astype(dtype).reshape(dims) if dims else np.array(1, dtype)
    t = numpy_helper.from_array(arr, name)
    how = draw(st.sampled_from(["ok", "ok", "ok", "ok", "short", "dims", "external"]))
    if how == "short":  # raw_data of the wrong length
        t.raw_data = t.raw_data[: draw(st.integers(0, max(0, len(t.raw_data) - 1)))] + b"\x01"
    elif how == "dims":
        t.dims.append(draw(st.sampled_from([0, -3, 2**40, 7])))
    elif how == "external":
        raw = t.raw_data
        t.ClearField("raw_data")
        t.data_location = T.EXTERNAL
        loc = draw(st.sampled_from(EXT_LOCATIONS))
        off = draw(st.sampled_from([0, 0, 3, 10**6, -1]))
        length = draw(st.sampled_from([len(raw), len(raw), 0, len(raw) + 5, 10**12, -2]))
        for k, v in (("location", loc), ("offset", str(off)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        if draw(st.booleans()):
            files["w.bin"] = files.get("w.bin", b"") + raw + b"\x00" * 16
    return t


@st.composite
def hostile_graph(draw):
    files: dict[str, bytes] = {}
    n_in = draw(st.integers(0, 2))
    inputs = [_vi(draw, f"x{i}") for i in range(n_in)]
    if inputs and draw(st.booleans()):
        inputs[0] = helper.make_tensor_value_info("x0", T.FLOAT, [1, 3, 4, 4])
    inits = [_tensor(draw, draw(st.sampled_from([f"w{i}", f"w{i}", "x0", "w0"])), files)
             for i in range(draw(st.integers(0, 3)))]
    names = [i.name for i in inputs] + [t.name for t in inits]
    n_nodes = draw(st.integers(1, 8))
    future = [f"t{k}" for k in range(n_nodes)]
    nodes = []
    for k in range(n_nodes):
        op = draw(st.sampled_from(sorted(OPS)))
        lo, hi = OPS[op]
        domain = ""
        if ":" in op:
            domain, op = op.split(":")
        elif draw(st.integers(0, 9)) == 9:
            domain = draw(st.sampled_from(["com.microsoft", "ai.onnx", "evil.domain", "ai.onnx.ml"]))
        pool = names or ["ghost"]
        ins = []
        for _ in range(draw(st.integers(lo, hi))):
            r = draw(st.integers(0, 19))
            if r == 17:
                ins.append(draw(st.sampled_from(future)))  # forward reference: cycles, order
            elif r == 18:
                ins.append("dangling")
            elif r == 19:
                ins.append("")
            else:
                ins.append(draw(st.sampled_from(pool)))
        outs = [f"t{k}"]
        r = draw(st.integers(0, 29))
        if r == 29 and names:
            outs = [draw(st.sampled_from(names))]  # produced twice / shadows an input
        elif r == 28:
            outs = [f"t{k}", f"t{k}"]
        elif r == 27:
            outs = [""]
        elif r >= 20 and op in ("Split", "If"):
            outs = [f"t{k}", f"t{k}_b"]
        attrs = {}
        for a in draw(st.lists(st.sampled_from(sorted(ATTRS)), max_size=3, unique=True)):
            attrs[a] = draw(ATTRS[a])
        if op == "Constant":
            attrs = {"value": _tensor(draw, "c", files)}
        if op == "If" and draw(st.booleans()):
            sub = helper.make_graph([helper.make_node("Identity", [draw(st.sampled_from(pool))], ["so"])],
                                    "sub", [], [helper.make_tensor_value_info("so", T.FLOAT, None)])
            attrs = {"then_branch": sub, "else_branch": sub}
        node_name = draw(st.sampled_from([f"n{k}", f"n{k}", "", "n0", "dup"]))
        try:
            nodes.append(helper.make_node(op, ins, outs, name=node_name, domain=domain, **attrs))
        except Exception:  # helper refuses some values (e.g. NaN in weird ways): skip the attrs
            nodes.append(helper.make_node(op, ins, outs, name=node_name, domain=domain))
        names += [o for o in outs if o]
    out_names = draw(st.lists(st.sampled_from(names + ["ghost_out"]), min_size=1, max_size=2))
    if draw(st.integers(0, 19)) == 19:
        out_names = []
    outputs = [helper.make_tensor_value_info(n, draw(st.sampled_from(ELEM[:8])), None) for n in out_names]
    g = helper.make_graph(nodes, "hostile", inputs, outputs, inits)
    for n in draw(st.lists(st.sampled_from(names or ["ghost"]), max_size=2)):
        g.value_info.append(_vi(draw, n))
    good = st.sampled_from([11, 13, 17, 17, 19, 21, 23])
    bad = st.sampled_from([1, 9, 10, 24, 99, 0, -1, 2**40])
    opsets = [helper.make_opsetid("", draw(bad if draw(st.integers(0, 5)) == 5 else good))]
    if draw(st.integers(0, 4)) == 4:
        opsets = draw(st.sampled_from([opsets + [helper.make_opsetid("com.x", 1)],
                                       opsets + [helper.make_opsetid("com.microsoft", 1)],
                                       opsets + [helper.make_opsetid("", 7)], []]))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = draw(st.sampled_from([8, 8, 8, 7, 9, 10, 3, 0, 99]))
    shapes = None
    if inputs and draw(st.integers(0, 3)) == 0:
        shapes = {draw(st.sampled_from([inputs[0].name, "nope"])):
                  draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))}
    return m.SerializeToString(), files, shapes


@pytest.mark.parametrize("target", ["load_graph", "open_model"])
def test_fuzz_hostile_graphs(target):
    label = f"graphs/{target}"

    @fuzz_settings(200)
    @given(hostile_graph())
    def check(case):
        data, files, shapes = case
        run_case(target, data, files, shapes, label=label)

    t = run_and_report(check, label)
    assert t.bad == 0 and t.cases >= 1


# -- generator 3: semantic edits of valid models ------------------------------------------------
def _edit(draw, m: onnx.ModelProto, files: dict):
    g = m.graph
    kind = draw(st.sampled_from(["attr", "attr", "input", "rename", "dim", "elem", "op", "opset", "drop_init",
                                 "dup_node", "cycle", "output", "init_dtype", "del_node", "scale",
                                 "ext_loc", "value_info"]))
    nodes = list(g.node)
    node = nodes[draw(st.integers(0, len(nodes) - 1))] if nodes else None
    if kind == "attr" and node is not None:
        a = draw(st.sampled_from(sorted(ATTRS)))
        try:
            new = helper.make_attribute(a, draw(ATTRS[a]))
        except Exception:
            return
        keep = [x for x in node.attribute if x.name != a]
        del node.attribute[:]
        node.attribute.extend(keep + [new])
    elif kind == "input" and node is not None and node.input:
        k = draw(st.integers(0, len(node.input) - 1))
        pool = [i.name for i in g.input] + [t.name for t in g.initializer] + [o for n in nodes for o in n.output]
        node.input[k] = draw(st.sampled_from(pool + ["", "ghost"]))
    elif kind == "rename" and node is not None and node.output:
        node.output[0] = draw(st.sampled_from(["renamed", nodes[0].output[0], g.input[0].name if g.input else "x"]))
    elif kind == "dim" and g.input:
        dims = g.input[0].type.tensor_type.shape.dim
        if dims:
            d = dims[draw(st.integers(0, len(dims) - 1))]
            v = draw(st.sampled_from([0, -1, 2**31, 2**40, 5, None]))
            d.Clear()
            if v is None:
                d.dim_param = "Q"
            else:
                d.dim_value = v
        elif draw(st.booleans()):
            g.input[0].type.tensor_type.ClearField("shape")
    elif kind == "elem" and g.input:
        g.input[0].type.tensor_type.elem_type = draw(st.sampled_from(ELEM))
    elif kind == "op" and node is not None:
        node.op_type = draw(st.sampled_from(sorted(k.split(":")[-1] for k in OPS)))
    elif kind == "opset":
        m.opset_import[0].version = draw(st.sampled_from([1, 7, 10, 11, 12, 14, 18, 19, 21, 22, 23, 24, 30]))
    elif kind == "drop_init" and g.initializer:
        del g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
    elif kind == "dup_node" and node is not None:
        g.node.append(node)
    elif kind == "cycle" and len(nodes) > 1 and nodes[0].input:
        nodes[0].input[0] = nodes[-1].output[0]
    elif kind == "output":
        if draw(st.booleans()) and g.output:
            del g.output[:]
        else:
            g.output.append(helper.make_tensor_value_info(draw(st.sampled_from(["ghost", g.node[0].output[0]])),
                                                          T.FLOAT, None))
    elif kind == "init_dtype" and g.initializer:
        t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        t.data_type = draw(st.sampled_from([T.INT64, T.DOUBLE, T.INT8, T.STRING, 0, 77]))
    elif kind == "del_node" and node is not None:
        g.node.remove(node)
    elif kind == "scale" and g.initializer:  # QDQ scales/zero points: zero, negative, NaN, vectors
        t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        val = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), 1e-45, 1e38]))
        try:  # an earlier edit may have broken this tensor already
            arr = numpy_helper.to_array(t) if t.data_location != T.EXTERNAL else None
        except Exception:
            arr = None
        if arr is not None and arr.dtype.kind == "f":
            if draw(st.booleans()):
                arr = np.full((draw(st.integers(1, 3)),), val, arr.dtype)
            else:
                arr = np.full(arr.shape, val, arr.dtype)
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    elif kind == "ext_loc":
        for t in g.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = draw(st.sampled_from(EXT_LOCATIONS))
                elif e.key in ("offset", "length") and draw(st.integers(0, 3)) == 0:
                    e.value = draw(st.sampled_from(["-1", "99999999", "x", "0"]))
        if draw(st.booleans()):
            files.pop("w.bin", None)
        elif "w.bin" in files and draw(st.booleans()):
            files["w.bin"] = files["w.bin"][: draw(st.integers(0, len(files["w.bin"])))]
    elif kind == "value_info" and node is not None and node.output:
        g.value_info.append(helper.make_tensor_value_info(
            node.output[0], draw(st.sampled_from(ELEM)),
            draw(st.lists(st.sampled_from([1, 2, 0, 7, 2**40]), max_size=4))))


@st.composite
def edited_model(draw):
    name = draw(st.sampled_from(sorted(SEEDS)))
    base, files, shapes = SEEDS[name]
    m = onnx.ModelProto()
    m.CopyFrom(base)
    files = dict(files)
    for _ in range(draw(st.integers(1, 3))):
        _edit(draw, m, files)
    if shapes and draw(st.integers(0, 4)) == 0:
        shapes = {k: [draw(st.sampled_from([1, 2, 3, 8, 64])) for _ in v] for k, v in shapes.items()}
    return name, m.SerializeToString(), files, shapes


@pytest.mark.parametrize("target", ["open_model", "analyze"])
def test_fuzz_edited_models(target):
    """``analyze`` here is the whole pipeline: load, calibrate, perf, fidelity, JSON report."""
    label = f"edits/{target}"

    @fuzz_settings(150)
    @given(edited_model())
    def check(case):
        name, data, files, shapes = case
        run_case(target, data, files, shapes, label=label, full=True)

    t = run_and_report(check, label)
    assert t.bad == 0 and t.ok > 0 and t.errors
