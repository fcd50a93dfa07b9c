"""Getting a PT2E model (``prepare_pt2e`` / ``prepare_qat_pt2e`` / ``convert_pt2e``) through the
TorchScript ONNX exporter, which :func:`qtquant.torch.export_onnx` uses for both bridges.

- A PT2E graph refuses ``.eval()``: torchao's ``move_exported_model_to_eval`` switches it.
- A prepared graph calls ONE observer module once per member of a shared group; each call gets
  its own attribute (same instance) so every QuantizeLinear is named after its own call.
- A converted graph holds ``quantized_decomposed`` quantize/dequantize ops, which the exporter
  has no symbolic for: each quantize -> dequantize pair (and each dequantize of a folded int8
  weight) becomes a :class:`FrozenFakeQuant` with the same qparams, i.e. a QDQ pair in ONNX.
- Producers are named after their module path (``/k_branches.0.conv/Conv``) when the resolver
  maps that name back to the same node, else after their FX node (``/cat_1/Concat``).
"""

from __future__ import annotations

import torch

from ..base.errors import BadInputError
from ._fakequant import FrozenFakeQuant, onnx_range
from ._resolve import Resolver, Unmappable, is_observer, op_name

__all__ = ["to_eval", "split_shared_calls", "qdq_to_fake_quant", "producer_label"]

_QUANT = {"quantize_per_tensor", "quantize_per_channel"}
_DEQUANT = {"dequantize_per_tensor", "dequantize_per_channel"}


def to_eval(model) -> None:
    from torchao.quantization.pt2e import move_exported_model_to_eval

    move_exported_model_to_eval(model)


def split_shared_calls(gm: torch.fx.GraphModule) -> None:
    """Give every call of a shared observer its own attribute path (the instance stays shared)."""
    mods = dict(gm.named_modules(remove_duplicate=False))
    seen: set[str] = set()
    for n in gm.graph.nodes:
        if n.op != "call_module" or not is_observer(mods.get(n.target)):
            continue
        if n.target in seen:
            k = 1
            while f"{n.target}_call{k}" in mods:
                k += 1
            new = f"{n.target}_call{k}"
            setattr(gm, new, mods[n.target])
            mods[new] = mods[n.target]
            n.target = new
        seen.add(n.target)
    gm.recompile()


def _value(gm, a):
    if isinstance(a, torch.fx.Node):
        if a.op != "get_attr":
            raise BadInputError(f"cannot export {a.name}: its qparams are computed at run time")
        return _attr(gm, a.target)
    return a


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _qparams(gm, n) -> tuple:
    """(scale, zero_point, qmin, qmax, axis) of a decomposed quantize/dequantize node."""
    args = list(n.args)
    if op_name(n.target).endswith("per_channel"):
        scale, zp, axis, qmin, qmax = (_value(gm, a) for a in args[1:6])
    else:
        (scale, zp, qmin, qmax), axis = (_value(gm, a) for a in args[1:5]), None
    return torch.as_tensor(scale), torch.as_tensor(zp), int(qmin), int(qmax), axis


def _frozen(gm, n) -> FrozenFakeQuant:
    scale, zp, qmin, qmax, axis = _qparams(gm, n)
    return FrozenFakeQuant(scale, zp, *onnx_range(qmin, qmax), axis)


def qdq_to_fake_quant(gm: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    """Replace decomposed q/dq ops by fake-quant modules, in place; returns module name -> the
    node whose output it quantizes (get_attr for weights)."""
    graph, made, k = gm.graph, {}, 0

    def add(fq, before, src):
        nonlocal k
        while hasattr(gm, f"_qdq_{k}"):
            k += 1
        name = f"_qdq_{k}"
        gm.add_module(name, fq)
        with graph.inserting_before(before):
            new = graph.call_module(name, (src,))
        new.meta = dict(before.meta)
        made[name] = src
        return new

    for n in list(graph.nodes):
        if n.op != "call_function" or op_name(n.target) not in _QUANT:
            continue
        dqs = list(n.users)
        if not dqs or any(u.op != "call_function" or op_name(u.target) not in _DEQUANT for u in dqs):
            raise BadInputError(f"cannot export {n.name}: a quantized tensor leaves the graph without a dequantize")
        new = add(_frozen(gm, n), n, n.args[0])
        for u in dqs:
            u.replace_all_uses_with(new)
            graph.erase_node(u)
        graph.erase_node(n)
    for n in list(graph.nodes):  # what is left: dequantize of a weight folded to int8 by convert_pt2e
        if n.op != "call_function" or op_name(n.target) not in _DEQUANT:
            continue
        src = n.args[0]
        if not isinstance(src, torch.fx.Node) or src.op != "get_attr" or not isinstance(src.target, str):
            raise BadInputError(f"cannot export {n.name}: it dequantizes a computed tensor")
        with torch.no_grad():
            w = n.target(*[_value(gm, a) if isinstance(a, torch.fx.Node) else a for a in n.args], **n.kwargs)
        wname = f"{src.target.replace('.', '_')}_float"
        gm.register_buffer(wname, w.detach().clone())
        with graph.inserting_before(n):
            wnode = graph.get_attr(wname)
        new = add(_frozen(gm, n), n, wnode)
        n.replace_all_uses_with(new)
        graph.erase_node(n)
    graph.eliminate_dead_code()
    gm.recompile()
    return made


def producer_label(res: Resolver, node, onnx_op: str) -> str:
    """The name an exported producer gets: its module path when that maps back to ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    if path:
        try:
            if res.resolve(f"/{path}/{onnx_op}_output_0", f"/{path}/{onnx_op}", onnx_op).node is node:
                return path
        except Unmappable:
            pass
    return node.name
