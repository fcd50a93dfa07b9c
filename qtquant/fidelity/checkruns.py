"""The runs a fidelity check is made of, and their cache: the float run, the shipped model's
default-level runs (fresh sessions, segments of a big export, or the incremental runner after an
edit), the cross-check's reference run, and which activations the first float run prefetches.

Results are kept per graph and calibration (:data:`RUNS`, in the graph's derived state): the
"before" run once per baseline domain map, the "after" runs of the last few maps (an equal map
builds the same model, so an undo or redo back to a measured state runs nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
import threading
import time

import numpy as np

from ..calib import keep
from ..calib.keep import keep_order, within_budget
from ..runs.incremental import IncrementalRunner
from ..runs.programs import moved_domains
from ..runs.sampleruns import run_session
from ..model.derived import Slot
from ..model.modelcheck import FLOAT_TYPES, INTEGER_TYPES
from ..model.runtime import make_session
from ..runs.shipped import (REFERENCE_OFF_TEXT, layout_passes_off, reference_level, segments_of, session_text,
                      shipped_session, split_parts)

if TYPE_CHECKING:
    from ..quant.state import QuantState

__all__ = ["runtime_text", "KEEP_STATES", "trace", "HOST_DEFAULT"]

# The level of a run at this CPU's default int8 kernels (beside "default", qtquant's exact one).
HOST_DEFAULT = "host-default"

_trace = threading.local()


def trace(reset: bool = False) -> dict:
    """This thread's ms per step of the check under way (Fidelity.trace): build, program,
    prepare, session, run (the incremental runner's), figures, members, total."""
    if reset or not hasattr(_trace, "d"):
        _trace.d = {}
    return _trace.d


class RunCache:
    def __init__(self):
        self.calib_id = None
        self.float_out: list[dict] | None = None  # per sample: output -> array
        self.tensors: dict[str, list[np.ndarray]] = {}  # member tensor -> per-sample float values
        # (float tensors, level, precision) -> [(dm, per-sample outputs)], the baseline first, then
        # the latest few maps: an undo or redo to a map measured before is measured already.
        self.runs: dict[tuple, list] = {}
        self.slices = None
        self.figures: dict[tuple, tuple] = {}  # (id(run), scheme, outputs) -> (run, figures)
        self.member_sqnr: dict[tuple, float] = {}  # (tensor, qparams) -> SQNR dB
        self.member_signal: dict[str, float] = {}  # tensor -> its Σref² over the check samples
        self.sparse: dict | None = None  # output -> (firing, elements) of the sparse float outputs
        self.runner = None  # qtquant.runs.incremental.IncrementalRunner of the check samples
        self.runtime: dict[int, str] = {}  # id(a shipped-model run) -> how its session ran


# Per graph, not per session object: the app hands a new Snapshot to every check, and the float
# run and prefetched activations hold for the graph and calibration alike.
RUNS: Slot[RunCache] = Slot("fidelity runs", RunCache)


def compared_outputs(graph):
    """The outputs the check compares: float ones by SQNR, integer and bool ones (an ArgMax's class)
    by agreement (:class:`~qtquant.fidelity.metrics.AgreementSums`).  elem_type 0: not typed in the file;
    compared as what onnxruntime gives.  Strings and sequences are not compared."""
    return [o for o in graph.outputs if (t := graph.tensors.get(o)) is not None
            and (t.elem_type in FLOAT_TYPES or t.elem_type in INTEGER_TYPES or t.elem_type == 0)]



def runtime_text(model=None, segments: int = 1) -> str:
    """How the shipped model runs in the check: default session options (on a big ``model``
    without a layout pass, :func:`~qtquant.runs.shipped.layout_passes_off`; in ``segments``, see
    :func:`~qtquant.runs.shipped.shipped_session`)."""
    return session_text(layout_passes_off(model) if model is not None else (), segments)


def run_outputs(model, base_dir, names, feeds, cancel, level="basic"):
    off = layout_passes_off(model) if level == "default" else ()
    # spinning threads starve the GUI
    sess = make_session(model, base_dir, spinning=False, level=level, disabled=off)
    return run_session(sess, names, feeds, cancel)


def _shape_of(graph):
    """The float model's static shapes by tensor name (what a QuantizeLinear of the export reads)."""
    def shape_of(name):
        t = graph.tensors.get(name)
        return None if t is None else t.shape
    return shape_of


def _host_default_run(model, graph, names, feeds, cancel):
    """``model`` as a user's default session runs it on this CPU (no precision mode): the second
    figure a report gives where this CPU's default int8 kernels are not exact
    (:attr:`~qtquant.model.int8path.Int8Path.default_exact`)."""
    sess = shipped_session(model, graph.base_dir, shape_of=_shape_of(graph), exact_int8=False)
    return run_session(sess, names, feeds, cancel)


def _reference_run(model, graph, names, feeds, cancel):
    """The cross-check's run of ``model``: Q/DQ evaluated in float (basic optimisations; on a big
    graph none at all, :func:`~qtquant.runs.shipped.reference_level`, and in segments)."""
    sess = shipped_session(model, graph.base_dir, shape_of=_shape_of(graph), level=reference_level(model))
    return run_session(sess, names, feeds, cancel)


KEEP_STATES = 6  # domain maps whose runs are kept besides the baseline's


def _run_key(session: QuantState, float_tensors, level, precision=None):
    # The precision is part of the program that ships: the same domains at other precisions are another run.
    # ``precision`` None: the session's.
    if precision is None:
        precision = session.options.precision
    return (float_tensors, level, precision)


def _same(a, b) -> bool:
    """Two (domain map, precision) pairs build the same model."""
    return (a[0] is b[0] or a[0] == b[0]) and a[1] == b[1]


def _cached_run(cache, key, dm):
    # Equal maps build the same model, so a map equal to one measured before reuses its run.
    runs = cache.runs.setdefault(key, [])
    for i, (m, res) in enumerate(runs):
        if m is dm or m == dm:
            if i:
                runs.append(runs.pop(i))
            return res
    return None


def _store_run(session, cache, key, dm, res) -> None:
    base = session.baseline_domains
    runs = cache.runs.setdefault(key, [])
    runs.append((dm, res))
    first = next((r for r in runs if r[0] is base or r[0] == base), None)
    cache.runs[key] = ([first] if first else []) + [r for r in runs if r is not first][-KEEP_STATES:]


def _shipped_runs(session, cache, jobs, outs, feeds, cancel, float_tensors, follow_edits=False,
                  segments=None, steps=None, builds=None) -> list:
    """The default-level runs of ``jobs`` ((dm, precision, model) triples), one after another (the runner
    keeps state; ``builds``: id(model) -> the QdqBuild that made it).  With ``follow_edits``:
    onnxruntime's program of the exported file, re-run only where the edit changed it
    (qtquant.runs.incremental; the same outputs as a fresh default session, bit for bit).  Without: each
    model in a fresh default session (no edit follows, so the runner's second optimisation for its
    reuse check would buy nothing)."""
    steps = trace() if steps is None else steps  # (the caller's: this may run on a pool thread)
    from ..export import qdq

    res = []
    check = object()  # the runner's token for the models of this check
    for dm, prec, model in jobs:
        if not follow_edits or split_parts(model) > 1:
            # A fresh default session (also the runner's above its MAX_NODES); above SPLIT_NODES in
            # segments created side by side (shipped.shipped_session: bit-identical outputs), said.
            sess = shipped_session(model, session.graph.base_dir, shape_of=_shape_of(session.graph),
                                   segments=(segments or {}).get(id(model), False))
            res.append(run_session(sess, outs, feeds, cancel))
            cache.runtime[id(res[-1])] = runtime_text(model, getattr(sess, "segments", 1))
            continue
        if cache.runner is None:
            cache.runner = IncrementalRunner(feeds)
        res.append(cache.runner.run(model, outs, cancel, session.graph.base_dir,
                                    moved=lambda dm=dm, prec=prec: qdq.build_qdq_model(
                                        session, moved_domains(dm), float_tensors=float_tensors,
                                        precision=prec).model,
                                    build=(builds or {}).get(id(model)), check=check))
        for k, v in cache.runner.times.items():
            steps[k] = steps.get(k, 0.0) + v
    return res


def qdq_outputs_many(session, cache, outs, feeds, cancel, float_tensors, wanted, first=None, meanwhile=None,
                      follow_edits=False):
    """Per ``(dm, level)`` of ``wanted``: the QDQ model's outputs on ``feeds``; and the result of
    ``first`` (a callable: the float run), run before them in the same pool.  ``meanwhile()`` is
    called in this thread once the models are built and their sessions under way.

    Each domain map's model is built once, whatever the levels it runs at, and the sessions not
    cached yet are created side by side on two threads: onnxruntime releases the GIL while it
    optimises a graph, and on a 20,000-node export that is seconds per session, so the float run
    and the cross-check's basic-level session take no wall time beside the default one."""
    got, todo = [], []
    for dm, level, *prec in wanted:  # (dm, level[, precision: None for the session's])
        key = _run_key(session, float_tensors, level, prec[0] if prec else None)
        res = _cached_run(cache, key, dm)
        if res is None and not any(k == key and (d is dm or d == dm) for k, d, _ in todo):
            todo.append((key, dm, level))
        got.append((key, dm, res))
    first_result = None
    if todo or first is not None:
        from concurrent.futures import ThreadPoolExecutor

        from ..export import qdq

        models, builds = [], {}  # ((dm, precision), model): one build per map and precision

        def model_of(dm, key):
            return next((m for pair, m in models if _same(pair, (dm, key[2]))), None)
        # One run and nothing beside it (the GUI's check after an edit): this thread runs it.
        alone = first is None and meanwhile is None and len(todo) == 1
        with _Inline() if alone else ThreadPoolExecutor(2, thread_name_prefix="qtquant-fidelity") as pool:
            pre = pool.submit(first) if first is not None else None
            futs = {}
            try:
                for key, dm, level in todo:
                    model = model_of(dm, key)
                    if model is None:  # built here, while the float run goes on in onnxruntime
                        t0 = time.perf_counter()
                        build = qdq.build_qdq_model(session, dm, float_tensors=float_tensors, precision=key[2],
                                                    record=follow_edits)
                        model = build.model
                        builds[id(model)] = build
                        trace()["build"] = trace().get("build", 0.0) + (time.perf_counter() - t0) * 1e3
                        models.append(((dm, key[2]), model))
                shipped = [(dm, key[2], model_of(dm, key)) for key, dm, level in todo if level == "default"]
                if shipped:
                    # A big export's segments are cut here, before the pool thread starts: cutting is
                    # Python work, and beside ``meanwhile`` (the perf simulation) it only took turns.
                    segs = {id(m): segments_of(m, _shape_of(session.graph)) for _, _, m in shipped
                            if split_parts(m) > 1}
                    futs["default"] = pool.submit(_shipped_runs, session, cache, shipped, outs, feeds, cancel,
                                                  float_tensors, follow_edits, segs, trace(), builds)
                for i, (key, dm, level) in enumerate(todo):
                    if level == HOST_DEFAULT:
                        futs[i] = pool.submit(_host_default_run, model_of(dm, key), session.graph, outs, feeds, cancel)
                    elif level != "default":
                        model = model_of(dm, key)
                        if reference_level(model) is not None:  # (None: too big, no cross-check)
                            futs[i] = pool.submit(_reference_run, model, session.graph, outs, feeds, cancel)
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None
            except BaseException:
                for f in [pre, *futs.values()]:
                    if f is not None:
                        f.cancel()  # the ones not started; the pool waits for the others
                raise
            shipped_res = iter(futs["default"].result() if "default" in futs else ())
            done = [next(shipped_res) if level == "default" else futs[i].result() if i in futs else None
                    for i, (_, _, level) in enumerate(todo)]
            first_result = pre.result() if pre is not None else None
        for (key, dm, level), res in zip(todo, done):
            if res is None:
                continue  # a cross-check left out
            _store_run(session, cache, key, dm, res)
            if level == "default":
                cache.runtime.setdefault(id(res), runtime_text(model_of(dm, key)))
            elif level == HOST_DEFAULT:
                continue
            elif reference_level(model_of(dm, key)) != "basic":
                cache.runtime[id(res)] = REFERENCE_OFF_TEXT
    if meanwhile is not None:
        meanwhile()
    out = [res if res is not None else _cached_run(cache, key, dm) for key, dm, res in got]
    return out, first_result


class _Inline:
    """A pool whose ``submit`` runs the call at once in this thread: starting two threads for one
    run cost up to 20 ms of an edit's check on a loaded machine."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def submit(fn, *args):
        from concurrent.futures import Future

        f = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # raised where the pool's future would raise it: at .result()
            f.set_exception(e)
        return f


def prefetchable(graph, samples: int) -> list[str]:
    """The activations the first float run fetches for later edits' group members, within
    :data:`~qtquant.calib.keep.VALUES_BUDGET`, by the rule calibration keeps its check values by
    (:mod:`qtquant.calib.keep`):
    the outputs and a Concat's inputs and output first (what shares join), then the rest in graph
    order while they fit.  (All or nothing made a model whose activations pass the budget pay a
    float run of its own at every edit that brought a new member: yolov8n_320 ~300 ms.)"""
    sizes = {}
    for t in graph.quantized_tensors:
        shape = graph.tensors[t].shape
        if not shape or any(d is None for d in shape):
            return []  # unknown sizes: fetch members on demand instead
        sizes[t] = math.prod(shape) * 4 * samples  # (np.prod per tensor: 0.1 s on the 20k CNN)
    return within_budget(keep_order(graph, list(sizes)), sizes.__getitem__, keep.VALUES_BUDGET)
