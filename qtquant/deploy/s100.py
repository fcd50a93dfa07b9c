"""S100 / nash: the ``quant_config`` JSON ``hb_compile`` takes.

Only ``node_config`` is written: ``{NODE: {"qtype": "int16", "input0": "int16"}}`` (finer levels
win over ``model_config``/``op_config``/``subgraph_config``, which are left to the user).  The
documented qtypes are int8, int16 and float16: a float choice has no float32 there, so its nodes
are written as float16 and each is a listed note.  Scales have no place in this file: hb_compile
calibrates; the groups are not stated (a listed note says so when there are any).
"""

from __future__ import annotations

import json

from ..base.errors import BadInputError
from ..base.fileio import atomic_write_text
from ..quant.precision import RANK
from ..base.vocab import Precision
from .facts import DeployFacts, Deployed, Note
from .header import Header

__all__ = ["QTYPES", "notes", "write", "quant_config", "check_quant_config"]

QTYPES = ("int8", "int16", "float16")  # hb_compile's documented qtypes
_QTYPE = {Precision.INT16: "int16", Precision.FLOAT: "float16"}


def notes(facts: DeployFacts) -> list[Note]:
    out = [Note(c.tensor, f"float{'' if c.origin == 'user' else ' (' + c.origin + ')'}: hb_compile's quant_config "
                          f"has no float32 qtype; its node(s) "
                          f"{', '.join(c.nodes)} are written as float16, the nearest it has")
           for c in facts.of(Precision.FLOAT)]
    if facts.groups:
        out.append(Note(f"{len(facts.groups)} group(s)", "quant_config sets types, not scales: the groups are "
                                                         "not stated here (hb_compile calibrates each tensor)"))
    return out


def quant_config(facts: DeployFacts) -> dict:
    nodes: dict[str, dict[str, str]] = {}
    rank: dict[str, Precision] = {}
    for c in sorted(facts.choices, key=lambda c: RANK[c.precision]):
        q = _QTYPE[c.precision]
        for n in c.nodes:  # the producer and its fused chain compute in that type
            if n not in rank or RANK[c.precision] >= RANK[rank[n]]:
                nodes.setdefault(n, {})["qtype"] = q
                rank[n] = c.precision
        if c.precision is Precision.INT16:
            for n, i in c.readers:  # a reader takes the tensor as int16 on that input
                nodes.setdefault(n, {}).setdefault(f"input{i}", "int16")
    return {"node_config": nodes}


def check_quant_config(doc) -> None:
    """Only the documented structure and qtypes; BadInputError names the first thing that is not."""
    if not isinstance(doc, dict) or set(doc) - {"model_config", "op_config", "subgraph_config", "node_config"}:
        raise BadInputError("quant_config: unknown top-level keys")
    for node, cfg in doc.get("node_config", {}).items():
        for k, v in cfg.items():
            if not (k == "qtype" or (k.startswith("input") and k[5:].isdigit())):
                raise BadInputError(f"quant_config: node {node}: undocumented key {k!r}")
            if v not in QTYPES:
                raise BadInputError(f"quant_config: node {node}: {k} {v!r} is not one of {', '.join(QTYPES)}")


def write(session, facts: DeployFacts, out, notes: list[Note]) -> Deployed:
    res = Deployed("s100", notes=notes)
    doc = quant_config(facts)
    path = out / f"{facts.stem}.quant_config.json"
    res.files.append(atomic_write_text(path, json.dumps(doc, indent=2) + "\n", inputs=[session.graph.path],
                                       what="quant_config"))
    back = json.loads(path.read_text(encoding="utf-8"))
    check_quant_config(back)
    res.checks.append(f"the JSON parses back and uses only node_config with qtype/input<n> keys and the documented "
                      f"qtypes ({len(back['node_config'])} node(s))")
    head = Header(
        title="hb_compile quant_config (S100 / nash)",
        does=["sets the int16 and float choices per node: the producing node (and its fused chain) gets the "
              "qtype, each node reading an int16 tensor takes it as int16 on that input"],
        use=[f"hb_compile ... --quant-config {path.name}   # or in the YAML: quant_config: {path.name}",
             "check the node names against the compiler's optimized_float_model.onnx first"],
        cannot=["no scales: hb_compile calibrates; shared groups cannot be stated here",
                "no float32: a float choice becomes float16",
                "node names are the ONNX file's; the compiler renames nodes it fuses, and a name it does not find "
                "is not applied: compare with its optimized_float_model.onnx"],
        checked=res.checks, notes=notes)
    res.files.append(head.write_readme(out, "s100", facts, [session.graph.path]))
    return res
