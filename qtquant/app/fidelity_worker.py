"""The fidelity check in a child process, for the desktop app.

:func:`~qtquant.fidelity.measure.measure_session` builds a QDQ model and an onnxruntime session per
edit.  In a thread of the GUI process that holds the interpreter lock for long stretches no
``sys.setswitchinterval`` can cut: destroying an onnxruntime session of a 60,000-node QDQ
graph takes some 0.8 s with the lock held, and the garbage collector walks every object the
build made.  The window would freeze each time.  Here the child process does all of that,
and the parent only sends the domain maps (in parts, see :mod:`qtquant.base.childproc`) and waits on
a pipe, without the lock.

The child keeps its caches between requests (the float run and the prefetched activations
of :mod:`qtquant.fidelity.measure`), as long as the model and calibration stay the same.  A request
is cancelled cooperatively: the child polls a shared flag between samples.  Messages are
pickled over a private pipe between this process and its own child; nothing read from a user
file is ever unpickled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from ..base import childproc
from ..base.errors import BadInputError, Cancelled

if TYPE_CHECKING:
    from ..calib import CalibrationResult
    from ..calib.state import SessionState
    from ..fidelity.report import Fidelity
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo
    from ..quant.domains import DomainMap
    from ..quant.groups import GroupSet
    from ..quant.outputs import OutputMode
    from .gcpolicy import Collector
    from .options import Options
    from .snapshot import Snapshot

__all__ = ["FidelityWorker"]

# A message off the pipe from the parent: ("load", ...) or ("measure", ...), its first item saying
# what the rest is (unpickled from this process's own parent only).
Request: TypeAlias = "tuple[Any, ...]"


@dataclass
class _Holdout:
    """What the child's measure_session reads of a CalibrationResult."""

    holdout: list[Mapping[str, np.ndarray]]  # the check samples' feeds
    in_sample: bool = False
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # the no-signal rule reads them
    config: None = None  # (the data settings: only the parent's synthetic-data hint reads them)
    check_values: list[object] = field(default_factory=list)  # none kept: the child runs the float model itself


@dataclass(eq=False)  # identity: measure_session's caches are keyed by it
class _Loaded:
    """The child's session: one object per loaded model, so measure_session's caches last."""

    graph: Graph
    calibration: _Holdout
    qdq: QdqInfo | None = None  # a quantized file's (the figures' reference is its float view)
    options: Options | None = None  # (None until the first request sets them)
    groups: GroupSet | None = None
    revision: int = -1
    domains: DomainMap | None = None
    baseline_domains: DomainMap | None = None


def _parts(dm: DomainMap) -> dict[str, object]:
    return {f.name: getattr(dm, f.name) for f in fields(dm)}


class _Server:
    """The handler in the child: ``("load", ...)`` then any number of ``("measure", ...)``.

    Garbage collection follows the app's policy (:mod:`qtquant.app.gcpolicy`), here too: none in
    the middle of a request, the thresholds' collections run in :meth:`idle` (after the reply went),
    and the loaded model is frozen out of them.  At Python's own thresholds a full collection fell
    inside a check now and then and walked the child's heap (the graph, the programs, the kept
    runs): in benchmarks/gui_refresh.py on yolov8n_320 (gc.callbacks), 24.7 ms while the policy
    edit's request was unpickled (its "ipc" 29 ms; 3-6 ms without) and 19.0 ms in a Resize drop's
    build; the young collections inside a mid-network share's check were 1-2 ms more."""

    def __init__(self) -> None:
        self.loaded: _Loaded | None = None
        self._collector: Collector | None = None

    def idle(self) -> None:
        """Between requests (the reply sent): the check's re-run session destroyed, then the
        collections the thresholds ask for."""
        from ..runs.incremental import release_sessions

        release_sessions()
        if self._collector is not None:
            self._collector.check()

    def __call__(self, request: Request, link: childproc.Link) -> Fidelity | None:
        if self._collector is None:
            from .gcpolicy import Collector

            Collector.take_over()
            self._collector = Collector()
        if request[0] == "load":
            import gc

            import onnx

            from .gcpolicy import long_lived, model_closing
            from ..model.graph import graph_from_model

            _, model_bytes, path, sha256, holdout, in_sample, ranges, qdq = request
            # The model replaced (and its caches: runs, programs, kept tensors) goes now, cycles
            # and all: a load is rare and slow anyway, and the thresholds would wait 100 requests.
            model_closing()
            self.loaded = None
            gc.collect()
            graph = graph_from_model(onnx.ModelProto.FromString(model_bytes), path=path, sha256=sha256)
            self.loaded = _Loaded(graph, _Holdout(holdout, in_sample, ranges), qdq)
            long_lived()
            return None
        from ..quant.domains import DomainMap
        from ..fidelity.measure import measure_session
        from ..quant.outputs import OutputMode

        _, options, groups, revision, after, before, mode = request
        s = self.loaded
        if s is None:
            raise BadInputError("the fidelity worker has no model loaded")
        s.options, s.groups, s.revision = options, groups, revision
        # None: the same map as in the previous request.  Keeping the object keeps
        # measure_session's cached run of it (the baseline changes only on recalibration).
        if after is not None:
            s.domains = DomainMap(**after)
        if before == "same":  # no groups: one map, measured once
            s.baseline_domains = s.domains
        elif before is not None:
            s.baseline_domains = DomainMap(**before)
        c0 = time.process_time()
        # The child's state is what measure_session reads of a session (a partial SessionState: the
        # calibration is its check samples and ranges only), not a whole one.
        res: Fidelity = measure_session(cast("SessionState", s), cancel=link.cancelled, output_mode=OutputMode(mode),
                              follow_edits=True)
        # CPU this process spent on the check (all its threads): against the check's wall time it
        # shows how much of that time the child waited for a core (it runs at a lower priority).
        res.trace["cpu"] = (time.process_time() - c0) * 1e3
        return res


class FidelityWorker:
    """``measure(snapshot)`` like :func:`~qtquant.fidelity.measure.measure_session`, run in a child process.

    Thread-safe: a request waits for the previous one (a superseded request is cancelled by
    its caller and returns quickly).  The child starts on first use and is replaced if it dies.
    """

    _shared: "FidelityWorker | None" = None

    @classmethod
    def shared(cls) -> "FidelityWorker":
        """One worker per process: windows take turns (a child costs a second to start and
        holds the model and its float activations)."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        self._child = childproc.Child(_Server(), name="qtquant-fidelity", what="the fidelity worker process",
                                      failed="fidelity check failed: {message}")
        self._lock = threading.Lock()
        self._loaded: tuple[Graph, CalibrationResult] | None = None  # (graph, calibration) the child holds
        self._sent: tuple[DomainMap | None, DomainMap | None] = (None, None)  # the (after, before) maps it holds

    def close(self) -> None:
        with self._lock:
            self._child.close()

    def abort(self) -> None:
        """Kill the child now, even in the middle of a request (which then fails): for a process
        that exits without the result (a screenshot taken before the check finished)."""
        self._child.close(grace=0)

    def measure(self, snapshot: Snapshot, *, cancel: Callable[[], bool] | None = None,
                quantize_outputs: bool | None = None, output_mode: OutputMode | None = None) -> Fidelity:
        """The Fidelity of ``snapshot``: a :class:`qtquant.app.Snapshot` taken where the session is
        edited (the GUI thread), or a session no one edits meanwhile."""
        from ..fidelity.measure import output_mode_of

        t0 = time.perf_counter()
        mode = output_mode_of(quantize_outputs, output_mode).value
        after, before = snapshot.domains, snapshot.baseline_domains
        graph, cal = snapshot.graph, snapshot.calibration
        if cal is None or not cal.holdout:
            raise BadInputError("the fidelity check needs check samples (held-back or in-sample); calibrate first")
        with self._lock:
            if cancel is not None and cancel():
                raise Cancelled("fidelity check cancelled")
            if self._child.ensure_running():
                self._loaded, self._sent = None, (None, None)
            if self._loaded is None or self._loaded[0] is not graph or self._loaded[1] is not cal:
                self._loaded = None
                self._child.call(("load", graph.model_bytes(), graph.path, graph.sha256, list(cal.holdout),
                                  cal.in_sample, dict(cal.ranges), snapshot.qdq),
                                 cancel=cancel)
                self._loaded, self._sent = (graph, cal), (None, None)
            sent_after, sent_before = self._sent
            self._sent = (None, None)  # unknown until the child answers
            send_after = _parts(after) if after is not sent_after else None
            if before is sent_before:
                send_before = None
            else:
                send_before = "same" if before is after else _parts(before)
            t1 = time.perf_counter()
            res: Fidelity = self._child.call(("measure", snapshot.options, snapshot.groups, snapshot.revision,
                                    send_after, send_before, mode), cancel=cancel)
            self._sent = (after, before)
            t2 = time.perf_counter()
            # the parent's side: waiting for an earlier request and the model, then the round trip
            res.trace.update(before_call=(t1 - t0) * 1e3, call=(t2 - t1) * 1e3)
            return res
