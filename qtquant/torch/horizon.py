"""Module names for horizon_plugin_pytorch's per-module qconfigs, from a plan's ONNX names.

The module ``qtquant deploy --target x5-qat`` writes calls :func:`resolve_modules` when qtquant is
importable beside the training code: the names go through the resolver the FX and PT2E bridges
share (:mod:`._resolve`), on an FX trace of the float model, so a name maps the way
:func:`qtquant.torch.apply_plan` would map it.  A member made by an op rather than a module (a cat,
a split inside a forward) cannot take a module-name qconfig: it is listed with the reason.
"""

from __future__ import annotations

import torch

from ._resolve import Resolver, Unmappable

__all__ = ["resolve_modules"]


def _traced(model):
    if isinstance(model, torch.fx.GraphModule):
        return model, ""
    try:
        return torch.fx.symbolic_trace(model), ""
    except Exception as e:  # (tracing fails on data-dependent control flow; the names are still checked)
        return None, f"FX could not trace the model ({type(e).__name__}); names checked against its modules only"


def resolve_modules(model: torch.nn.Module, members: list[dict], aliases: dict | None = None
                    ) -> tuple[dict[str, str], list[dict]]:
    """(tensor -> module name, [{tensor, group, reason}]) for ``members`` (dicts with ``tensor``,
    ``producer``, ``producer_op``, ``group`` and optionally ``module``/``why``, as the generated
    module holds them); ``aliases``: tensor -> module name, taken as given when the model has it."""
    aliases = dict(aliases or {})
    gm, why_not = _traced(model)
    modules = dict(model.named_modules())
    res = Resolver(gm) if gm is not None else None
    mapped, unmapped = {}, []

    def miss(m, reason):
        unmapped.append({"tensor": m["tensor"], "group": m.get("group"), "reason": reason})

    for m in members:
        t = m["tensor"]
        if t in aliases:
            if aliases[t] in modules:
                mapped[t] = aliases[t]
            else:
                miss(m, f"alias {aliases[t]!r} names no module of the model")
            continue
        if res is None:
            name = m.get("module") or ""
            if name and name in modules:
                mapped[t] = name
            else:
                miss(m, m.get("why") or f"the model has no module {name!r}; {why_not}")
            continue
        if m.get("producer") is None:
            miss(m, m.get("why") or "no producer: a model input or a constant")
            continue
        if (m.get("producer_op") or "").lower() == "concat":
            # (the plugin's cat is a FloatFunctional, which FX traces through: never a module call here)
            miss(m, f"the output of cat {m['producer']}: give this call site a FloatFunctional of its own (one per "
                    "cat call site) and name it in ALIASES")
            continue
        try:
            site = res.resolve(t, m.get("producer"), m.get("producer_op"))
        except Unmappable as e:
            miss(m, str(e))
            continue
        node = site.node
        if node is not None and node.op == "call_module":
            mapped[t] = node.target
        else:
            label = getattr(node, "name", site.label)
            miss(m, f"made by {label} (an op inside a forward, not a module) via {site.via}: give it a module of "
                    "its own (one FloatFunctional per cat call site) and name it in ALIASES")
    return mapped, unmapped
