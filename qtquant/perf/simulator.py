"""The BPU perf simulator: full and incremental simulation over a graph (DESIGN §4).

Per-node costs depend only on the graph and the march, never on the scales, so a
:class:`Simulator` computes them once.  A group edit changes only which Concat inputs
need a rescale; :meth:`Simulator.update` re-costs just the Concats and their virtual
rescale nodes and gives exactly the result :meth:`Simulator.full` would.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from .board import board_cpu_us, board_io, board_layer_us
from .confidence import family_of
from .context import CostContext
from .costs import LayerCost, copy_cost, node_cost, rescale_cost, zero_cost
from .march import MarchProfile, load_march
from ..model.derived import Slot
from .macs import shape_of

if TYPE_CHECKING:
    from ..quant.state import QuantState
    from .precision import PrecisionCost

__all__ = ["PerfResult", "Simulator", "simulate", "simulate_session", "with_int_outputs", "warm_up",
           "latency_delta_us", "map_delta_us", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class _ConcatCost:
    layer: LayerCost  # the Concat itself (zero when done in place)
    rescales: tuple[LayerCost, ...]
    attributable_us: float  # what the mismatch costs: rescales + the copy it forces


@dataclass
class _Tally:
    """Running totals.  Layers are added in one fixed order, so full and update sum identically."""

    total_us: float = 0.0
    ddr: int = 0
    macs: int = 0
    n_compute: int = 0
    n_memory: int = 0
    n_overhead: int = 0
    board_us: float = 0.0  # the same layers at the board's BPU clock

    def add(self, lc: LayerCost, march) -> None:
        self.total_us += lc.total_us
        self.board_us += board_layer_us(lc, march)
        self.ddr += lc.ddr_bytes
        self.macs += lc.macs
        if lc.total_us > 0:
            if lc.bound == "compute":
                self.n_compute += 1
            elif lc.bound == "overhead":
                self.n_overhead += 1
            else:
                self.n_memory += 1


@dataclass(eq=False)
class PerfResult:
    """Totals are computed eagerly; the layer list is assembled on first use."""

    march: str
    total_us: float
    ddr_bytes: int
    rescale_us: float
    rescale_count: int
    macs: int
    compute_bound: int
    memory_bound: int
    model: str = ""
    overhead_bound: int = 0
    _order: tuple = field(default=(), repr=False)  # node names in topological order
    _base: dict = field(default_factory=dict, repr=False)  # node -> LayerCost (non-Concat nodes)
    _concats: dict = field(default_factory=dict, repr=False)  # Concat node -> _ConcatCost
    precision: PrecisionCost | None = None  # when some tensor is not int8
    board_cpu_us: float = 0.0  # what the runtime adds on the CPU per inference (perf/board.py)
    board_bpu_us: float | None = None  # the BPU part at the board's BPU clock (None: total_us)
    board_io: tuple = ()  # board.BoardIo per model input and output
    family: str = ""  # confidence.family_of: which of the march fit's figures are nearest

    # -- totals ---------------------------------------------------------------------------------
    # total_us is the static estimate: the BPU part, what the compiler prints. board_us adds what the
    # runtime does on the CPU for one inference of one thread (perf/board.py).
    @property
    def board_us(self) -> float:
        bpu = self.total_us if self.board_bpu_us is None else self.board_bpu_us
        return bpu + self.board_cpu_us

    @property
    def board_ms(self) -> float:
        return self.board_us / 1000.0

    @property
    def total_ms(self) -> float:
        return self.total_us / 1000.0

    @property
    def fps(self) -> float:
        return 1e6 / self.total_us if self.total_us > 0 else 0.0

    # -- layers -----------------------------------------------------------------------------------
    @cached_property
    def layers(self) -> list[LayerCost]:
        """Every graph node in topological order, each rescale just before its Concat."""
        out = []
        for name in self._order:
            cc = self._concats.get(name)
            if cc is None:
                out.append(self._base[name])
            else:
                out.extend(cc.rescales)
                out.append(cc.layer)
        return out

    @property
    def rescales(self) -> list[LayerCost]:
        return [r for name in self._order if name in self._concats for r in self._concats[name].rescales]

    def rescale_cost_by_concat(self) -> dict[str, float]:
        """µs each Concat's scale mismatch costs: its rescale nodes plus the copy they force
        (a channel Concat with matched scales is free).  0.0 for matched Concats."""
        return {name: cc.attributable_us for name, cc in self._concats.items()}

    def layer(self, name: str) -> LayerCost | None:
        """The cost record of one graph node or virtual rescale node (None: not in the graph)."""
        if name in self._base and name not in self._concats:
            return self._base[name]
        if name in self._concats:
            return self._concats[name].layer
        return next((r for r in self.rescales if r.name == name), None)

    def by_node(self) -> dict[str, float]:
        """µs per graph node (the GUI's latency overlay); a Concat carries its rescales' cost."""
        d = {name: lc.total_us for name, lc in self._base.items()}
        for name, cc in self._concats.items():
            d[name] = cc.layer.total_us + sum(r.total_us for r in cc.rescales)
        return d

    def summary(self) -> dict:
        return {
            "march": self.march,
            "latency_ms": self.total_ms,  # the BPU static estimate
            "board_latency_ms": self.board_ms,  # + the runtime's CPU work, one thread
            "board_cpu_us": self.board_cpu_us,
            "fps": self.fps,
            "ddr_bytes": self.ddr_bytes,
            "macs": self.macs,
            "rescales": self.rescale_count,
            "rescale_cost_us": self.rescale_us,
            "compute_bound_layers": self.compute_bound,
            "memory_bound_layers": self.memory_bound,
            "overhead_bound_layers": self.overhead_bound,
        }

    def to_dict(self) -> dict:
        """Stable JSON form (keys never renamed; new keys may be added)."""
        d = {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "summary": self.summary(),
            "rescale_cost_by_concat": self.rescale_cost_by_concat(),
            "layers": [lc.to_dict() for lc in self.layers],
        }
        if self.precision is not None:
            d["precision"] = self.precision.to_dict()
        d["board_io"] = [io.to_dict() for io in self.board_io]
        return d


def _is_channel_concat(node, graph) -> bool:
    out = shape_of(graph, node.outputs[0]) if node.outputs else None
    rank = len(out) if out is not None else 4
    axis = int(node.attrs.get("axis", 0) or 0)
    if axis < 0:
        axis += rank
    return rank >= 2 and axis == 1


class Simulator:
    """``Simulator(graph, march).full(concats)`` / ``.update(concats)`` → :class:`PerfResult`."""

    def __init__(self, graph, march):
        self.graph = graph
        self.march: MarchProfile = load_march(march)
        self._lock = threading.Lock()
        self._state = None  # (ctx, base, the tally of every node but the Concats)
        self._memo: dict = {}
        self._concat_nodes = [n.name for n in graph.nodes.values() if n.op_type == "Concat"]
        self._order = tuple(graph.nodes)
        self._board_io = board_io(graph)
        self._board_cpu_us = board_cpu_us(self._board_io, self.march)
        self._family = family_of(graph)

    # -- public ---------------------------------------------------------------------------------
    def full(self, concats) -> PerfResult:
        """Cost every node from scratch (and refresh the cache :meth:`update` reuses)."""
        state = self._compute_base()
        with self._lock:
            self._state, self._memo = state, {}
        return self._assemble(concats, state, {})

    def update(self, concats) -> PerfResult:
        """Re-cost only the Concats and their rescales, reusing every other node's cost."""
        return self._assemble(concats, self.base_state(), self._memo)

    def base_state(self):
        """The per-node costs :meth:`update` reuses, computed on first use (a caller on another
        thread computing them meanwhile is waited for)."""
        state = self._state
        if state is None:
            with self._lock:
                if self._state is None:
                    self._state = self._compute_base()
                state = self._state
        return state

    # -- internals ------------------------------------------------------------------------------
    def _compute_base(self):
        ctx = CostContext(self.graph, self.march)
        base = {}
        tally = _Tally()
        for node in self.graph.nodes.values():
            lc = base[node.name] = node_cost(node, ctx)
            if node.op_type != "Concat":  # a Concat's default (copy) cost counts only when no ConcatInfo is given
                tally.add(lc, self.march)
        return ctx, base, tally

    def _concat_cost(self, info, ctx) -> _ConcatCost:
        node = self.graph.nodes[info.node]
        idx = tuple(info.rescale_inputs)
        rescales = tuple(rescale_cost(f"{node.name}_rescale_{i}", node.inputs[i], node.name, ctx) for i in idx)
        channel = _is_channel_concat(node, self.graph)
        if getattr(info, "export_float", False):
            # What ships (outputs.export_float_tensors): each input dequantized at its own scale
            # into the float output, no rescale; not in place, the output is another buffer.
            layer = copy_cost(node.name, node.op_type, node.inputs, node.outputs, ctx,
                              note="output left in float by the export: its inputs are dequantized into it "
                                   "at their own scales, no rescale")
            extra = 0.0
        elif channel and not idx:
            layer = zero_cost(node, "channel Concat in place: producers write straight into the output buffer")
            extra = 0.0
        elif channel and self.march.fusion.concat_in_place:
            # The march's compiler writes each requantized input straight into the output
            # buffer (the X5 log keeps a plain Concat next to its HzRequantize nodes).
            layer = zero_cost(node, f"channel Concat in place; {len(idx)} input(s) requantized into its buffer")
            extra = 0.0
        elif channel:
            layer = copy_cost(node.name, node.op_type, node.inputs, node.outputs, ctx,
                              note=f"copy: {len(idx)} input(s) need a rescale, so it cannot be done in place")
            extra = layer.total_us
        else:
            layer = copy_cost(node.name, node.op_type, node.inputs, node.outputs, ctx,
                              note="copy (not on the channel axis)")
            extra = 0.0
        return _ConcatCost(layer, rescales, sum(r.total_us for r in rescales) + extra)

    def _assemble(self, concats, state, memo) -> PerfResult:
        ctx, base, base_tally = state
        tally = replace(base_tally)
        by_name = {c.node: c for c in concats}
        ccosts: dict[str, _ConcatCost] = {}
        rescale_us = 0.0
        n_rescales = 0
        for name in self._concat_nodes:  # fixed order: full and update sum identically
            info = by_name.get(name)
            if info is None:
                lc = base[name]
                cc = _ConcatCost(lc, (), 0.0)
            else:
                key = (name, tuple(info.rescale_inputs), getattr(info, "export_float", False))
                cc = memo.get(key)
                if cc is None:
                    cc = self._concat_cost(info, ctx)
                    memo[key] = cc
                ccosts[name] = cc
            for lc in (*cc.rescales, cc.layer):
                tally.add(lc, self.march)
            rescale_us += cc.attributable_us
            n_rescales += len(cc.rescales)
        concat_all = {name: ccosts.get(name) or _ConcatCost(base[name], (), 0.0) for name in self._concat_nodes}
        g = self.graph
        model = g.path.name if getattr(g, "path", None) else ""
        return PerfResult(self.march.name, tally.total_us, int(tally.ddr), rescale_us, n_rescales, int(tally.macs),
                          tally.n_compute, tally.n_memory, model=model, overhead_bound=tally.n_overhead,
                          _order=self._order, _base=base,
                          _concats=concat_all, board_cpu_us=self._board_cpu_us, board_io=self._board_io,
                          board_bpu_us=tally.board_us,
                          family=self._family)


def with_int_outputs(res: PerfResult, graph, march: MarchProfile, int_outputs) -> PerfResult:
    """``res`` with ``int_outputs`` left to the application (perf/board.py): the runtime converts nothing
    for them on the board.  The BPU part does not change, so the simulation is not run again."""
    if not int_outputs:
        return res
    ios = board_io(graph, frozenset(int_outputs))
    return replace(res, board_io=ios, board_cpu_us=board_cpu_us(ios, march))


def simulate(graph, march, concats=()) -> PerfResult:
    """One-shot full simulation, the nodes the march runs on its CPU priced there (perf/placement.py)."""
    from .precision import apply_precision

    sim = Simulator(graph, march)
    res = sim.full(concats)
    return apply_precision(res, graph, sim.march, None, ctx=sim.base_state()[0])


# One cached simulator per march, in the graph's derived state: the GUI re-simulates after every edit.
SIMULATORS: Slot[dict[MarchProfile, Simulator]] = Slot("perf simulators", dict)
_SIMS_LOCK = threading.Lock()


def _simulator_for(graph, march: MarchProfile) -> Simulator:
    with _SIMS_LOCK:
        per_graph = graph.derived.get(SIMULATORS)
        sim = per_graph.get(march)
        if sim is None:
            sim = per_graph[march] = Simulator(graph, march)
        return sim


def _march_of(session, march_file=None) -> MarchProfile:
    """The march a session is priced on: ``march_file`` when given, else ``session.options.march``; at the
    board's BPU clock of the session's options when they state one."""
    march = load_march(march_file if march_file else session.options.march)
    ghz = session.options.board_bpu_ghz
    return replace(march, board_bpu_ghz=ghz) if ghz and ghz != march.board_bpu_ghz else march


def warm_up(session, march_file=None) -> threading.Thread:
    """Compute the per-node costs :func:`simulate_session` will reuse, on a thread of their own.

    They depend on the graph and the march only, not on the scales, so ``qtquant analyze`` starts
    them before calibrating: onnxruntime releases the GIL while it creates calibration's session
    (20,000-node CNN: about a second, beside the 1-1.5 s these costs take), so the two overlap
    instead of the simulation taking its turn later.  A failure here is left to
    :func:`simulate_session`, which computes them again and raises it where it is reported."""
    def run():
        try:
            _simulator_for(session.graph, _march_of(session, march_file)).base_state()
        except Exception:  # noqa: BLE001 - reported by simulate_session (see above)
            pass

    t = threading.Thread(target=run, name="qtquant-perf-warm", daemon=True)
    t.start()
    return t


def simulate_session(session: QuantState, march_file=None, *, baseline: bool = False) -> PerfResult:
    """Simulate a session as edited (or, with ``baseline``, the model as opened: no user group,
    every tensor int8; :mod:`qtquant.perf.price` splits the difference by kind of edit).

    The march is ``march_file`` when given, else ``session.options.march``.
    """
    march = _march_of(session, march_file)
    sim = _simulator_for(session.graph, march)
    res = sim.update(session.concats(baseline=baseline))
    res = with_int_outputs(res, session.graph, march, session.options.int_outputs)
    # int16 / float nodes re-priced (perf/precision.py), and the nodes the march runs on its CPU, which
    # the model as opened has too (perf/placement.py)
    from .precision import apply_precision

    state = sim._state
    return apply_precision(res, session.graph, march, None if baseline else session.options.precision,
                           ctx=state[0] if state else None)


def latency_delta_us(session: QuantState, tensors, precision, march_file=None) -> float:
    """µs the board latency changes by when ``tensors`` are set to ``precision`` on top of the
    session's current map (the sensitivity ranking's latency price of a candidate)."""
    from ..quant.precision import PrecisionMap

    now = PrecisionMap(session.options.precision)
    return map_delta_us(session, now.with_(tensors, precision), march_file)


def map_delta_us(session: QuantState, precision, march_file=None) -> float:
    """µs the board latency changes by when the session's precision map is replaced by
    ``precision`` (a whole map: "reach X dB"'s price of its plan).  The board latency, because a node
    kept in float leaves the BPU's static estimate for the CPU."""
    from ..quant.precision import PrecisionMap
    from .precision import apply_precision

    march = load_march(march_file if march_file else session.options.march)
    sim = _simulator_for(session.graph, march)
    res = sim.update(session.concats())
    ctx = sim._state[0] if sim._state else None
    now = PrecisionMap(session.options.precision)
    a = apply_precision(res, session.graph, march, now, ctx=ctx)
    b = apply_precision(res, session.graph, march, PrecisionMap(precision), ctx=ctx)
    return b.board_us - a.board_us  # a float node leaves the static estimate: its price is on the board
