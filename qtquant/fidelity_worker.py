"""The fidelity check in a child process, for the desktop app.

:func:`~qtquant.fidelity.measure_session` builds a QDQ model and an onnxruntime session per
edit.  In a thread of the GUI process that holds the interpreter lock for long stretches no
``sys.setswitchinterval`` can cut: destroying an onnxruntime session of a 60,000-node QDQ
graph takes some 0.8 s with the lock held, and the garbage collector walks every object the
build made.  The window would freeze each time.  Here the child process does all of that,
and the parent only sends the domain maps and waits on a pipe, without the lock.

The child keeps its caches between requests (the float run and the prefetched activations
of :mod:`qtquant.fidelity`), as long as the model and calibration stay the same.  A request
is cancelled cooperatively: the child polls a shared flag between samples.  Messages are
pickled over a private pipe between this process and its own child; nothing read from a user
file is ever unpickled.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from dataclasses import dataclass

from . import errors
from .errors import Cancelled, QtQuantError

__all__ = ["FidelityWorker", "Snapshot"]

_POLL_S = 0.02


@dataclass
class _Holdout:
    """What the child's measure_session reads of a CalibrationResult."""

    holdout: list
    in_sample: bool = False
    ranges: dict | None = None  # the calibrated ranges: the no-signal rule reads them


class Snapshot:
    """What a fidelity request reads of a Session, fixed at one moment (on the GUI thread):
    the worker thread that sends it must not read a session the next edit is changing."""

    def __init__(self, session):
        from .groups import GroupSet

        self.graph = session.graph
        self.calibration = session.calibration
        self.options = session.options
        self.revision = session.revision
        self.groups = GroupSet(list(session.groups.groups), session.groups.next_id)
        self.domains = session.domains
        self.baseline_domains = session.baseline_domains


class _ChildSession:
    """The parts of a Session that :func:`measure_session` and the QDQ build read."""

    def __init__(self, graph, calibration):
        self.graph = graph
        self.calibration = calibration
        self.options = None
        self.groups = None
        self.revision = -1
        self.domains = self.baseline_domains = None


_PART = 1000  # dict entries per message (pickling one holds the GIL ~5 ms on a big graph)


def _dm_messages(slot: str, dm):
    """A domain map as several small messages: pickling a 20,000-tensor map in one call holds
    the parent's GIL ~0.1 s (the GUI freezes that long)."""
    yield ("dm", slot, None, {k: v for k, v in vars(dm).items() if not isinstance(v, dict)})
    for k, v in vars(dm).items():
        if isinstance(v, dict):
            items = list(v.items())
            for i in range(0, max(len(items), 1), _PART):
                yield ("dm", slot, k, items[i:i + _PART])


def _dm_receive(pending: dict, msg) -> None:
    _, slot, key, payload = msg
    if key is None:
        from .domains import DomainMap

        dm = pending[slot] = object.__new__(DomainMap)
        dm.__dict__.update(payload)
    else:
        pending[slot].__dict__.setdefault(key, {}).update(payload)


def _child(conn, cancel_flag) -> None:
    import onnx

    from .fidelity import measure_session
    from .graph import graph_from_model
    from .outputs import OutputMode

    session = None
    pending: dict = {}  # slot -> DomainMap being received
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        try:
            if kind == "stop":
                return
            if kind == "dm":
                _dm_receive(pending, msg)
                continue
            if kind == "load":
                _, model_bytes, path, sha256, holdout, in_sample, ranges = msg
                model = onnx.ModelProto.FromString(model_bytes)
                graph = graph_from_model(model, path=path, sha256=sha256)
                session = _ChildSession(graph, _Holdout(holdout, in_sample, ranges))
                conn.send(("ok", None))
            elif kind == "measure":
                _, options, groups, revision, after, before, mode = msg
                if session is None:
                    raise QtQuantError("the fidelity worker has no model loaded")
                session.options, session.groups, session.revision = options, groups, revision
                # False: the same map as in the previous request.  Keeping the object keeps
                # measure_session's cached run of it (the baseline changes only on recalibration).
                session.domains = pending.pop("after") if after else session.domains
                if before == "same":  # no groups: one map, measured once
                    session.baseline_domains = session.domains
                elif before:
                    session.baseline_domains = pending.pop("before")
                fid = measure_session(session, cancel=cancel_flag.is_set, output_mode=OutputMode(mode))
                conn.send(("ok", fid))
        except Cancelled:
            conn.send(("cancelled", None))
        except QtQuantError as e:
            conn.send(("error", type(e).__name__, str(e)))
        except BaseException as e:  # noqa: BLE001 - report, never leave the parent waiting
            conn.send(("error", "", f"{type(e).__name__}: {e}"))


class FidelityWorker:
    """``measure(session)`` like :func:`~qtquant.fidelity.measure_session`, run in a child process.

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

    def __init__(self):
        self._ctx = mp.get_context("spawn")  # fork next to Qt and onnxruntime threads is unsafe
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._cancel = self._ctx.Event()
        self._loaded = None  # (graph, calibration) the child holds
        self._sent = (None, None)  # the (after, before) domain maps the child holds

    # -- process -------------------------------------------------------------------------------
    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_child, args=(child, self._cancel), daemon=True,
                                       name="qtquant-fidelity")
        self._proc.start()
        child.close()
        self._conn = parent
        self._loaded = None
        self._sent = (None, None)

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self._proc.join(timeout=2)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=2)
        self._conn.close()
        self._proc = self._conn = None
        self._loaded = None

    def _call(self, msg, cancel):
        """Send ``msg`` and wait for the answer; ``cancel()`` is forwarded to the child."""
        self._cancel.clear()
        try:
            self._conn.send(msg)
            while not self._conn.poll(_POLL_S):
                if not self._proc.is_alive():
                    break
                if cancel is not None and cancel():
                    self._cancel.set()
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=2)
            code = self._proc.exitcode
            self._stop()
            raise QtQuantError(f"the fidelity worker process stopped unexpectedly (exit code {code})") from None
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "cancelled":
            raise Cancelled("fidelity check cancelled")
        raise errors.from_name(reply[1], reply[2], "fidelity check failed: {message}")

    # -- the check ------------------------------------------------------------------------------
    def measure(self, session, *, cancel=None, quantize_outputs: bool | None = None, output_mode=None):
        """The Fidelity of ``session`` (a Session, or a :class:`Snapshot` of one taken where the
        session is edited: the GUI thread)."""
        from .fidelity import output_mode_of

        mode = output_mode_of(quantize_outputs, output_mode).value
        after, before = session.domains, session.baseline_domains
        graph, cal = session.graph, session.calibration
        groups, options, revision = session.groups, session.options, session.revision
        if cal is None or not cal.holdout:
            from .errors import BadInputError

            raise BadInputError("the fidelity check needs check samples (held-back or in-sample); calibrate first")
        with self._lock:
            if cancel is not None and cancel():
                raise Cancelled("fidelity check cancelled")
            if not self._alive():
                self._start()
            if self._loaded is None or self._loaded[0] is not graph or self._loaded[1] is not cal:
                self._loaded = None
                self._call(("load", graph.model_bytes(), graph.path, graph.sha256,
                            list(cal.holdout), bool(getattr(cal, "in_sample", False)),
                            dict(getattr(cal, "ranges", None) or {})), cancel)
                self._loaded, self._sent = (graph, cal), (None, None)
            sent_after, sent_before = self._sent
            self._sent = (None, None)  # unknown until the child answers
            new_after, new_before = after is not sent_after, before is not sent_before
            if before is after and new_before:
                new_before = "same"
            try:
                for slot, dm, new in (("after", after, new_after), ("before", before, new_before is True)):
                    for m in _dm_messages(slot, dm) if new else ():
                        self._conn.send(m)
            except (OSError, ValueError):
                pass  # a dead child: _call reports it
            res = self._call(("measure", options, groups, revision, new_after, new_before, mode), cancel)
            self._sent = (after, before)
            return res
