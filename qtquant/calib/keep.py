"""Which float activations of the check samples are kept in memory: one rule, one budget.

Two places keep them for later.  An in-sample calibration keeps what its own run computed for the
check samples, so the fidelity check needs no float run of its own
(:attr:`~qtquant.calib.engine.CalibrationResult.check_values`).  The fidelity check's first float
run prefetches the tensors later edits' groups will ask for (``qtquant.fidelity.checkruns.prefetchable``).
Both keep, within :data:`VALUES_BUDGET` bytes over all check samples, the model outputs and every
Concat's inputs and output first (the check always compares the outputs, and shares join a
Concat's tensors), then the rest in the order given, each while it still fits.  All or nothing made
yolov8n_320 (155 observed tensors, 7 samples: 261 MB) keep nothing and pay a float run.
"""

from __future__ import annotations

__all__ = ["VALUES_BUDGET", "keep_order", "within_budget"]

VALUES_BUDGET = 256 << 20  # bytes, all check samples together


def keep_order(graph, names) -> list[str]:
    """``names`` with the model outputs first, then Concat inputs and outputs (graph order), then
    the rest in their given order."""
    have = set(names)
    first = [*graph.outputs, *(t for n in graph.nodes_of("Concat") for t in (*n.inputs, *n.outputs))]
    return list(dict.fromkeys([t for t in first if t in have] + list(names)))


def within_budget(order, size_of, budget: int = VALUES_BUDGET) -> list[str]:
    """The names of ``order`` kept: each in turn while the total of ``size_of(name)`` fits ``budget``."""
    names, total = [], 0
    for t in order:
        size = size_of(t)
        if total + size <= budget:
            names.append(t)
            total += size
    return names
