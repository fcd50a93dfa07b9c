"""onnx shape inference in a child process, for big graphs opened by the desktop app.

``onnx.shape_inference.infer_shapes`` holds the GIL for its whole run (20,000 nodes: ~140 ms),
so a GUI in the same process freezes that long while a model loads.  Run here, the parent waits
on a pipe without the lock.  A crash of onnx's C++ code on a hostile file also stays in the
child and comes back as a one-line error.  The messages are the model bytes in and the inferred
model bytes (or a JSON error) out: nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx

from . import errors
from .errors import ModelError

__all__ = ["infer_in_child", "MIN_NODES", "MAX_BYTES"]

# The app turns this on (see qtquant.gui.controller); the CLI runs inference in-process.
MIN_NODES: int | None = None
MAX_BYTES = 256 << 20  # bigger files carry weights worth more than the freeze to copy through a pipe
_TIMEOUT_S = 600


def wanted(model: onnx.ModelProto) -> bool:
    return MIN_NODES is not None and len(model.graph.node) >= MIN_NODES and model.ByteSize() <= MAX_BYTES


def infer_in_child(model: onnx.ModelProto) -> onnx.ModelProto:
    """What ``modelcheck._infer_here(model)`` returns, computed in a child process."""
    env = dict(os.environ)  # the child imports this package from where the parent has it
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        res = subprocess.run([sys.executable, "-c", "from qtquant.shape_child import _main; _main()"],
                             input=model.SerializeToString(), capture_output=True, timeout=_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise ModelError(f"shape inference took over {_TIMEOUT_S} s") from None
    except OSError as e:
        raise ModelError(f"cannot start shape inference: {e}") from None
    if res.returncode == 0:
        return onnx.ModelProto.FromString(res.stdout)
    try:
        doc = json.loads(res.stdout.decode("utf-8"))
        name, message = str(doc["error"]), str(doc["message"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ModelError(f"shape inference stopped unexpectedly (exit code {res.returncode})") from None
    raise errors.from_name(name, message, "{message}")


def _main() -> None:
    from .modelcheck import _infer_here

    data = sys.stdin.buffer.read()
    try:
        out = _infer_here(onnx.ModelProto.FromString(data)).SerializeToString()
    except errors.QtQuantError as e:
        sys.stdout.write(json.dumps({"error": type(e).__name__, "message": str(e)}))
        sys.exit(3)
    except Exception as e:  # noqa: BLE001 - report one line, never a traceback
        sys.stdout.write(json.dumps({"error": "ModelError", "message": f"shape inference failed: {e}"}))
        sys.exit(3)
    sys.stdout.buffer.write(out)
