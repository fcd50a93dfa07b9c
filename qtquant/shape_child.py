"""onnx shape inference in a child process, for big graphs opened by the desktop app.

``onnx.shape_inference.infer_shapes`` holds the GIL for its whole run (20,000 nodes: ~140 ms),
so a GUI in the same process freezes that long while a model loads.  Run here (a
:mod:`qtquant.childproc` child), the parent waits on a pipe without the lock.  A crash of onnx's
C++ code on a hostile file also stays in the child and comes back as a one-line error.  The model
crosses as its serialized bytes, both ways, written raw: no part of the file is ever unpickled.

The child is kept between opens, and the app starts it before the first big one (:func:`warm`):
starting one costs more than a second (a new interpreter importing onnx), where the inference of a
5,000-node graph takes some 20 ms.  A child that crashed is replaced at the next open.
"""

from __future__ import annotations

import threading

import onnx

from . import childproc
from .errors import ModelError, QtQuantError

__all__ = ["infer_in_child", "warm", "close", "MIN_NODES", "MAX_BYTES"]

# The app turns this on (see qtquant.gui.controller); the CLI runs inference in-process.
MIN_NODES: int | None = None
MAX_BYTES = 256 << 20  # bigger files carry weights worth more than the freeze to copy through a pipe
_TIMEOUT_S = 600


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
    """What ``modelcheck._infer_here(model)`` returns (the inferred model, serialized), computed in
    the child process."""
    data = model.SerializeToString()
    with _lock:
        try:
            return _child.call(data, timeout=_TIMEOUT_S)
        except OSError as e:
            raise ModelError(f"cannot start shape inference: {e}") from None


def _infer(data: bytes, link) -> bytes:
    from .modelcheck import _infer_here

    try:
        return _infer_here(data)
    except QtQuantError:
        raise
    except Exception as e:  # one line, never a traceback
        raise ModelError(f"shape inference failed: {e}") from None


_child = childproc.Child(_infer, name="qtquant-shapes", what="shape inference", error=ModelError)
