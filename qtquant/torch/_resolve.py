"""Mapping plan names (ONNX tensor/node names) to the torch model that produced them.

ONNX node names written by ``torch.onnx.export`` are the module call scopes joined by
``/`` (``/k_branches.0/conv/Conv`` for module ``k_branches.0.conv``); a scope level keeps
only the unqualified module name, so containers that are indexed rather than called
(ModuleDict) drop out of the path.  :func:`qtquant.torch.export_onnx` names every
observed producer after its FX node or module, so plans made from its files map exactly.

Resolution order for one member (first hit wins; ambiguity is reported, never guessed):
alias given by the caller, ``module`` hint in the plan, exact module call site, exact FX
node name, an op traced inside the named module (FX ``nn_module_stack``), a module fused
into its producer (conv+bn+relu), the nearest called ancestor, then a partial module path
(containers missing from the scope).

The same rules serve FX (``prepare_qat_fx``) and PT2E (``torch.export`` graphs, whose nodes are
aten ops: ``aten.conv2d.default`` is matched as ``conv2d``) -- one resolver for both bridges.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

import torch

from ..deploy.scopes import split_scope

__all__ = ["Unmappable", "Site", "Resolver", "is_observer", "is_qdq_node", "is_pt2e", "op_name",
           "follow_pattern", "settled", "PATTERN_TAILS", "CAT_TARGETS"]

CAT_TARGETS = {torch.cat, torch.concat, torch.ops.aten.cat.default}
if hasattr(torch, "concatenate"):
    CAT_TARGETS.add(torch.concatenate)

# Where observer / fake-quant base classes live: torch.ao (FX and eager, deprecated) and torchao
# (PT2E).  Looked up in sys.modules, never imported: a model can only hold an instance of a class
# whose module is loaded, and importing torch.ao.quantization here would tie the PT2E path to the
# deprecated package.
_OBSERVER_BASES = (
    ("torch.ao.quantization.observer", "ObserverBase"),
    ("torch.ao.quantization.fake_quantize", "FakeQuantizeBase"),
    ("torchao.quantization.pt2e.observer", "ObserverBase"),
    ("torchao.quantization.pt2e.fake_quantize", "FakeQuantizeBase"),
)
# the decomposed quantize/dequantize ops convert_pt2e (and convert_to_reference_fx) write
QDQ_FUNCTIONS = {"quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
                 "dequantize_per_channel", "dequantize"}

# ONNX op type (lower case) -> FX call_function/method names it can come from
_OP_ALIASES = {
    "concat": {"cat", "concat", "concatenate"},
    "conv": {"conv1d", "conv2d", "conv3d", "convolution", "_convolution"},
    "convtranspose": {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"},
    "matmul": {"matmul", "bmm", "mm"},
    "gemm": {"linear", "addmm"},
    "maxpool": {"max_pool2d", "max_pool1d"},
    "sigmoid": {"sigmoid"},
    "relu": {"relu", "relu_"},
    "clip": {"hardtanh", "hardtanh_", "relu6", "clamp"},
    "add": {"add", "add_", "iadd"},
    "mul": {"mul", "mul_", "imul"},
    "sub": {"sub", "rsub"},
    "div": {"div", "truediv", "true_divide"},
    "averagepool": {"avg_pool2d", "avg_pool1d", "adaptive_avg_pool2d"},
    "globalaveragepool": {"adaptive_avg_pool2d", "mean"},
    "hardsigmoid": {"hardsigmoid"},
    "hardswish": {"hardswish"},
}
# fused module class-name fragment that contains a given ONNX tail op (conv+bn+relu fusion)
_FUSED_TAIL = {"relu": "relu", "batchnormalization": "bn", "add": "add"}


# Ops between a conv and the output a quantizer observes when it takes conv + bn (+ relu) as one
# pattern: batch norm, the activation, and the scale / bias arithmetic of PT2E's QAT conv-bn fold.
PATTERN_TAILS = {"batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                 "getitem", "relu", "relu_", "hardtanh", "hardtanh_", "relu6", "div", "add", "mul"}


def follow_pattern(node, accept, steps: int = 6):
    """``node`` or the first node downstream that ``accept``s, walking single users through
    :data:`PATTERN_TAILS` only (a plan naming a conv means its pattern's quantized output)."""
    cur = node
    for _ in range(steps + 1):
        if accept(cur):
            return cur
        if cur.target in CAT_TARGETS:
            return None
        users = list(cur.users)
        if len(users) != 1 or users[0].op != "call_function" or op_name(users[0].target) not in PATTERN_TAILS:
            return None
        cur = users[0]
    return None


def settled(site, accept):
    """``site`` moved to its pattern's quantized output (see :func:`follow_pattern`), if it moves."""
    if site.node is None or accept(site.node):
        return site
    n = follow_pattern(site.node, accept)
    if n is None:
        return site
    return Site(label=n.name, via=f"{site.via}, quantized at {n.name}", node=n)


def _observer_classes() -> tuple:
    out = []
    for mod, name in _OBSERVER_BASES:
        cls = getattr(sys.modules.get(mod), name, None)
        if cls is not None:
            out.append(cls)
    return tuple(out)


def is_observer(m) -> bool:
    """An observer or fake-quant module, of torch.ao (FX, eager) or of torchao (PT2E)."""
    classes = _observer_classes()
    return bool(classes) and isinstance(m, classes)


def is_pt2e(model) -> bool:
    """A graph captured by ``torch.export`` (aten ops), as PT2E quantizes."""
    return isinstance(model, torch.fx.GraphModule) and any(
        isinstance(n.target, torch._ops.OpOverload) for n in model.graph.nodes if n.op == "call_function")


def is_qdq_node(n) -> bool:
    """A quantize/dequantize call (converted model), not an op of the network."""
    return (n.op == "call_method" and n.target == "dequantize") or \
        (n.op == "call_function" and op_name(n.target) in QDQ_FUNCTIONS)


class Unmappable(Exception):
    """A plan member that does not map to the torch model; ``str`` is the reason."""


@dataclass
class Site:
    """Where a tensor is produced: an FX node, or (eager models) a module path."""

    label: str  # module path or FX node name, for reports
    via: str  # how the name was mapped
    node: torch.fx.Node | None = None  # for GraphModules
    module_path: str | None = None  # eager models: the module owning activation_post_process


def op_name(target) -> str:
    if isinstance(target, str):
        return target.lower()
    packet = getattr(target, "overloadpacket", None)  # aten.conv2d.default -> conv2d (PT2E graphs)
    if packet is not None:
        target = packet
    return getattr(target, "__name__", str(target)).lower()


def _op_of(last: str, producer_op: str | None) -> str:
    if producer_op:
        return producer_op.lower()
    base = last.rsplit("_", 1)[0] if last.rsplit("_", 1)[-1].isdigit() else last
    return base.lower()


def _subseq(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(any(a == b for b in it) for a in short)


class Resolver:
    def __init__(self, model: torch.nn.Module, aliases: dict | None = None):
        self.model = model
        self.aliases = dict(aliases or {})
        self.modules = dict(model.named_modules(remove_duplicate=False))
        self.graph = model.graph if isinstance(model, torch.fx.GraphModule) else None
        self.nodes: dict = {}
        self.calls: dict[str, list] = defaultdict(list)
        self.scoped: dict[str, list] = defaultdict(list)  # innermost module path -> traced op nodes
        if self.graph is not None:
            for n in self.graph.nodes:
                self.nodes[n.name] = n
                if n.op == "call_module" and not self.is_observer_node(n):
                    self.calls[n.target].append(n)
                if n.op in ("call_function", "call_method", "call_module") and not self.is_observer_node(n):
                    stack = n.meta.get("nn_module_stack") or {}
                    inner = next(reversed(stack.values()))[0] if stack else ""
                    if n.op == "call_module" and inner == n.target and len(stack) > 1:
                        inner = list(stack.values())[-2][0]  # a module node lives in its parent's scope
                    elif n.op == "call_module" and inner == n.target:
                        inner = ""
                    self.scoped[inner].append(n)

    # -- helpers --------------------------------------------------------------------------
    @property
    def is_fx(self) -> bool:
        return self.graph is not None

    @property
    def has_observers(self) -> bool:
        """Prepared (observers run in forward), not converted.  For a GraphModule the graph
        decides: convert_pt2e rewrites the prepared graph in place and leaves the observer
        modules behind as unused attributes."""
        if self.graph is not None:
            return any(self.is_observer_node(n) for n in self.graph.nodes)
        return any(is_observer(m) for m in self.modules.values())

    def is_observer_node(self, n) -> bool:
        return n.op == "call_module" and is_observer(self.modules.get(n.target))

    def observer_nodes_after(self, node) -> list:
        return [u for u in node.users if self.is_observer_node(u)]

    def _eager_site(self, path: str, via: str) -> Site | None:
        mod = self.modules.get(path)
        if mod is not None and is_observer(getattr(mod, "activation_post_process", None)):
            return Site(label=path, via=via, module_path=path)
        return None

    def _call_site(self, path: str, via: str) -> Site | None:
        if self.is_fx:
            calls = self.calls.get(path, [])
            if len(calls) > 1:
                raise Unmappable(f"module {path!r} is called {len(calls)} times in the prepared model; "
                                 "cannot tell which call produced it (pass aliases= with the FX node name: "
                                 + ", ".join(c.name for c in calls) + ")")
            return Site(label=path, via=via, node=calls[0]) if calls else None
        return self._eager_site(path, via)

    def _node_site(self, name: str, via: str) -> Site | None:
        n = self.nodes.get(name)
        if n is None or n.op in ("placeholder", "output", "get_attr") or self.is_observer_node(n):
            return None
        label = n.target if n.op == "call_module" else n.name
        return Site(label=label, via=via, node=n)

    def _by_name(self, name: str, via: str) -> Site | None:
        return self._call_site(name, via) or (self._node_site(name, via) if self.is_fx else None)

    def _traced_in(self, path: str, op: str, via: str) -> Site | None:
        """An op traced through inside module ``path`` (FX inlines non-leaf modules)."""
        if not self.is_fx or not op:
            return None
        names = _OP_ALIASES.get(op, {op})
        cands = [n for n in self.scoped.get(path, []) if n.op != "call_module" and op_name(n.target) in names]
        if len(cands) > 1:
            raise Unmappable(f"{len(cands)} '{op}' ops inside module {path or '<root>'!r} "
                             f"({', '.join(c.name for c in cands)}); pass aliases= to pick one")
        return Site(label=cands[0].name, via=via, node=cands[0]) if cands else None

    def _fused(self, path: str, op: str) -> Site | None:
        """``path`` was fused away (its op now lives in a fused module of the same parent)."""
        frag = _FUSED_TAIL.get(op)
        if not frag or path in self.calls:
            return None
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if self.is_fx:
            cands = [n for n in self.scoped.get(parent, []) if n.op == "call_module"
                     and frag in type(self.modules[n.target]).__name__.lower()]
            cands += [n for t, ns in self.calls.items() for n in ns
                      if (t.rsplit(".", 1)[0] if "." in t else "") == parent and n not in cands
                      and frag in type(self.modules[t]).__name__.lower()]
            if len(cands) == 1:
                return Site(label=cands[0].target, via=f"fused into {cands[0].target}", node=cands[0])
            return None
        cands = [p for p, m in self.modules.items() if (p.rsplit(".", 1)[0] if "." in p else "") == parent
                 and frag in type(m).__name__.lower() and self._eager_site(p, "") is not None]
        if len(cands) == 1:
            return Site(label=cands[0], via=f"fused into {cands[0]}", module_path=cands[0])
        return None

    def _ancestor(self, path: str) -> Site | None:
        atoms = path.split(".")
        for k in range(len(atoms) - 1, 0, -1):
            p = ".".join(atoms[:k])
            s = self._call_site(p, f"inside called module {p}")
            if s is not None:
                return s
        return None

    def _module_path(self, path: str, op: str, via: str) -> Site | None:
        return (self._call_site(path, via) or self._traced_in(path, op, via + " (traced op)")
                or self._fused(path, op) or self._ancestor(path))

    def _partial_match(self, atoms: list[str]) -> str | None:
        known = set(self.modules) | set(self.calls) | set(self.scoped)
        cands = sorted(q for q in known if q and q.split(".")[-1] == atoms[-1] and _subseq(atoms, q.split("."))
                       and not is_observer(self.modules.get(q)))
        if len(cands) > 1:
            raise Unmappable(f"scope {'.'.join(atoms)!r} matches several modules ({', '.join(cands[:5])}); "
                             "pass aliases= to pick one")
        return cands[0] if cands else None

    def _partial(self, path: str, op: str) -> Site | None:
        """Scopes miss container levels that were indexed, not called (ModuleDict)."""
        atoms = path.split(".")
        real = self._partial_match(atoms)
        if real is not None and real != path:
            return self._module_path(real, op, f"module path {real} (partial scope {path})")
        if real is None and len(atoms) > 1:
            parent = self._partial_match(atoms[:-1])  # the leaf itself may have been fused away
            if parent is not None:
                return self._module_path(f"{parent}.{atoms[-1]}", op, f"module path {parent}.{atoms[-1]} "
                                         f"(partial scope {path})")
        return None

    # -- public ---------------------------------------------------------------------------
    def resolve(self, tensor: str, producer: str | None = None, producer_op: str | None = None,
                module: str | None = None) -> Site:
        """Where ``tensor`` is produced in the torch model; raises :class:`Unmappable`."""
        for key in (tensor, producer):
            if key and key in self.aliases:
                target = self.aliases[key]
                s = self._by_name(target, f"alias {target}")
                if s is None:
                    raise Unmappable(f"alias {key!r} -> {target!r} names no called module or FX node")
                return s
        if module:
            s = self._by_name(module, "plan module hint")
            if s is not None:
                return s
        scope, last = split_scope(producer)
        if not scope and not producer:
            scope, last = split_scope(tensor)
        op = _op_of(last, producer_op)
        path = ".".join(scope)
        if path:
            s = self._call_site(path, "module path")
            if s is not None:
                return s
        for name in dict.fromkeys(x for x in (path, producer, tensor, path.replace(".", "_")) if x):
            s = self._node_site(name, "FX node name") if self.is_fx else None
            if s is not None:
                return s
        if path or producer:
            s = self._module_path(path, op, "module path") if path else self._traced_in("", op, "root op")
            if s is not None:
                return s
        if path:
            s = self._partial(path, op)
            if s is not None:
                return s
        where = f"scope {path!r}" if path else f"name {producer or tensor!r}"
        hint = ("export with qtquant.torch.export_onnx (names follow the FX graph), export the float model, "
                "or pass aliases=")
        if self.is_fx:
            raise Unmappable(f"{where} names no module call or FX node of the prepared model; {hint}")
        raise Unmappable(f"{where} names no module with an activation_post_process; {hint}")

    def source(self, node):
        """The producer behind observer / dequantize / quantize nodes (FX)."""
        seen = 0
        while seen < 64 and node is not None and hasattr(node, "op"):
            seen += 1
            if self.is_observer_node(node) or is_qdq_node(node):
                node = node.args[0] if node.args else None
                continue
            return node
        return node

    def cats_fed_by(self, producers: set) -> list:
        """FX cat nodes all of whose inputs come from ``producers`` (a set of FX nodes)."""
        out: list = []
        if self.graph is None:
            return out
        for n in self.graph.nodes:
            if n.op != "call_function" or n.target not in CAT_TARGETS:
                continue
            ts = n.args[0] if n.args else n.kwargs.get("tensors")
            if not isinstance(ts, (list, tuple)) or not ts:
                continue
            if all(self.source(t) in producers for t in ts):
                out.append(n)
        return out
