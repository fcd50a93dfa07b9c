"""Which tensor of one model is which tensor of another: by name, then by where it is made.

Quantizers rename what they touch (onnxruntime's ``quantize_static`` leaves a model output as
``output0_QuantizeLinear_Input``; NNCF and ModelOpt name their Q/DQ nodes their own way), so a
tensor missing by name is looked for by its producer structure: a signature built from the graph
inputs forward (the producer's op type, which of its outputs, the signatures of its inputs; a
constant is its shape, an Identity passes its input's on).  Only a signature that occurs once on
each side matches; what is left is listed, never guessed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum

from ..base.errors import BadInputError

__all__ = ["MatchedBy", "TensorPair", "TensorMatch", "DifferentModelsError", "match_tensors", "signatures"]


class DifferentModelsError(BadInputError):
    """The two files are not quantizations of one model: different inputs, or no tensor in common."""


class MatchedBy(str, Enum):
    NAME = "name"
    STRUCTURE = "structure"

    __str__ = str.__str__


@dataclass(frozen=True)
class TensorPair:
    a: str
    b: str
    by: MatchedBy


@dataclass
class TensorMatch:
    pairs: list[TensorPair] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)  # in A, with no counterpart in B
    only_b: list[str] = field(default_factory=list)

    def b_of(self) -> dict[str, str]:
        return {p.a: p.b for p in self.pairs}

    def a_of(self) -> dict[str, str]:
        return {p.b: p.a for p in self.pairs}

    @property
    def by_structure(self) -> int:
        return sum(1 for p in self.pairs if p.by is MatchedBy.STRUCTURE)


def _digest(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:20]


def signatures(graph) -> tuple[dict[str, str], set[str]]:
    """tensor -> its producer-structure signature (every tensor of the graph), and the tensors an
    Identity made (they carry their input's signature: one value under two names)."""
    sig: dict[str, str] = {}
    copies: set[str] = set()

    def of(t: str) -> str:
        if not t:
            return ""
        s = sig.get(t)
        if s is None:  # a graph input, an initializer or a folded constant
            info = graph.tensors.get(t)
            s = sig[t] = (_digest("input", t) if t in graph.inputs
                          else _digest("const", tuple(info.shape) if info is not None and info.shape else None))
        return s

    for node in graph.order:
        ins = tuple(of(t) for t in node.inputs)
        for k, out in enumerate(node.outputs):
            if not out:
                continue
            # An Identity is where a quantizer parks a renamed output: it adds nothing to the structure
            if node.op_type == "Identity" and ins:
                sig[out] = ins[0]
                copies.add(out)
            else:
                sig[out] = _digest(node.op_type, k, ins)
    return sig, copies


def _inputs(graph) -> dict[str, tuple]:
    return {t: tuple(graph.input_shapes.get(t) or (graph.tensors[t].shape if t in graph.tensors else ()) or ())
            for t in graph.inputs}


def match_tensors(graph_a, graph_b, tensors_a, tensors_b) -> TensorMatch:
    """Pair ``tensors_a`` (of ``graph_a``) with ``tensors_b``: same name first, then a unique
    producer-structure signature.  Raises :class:`DifferentModelsError` when the graphs' inputs
    differ or nothing pairs."""
    ins_a, ins_b = _inputs(graph_a), _inputs(graph_b)
    if ins_a != ins_b:
        def text(ins):
            return ", ".join(f"{k}={'x'.join(map(str, v)) or '?'}" for k, v in ins.items())

        raise DifferentModelsError(f"the two files are not one model: inputs {text(ins_a)} against {text(ins_b)}")
    set_b = set(tensors_b)
    pairs = [TensorPair(t, t, MatchedBy.NAME) for t in tensors_a if t in set_b]
    named = {p.a for p in pairs}
    left_a = [t for t in tensors_a if t not in named]
    left_b = [t for t in tensors_b if t not in named]
    if left_a and left_b:
        (sig_a, copies_a), (sig_b, copies_b) = signatures(graph_a), signatures(graph_b)

        def unique(sig, copies):
            count: dict[str, int] = {}
            for t, s in sig.items():
                if t not in copies:
                    count[s] = count.get(s, 0) + 1
            return {s for s, n in count.items() if n == 1}

        once = unique(sig_a, copies_a) & unique(sig_b, copies_b)
        b_by_sig = {sig_b[t]: t for t in left_b if sig_b.get(t) in once and t not in copies_b}
        for t in left_a:
            u = b_by_sig.pop(sig_a[t], None) if t in sig_a else None
            if u is not None:
                pairs.append(TensorPair(t, u, MatchedBy.STRUCTURE))
    got_a, got_b = {p.a for p in pairs}, {p.b for p in pairs}
    if not any(p.a not in graph_a.inputs for p in pairs):  # (one input name in common is no evidence)
        raise DifferentModelsError("the two files are not one model: no quantized tensor of one matches the other "
                                   "by name or by structure")
    return TensorMatch(pairs=pairs, only_a=[t for t in tensors_a if t not in got_a],
                       only_b=[t for t in tensors_b if t not in got_b])
