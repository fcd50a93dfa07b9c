"""onnx shape inference in a child process, for big graphs opened by the desktop app.

``onnx.shape_inference.infer_shapes`` holds the GIL for its whole run (20,000 nodes: ~140 ms),
so a GUI in the same process freezes that long while a model loads.  Run here (a
:mod:`qtquant.base.childproc` child), the parent waits on a pipe without the lock.  A crash of onnx's
C++ code on a hostile file also stays in the child and comes back as a one-line error.  The model
crosses as its serialized bytes, both ways, written raw: no part of the file is ever unpickled.

The child is kept between opens, and the app starts it before the first big one (:func:`warm`):
starting one costs more than a second (a new interpreter importing onnx), where the inference of a
5,000-node graph takes some 20 ms.  A child that crashed is replaced at the next open.
"""

from __future__ import annotations

import threading

import onnx

from ..base import childproc
from ..base.errors import ModelError, QtQuantError
from .inference import infer_here

__all__ = ["infer_in_child", "submit_file", "Early", "warm", "close", "MIN_NODES", "APP_MIN_NODES", "MAX_BYTES",
           "EARLY_MAX_BYTES"]

# The app turns this on (see qtquant.gui.window.controller); the CLI runs inference in-process.
MIN_NODES: int | None = None
# What the app sets MIN_NODES to (and where it moves calibration and the layout to children too):
# below this size, starting a child costs more than the freeze it avoids.
APP_MIN_NODES = 2000
MAX_BYTES = 256 << 20  # bigger files carry weights worth more than the freeze to copy through a pipe
_TIMEOUT_S = 600
# A file sent as it is (submit_file) comes back with its weights: beyond this size the skeleton
# that infer_in_child sends is worth waiting for.
EARLY_MAX_BYTES = 8 << 20


def may_want(model: onnx.ModelProto) -> bool:
    """Whether the app runs inference in a child for a model of this many nodes (before the
    skeleton's size is known, see modelcheck.infer_shapes)."""
    return MIN_NODES is not None and len(model.graph.node) >= MIN_NODES


def wanted(model: onnx.ModelProto) -> bool:
    return may_want(model) and model.ByteSize() <= MAX_BYTES


_lock = threading.Lock()  # one request at a time (two loads at once: the second waits)


def warm() -> None:
    """Start the child now, if it does not run, without waiting for it: the next big open finds it
    ready.  A child that cannot start is left to the open to report."""
    with _lock:
        try:
            _child.ensure_running()
        except OSError:
            pass


def close() -> None:
    with _lock:
        _child.close()


def infer_in_child(model: onnx.ModelProto) -> bytes:
    """What ``inference.infer_here(model)`` returns (the inferred model, serialized), computed in
    the child process."""
    data = model.SerializeToString()
    with _lock:
        try:
            inferred: bytes = _child.call(data, timeout=_TIMEOUT_S)
            return inferred
        except OSError as e:
            raise ModelError(f"cannot start shape inference: {e}") from None


class Early:
    """Shape inference of a model file's own bytes, running in the child while this process reads
    the same file (its node table, its checks, the graph's structure): on a 10,000-node graph the
    inference takes some 25 ms, which this process spends on that work instead of waiting.

    The reply is what ``infer_in_child`` of the parsed file would give: the caller reads it with
    :meth:`result` only when nothing changed the model before inference (input shapes, a cut, a
    sort), and else drops it (:meth:`discard`).  Until then the child is this request's: one of
    the two must come, and the caller's ``finally`` makes sure (another inference would wait)."""

    def __init__(self, reply: childproc.Reply):
        self._reply: childproc.Reply | None = reply

    @property
    def open(self) -> bool:
        return self._reply is not None

    def result(self) -> bytes:
        reply, self._reply = self._reply, None
        if reply is None:
            raise RuntimeError("this inference was read or dropped already")
        try:
            inferred: bytes = reply.result(timeout=_TIMEOUT_S)
            return inferred
        except OSError as e:
            raise ModelError(f"cannot run shape inference: {e}") from None
        finally:
            _lock.release()

    def discard(self) -> None:
        if self._reply is None:
            return
        reply, self._reply = self._reply, None
        try:
            reply.discard(timeout=_TIMEOUT_S)
        except OSError:
            pass
        finally:
            _lock.release()


def submit_file(model: onnx.ModelProto, data: bytes) -> Early | None:
    """Start inferring ``data`` (the file ``model`` was just parsed from) in the child, when the
    app wants big graphs inferred there (:func:`may_want`), the child runs already, the file is
    small enough to cross twice, and nothing it holds is read before inference (local functions,
    external data); else None."""
    if not may_want(model) or len(data) > EARLY_MAX_BYTES or model.functions or not _child.alive:
        return None
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        return None
    if not _lock.acquire(blocking=False):  # another open infers now: this one waits its turn later
        return None
    try:
        return Early(_child.submit(data))
    except (OSError, QtQuantError):  # the child could not take it: the open infers as it would
        _lock.release()
        return None


def _infer(data: bytes, link: childproc.Link) -> bytes:
    try:
        return infer_here(data)
    except QtQuantError:
        raise
    except Exception as e:  # one line, never a traceback
        raise ModelError(f"shape inference failed: {e}") from None


_child = childproc.Child(_infer, name="qtquant-shapes", what="shape inference", error=ModelError)
