"""The check samples run through one onnxruntime session, several at a time (the fidelity check's
runs and the incremental runner's re-runs)."""

from __future__ import annotations

import os

from ..base.errors import Cancelled, ModelError, first_line

__all__ = ["run_session", "sample_threads"]


def run_session(sess, names, feeds, cancel, threads: int = 1) -> list[dict]:
    """``names`` of ``sess`` for each feed, cancellable between samples; onnxruntime's errors
    become a one-line :class:`ModelError`.  ``threads`` > 1: that many samples at a time, each
    ``run`` on its own thread (onnxruntime's ``Run`` is thread-safe and releases the GIL): the
    small kernels of one sample leave the session's intra-op threads idle much of the time
    (yolov8n_320's int8 program, 7 samples on 2 busy cores: 250-380 ms against 350-395 ms one
    after another).  The results are the same; their order is the feeds'."""

    def one(feed):
        if cancel is not None and cancel():
            raise Cancelled("fidelity check cancelled")
        try:
            out = sess.run(names, feed)
        except Exception as e:  # onnxruntime's errors are not ours: make them a one-line message
            raise ModelError(f"fidelity check failed in onnxruntime: {first_line(e)}") from None
        return dict(zip(names, out))

    feeds = list(feeds)
    if threads <= 1 or len(feeds) <= 1:
        return [one(f) for f in feeds]
    return list(_sample_pool(threads).map(one, feeds))


_pools: dict = {}


def _sample_pool(threads: int):
    """One pool per size for the life of the process: starting threads per check cost up to 20 ms
    on a loaded machine."""
    pool = _pools.get(threads)
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor

        pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="qtquant-sample")
    return pool


def sample_threads() -> int:
    """Samples the runner's sessions run side by side: one per core, at most two (beside the
    window's own thread and the perf simulation)."""
    return max(1, min(2, os.cpu_count() or 1))
