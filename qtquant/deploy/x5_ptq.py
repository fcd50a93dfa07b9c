"""RDK X5 PTQ: the hb_mapper YAML fragment for the precision choices, and (experimental) the QDQ
ONNX for ``calibration_type: load`` that carries the groups' scales.

The YAML holds only documented keys and values (:data:`NODE_KEYS`, :data:`NODE_VALUES`):

    model_parameters:
      node_info:
        NODE: {ON: BPU, OutputType: int16}     # the producer of an int16 tensor (and its fused chain)
        READER: {ON: BPU, InputType1: int16}   # a node reading it, on that input
        SOFTMAX: {ON: BPU}                     # a Softmax priced on the BPU (X5 runs it on the CPU by default)
    calibration_parameters:
      run_on_cpu: 'n1;n2'                      # the nodes of float choices

hb_mapper's YAML has no per-tensor scale: the groups reach it only through the load model
(:mod:`.load_qdq`).
"""

from __future__ import annotations

import re

import yaml

from ..base.errors import BadInputError
from ..base.fileio import atomic_write_bytes, atomic_write_text
from ..quant.precision import RANK
from ..base.vocab import Precision
from .facts import DeployFacts, Deployed, Note
from .header import Header
from .load_qdq import build_load_model, check_load_model
from .opset11 import LowerError

__all__ = ["NODE_KEYS", "NODE_VALUES", "notes", "write", "yaml_fragment", "check_fragment"]

NODE_KEYS = re.compile(r"^(ON|InputType\d*|OutputType)$")
NODE_VALUES = {"ON": {"BPU", "CPU"}, "type": {"int8", "int16"}}


def notes(facts: DeployFacts) -> list[Note]:
    return []  # int16 and float both have a documented form; the groups go in the load model


def softmax_on_bpu(graph, facts: DeployFacts) -> list[str]:
    """The Softmax nodes qtquant prices on the X5's BPU (perf/placement.py: a 4-D input over its last
    axis, not kept in float), which hb_mapper runs on the CPU unless node_info puts them on the BPU."""
    from ..perf import load_march
    from ..perf.placement import cpu_placed

    placed = cpu_placed(graph, load_march("bayes-e"))
    cpu = {n for c in facts.of(Precision.FLOAT) for n in c.nodes}
    return sorted(n.name for n in graph.nodes.values()
                  if n.op_type == "Softmax" and n.name not in placed and n.name not in cpu
                  and any(graph.is_quantized(o) for o in n.outputs if o))


def yaml_fragment(facts: DeployFacts, bpu_softmax=()) -> dict:
    """``bpu_softmax``: the nodes of :func:`softmax_on_bpu`."""
    info: dict[str, dict[str, str]] = {n: {"ON": "BPU"} for n in bpu_softmax}
    cpu = {n for c in facts.of(Precision.FLOAT) for n in c.nodes}
    for c in sorted(facts.of(Precision.INT16), key=lambda c: RANK[c.precision]):
        for n in c.nodes:
            if n not in cpu:
                info.setdefault(n, {"ON": "BPU"})["OutputType"] = "int16"
        for n, i in c.readers:
            if n in cpu:
                continue  # (a CPU node reads float)
            info.setdefault(n, {"ON": "BPU"})[f"InputType{i}"] = "int16"
    doc: dict = {}
    if info:
        doc["model_parameters"] = {"node_info": info}
    if cpu:
        doc["calibration_parameters"] = {"run_on_cpu": ";".join(sorted(cpu))}
    return doc


def check_fragment(doc) -> None:
    """Only the documented keys and value forms; BadInputError names the first that is not."""
    if not isinstance(doc, dict) or set(doc) - {"model_parameters", "calibration_parameters"}:
        raise BadInputError("hb_mapper fragment: unknown top-level keys")
    mp, cp = doc.get("model_parameters", {}), doc.get("calibration_parameters", {})
    if set(mp) - {"node_info"} or set(cp) - {"run_on_cpu"}:
        raise BadInputError("hb_mapper fragment: keys other than node_info and run_on_cpu")
    for node, cfg in mp.get("node_info", {}).items():
        if not isinstance(cfg, dict):
            raise BadInputError(f"hb_mapper fragment: node_info {node} is not a mapping")
        for k, v in cfg.items():
            if not NODE_KEYS.match(k):
                raise BadInputError(f"hb_mapper fragment: node_info {node}: undocumented key {k!r}")
            if v not in NODE_VALUES["ON" if k == "ON" else "type"]:
                raise BadInputError(f"hb_mapper fragment: node_info {node}: {k} {v!r} is not documented")
    if "run_on_cpu" in cp and not isinstance(cp["run_on_cpu"], str):
        raise BadInputError("hb_mapper fragment: run_on_cpu should be one ';'-separated string")


def write(session, facts: DeployFacts, out, notes: list[Note]) -> Deployed:
    res = Deployed("x5-ptq", notes=list(notes))
    doc = yaml_fragment(facts, softmax_on_bpu(session.graph, facts))
    load_name = f"{facts.stem}.x5_load_qdq.onnx"
    model = None
    if session.quantized_file:  # (the load model is built from a float model: a QDQ file has its own pairs)
        res.notes.append(Note(f"{len(facts.groups)} group(s)", "the load model is made from a float model only, "
                                                             "and this is a QDQ file: the YAML cannot state scales"))
    else:
        try:
            model = build_load_model(session.graph, facts)[0]
        except LowerError as e:
            res.notes.append(Note(f"{len(facts.groups)} group(s)", f"the load model was not written ({e}): "
                                                                 "the YAML cannot state scales"))
    checks = res.checks
    head = Header(
        title="hb_mapper YAML fragment for RDK X5 PTQ (+ experimental QDQ model for calibration_type: load)",
        does=["model_parameters.node_info: each int16 tensor's producer (and fused chain) outputs int16, "
              "each node reading it takes it as int16 on that input (InputType<n>, n its input index)",
              "model_parameters.node_info: each Softmax that qtquant prices on the BPU (a 4-D input over its "
              "last axis) is put there (ON: BPU): hb_mapper runs Softmax on the CPU unless told",
              "calibration_parameters.run_on_cpu: the nodes of float choices",
              f"{load_name} (experimental): the float model at opset 11 with a Q/DQ pair per quantized "
              "activation, one scalar scale per tensor, zero point 0; a group's members read one scale"],
        use=["merge these keys into your hb_mapper config YAML (the rest of it unchanged), then:",
             "hb_mapper makertbin --config config.yaml --model-type onnx",
             f"load variant: model_parameters.onnx_model: {load_name} and calibration_parameters."
             "calibration_type: load",
             "after compiling: qtquant deploy MODEL [the same options] --readback hb_mapper_makertbin.log says which "
             "groups took effect"],
        cannot=["no per-tensor scale in the YAML: the groups reach hb_mapper only through the load model",
                "node names are the ONNX file's; hb_mapper renames nodes it fuses (check its optimized model)",
                "the load model is experimental: nobody has run it through hb_mapper yet; its weights are "
                "float and its int16 tensors have no Q/DQ (int16 QuantizeLinear needs opset 21)"],
        checked=checks, notes=res.notes)
    body = yaml.safe_dump(doc, sort_keys=True, default_flow_style=False) if doc else \
        "# (no int16 or float choices and no Softmax to put on the BPU: nothing to set)\n"
    back = yaml.safe_load(body) or {}
    check_fragment(back)
    if back != doc:
        raise BadInputError("the hb_mapper fragment did not parse back to what was written")  # (a bug)
    checks.append("the YAML parses back (PyYAML safe_load) to the same keys and values, all of them documented "
                  "ones (ON, InputType<n>, OutputType; int8/int16, BPU/CPU; run_on_cpu)")
    if model is not None:
        checks += check_load_model(model)
    text = head.comment(facts) + "\n" + body
    if (yaml.safe_load(text) or {}) != doc:
        raise BadInputError("the hb_mapper fragment with its header did not parse back")  # (a bug)
    path = out / f"{facts.stem}.x5_ptq.yaml"
    res.files.append(atomic_write_text(path, text, inputs=[session.graph.path], what="hb_mapper YAML"))
    if model is not None:
        res.files.append(atomic_write_bytes(out / load_name, model.SerializeToString(), inputs=[session.graph.path],
                                            what="load QDQ model"))
    res.files.append(head.write_readme(out, "x5-ptq", facts, [session.graph.path]))
    return res
