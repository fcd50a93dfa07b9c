"""onnxruntime: ``TensorQuantOverrides`` (:mod:`qtquant.export.overrides`), with the precision map.

The overrides give every quantized tensor its scale (a group's members one scale).  An int16
choice is stated there too (``quant_type: QInt16`` at the int16 scale over the tensor's range); a
float choice cannot be (an override quantizes): those tensors are left out and their nodes listed
for ``quantize_static(nodes_to_exclude=...)`` in ``<model>.nodes_to_exclude.json``.
"""

from __future__ import annotations

import json

from ..export.overrides import overrides_dict
from ..base.fileio import atomic_write_text
from ..base.vocab import Precision, Scheme
from .facts import DeployFacts, Deployed, Note
from .header import Header

__all__ = ["notes", "write", "deploy_overrides"]


def notes(facts: DeployFacts) -> list[Note]:
    out = []
    if facts.scheme is not Scheme.SYMMETRIC_INT8:
        out += [Note(c.tensor, "int16 is written as QInt16 with zero point 0 (symmetric) under an asymmetric "
                               "scheme") for c in facts.of(Precision.INT16)]
    return out


def deploy_overrides(session, facts: DeployFacts) -> dict:
    ov = overrides_dict(session)
    for c in facts.choices:
        if c.precision is Precision.FLOAT:
            ov.pop(c.tensor, None)
        elif c.precision is Precision.INT16 and c.tensor in ov and c.scale16 is not None:
            ov[c.tensor] = [{"quant_type": "QInt16", "scale": c.scale16, "zero_point": 0}]
    return ov


def write(session, facts: DeployFacts, out, notes: list[Note]) -> Deployed:
    res = Deployed("ort", notes=notes)
    ov = deploy_overrides(session, facts)
    path = out / f"{facts.stem}.overrides.json"
    res.files.append(atomic_write_text(path, json.dumps(ov, indent=1, sort_keys=True) + "\n",
                                       inputs=[session.graph.path], what="overrides file"))
    exclude = sorted({n for c in facts.of(Precision.FLOAT) for n in c.nodes})
    ex_path = out / f"{facts.stem}.nodes_to_exclude.json"
    res.files.append(atomic_write_text(ex_path, json.dumps(exclude, indent=1) + "\n", inputs=[session.graph.path],
                                       what="nodes_to_exclude file"))
    from ..export.overrides import load_overrides

    back = load_overrides(path)
    res.checks.append(f"the overrides load back into quantize_static's types ({len(back)} tensors, "
                      f"{sum(1 for v in ov.values() if v[0]['quant_type'].endswith('16'))} int16); "
                      f"{len(exclude)} node(s) to exclude")
    head = Header(
        title="onnxruntime TensorQuantOverrides",
        does=["every quantized tensor's scale for onnxruntime's quantize_static, a group's members one scale",
              "int16 choices as QInt16 overrides; float choices as nodes to exclude"],
        use=["from qtquant.export.overrides import load_overrides",
             f"exclude = json.load(open('{ex_path.name}'))",
             f"quantize_static(MODEL, OUT, reader, nodes_to_exclude=exclude, "
             f"extra_options={{'TensorQuantOverrides': load_overrides('{path.name}')}})"],
        cannot=["quantize_static still places the Q/DQ pairs itself: tensors it does not quantize ignore their "
                "override", "int16 needs an onnxruntime with 16-bit QDQ (1.17 or later) and opset 21 Q/DQ"],
        checked=res.checks, notes=notes)
    res.files.append(head.write_readme(out, "ort", facts, [session.graph.path]))
    return res
