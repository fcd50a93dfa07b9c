"""The sensitivity estimate's runs of the gated model, each started where its unit's gate first acts.

Closing one unit's gate changes nothing upstream of the unit's first gated Q/DQ pair, so a run with
only that gate closed can start from what the all-open run of the same sample computed there: the
first pass of PP-OCRv4 det (251 units x 4 samples of one run each at 640x640) had spent some 220 s
running the same backbone prefix again and again.

The gated model is cut at a few node positions where few tensors cross (:func:`plan_cuts`, at the
quantiles of the units' first gates), each cut's suffix gets its own session, and each sample's
all-open run keeps what crosses the cuts.  A closed gate's run starts at the last cut before the
gate.  The suffixes run the same nodes with the same inputs; onnxruntime's basic optimisations act
within a suffix, so a fusion across a cut becomes two kernels: the same values to float rounding.

Cutting costs a session per suffix, so it is done only where the runs it saves are estimated to
take longer than :data:`MIN_SAVED_S`; graphs with subgraphs (If, Loop, Scan, whose bodies may read
any outer tensor) are never cut.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import onnx

from ...model.runtime import OrtSession

__all__ = ["GatedRunner", "Cut", "plan_cuts"]

MAX_CUTS = 4  # (8 on PP-OCRv4 det: 134 s against 143 s, for 340 MB more)
MAX_CROSS = 16  # tensors crossing one cut at most
VALUES_BUDGET = 384 << 20  # bytes kept of what crosses the cuts, over all samples
MIN_SAVED_S = 8.0  # the runs a cut saves must be worth more than this (its session costs seconds)


@dataclass(frozen=True)
class Cut:
    at: int  # the suffix's first node, in the gated model's order
    crossing: tuple[str, ...]  # values made before ``at`` (or model inputs) that nodes from ``at`` on read
    outputs_before: tuple[str, ...]  # model outputs made before ``at`` (no gate from ``at`` on changes them)
    skips: float = 0.0  # the share of the model's (non-constant) nodes a run from here leaves out


@dataclass
class _Scan:
    """Where each value of the gated model is made and last read, and where each gate first acts."""

    made: dict[str, int]  # value -> its producer's index (-1: a model input)
    last: dict[str, int]  # value -> the last node reading it
    first_gate: dict[str, int]  # gate input -> the first node reading it
    consts: set[int]  # nodes computing from initializers alone: every suffix that reads them computes them again
    nodes: int


def _scan(model: onnx.ModelProto, gates) -> _Scan:
    from ...runs.segments import const_nodes

    g = model.graph
    gates = set(gates)
    inits = {i.name for i in g.initializer}
    info = [(n.op_type, tuple(n.input), tuple(n.output)) for n in g.node]
    consts = {k for k, c in enumerate(const_nodes(info, inits)) if c}
    made = {i.name: -1 for i in g.input if i.name not in inits and i.name not in gates}
    last: dict[str, int] = {}
    first_gate: dict[str, int] = {}
    for k, (_, ins, outs) in enumerate(info):
        if k in consts:
            continue
        for t in ins:
            if t in made:
                last[t] = k
            elif t in gates and t not in first_gate:
                first_gate[t] = k
        for t in outs:
            if t:
                made[t] = k
    return _Scan(made, last, first_gate, consts, len(info))


def plan_cuts(model: onnx.ModelProto, gates, *, max_cuts: int = MAX_CUTS, max_cross: int = MAX_CROSS) -> list[Cut]:
    """Up to ``max_cuts`` cuts of ``model`` (nodes in topological order) for the gate inputs
    ``gates``: each at or just before a quantile of the gates' first uses, where at most
    ``max_cross`` tensors cross (the fewest in a window before the quantile)."""
    return _cuts(model, _scan(model, gates), max_cuts, max_cross)


def _cuts(model: onnx.ModelProto, scan: _Scan, max_cuts: int = MAX_CUTS, max_cross: int = MAX_CROSS) -> list[Cut]:
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for n in model.graph.node for a in n.attribute):
        return []
    made, last, n_nodes = scan.made, scan.last, scan.nodes
    count = [0] * (n_nodes + 2)  # count[b]: tensors crossing a cut before node b
    for t, end in last.items():
        if end > made[t]:
            count[made[t] + 1] += 1
            count[end + 1] -= 1
    for b in range(1, len(count)):
        count[b] += count[b - 1]
    firsts = sorted(scan.first_gate.values())
    if not firsts:
        return []
    window = max(1, n_nodes // (2 * (max_cuts + 1)))
    outputs = [o.name for o in model.graph.output]
    computed = max(1, n_nodes - len(scan.consts))
    cuts, prev = [], 0
    for j in range(1, max_cuts + 1):
        q = firsts[j * len(firsts) // (max_cuts + 1)]
        lo = max(prev + 1, q - window)
        if lo > q:
            continue
        b = min(range(q, lo - 1, -1), key=count.__getitem__)  # the fewest crossing, the latest of equals
        if count[b] > max_cross:
            continue
        crossing = tuple(t for t, end in last.items() if made[t] < b <= end)
        cuts.append(Cut(b, crossing, tuple(o for o in outputs if made.get(o, n_nodes) < b),
                        sum(1 for k in range(b) if k not in scan.consts) / computed))
        prev = b
    return cuts


def _suffix(model: onnx.ModelProto, cut: Cut, types: dict, outs, consts: set[int]) -> onnx.ModelProto:
    """The nodes of ``model`` from ``cut.at`` on (and the constants they read, ``consts`` by
    index), reading what crosses the cut as inputs typed by ``types`` (name -> ValueInfoProto),
    and the gates they read."""
    g = model.graph
    nodes = [n for k, n in enumerate(g.node) if k >= cut.at and k not in consts]
    need = {t for n in nodes for t in n.input}
    const = []
    for k in sorted(consts, reverse=True):  # the constants the suffix reads, and theirs
        n = g.node[k]
        if any(t in need for t in n.output):
            const.append(n)
            need.update(n.input)
    nodes = const[::-1] + nodes
    used = {t for n in nodes for t in n.input}
    m = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    m.graph.name = g.name
    m.graph.node.extend(nodes)
    made = {t for n in nodes for t in n.output}
    m.graph.value_info.extend(v for v in g.value_info if v.name in made)
    m.graph.initializer.extend(i for i in g.initializer if i.name in used)
    m.graph.input.extend(types[t] for t in cut.crossing)
    given = set(cut.crossing) | {i.name for i in g.initializer}
    m.graph.input.extend(i for i in g.input if i.name in used and i.name not in given)  # the gates it reads
    before = set(cut.outputs_before)
    m.graph.output.extend(o for o in g.output if o.name in outs and o.name not in before)
    return m


class GatedRunner:
    """Runs of the gated ``model`` over ``feeds``: :meth:`run` with every gate open first (each
    sample once, in order), then with one gate closed at a time."""

    def __init__(self, model: onnx.ModelProto, gates: list[str], outs: list[str], feeds: list[dict], make):
        self.outs, self.feeds, self.make = list(outs), feeds, make
        self.gates = gates
        self._scan = _scan(model, gates)
        self.cuts = _cuts(model, self._scan)
        extra = list(dict.fromkeys(t for c in self.cuts for t in (*c.crossing, *c.outputs_before)
                                   if t not in outs and t not in feeds[0]))
        full = model
        if extra:  # the all-open run hands out what crosses the cuts
            full = onnx.ModelProto()
            full.CopyFrom(model)
            for t in extra:
                full.graph.output.add().name = t  # (typed by onnxruntime)
        self._model, self._extra = model, extra
        self.session = make(full)
        self._kept: list[dict] = []  # per sample: what crosses the cuts, as the all-open run made it
        self._open_s: list[float] = []
        self._suffixes: list[tuple[Cut, OrtSession]] | None = None
        self._inputs: list[set[str]] = []  # per suffix: its input names
        self._start: dict[str, int] = {}  # gate -> index into _suffixes (absent: the whole model)

    def run(self, i: int, gates: dict, closed: str | None = None) -> list:
        """The outputs (``outs`` order) of sample ``i`` under ``gates`` (``closed``: the one gate
        closed among them, or None with every gate open)."""
        feed = self.feeds[i]
        if closed is None:
            t = time.perf_counter()
            values = self.session.run(self.outs + self._extra, {**feed, **gates})
            self._open_s.append(time.perf_counter() - t)
            if self.cuts:
                self._kept.append(dict(zip(self.outs + self._extra, values)))
            return values[:len(self.outs)]
        if self._suffixes is None:
            self._suffixes = self._prepare()
        k = self._start.get(closed)
        if k is None:
            return self.session.run(self.outs, {**feed, **gates})
        cut, sess = self._suffixes[k]
        kept = self._kept[i]
        given = {t: (feed[t] if t in feed else kept[t]) for t in cut.crossing}
        got = dict(zip([o.name for o in sess.get_outputs()],
                       sess.run(None, {**given, **{g: v for g, v in gates.items() if g in self._inputs[k]}})))
        return [got[o] if o in got else kept[o] for o in self.outs]

    def _prepare(self) -> list[tuple[Cut, OrtSession]]:
        """Sessions of the suffixes, where the runs they save are worth their cost."""
        if not self.cuts or len(self._kept) != len(self.feeds):
            return []
        first = self._scan.first_gate
        budget = VALUES_BUDGET // len(self.feeds)
        chosen = []
        for c in self.cuts:  # what each sample keeps of a cut's crossing values, within the budget
            size = sum(self._kept[0][t].nbytes for t in c.crossing if t in self._kept[0])
            if size <= budget:
                budget -= size
                chosen.append(c)
        start = {}
        for g in self.gates:
            at = first.get(g)
            k = max((j for j, c in enumerate(chosen) if at is not None and c.at <= at), default=None)
            if k is not None:
                start[g] = k
        # each run that starts at a cut skips the nodes before it (their count for their share of the work)
        saved = min(self._open_s) * len(self.feeds) * sum(chosen[k].skips for k in start.values())
        if saved < MIN_SAVED_S:
            self._kept = []
            return []
        types = {t: _value_info(t, self._kept[0][t]) for c in chosen for t in c.crossing if t in self._kept[0]}
        types.update({i.name: i for i in self._model.graph.input})
        from concurrent.futures import ThreadPoolExecutor

        models = [_suffix(self._model, c, types, self.outs, self._scan.consts) for c in chosen]
        with ThreadPoolExecutor(2, thread_name_prefix="qtquant-suffix") as pool:  # (sessions build without the GIL)
            sessions = list(pool.map(self.make, models))
        self._inputs = [{i.name for i in m.graph.input} for m in models]
        self._start = start
        keep = {t for c in chosen for t in (*c.crossing, *c.outputs_before)} | set(self.outs)
        self._kept = [{t: v for t, v in d.items() if t in keep} for d in self._kept]
        return list(zip(chosen, sessions))

    @property
    def suffixes(self) -> int:
        """Suffix sessions in use (0: every run is of the whole model)."""
        return len(self._suffixes or ())


def _value_info(name: str, value) -> onnx.ValueInfoProto:
    """The type of a value the all-open run made (the samples share their shapes)."""
    return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
