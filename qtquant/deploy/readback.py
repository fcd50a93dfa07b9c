"""After deployment: which groups and precision choices took effect, read from the compile log.

The session holds the decisions as deployed (the same model, plan and options); the log is
``hb_mapper makertbin``'s (:mod:`qtquant.horizon.log`), placed on the graph by
:func:`qtquant.horizon.match.match_compile_log`.  For each group's Concats the log's
``HzRequantize`` rows are set beside what qtquant predicts *without* the groups:

- **gone**: an input qtquant predicted a requantize for without the group, and the log has none;
- **still there**: the log still requantizes an input it predicted one for;
- **new**: the log requantizes an input it predicted none for.

A group took effect when its Concats have nothing still there and nothing new.  The compiler's
thresholds of the members say the same from the other side: one threshold for every member is
one shared scale.  An int16 choice took effect when its producer's row outputs int16,
a float choice when its node runs on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..horizon.log import read_compile_log
from ..horizon.match import match_compile_log
from ..base.vocab import Precision, StrEnum  # (enum.StrEnum is Python 3.11's; 3.10 is supported)
from .facts import DeployFacts

__all__ = ["Effect", "GroupReadback", "ChoiceReadback", "Readback", "read_back"]


class Effect(StrEnum):
    TOOK_EFFECT = "took effect"
    PARTLY = "partly"
    NOT_TAKEN = "did not take effect"
    NOT_IN_LOG = "not in the log"


@dataclass(frozen=True)
class GroupReadback:
    id: int
    name: str
    effect: Effect
    gone: tuple[str, ...]
    still: tuple[str, ...]
    new: tuple[str, ...]
    thresholds: tuple[float, ...]  # the compiler's distinct thresholds over the members it gives one for
    not_in_log: tuple[str, ...] = ()  # the group's Concats the log has no row for

    def line(self) -> str:
        th = "" if not self.thresholds else (
            f"; one compiler threshold {self.thresholds[0]:.6g} for its members" if len(self.thresholds) == 1 else
            f"; {len(self.thresholds)} compiler thresholds over its members "
            f"({min(self.thresholds):.6g}..{max(self.thresholds):.6g})")
        parts = [f"{k} {len(v)}: {', '.join(v[:4])}" + (" ..." if len(v) > 4 else "")
                 for k, v in (("gone", self.gone), ("still there", self.still), ("new", self.new)) if v]
        where = f"; not in the log: {', '.join(self.not_in_log)}" \
            if self.not_in_log and self.effect is not Effect.NOT_IN_LOG else ""
        return f"group {self.id} ({self.name or 'unnamed'}): {self.effect}" + \
            (f" ({'; '.join(parts)})" if parts else "") + th + where


@dataclass(frozen=True)
class ChoiceReadback:
    tensor: str
    precision: Precision
    effect: Effect
    why: str

    def line(self) -> str:
        return f"{self.precision.value} {self.tensor}: {self.effect} ({self.why})"


@dataclass
class Readback:
    log: str
    groups: list[GroupReadback] = field(default_factory=list)
    choices: list[ChoiceReadback] = field(default_factory=list)
    new_elsewhere: tuple[str, ...] = ()  # requantized where no group is and qtquant predicted none
    unmatched: int = 0  # log rows not found in the graph (listed by the compile-log reader)

    def lines(self) -> list[str]:
        took = sum(1 for g in self.groups if g.effect is Effect.TOOK_EFFECT)
        out = [f"read back {self.log}: {took} of {len(self.groups)} group(s) took effect"]
        out += [g.line() for g in self.groups]
        out += [c.line() for c in self.choices]
        if self.new_elsewhere:
            out.append(f"new requantizes outside the groups ({len(self.new_elsewhere)}): "
                       + ", ".join(self.new_elsewhere[:6]) + (" ..." if len(self.new_elsewhere) > 6 else ""))
        if self.unmatched:
            out.append(f"note: {self.unmatched} log row(s) not found in the model (qtquant analyze --compiler-log "
                       "lists them)")
        return out

    def to_dict(self) -> dict:
        return {"log": self.log,
                "groups": [{"id": g.id, "name": g.name, "effect": g.effect.value, "gone": list(g.gone),
                            "still": list(g.still), "new": list(g.new), "thresholds": list(g.thresholds),
                            "not_in_log": list(g.not_in_log)} for g in self.groups],
                "choices": [{"tensor": c.tensor, "precision": c.precision.value, "effect": c.effect.value,
                             "why": c.why} for c in self.choices],
                "new_elsewhere": list(self.new_elsewhere), "unmatched": self.unmatched}


def _effect(gone, still, new, in_log: bool) -> Effect:
    if not in_log:
        return Effect.NOT_IN_LOG
    if not still and not new:
        return Effect.TOOK_EFFECT
    return Effect.PARTLY if gone else Effect.NOT_TAKEN


def read_back(session, log_path, *, any_shape: bool = False) -> Readback:
    """The deployed decisions of ``session`` against the compile log at ``log_path``."""
    facts = DeployFacts.from_session(session)
    graph = session.graph
    match = match_compile_log(graph, read_compile_log(log_path), any_shape=any_shape)
    before = {c.node: c for c in session.concats(baseline=True)}
    predicted = {c.node: {m.tensor for m in c.inputs if not m.constant and m.needs_rescale} for c in before.values()}
    res = Readback(str(log_path), unmatched=len(match.unmatched))
    at_groups: set[str] = set()
    for g in facts.groups:
        gone, still, new, absent = [], [], [], []
        for c in g.concats:
            if c not in match.nodes:
                absent.append(c)
                continue
            node = graph.nodes[c]
            inputs = [t for t in node.inputs if t]
            at_groups.update(inputs)
            listed = set(match.requantized_for.get(c, ()))
            was = predicted.get(c, set())
            gone += [t for t in inputs if t in was and t not in listed]
            still += [t for t in inputs if t in was and t in listed]
            new += [t for t in inputs if t not in was and t in listed]
        ths = sorted({round(match.thresholds[m.tensor].threshold, 6) for m in g.members
                      if m.tensor in match.thresholds and match.thresholds[m.tensor].threshold is not None
                      and math.isfinite(match.thresholds[m.tensor].threshold)})
        in_log = len(absent) < len(g.concats) or not g.concats
        res.groups.append(GroupReadback(g.id, g.name, _effect(gone, still, new, in_log), tuple(gone), tuple(still),
                                        tuple(new), tuple(ths), tuple(absent)))
    all_predicted = set().union(*predicted.values()) if predicted else set()
    res.new_elsewhere = tuple(t for t in match.requantized if t not in at_groups and t not in all_predicted)
    for choice in facts.choices:
        if choice.precision is Precision.INT16:
            row = match.nodes.get(choice.member.producer) if choice.member.producer else None
            if row is None:
                res.choices.append(ChoiceReadback(choice.tensor, choice.precision, Effect.NOT_IN_LOG,
                                                  "its producer has no row in the log"))
            else:  # (the row's DataType is its output's)
                ok = row.data_type == "int16"
                res.choices.append(ChoiceReadback(choice.tensor, choice.precision, Effect.TOOK_EFFECT if ok else
                                                  Effect.NOT_TAKEN, f"{row.name} outputs {row.data_type} in the log"))
        else:
            rows = [match.nodes[n] for n in choice.nodes if n in match.nodes]
            if not rows:
                res.choices.append(ChoiceReadback(choice.tensor, choice.precision, Effect.NOT_IN_LOG,
                                                  "its nodes have no row in the log"))
                continue
            cpu = [r for r in rows if r.on == "CPU"]
            eff = Effect.TOOK_EFFECT if len(cpu) == len(rows) else Effect.PARTLY if cpu else Effect.NOT_TAKEN
            res.choices.append(ChoiceReadback(choice.tensor, choice.precision, eff,
                                              f"{len(cpu)} of {len(rows)} node(s) on the CPU"))
    return res
