"""Running the calibration samples through onnxruntime and reducing each into statistics.

Two *lanes* (threads) share one onnxruntime session.  Each takes the next sample, loads it, runs
it, and reduces the outputs into the statistics when its turn comes: samples are reduced strictly
in order, so the moving-average states (the only order-dependent part of
:class:`~qtquant.calib.stats.TensorStats`) come out bit for bit as in one thread.  onnxruntime's
``Run`` is thread-safe and releases the GIL, Pillow's decoding and numpy's big loops release it
too, so while one lane reduces sample k the other runs sample k+1, and both cores stay busy without
onnxruntime's intra-op threads waiting on each other op by op.  At most one sample's outputs per
lane are alive.

The two runs in flight share the cores: the session gets ``cpu_count // LANES`` intra-op threads
(one each on 2 cores).  A pool of every core per run, as a one-lane run would have, oversubscribed
them: yolov8n_320 MinMax, 256 samples on 2 cores, 6.1-6.3 s with 2 threads a run against 5.3-5.4 s
with 1.  onnxruntime splits some kernels by the thread count, and another split rounds a few
activations differently (yolov8n_320: two 10x10 convolutions of the head, min/max within 2.5e-7 of
|x|max), so the statistics are those of any run with that many threads a session: ``--jobs N``'s
workers have ``cpu_count // (N * LANES)`` (:func:`session_threads`) and Ray's one, the same on 2 cores.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import numpy as np

from ..base.errors import CalibrationDataError, Cancelled, ModelError, first_line
from ..model.runtime import make_session
from ..runs.segments import chained_session, iter_segments
from ..runs.shipped import SEGMENT_NODES
from .augment import augment
from . import keep
from .keep import within_budget
from .sources import SampleRef, Source
from .stats import BINS, NonFiniteError, TensorStats, update_rows

__all__ = ["ChunkRunner", "run_chunk", "session_threads", "LANES", "ROWS_MIN", "ROWS_MAX_SIZE", "SPLIT_NODES"]

LANES = 2  # samples in flight: one reduced while the other runs
SPLIT_NODES = 10_000  # an augmented model above this many nodes runs as segments (see _session)
ROWS_MIN = 8  # tensors of one size reduced together from this many on (update_rows)
ROWS_MAX_SIZE = 4096  # ... when smaller than this (bigger ones pay numpy's per-call cost back)
# An in-sample calibration keeps the observed tensors' values of its check samples within this many
# bytes (all samples), by calib.keep's rule: the fidelity check's float reference is then the
# calibration run's own (20,000-node CNN, 4 samples: 164 MB, and a float session plus four runs fewer).


def session_threads(processes: int = 1) -> int:
    """Intra-op threads of each calibration session when ``processes`` runners share this machine
    (``--jobs N``): each runs :data:`LANES` samples at once, so the cores are split over
    ``processes * LANES`` runs in flight (one thread each on 2 cores, whatever N)."""
    return max(1, (os.cpu_count() or LANES) // (max(1, processes) * LANES))


class ChunkRunner:
    """One onnxruntime session of the augmented model, reused for any number of chunks (a Ray
    worker keeps one for its life).  Capturing the activations (this class) is kept apart from
    reducing them (:meth:`TensorStats.update`)."""

    def __init__(self, model, base_dir, names: list[str], input_names, *, threads: int = 0, stride: int = 1,
                 bins: int = BINS):
        self.names, self.stride, self.bins = list(names), stride, bins
        self.inputs = [n for n in names if n in input_names]
        run_names = [n for n in names if n not in input_names]
        aug, self.plan = augment(model, run_names)
        if not threads:
            # The lanes' runs share the cores (see the module's docstring; a lane reduces between
            # its runs, which leaves the histogram its core share).  And no spinning: busy-waiting
            # pool threads starve the lane that reduces.
            threads = session_threads()
        # No arena: its fragmentation let peak RSS creep up with the number of batches (yolov8n:
        # 271 MiB after 16 samples, 294 after 64; without it 262-263 whatever the count).
        self.sess = _session(aug, Path(base_dir) if base_dir else None, threads)

    def run(self, source: Source, refs: list[SampleRef], *, progress=None, cancel=None,
            kept: dict | None = None, keep_order=None, check_feeds: dict | None = None) -> dict[str, TensorStats]:
        return _run_refs(self, source, refs, progress, cancel, kept, keep_order, check_feeds)


def _session(aug, base_dir, threads):
    """The augmented model's session; above :data:`SPLIT_NODES` nodes a
    :class:`~qtquant.runs.segments.ChainedSession` of segments of about ``shipped.SEGMENT_NODES``
    nodes, cut where only observed tensors (graph outputs of ``aug``) cross, created two at a time.

    Why: onnxruntime creates a session on one thread, and small graphs cost less per node (they
    stay in cache): the 20,000-node CNN's augmented model took ~1.1 CPU seconds as one session.
    The values are the whole model's: no optimisation fuses nodes across a graph output, each
    segment's session has the same options (the same intra-op thread count), and what crosses a
    cut is handed on as fetched."""
    def make(m):
        return make_session(m, base_dir, threads=threads, spinning=False, arena=False)

    n = len(aug.graph.node)
    if n > SPLIT_NODES:
        shapes = _value_shapes(aug.graph)
        segs = iter_segments(aug, -(-n // SEGMENT_NODES), shapes.get, cross="outputs")
        if segs is not None:
            return chained_session(segs, make)
    return make(aug)


def _value_shapes(g) -> dict[str, tuple]:
    """Static shapes the model's value infos state (what a segment's inputs are typed with)."""
    out = {}
    for v in (*g.value_info, *g.input, *g.output):
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[v.name] = tuple(d.dim_value for d in dims)
    return out


def run_chunk(model, base_dir, names: list[str], source: Source, refs: list[SampleRef], *,
              progress=None, cancel=None, threads: int = 0, stride: int = 1,
              bins: int = BINS, kept: dict | None = None, keep_order=None,
              check_feeds: dict | None = None) -> dict[str, TensorStats]:
    """Run ``refs`` through the model and reduce them into statistics for ``names``.  ``kept``: a
    dict whose keys are refs to keep the values of, ``keep_order`` the tensors in the order they are
    kept by, ``check_feeds`` refs whose feeds to copy (see :func:`_run_refs`)."""
    runner = ChunkRunner(model, base_dir, names, source.specs, threads=threads, stride=stride, bins=bins)
    return runner.run(source, refs, progress=progress, cancel=cancel, kept=kept, keep_order=keep_order,
                      check_feeds=check_feeds)


class _Reducer:
    """Folds one sample's outputs into the statistics (called in sample order)."""

    def __init__(self, runner: ChunkRunner, kept: dict | None, keep_order=None, check_feeds: dict | None = None):
        self.plan, self.inputs, self.stride = runner.plan, runner.inputs, runner.stride
        self.check_feeds = check_feeds
        self.stats = {n: TensorStats(bins=runner.bins) for n in runner.names}
        self.kept, self.keep_order, self.keep_bytes = kept, keep_order, 0
        self.keep_names: list[str] | None = None  # chosen on the first check sample, the same for all

    def _keep(self, kept: dict, ref: SampleRef, work: list) -> None:
        """Keep the inputs and, by :func:`~qtquant.calib.keep.within_budget`, what fits of the rest
        in ``kept`` (:attr:`kept`, the check samples' values)."""
        values = dict(work)
        if self.keep_names is None:
            n = len(kept)  # the check samples
            size = {t: v.nbytes * n for t, v in work if isinstance(v, np.ndarray)}
            inputs = sum(size[i] for i in self.inputs)  # kept first: they tell the samples apart
            order = [t for t in (self.keep_order or self.plan.tensors) if t in size and t not in self.inputs]
            self.keep_names = [*self.inputs, *within_budget(order, size.__getitem__, keep.VALUES_BUDGET - inputs)]
        # The values themselves, not copies: nothing writes into them.
        kept[ref] = {t: values[t] for t in self.keep_names if t in values}
        self.keep_bytes += sum(v.nbytes for v in kept[ref].values())
        if self.keep_bytes > keep.VALUES_BUDGET:  # a sample bigger than the first (data-dependent shapes)
            kept.clear()

    def __call__(self, ref: SampleRef, outs: list, feed: dict) -> None:
        stats = self.stats
        work = [*zip(self.plan.tensors, outs), *((n, feed[n]) for n in self.inputs)]
        if self.kept and ref in self.kept:
            self._keep(self.kept, ref, work)
        if self.check_feeds is not None and ref in self.check_feeds:
            # Copies: a feed can be a view of a whole loaded .npz array or of a memory-mapped .npy.
            self.check_feeds[ref] = {k: np.array(v, copy=True) for k, v in feed.items()}
        # Small float32 tensors of one size are reduced together (update_rows: the same statistics,
        # bit for bit, without one round of numpy calls per tensor); the others, and any row it
        # leaves (zeros only, NaN), one by one.
        by_size: dict[int, list] = {}
        for item in work:
            v = item[1]
            if isinstance(v, np.ndarray) and v.dtype == np.float32 and 0 < v.size < ROWS_MAX_SIZE:
                by_size.setdefault(v.size, []).append(item)
        batched: set[str] = set()
        for items in by_size.values():
            if len(items) < ROWS_MIN:
                continue
            rows = np.stack([v.reshape(-1) for _, v in items])
            left = set(update_rows([stats[n] for n, _ in items], rows, self.stride))
            batched.update(n for k, (n, _) in enumerate(items) if k not in left)
        for n, values in work:
            if n in batched:
                continue
            try:
                stats[n].update(values, stride=self.stride)
            except NonFiniteError:
                raise CalibrationDataError(f"tensor {n!r} has NaN or Inf values on {ref.label()}") from None


class _Lanes:
    """The lanes' shared state: the sample iterator, whose turn it is to reduce, the first failure."""

    def __init__(self, runner: ChunkRunner, source: Source, refs, reducer: "_Reducer"):
        self.runner, self.reduce = runner, reducer
        self.items = source.feeds(refs)
        self.hint = source.run_failure_hint()
        self.take = threading.Lock()  # the iterator (loading happens under it, in sample order)
        self.turn = threading.Condition()
        self.taken = 0  # samples handed to lanes
        self.folded = 0  # samples reduced, in order
        self.stop_at = len(refs)  # no sample from here on is reduced (a failure, a cancel)
        self.error: tuple[int, BaseException] | None = None  # (sample, what it raised): the earliest
        self.done: queue.SimpleQueue = queue.SimpleQueue()  # a token per reduced sample, then None per lane

    def fail(self, k: int, e: BaseException) -> None:
        with self.turn:
            if self.error is None or k < self.error[0]:
                self.error = (k, e)
            self.stop_at = min(self.stop_at, k)
            self.turn.notify_all()

    def stop(self) -> None:
        """Nothing more is reduced (a lane reducing now finishes that sample)."""
        with self.turn:
            self.stop_at = -1
            self.turn.notify_all()

    def lane(self) -> None:
        try:
            while self._one():
                pass
        finally:
            self.done.put(None)

    def _one(self) -> bool:
        """Load, run and reduce the next sample; False when there is none left (or a stop)."""
        with self.take:
            k = self.taken
            if k >= self.stop_at:
                return False
            try:
                item = next(self.items, None)
            except BaseException as e:  # noqa: BLE001 - a bad sample: reported as the sample's error
                self.fail(k, e)
                return False
            if item is None:
                return False
            self.taken += 1
        ref, feed = item
        plan = self.runner.plan
        try:
            outs = self.runner.sess.run(list(plan.fetch), feed) if plan.fetch else []
        except Exception as e:  # onnxruntime raises its own types; report one line
            self.fail(k, ModelError(f"onnxruntime failed on {ref.label()}: {first_line(e)}{self.hint}"))
            return False
        with self.turn:
            while self.folded != k and k < self.stop_at:
                self.turn.wait()
            if k >= self.stop_at:
                return False
        try:
            self.reduce(ref, outs, feed)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            self.fail(k, e)
            return False
        del outs, feed
        with self.turn:
            self.folded += 1
            self.turn.notify_all()
        self.done.put(k)
        return True


def _run_refs(runner: ChunkRunner, source: Source, refs, progress, cancel, kept=None,
              keep_order=None, check_feeds=None) -> dict[str, TensorStats]:
    """Statistics of ``refs``, run and reduced on :data:`LANES` lanes; ``progress`` and ``cancel``
    are called from this thread, between samples.

    ``kept``: refs -> None on entry; each of those refs gets the values of the model inputs and of
    the observed tensors that fit in :data:`~qtquant.calib.keep.VALUES_BUDGET` over all of them, taken in
    ``keep_order`` (:func:`~qtquant.calib.keep.keep_order`; default: the fetch order) by
    :func:`~qtquant.calib.keep.within_budget` (name -> array, as fetched).  ``kept`` is emptied
    when the inputs alone do not fit.  ``check_feeds``: refs -> None on entry, each ref's feed
    (copied) on return.
    """
    reducer = _Reducer(runner, kept, keep_order, check_feeds)
    total = len(refs)
    if cancel is not None and cancel():
        raise Cancelled("calibration cancelled")
    state = _Lanes(runner, source, refs, reducer)
    lanes = [threading.Thread(target=state.lane, name=f"qtquant-calib-lane-{i}", daemon=True)
             for i in range(min(LANES, max(total, 1)))]
    for t in lanes:
        t.start()
    done, running = 0, len(lanes)
    try:
        while running:
            token = state.done.get()
            if token is None:
                running -= 1
                continue
            done += 1
            if progress is not None:
                progress(done, total)
            if done < total and cancel is not None and cancel():
                raise Cancelled("calibration cancelled")
    finally:
        state.stop()
        for t in lanes:
            t.join()
    if state.error is not None:
        raise state.error[1]
    return reducer.stats
