"""First MinMax calibration pass (to be replaced by the full engine)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import CalibrationDataError, Cancelled
from ..runtime import input_specs, make_session, with_outputs

__all__ = ["CalibConfig", "CalibrationResult", "TensorStats", "calibrate"]


@dataclass(frozen=True)
class CalibConfig:
    source: str = "synthetic"
    count: int = 8
    observer: str = "minmax"
    percentile: float = 99.99
    seed: int = 0
    holdout: int = 2


@dataclass
class TensorStats:
    min: float
    max: float
    hist: np.ndarray | None = None
    edges: np.ndarray | None = None

    @property
    def absmax(self) -> float:
        return max(abs(self.min), abs(self.max))


@dataclass
class CalibrationResult:
    stats: dict[str, TensorStats]
    ranges: dict[str, tuple[float, float]]
    config: CalibConfig
    holdout: list = field(default_factory=list)
    batches: int = 0


def _synthetic(graph, n, seed):
    rng = np.random.default_rng(seed)
    specs = input_specs(graph)
    for _ in range(n):
        yield {k: rng.random(s, dtype=np.float32).astype(d) if d.kind == "f" else np.zeros(s, d)
               for k, (s, d) in specs.items()}


def calibrate(graph, config: CalibConfig = CalibConfig(), progress=None, cancel=None) -> CalibrationResult:
    names = list(graph.observed_tensors)
    sess = make_session(with_outputs(graph.model, names), graph.base_dir)
    mins = {n: np.inf for n in names}
    maxs = {n: -np.inf for n in names}
    samples = list(_synthetic(graph, config.count + config.holdout, config.seed))
    calib, holdout = samples[: config.count], samples[config.count:]
    for k, feed in enumerate(calib):
        if cancel is not None and cancel():
            raise Cancelled("calibration cancelled")
        outs = sess.run(names, feed)
        for n, v in zip(names, outs):
            if v.size:
                if not np.all(np.isfinite(v)):
                    raise CalibrationDataError(f"tensor {n!r} has NaN or Inf values during calibration")
                mins[n] = min(mins[n], float(v.min()))
                maxs[n] = max(maxs[n], float(v.max()))
        if progress:
            progress(k + 1, len(calib))
    stats = {n: TensorStats(mins[n], maxs[n]) for n in names if np.isfinite(mins[n])}
    ranges = {n: (s.min, s.max) for n, s in stats.items()}
    return CalibrationResult(stats, ranges, config, holdout, len(calib))
