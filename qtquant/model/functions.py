"""ONNX local functions inlined at load, keeping where each node came from.

A call of a local function is one opaque node: nothing inside could be calibrated, grouped
or drawn.  Inlined here (recursively), each node of a function body is named
``/<call>/<inner call>/<name>`` and carries the call path as the node metadata
``qtquant.scope``, which the module hierarchy (:mod:`qtquant.app.scene.hierarchy`) reads:
one block per call.  Tensors inside a body get the same prefix, so two calls never clash.
"""

from __future__ import annotations

import copy

import onnx

__all__ = ["inline_local_functions", "SCOPE_KEY"]

SCOPE_KEY = "qtquant.scope"


def _attr_for(ref: onnx.AttributeProto, call: onnx.NodeProto, fn: onnx.FunctionProto) -> onnx.AttributeProto | None:
    """The value a ``ref_attr_name`` attribute takes at this call (None: not given, no default)."""
    for a in call.attribute:
        if a.name == ref.ref_attr_name:
            out: onnx.AttributeProto = copy.deepcopy(a)
            out.name = ref.name
            return out
    for a in fn.attribute_proto:
        if a.name == ref.ref_attr_name:
            out = copy.deepcopy(a)
            out.name = ref.name
            return out
    return None


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every call of a local function replaced by the function's body (in place)."""
    funcs = {(f.domain, f.name): f for f in model.functions}
    if not funcs:
        return model
    counter = [0]
    out: list[onnx.NodeProto] = []

    def inline(call: onnx.NodeProto, scope: list[str]) -> None:
        fn = funcs[(call.domain, call.op_type)]
        if not call.name:
            counter[0] += 1
            call.name = f"{fn.name}_{counter[0]}"
        path = scope + [call.name.strip("/").replace("/", "_")]
        prefix = "/" + "/".join(path)
        names: dict[str, str] = {}
        for formal, actual in zip(fn.input, call.input):
            names[formal] = actual
        for formal, actual in zip(fn.output, call.output):
            names[formal] = actual

        def rename(t: str) -> str:
            if not t:
                return t
            if t not in names:
                names[t] = f"{prefix}/{t}"
            return names[t]

        for k, n in enumerate(fn.node):
            nn = copy.deepcopy(n)
            del nn.input[:]
            nn.input.extend(rename(t) for t in n.input)
            del nn.output[:]
            nn.output.extend(rename(t) for t in n.output)
            nn.name = f"{prefix}/{n.name or f'{n.op_type}_{k}'}"
            attrs = []
            for a in nn.attribute:
                if a.ref_attr_name:
                    a = _attr_for(a, call, fn)
                if a is not None:
                    attrs.append(a)
            del nn.attribute[:]
            nn.attribute.extend(attrs)
            if (nn.domain, nn.op_type) in funcs:
                inline(nn, path)
                continue
            for p in list(nn.metadata_props):
                if p.key == SCOPE_KEY:
                    nn.metadata_props.remove(p)
            nn.metadata_props.add(key=SCOPE_KEY, value="/".join(path))
            out.append(nn)

    for n in model.graph.node:
        if (n.domain, n.op_type) in funcs:
            inline(copy.deepcopy(n), [])
        else:
            out.append(n)
    have = {o.domain for o in model.opset_import}
    for f in model.functions:  # the bodies' domains, now used by the graph itself
        for o in f.opset_import:
            if o.domain not in have:
                model.opset_import.append(copy.deepcopy(o))
                have.add(o.domain)
    del model.graph.node[:]
    model.graph.node.extend(out)
    used = {(n.domain, n.op_type) for n in out}
    keep = [f for f in model.functions if (f.domain, f.name) in used]
    del model.functions[:]
    model.functions.extend(keep)
    names = {o.domain for o in model.opset_import}
    domains = {n.domain for n in out} | {f.domain for f in keep}
    for o in [o for o in model.opset_import if o.domain not in domains and o.domain not in ("", "ai.onnx")]:
        if o.domain in names and any(f.domain == o.domain for f in funcs.values()):
            model.opset_import.remove(o)
    return model
