"""The perf simulator's results (:class:`~qtquant.perf.PerfResult`, its :class:`~qtquant.perf.LayerCost`
layers) read for the views: per-node latency and tags, the slowest layers, rescale costs, the edit price
and how sure the totals are.

``qtquant.perf`` and ``qtquant.fidelity.measure`` are imported on first use (:func:`simulator`,
:func:`fidelity_measure`): the window imports them when it chooses to, not every importer of the views.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...base.fileio.paths import StrPath
    from ...calib.state import SessionState
    from ...fidelity.measure import Fidelity
    from ...perf import PerfResult
    from ...perf.price import EditPrice
    from ..fidelity_worker import FidelityWorker
    from ..snapshot import Snapshot

__all__ = ["CHART_ROWS", "simulator", "edit_price_of", "confidences", "fidelity_measure", "node_us", "placed_on_cpu",
           "rescale_us_by_concat", "rescale_us_for_input", "top_layers", "num", "node_detail", "BOUND_ABBR"]

BOUND_ABBR = {"compute": "cmp", "memory": "mem", "overhead": "ovh"}  # the latency badge's bound tag


class Simulate(Protocol):
    """``qtquant.perf.simulate_session``: a session state's simulation (``baseline``: without its groups)."""

    def __call__(self, session: SessionState, march_file: StrPath | None = None, /, *,
                 baseline: bool = False) -> PerfResult: ...


class Measure(Protocol):
    """A fidelity check of a snapshot (``cancel()`` polled between samples)."""

    def __call__(self, snapshot: Snapshot, /, *, cancel: Callable[[], bool] | None = None) -> Fidelity: ...


def simulator() -> Simulate:
    """``qtquant.perf.simulate_session``."""
    from ...perf import simulate_session

    return simulate_session


def confidences(perf: PerfResult, march: str) -> tuple[str, str, str, str]:
    """(static short, static full, board short, board full): how sure the two latencies are, from the
    march fit's leave-one-out errors (``qtquant.perf.confidence``).  A march that does not load gives
    empty texts: the simulation of it fails too, and its message is where the perf job reports it."""
    from ...base.errors import MarchError
    from ...perf import load_march
    from ...perf.confidence import confidence
    from ...perf.march import FigureKind

    try:
        m = load_march(march)
    except MarchError:
        return "", "", "", ""
    s, b = confidence(m, perf.family, FigureKind.STATIC), confidence(m, perf.family, FigureKind.BOARD)
    return s.short, s.text, b.short, b.text


def edit_price_of(before: PerfResult | None, after: PerfResult | None) -> EditPrice | None:
    """``qtquant.perf.price.edit_price(before, after)``; None without both results."""
    if before is None or after is None:
        return None
    from ...perf.price import edit_price

    return edit_price(before, after)


def fidelity_measure(worker: FidelityWorker | None = None) -> Measure:
    """``qtquant.fidelity.measure.measure_session`` (following edits: one check per edit comes);
    with ``worker`` (a :class:`~qtquant.app.fidelity_worker.FidelityWorker`), the same check run in
    its child process."""
    from ...fidelity.measure import measure_session

    return worker.measure if worker is not None else partial(measure_session, follow_edits=True)


def num(x: float | None) -> float | None:
    """``x`` if it is a finite number, else None (a figure shown as "—")."""
    return x if x is not None and math.isfinite(x) else None


def node_us(perf: PerfResult | None) -> dict[str, float]:
    """Latency per graph node in µs (a Concat carries its rescales' cost)."""
    return perf.by_node() if perf is not None else {}


def placed_on_cpu(perf: PerfResult | None) -> dict[str, tuple[str, float]]:
    """Node -> (why, µs on the CPU) for the nodes the march's compiler runs on its CPU whatever their
    precision (perf/placement.py), as the simulation priced them."""
    cost = getattr(perf, "precision", None)
    return {k: (n.placed, n.total_us) for k, n in cost.placed_nodes.items()} if cost is not None else {}


_detail_memo: tuple[PerfResult | None, dict[str, str]] = (None, {})  # (perf, tags) of the latest perf: computed once


def node_detail(perf: PerfResult | None) -> dict[str, str]:
    """Per graph node: what bounds its layer and what was fused into it, as the latency
    badge's tag ("mem", "cmp BN+Relu", "mem SiLU (LUT)"); nodes merged into another layer
    say where ("in /model.0/conv/Conv").  Remembered for the latest ``perf``, as top_layers."""
    if perf is None:
        return {}
    global _detail_memo
    if _detail_memo[0] is perf:
        return _detail_memo[1]
    out = _node_detail(perf)
    _detail_memo = (perf, out)
    return out


def _node_detail(perf: PerfResult) -> dict[str, str]:
    from ...perf.report import short_fused

    out: dict[str, str] = {}
    for layer in perf.layers:
        if layer.is_rescale:
            continue
        if layer.fused_into:
            out[layer.name] = f"in {layer.fused_into}"
            continue
        fused = short_fused(layer)
        out[layer.name] = (BOUND_ABBR.get(layer.bound, "") + (" " + fused if fused else "")).strip()
    return out


def rescale_us_by_concat(perf: PerfResult | None) -> dict[str, float]:
    """µs each Concat's scale mismatch costs (:meth:`PerfResult.rescale_cost_by_concat`); {} without perf."""
    return perf.rescale_cost_by_concat() if perf is not None else {}


def rescale_us_for_input(perf: PerfResult | None, concat: str, index: int) -> float | None:
    """Cost of the virtual rescale op ``<concat>_rescale_<index>``; None when the simulator made none."""
    layer = perf.layer(f"{concat}_rescale_{index}") if perf is not None else None
    return layer.total_us if layer is not None else None


ChartRow = tuple[str, str, float, bool]  # (name, op type, µs, on the CPU)
_top_memo: dict[int, tuple[PerfResult, list[ChartRow]]] = {}  # n -> (perf, rows): asked on every refresh


CHART_ROWS = 12  # layers in the perf dock's chart


def top_layers(perf: PerfResult | None, n: int = CHART_ROWS) -> list[ChartRow]:
    """(name, op type, µs, on the CPU) of the n slowest layers, rescales included; a node kept in float
    runs on the CPU (its µs are on the board estimate, not the static one).

    Remembered for the latest ``perf``: 20,000 layers take ~0.1 s, which the perf job spends
    (it calls this once) rather than the GUI thread."""
    if perf is None:
        return []
    hit = _top_memo.get(n)
    if hit is not None and hit[0] is perf:
        return list(hit[1])
    prec = perf.precision
    cpu = {p.node for p in prec.nodes if p.device == "cpu"} if prec is not None else set()
    rows = sorted(((lc.name, lc.op_type, lc.total_us, lc.name in cpu) for lc in perf.layers), key=lambda r: -r[2])[:n]
    _top_memo[n] = (perf, rows)
    return list(rows)
