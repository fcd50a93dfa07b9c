"""The QDQ ONNX for hb_mapper's ``calibration_type: load`` (experimental: not yet run through hb_mapper).

Shaped like horizon_plugin_pytorch's QAT export as hb_mapper's docs describe what ``load`` takes:
opset 11, a ``QuantizeLinear``/``DequantizeLinear`` pair on each quantized activation with one
scalar float32 scale and an int8 zero point of 0.  The members of a group read one scale
initializer, so the group's one threshold is what hb_mapper loads.

What it leaves out, and why: weights stay float (the compiler quantizes weights per channel itself;
opset 11's DequantizeLinear has no per-channel axis); int16 tensors get no pair (an int16
QuantizeLinear needs opset 21: the YAML's node_info carries them); float choices get no pair.

Each tensor keeps its name: its producer writes ``<name>_float``, the pair writes ``<name>`` back,
so readers, outputs and value_info stay as they were.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..base.errors import BadInputError
from .facts import DeployFacts
from .opset11 import LOAD_OPSET, lower_to_11

__all__ = ["build_load_model", "check_load_model"]


def _ranks(graph) -> dict[str, int]:
    return {n: len(t.shape) for n, t in graph.tensors.items() if t.shape is not None}


def build_load_model(graph, facts: DeployFacts) -> tuple[onnx.ModelProto, int]:
    """(the opset-11 QDQ model, the number of Q/DQ pairs)."""
    skip = {c.tensor for c in facts.choices}
    m = lower_to_11(graph.model, _ranks(graph))
    g = m.graph
    scale_of = {t: s for t, s in facts.scales.items() if t not in skip}
    zp = "qtq_zero_point"
    g.initializer.append(numpy_helper.from_array(np.array(0, np.int8), zp))
    scale_init: dict[object, str] = {}

    def scale_name(t: str) -> str:
        grp = facts.group_of(t)
        key = ("g", grp.id) if grp is not None else ("t", t)
        if key not in scale_init:
            name = f"qtq_g{grp.id}_scale" if grp is not None else f"{t}_qtq_scale"
            g.initializer.append(numpy_helper.from_array(np.array(scale_of[t], np.float32), name))
            scale_init[key] = name
        return scale_init[key]

    inputs = {i.name for i in g.input}
    made = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    after: dict[int, list] = {}
    head: list[onnx.NodeProto] = []
    for t in scale_of:
        if t not in made and t not in inputs:
            continue  # (a constant: no activation pair)
        s = scale_name(t)
        if t in made:
            k = made[t]
            src = f"{t}_float"
            node = g.node[k]
            node.output[list(node.output).index(t)] = src
            where = after.setdefault(k, [])
            feed = t
        else:  # a model input: the pair follows it and its readers read the pair
            src, where, feed = t, head, f"{t}_qtq_dq"
            for n in g.node:
                for i, x in enumerate(n.input):
                    if x == t:
                        n.input[i] = feed
        q = f"{t}_qtq_q"
        where.append(helper.make_node("QuantizeLinear", [src, s, zp], [q], f"{t}_QuantizeLinear"))
        where.append(helper.make_node("DequantizeLinear", [q, s, zp], [feed], f"{t}_DequantizeLinear"))
    nodes = list(head)
    for k, n in enumerate(g.node):
        nodes.append(n)
        nodes += after.get(k, [])
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]  # (shape inference fills them again; stale ones would only mislead)
    m.metadata_props.add(key="qtquant_deploy", value="x5-ptq calibration_type: load (experimental)")
    return m, sum(1 for n in nodes if n.op_type == "QuantizeLinear")


def check_load_model(model: onnx.ModelProto, feeds: dict | None = None) -> list[str]:
    """What :func:`build_load_model`'s file is checked for here, as sentences; a failure raises
    BadInputError naming it: onnx.checker at opset 11, scalar scales and int8 zero points of 0,
    and one onnxruntime run."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # (onnx raises several types; any is the same finding)
        raise BadInputError(f"the load QDQ model fails onnx.checker: {str(e).splitlines()[0][:200]}") from None
    ops = {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")}
    if ops != {LOAD_OPSET}:
        raise BadInputError(f"the load QDQ model is at opset {ops}, not {LOAD_OPSET}")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    pairs = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    for n in pairs:
        s, z = inits.get(n.input[1]), inits.get(n.input[2])
        if s is None or s.shape != () or s.dtype != np.float32 or z is None or z.shape != () \
                or z.dtype != np.int8 or int(z) != 0:
            raise BadInputError(f"{n.name}: scale and zero point should be scalar float32 and int8 0")
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    if feeds is None:
        feeds = {}
        for i in sess.get_inputs():
            if any(not isinstance(d, int) for d in i.shape):
                raise BadInputError(f"input {i.name} has a dynamic shape {i.shape}: give --input-shape")
            feeds[i.name] = np.random.default_rng(0).random(i.shape, dtype=np.float32)
    outs = sess.run(None, feeds)
    bad = [o.name for o, v in zip(sess.get_outputs(), outs) if not np.all(np.isfinite(v))]
    if bad:
        raise BadInputError(f"the load QDQ model gives non-finite values on {bad[0]}")
    return [f"onnx.checker (full) passes at opset {LOAD_OPSET}",
            f"{len(pairs) // 2} Q/DQ pairs, each with a scalar float32 scale and an int8 zero point of 0",
            f"onnxruntime runs it on a random input ({len(outs)} output(s), all finite)"]
