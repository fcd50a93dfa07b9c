"""``--jobs N``: split the calibration batches over worker processes and merge their statistics.

Each worker (a :mod:`qtquant.base.childproc` child) rebuilds the onnxruntime session from the
serialized model, reduces its contiguous share of the samples, and sends back
:class:`~qtquant.calib.stats.TensorStats`.  Merging the shares in order gives exactly the
single-process statistics (see :mod:`qtquant.calib.stats`), so a Ray or Dask backend could reuse
the same merge.  Cancelling terminates the workers at once.
"""

from __future__ import annotations

from ..base import childproc
from .runner import run_chunk, session_threads
from .stats import BINS, TensorStats

__all__ = ["run_parallel", "split_even"]

# Tensors per message: the parent unpickles each message in one call holding the GIL, and 20,000
# tensors' histograms are some 650 MB (0.3 s).  Parts keep the parent's GUI responsive.
_PART = 256


def split_even(items: list, parts: int) -> list[list]:
    """``items`` cut into ``parts`` contiguous, nearly equal chunks (order kept)."""
    n = len(items)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(parts)]


def _calibrate_share(request, link) -> dict:
    import onnx

    model_bytes, base_dir, names, source, refs, threads, stride, bins = request
    return run_chunk(onnx.ModelProto.FromString(model_bytes), base_dir, names, source, refs, threads=threads,
                     stride=stride, bins=bins, progress=lambda done, total: link.progress(done))


def run_parallel(graph, names, source, refs, jobs: int, *, stride: int = 1, progress=None,
                 cancel=None, bins: int = BINS) -> dict[str, TensorStats]:
    chunks = [c for c in split_even(list(refs), jobs) if c]
    # Each worker runs LANES samples at once: cpu_count // jobs threads a session oversubscribed
    # the cores twice over (16 cores, --jobs 2: 2 x 2 runs of 8 threads).
    threads = session_threads(len(chunks))
    model_bytes = graph.model_bytes()
    base_dir = str(graph.base_dir) if graph.base_dir else ""
    workers = [childproc.Child(_calibrate_share, name=f"qtquant-calib-{i}", what=f"calibration worker {i}",
                               failed=f"calibration worker {i} failed: {{message}}", part=_PART,
                               hard_cancel="calibration cancelled", once=True) for i in range(len(chunks))]
    total = len(refs)
    done = [0] * len(chunks)

    def on_progress(i: int, n: int) -> None:
        done[i] = n
        if progress is not None:
            progress(sum(done), total)

    shares = childproc.run_all(workers, [(model_bytes, base_dir, list(names), source, c, threads, stride, bins)
                                         for c in chunks], cancel=cancel, progress=on_progress)
    merged = {n: TensorStats(bins=bins) for n in names}
    for share in shares:
        for n in names:
            merged[n] = merged[n].merge(share[n])
    return merged
