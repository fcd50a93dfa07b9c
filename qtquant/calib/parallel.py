"""``--jobs N``: split the calibration batches over worker processes and merge their statistics.

Workers are started with the ``spawn`` method (safe next to Qt threads and on every OS), rebuild
the onnxruntime session from the serialized model, reduce their contiguous share of the samples,
and send back :class:`~qtquant.calib.stats.TensorStats`.  Merging the shares in order gives
exactly the single-process statistics (see :mod:`qtquant.calib.stats`), so a Ray or Dask backend
could reuse the same merge.  Cancelling terminates the workers at once.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue

from .. import errors
from ..errors import Cancelled, QtQuantError
from .stats import TensorStats

__all__ = ["run_parallel", "split_even"]

_POLL_S = 0.05
_PART = 256  # tensors per message


def split_even(items: list, parts: int) -> list[list]:
    """``items`` cut into ``parts`` contiguous, nearly equal chunks (order kept)."""
    n = len(items)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(parts)]


def _worker(idx, q, model_bytes, base_dir, names, source, refs, threads, stride, part=256):
    try:
        import onnx

        from .engine import run_chunk

        model = onnx.ModelProto.FromString(model_bytes)
        stats = run_chunk(model, base_dir, names, source, refs, threads=threads, stride=stride,
                          progress=lambda done, total: q.put(("progress", idx, done)))
        # In parts: the parent unpickles each message in one call holding the GIL, and 20,000
        # tensors' histograms are some 650 MB (0.3 s).  Parts keep the parent's GUI responsive.
        items = list(stats.items())
        for k in range(0, len(items), part):
            q.put(("part", idx, dict(items[k:k + part])))
        q.put(("done", idx, None))
    except QtQuantError as e:
        q.put(("error", idx, type(e).__name__, str(e)))
    except BaseException as e:  # report, never hang the parent
        q.put(("error", idx, "", f"{type(e).__name__}: {e}"))


def run_parallel(graph, names, source, refs, jobs: int, *, stride: int = 1, progress=None, cancel=None) -> dict[str, TensorStats]:
    chunks = [c for c in split_even(list(refs), jobs) if c]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    threads = max(1, (os.cpu_count() or 1) // len(chunks))
    model_bytes = graph.model_bytes()
    base_dir = str(graph.base_dir) if graph.base_dir else ""
    procs = [ctx.Process(target=_worker, args=(i, q, model_bytes, base_dir, list(names), source, c, threads, stride, _PART),
                         daemon=True, name=f"qtquant-calib-{i}") for i, c in enumerate(chunks)]
    total = len(refs)
    done = [0] * len(chunks)
    results: dict[int, dict] = {}
    parts: dict[int, dict] = {i: {} for i in range(len(chunks))}
    try:
        for p in procs:
            p.start()
        while len(results) < len(chunks):
            if cancel is not None and cancel():
                raise Cancelled("calibration cancelled")
            try:
                msg = q.get(timeout=_POLL_S)
            except queue.Empty:
                for i, p in enumerate(procs):
                    if i not in results and not p.is_alive() and p.exitcode not in (0, None):
                        raise QtQuantError(f"calibration worker {i} stopped unexpectedly "
                                           f"(exit code {p.exitcode})")
                continue
            kind, i = msg[0], msg[1]
            if kind == "progress":
                done[i] = msg[2]
                if progress is not None:
                    progress(sum(done), total)
            elif kind == "part":
                parts[i].update(msg[2])
            elif kind == "done":
                results[i] = parts.pop(i)
            else:
                raise errors.from_name(msg[2], msg[3], f"calibration worker {i} failed: {{message}}")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
        q.close()
    merged = {n: TensorStats() for n in names}
    for i in range(len(chunks)):
        for n in names:
            merged[n] = merged[n].merge(results[i][n])
    return merged
