"""Child processes: the one protocol behind every child the project starts.

Work goes to a child process when, in a thread, it would hold the interpreter lock for long
stretches no ``sys.setswitchinterval`` can cut (onnx shape inference, igraph's layout, building
and destroying onnxruntime sessions of big graphs), so a window in the parent would freeze; or
when it needs the cores of several processes (``--jobs``).  A crash of C++ code in the child on a
hostile file also stays in the child and comes back as a one-line error.

- Children are started with ``spawn``: a fork next to Qt's and onnxruntime's threads can inherit a
  lock one of those threads held, and hang.
- A child serves requests with a *handler*, ``handler(request, link) -> reply``, a module-level
  function or object (it is pickled into the child, so an object can keep caches between
  requests).  :class:`Child` keeps a child for as long as the parent wants it (and replaces it
  when it died); :func:`run` and :func:`run_all` start children for one request each.  A handler
  object with an ``idle()`` method has it called after each reply is sent, before the next request
  is read: work that must not hold up a reply (the fidelity worker's garbage collection).
- Requests and replies travel in parts: a dict or list with more than ``part`` entries (the whole
  message, or inside small tuples, lists and dicts of it) goes in slices of ``part`` entries (its
  entries whole), and long ``bytes`` go raw.  Unpickling a 20,000-entry map in one call holds the receiver's GIL some
  0.1 s (the parent's GUI freezes that long); one part takes a few ms.
- Children run at niceness :data:`NICENESS` (set by the desktop app, which keeps its own threads
  at the normal priority): their cores go to the window first.
- ``cancel()`` is polled in the parent while it waits.  A cooperative child sees it as
  ``link.cancelled()`` (a flag shared with the parent) and raises
  :class:`~qtquant.base.errors.Cancelled` itself, so it keeps its caches; with ``hard_cancel`` the
  parent kills the child at once instead.
- A child that dies is a one-line error that names its exit code.  An error its handler raises
  comes back as the same project error type (:func:`qtquant.base.errors.from_name`); anything else as
  a plain :class:`~qtquant.base.errors.QtQuantError`.

Messages are pickled only over private pipes between this process and its own child; nothing read
from a user file is ever unpickled (a model crosses as its serialized bytes, sent raw).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any, NoReturn, TypeAlias, cast

from . import errors
from .errors import Cancelled, QtQuantError

__all__ = ["Child", "Reply", "Link", "run", "run_all", "POLL_S", "PART", "NICENESS"]

POLL_S = 0.02  # how often cancel() is polled while nothing arrives
PART = 1000  # entries per part: pickling one takes ~5 ms on a big graph
_RAW_MIN = 1 << 16  # bytes from this length are written as they are, without a pickle copy
_DEPTH = 3  # how far into small containers big ones are looked for
NICENESS = 0  # children started from now on run at least this nice (the desktop app sets 10)

_ctx = mp.get_context("spawn")

# A message is any picklable value (what a handler takes and returns is its own business).
Handler: TypeAlias = Callable[[Any, "Link"], Any]
"""``handler(request, link) -> reply``, run in the child."""
Cancel: TypeAlias = "Callable[[], bool] | None"
Frame: TypeAlias = "tuple[Any, ...]"


# -- messages in parts ---------------------------------------------------------------------------
class _Hole(int):
    """Where a container that travelled in parts goes back into its message."""


def _cut(value: Any, holes: list[Any], seen: dict[int, int], part: int, depth: int = 0) -> Any:
    """``value`` with its big containers replaced by holes (appended to ``holes``, each once)."""
    t = type(value)
    if (t is dict or t is list) and len(value) > part or t is bytes and len(value) >= _RAW_MIN:
        if id(value) not in seen:
            seen[id(value)] = len(holes)
            holes.append(value)
        return _Hole(seen[id(value)])
    if depth < _DEPTH:
        if t is tuple:
            return tuple(_cut(v, holes, seen, part, depth + 1) for v in value)
        if t is list:
            return [_cut(v, holes, seen, part, depth + 1) for v in value]
        if t is dict:
            return {k: _cut(v, holes, seen, part, depth + 1) for k, v in value.items()}
    return value


def _fill(value: Any, holes: dict[int, Any], depth: int = 0) -> Any:
    """The inverse of :func:`_cut` (the same walk)."""
    t = type(value)
    if t is _Hole:
        return holes[value]
    if depth < _DEPTH:
        if t is tuple:
            return tuple(_fill(v, holes, depth + 1) for v in value)
        if t is list:
            return [_fill(v, holes, depth + 1) for v in value]
        if t is dict:
            return {k: _fill(v, holes, depth + 1) for k, v in value.items()}
    return value


def _frames(value: Any, part: int) -> Iterator[tuple[Frame, bytes | None]]:
    """``value`` as the frames that carry it: parts first, then ``("end", skeleton)``."""
    holes: list[Any] = []
    skeleton = _cut(value, holes, {}, part)
    for i, h in enumerate(holes):
        if type(h) is bytes:
            yield ("raw", i), h
        elif type(h) is dict:
            items = iter(h.items())
            while chunk := dict(islice(items, part)):
                yield ("part", i, chunk), None
        else:
            for k in range(0, len(h), part):
                yield ("part", i, h[k:k + part]), None
    yield ("end", skeleton), None


def _send(conn: Connection, value: Any, part: int) -> None:
    for frame, raw in _frames(value, part):
        conn.send(frame)
        if raw is not None:
            conn.send_bytes(raw)


class _Receiver:
    """Reassembles one message at a time from its frames."""

    def __init__(self) -> None:
        self.holes: dict[int, Any] = {}

    def feed(self, frame: Frame, read_raw: Callable[[], bytes]) -> tuple[str, Any] | None:
        """Take one frame (``read_raw()`` reads the bytes a raw one announces): ``None`` while a
        message is incomplete, then ``(kind, value)`` (kind ``"end"`` for a message, ``"progress"``
        or ``"stop"``)."""
        kind = frame[0]
        if kind == "part":
            _, i, chunk = frame
            have: Any = self.holes.setdefault(i, chunk)
            if have is not chunk:
                (have.update if type(chunk) is dict else have.extend)(chunk)
            return None
        if kind == "raw":
            self.holes[frame[1]] = read_raw()
            return None
        if kind == "end" and self.holes:
            value, self.holes = _fill(frame[1], self.holes), {}
            return kind, value
        return kind, frame[1]


# -- the child's side ----------------------------------------------------------------------------
class Link:
    """What a handler in the child can tell its parent while it works."""

    def __init__(self, conn: Connection, flag: Event | None):
        self._conn, self._flag = conn, flag

    def cancelled(self) -> bool:
        """True once the parent's ``cancel()`` did (cooperative children only)."""
        return self._flag is not None and self._flag.is_set()

    def progress(self, value: object) -> None:
        """Hand ``value`` to the parent's ``progress`` callback."""
        self._conn.send(("progress", value))


def _reply_to(handler: Handler, request: Any, link: Link) -> Frame:
    try:
        return ("ok", handler(request, link))
    except BaseException as e:  # noqa: BLE001 - report, never leave the parent waiting
        return ("error", *errors.to_name(e))


def _answer(conn: Connection, reply: Frame, part: int) -> bool:
    """Send ``reply``; False when the parent is gone."""
    try:
        _send(conn, reply, part)
    except (EOFError, OSError):
        return False
    except Exception as e:  # noqa: BLE001 - a result that cannot be pickled: say so, do not hang
        if reply[0] != "ok":
            raise
        return _answer(conn, ("error", "", f"cannot send the result back: {type(e).__name__}: {e}"), part)
    return True


def _serve(conn: Connection, flag: Event | None, handler: Handler, part: int, once: bool, nice: int = 0) -> None:
    if nice > 0:
        try:  # this thread, and so the threads onnxruntime starts later
            os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), nice))
        except (AttributeError, OSError):  # not allowed, or not Linux: the normal priority
            pass
    link, rx = Link(conn, flag), _Receiver()
    idle: Callable[[], object] | None = getattr(handler, "idle", None)  # the handler's optional hook
    while True:
        try:
            got = None
            while got is None:
                got = rx.feed(conn.recv(), conn.recv_bytes)
        except (EOFError, OSError):  # the parent is gone
            return
        if got[0] == "stop" or not _answer(conn, _reply_to(handler, got[1], link), part) or once:
            return
        if idle is not None:
            idle()


# -- the parent's side ---------------------------------------------------------------------------
class Child:
    """One child process serving ``handler``; not thread-safe (one caller at a time).

    ``name`` is the process name; ``what`` names it in errors ("{what} stopped unexpectedly (exit
    code N)"); ``failed`` wraps the message of an error that is not the project's ("{message}" is
    filled in); ``error`` is the type of the errors about the process itself.  ``once``: the child
    leaves after its first reply.
    """

    def __init__(self, handler: Handler, *, name: str, what: str, failed: str = "{message}",
                 error: type[QtQuantError] = QtQuantError, part: int = PART,
                 hard_cancel: str | None = None, once: bool = False):
        self.handler, self.name, self.what, self.failed, self.error = handler, name, what, failed, error
        self.part, self.hard_cancel, self.once = part, hard_cancel, once
        self.process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._flag: Event | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def ensure_running(self) -> bool:
        """Start the process unless it runs.  True when a new one started: whatever an earlier
        one held is gone.  A failure to start is the ``OSError`` it is."""
        if self.alive:
            return False
        self.close()
        parent, child = _ctx.Pipe()
        self._flag = None if self.hard_cancel else _ctx.Event()
        proc = _ctx.Process(target=_serve, args=(child, self._flag, self.handler, self.part, self.once, NICENESS),
                            daemon=True, name=self.name)
        try:
            proc.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.process, self._conn = proc, parent
        return True

    def call(self, request: Any, *, cancel: Cancel = None, progress: Callable[[Any], object] | None = None,
             timeout: float | None = None) -> Any:
        """Send ``request`` (starting the process if needed) and return the reply.

        ``progress(value)`` gets what the handler passes to ``link.progress``.  A child that dies,
        is cancelled hard or runs out of time is stopped; the next call starts a new one.
        """
        self.ensure_running()
        return _value(self, _gather([self], [request], cancel, _by_index(progress), timeout)[0])

    def submit(self, request: Any) -> Reply:
        """Send ``request`` (starting the process if needed) and return at once: the
        :class:`Reply`'s ``result()`` is what :meth:`call` would have returned."""
        self.ensure_running()
        return Reply(self, _post([self], [request]))

    def close(self, grace: float = 2.0) -> None:
        """Stop the process: asked to leave (given ``grace`` seconds), then killed."""
        proc, conn = self.process, self._conn
        if proc is None or conn is None:
            return
        self.process = self._conn = None
        if grace > 0 and not self.once and proc.is_alive():
            try:
                conn.send(("stop", None))
            except (OSError, ValueError):
                pass
        if grace > 0:
            proc.join(grace)
        if proc.is_alive():
            proc.kill()
            proc.join(2)
        conn.close()

    def _died(self) -> NoReturn:
        proc = self.process
        code = None
        if proc is not None:
            proc.join(2)
            code = proc.exitcode
        self.close(grace=0)
        raise self.error(f"{self.what} stopped unexpectedly (exit code {code})") from None


def _by_index(progress: Callable[[Any], object] | None) -> Callable[[int, Any], object] | None:
    """A one-child ``progress(value)`` as the ``progress(index, value)`` :func:`_gather` calls."""
    return None if progress is None else (lambda _i, v: progress(v))


def _value(child: Child, reply: Frame) -> Any:
    if reply[0] == "ok":
        return reply[1]
    raise errors.from_name(reply[1], reply[2], child.failed)


def _gather(children: list[Child], requests: list[Any], cancel: Cancel,
            progress: Callable[[int, Any], object] | None, timeout: float | None) -> dict[int, Frame]:
    """Send each child its request and read the replies, until all came or one is an error.
    Any exception leaves the children stopped (their side of the protocol is unknown then)."""
    return _collect(children, _post(children, requests), cancel, progress, timeout)


@contextmanager
def _stopped_on_failure(children: list[Child]) -> Iterator[None]:
    """Any exception leaves ``children`` stopped: their side of the protocol is unknown then."""
    try:
        yield
    except BaseException:
        for c in children:
            c.close(grace=0)
        raise


Pending: TypeAlias = "dict[Connection, tuple[int, _Receiver]]"


def _post(children: list[Child], requests: list[Any]) -> Pending:
    """Send each child its request: what :func:`_collect` reads the replies with."""
    with _stopped_on_failure(children):
        pending: Pending = {}
        for i, (c, req) in enumerate(zip(children, requests)):
            if c._flag is not None:
                c._flag.clear()
            if c._conn is None:  # (started by the caller: not reached)
                c._died()
            try:
                _send(c._conn, req, c.part)
            except (OSError, ValueError):
                c._died()
            pending[c._conn] = (i, _Receiver())
        return pending


def _collect(children: list[Child], pending: Pending, cancel: Cancel,
             progress: Callable[[int, Any], object] | None, timeout: float | None) -> dict[int, Frame]:
    """The replies to the requests :func:`_post` sent (see :func:`_gather`)."""
    with _stopped_on_failure(children):
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: dict[int, Frame] = {}
        while pending:
            if cancel is not None and cancel():
                for c in children:
                    if c.hard_cancel:
                        raise Cancelled(c.hard_cancel)
                    if c._flag is not None:
                        c._flag.set()
            if deadline is not None and time.monotonic() > deadline:
                raise children[0].error(f"{children[0].what} took over {timeout:g} s")
            for ready in wait(list(pending), POLL_S):
                conn = cast(Connection, ready)  # wait() returns the pipes it was given
                i, rx = pending[conn]
                try:
                    got = rx.feed(conn.recv(), conn.recv_bytes)
                except (EOFError, OSError):
                    children[i]._died()
                if got is None:
                    continue
                if got[0] == "progress":
                    if progress is not None:
                        progress(i, got[1])
                    continue
                replies[i] = got[1]
                del pending[conn]
                if got[1][0] != "ok":
                    return replies
        return replies


class Reply:
    """The reply to a request :meth:`Child.submit` sent, read when it is wanted: the caller works
    meanwhile, beside the child.  Read it (:meth:`result`) or drop it (:meth:`discard`) before
    the child's next request, or the two replies would be mixed up."""

    def __init__(self, child: Child, pending: Pending):
        self._child = child
        self._pending: Pending | None = pending

    @property
    def open(self) -> bool:
        return self._pending is not None

    def result(self, *, cancel: Cancel = None, timeout: float | None = None) -> Any:
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("this reply was read or dropped already")
        return _value(self._child, _collect([self._child], pending, cancel, None, timeout)[0])

    def discard(self, timeout: float | None = None) -> None:
        """Read the reply and drop it, whatever it says (a no-op once read)."""
        if self._pending is None:
            return
        try:
            self.result(timeout=timeout)
        except QtQuantError:
            pass


def run_all(children: list[Child], requests: list[Any], *, cancel: Cancel = None,
            progress: Callable[[int, Any], object] | None = None, timeout: float | None = None) -> list[Any]:
    """Each child's reply to its request (in order), the children started together here and
    stopped before this returns.  ``progress(index, value)``; the first error ends them all."""
    ok = False
    try:
        for c in children:  # all started before any request is sent: they boot side by side
            c.ensure_running()
        replies = _gather(children, requests, cancel, progress, timeout)
        for i, r in replies.items():
            if r[0] != "ok":
                _value(children[i], r)
        ok = True
        return [replies[i][1] for i in range(len(children))]
    finally:
        for c in children:
            c.close(grace=5 if ok else 0)


def run(handler: Handler, request: Any, *, cancel: Cancel = None, progress: Callable[[Any], object] | None = None,
        timeout: float | None = None, **child: Any) -> Any:
    """``handler(request, link)`` run in a new child process (the keywords of :class:`Child`)."""
    return run_all([Child(handler, once=True, **child)], [request], cancel=cancel, progress=_by_index(progress),
                   timeout=timeout)[0]
