"""The histogram use case: a tensor's activation histogram and the range the export clips it to.

The calibration's statistics carry a histogram of every tensor they observed (a pass-through output
shares its source's); a tensor without one (statistics read from a file that keeps none) is run on
the check samples with onnxruntime, once, and remembered in :attr:`Session.histograms`.  The
inspector dock shows it (:func:`stored_histogram` on the GUI thread, :func:`compute_histogram` in
its background job); :func:`tensor_histogram` does both at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..calib.stats import TensorStats
    from ..model.graphmodel import Graph
    from ..model.scales import QParams
    from .session import Session

__all__ = ["Histogram", "BINS", "export_qparams", "clip_range", "stored_histogram", "histogram_feeds",
           "compute_histogram", "tensor_histogram"]

BINS = 128  # bins of a histogram computed on the check samples


@dataclass(frozen=True, eq=False)
class Histogram:
    tensor: str
    counts: np.ndarray
    edges: np.ndarray  # len(counts) + 1 bin edges
    clip: tuple[float, float] | None  # the range the export quantizes the tensor to; None: it ships in float


def export_qparams(session: Session, tensor: str) -> QParams | None:
    """The quantization the export gives ``tensor``: int8, int16 (its precision), or None when it ships
    in float (its precision, or an output Concat the export keeps in float).  The session must be ready."""
    if tensor in session.export_float():
        return None
    return session.domains.qparams_at(tensor, session.precision.of(tensor))


def clip_range(session: Session, tensor: str) -> tuple[float, float] | None:
    q = export_qparams(session, tensor)
    return (q.lo, q.hi) if q is not None else None


def _stats_of(session: Session, tensor: str) -> TensorStats | None:
    """The calibration statistics that observed ``tensor``: its own, else (a pass-through output shares
    its source's observer) those of a member of its natural domain."""
    cal = session.calibration
    if cal is None:
        return None
    st = cal.stats.get(tensor)
    if st is not None:
        return st
    return next((cal.stats[m] for m in session.domains.natural_of.get(tensor, ()) if m in cal.stats), None)


def stored_histogram(session: Session, tensor: str) -> Histogram | None:
    """``tensor``'s histogram from the calibration statistics or one computed before; None when it has
    to be computed (:func:`compute_histogram`) or the session has no scales yet."""
    if not session.ready:
        return None
    st = _stats_of(session, tensor)
    counts = st.hist if st is not None else None
    edges = st.edges if st is not None else None
    if counts is not None and edges is not None:
        return Histogram(tensor, counts, edges, clip_range(session, tensor))
    got = session.histograms.get(tensor)
    return Histogram(tensor, got[0], got[1], clip_range(session, tensor)) if got is not None else None


def histogram_feeds(session: Session) -> list[Mapping[str, np.ndarray]]:
    """The samples a histogram is computed on: the check samples, else one input of zeros."""
    cal = session.calibration
    feeds: list[Mapping[str, np.ndarray]] = list(cal.holdout) if cal is not None else []
    if not feeds:
        from ..model.runtime import zeros_feed

        feeds = [zeros_feed(session.graph)]
    return feeds


def compute_histogram(graph: Graph, feeds: Sequence[Mapping[str, np.ndarray]], tensor: str,
                      bins: int = BINS) -> tuple[np.ndarray, np.ndarray] | None:
    """(counts, edges) of ``tensor`` over ``feeds`` with onnxruntime, or None without a finite value.
    Reads only ``graph`` and ``feeds``: a background job runs it."""
    from ..model.runtime import make_session, with_outputs

    sess = make_session(with_outputs(graph.model, [tensor]), graph.base_dir)
    vals = np.concatenate([np.asarray(sess.run([tensor], f)[0], np.float64).ravel() for f in feeds])
    vals = vals[np.isfinite(vals)]
    return np.histogram(vals, bins=bins) if vals.size else None


def tensor_histogram(session: Session, tensor: str) -> Histogram | None:
    """``tensor``'s histogram, computed now (and remembered) when the statistics carry none; None
    before calibration or when the tensor takes no finite value."""
    hit = stored_histogram(session, tensor)
    if hit is not None or session.calibration is None:
        return hit
    got = compute_histogram(session.graph, histogram_feeds(session), tensor)
    if got is None:
        return None
    session.histograms[tensor] = got
    return stored_histogram(session, tensor)
