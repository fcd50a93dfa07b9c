"""Open a model file as a :class:`~qtquant.app.Session` (float or QDQ)."""

from __future__ import annotations

from pathlib import Path

import onnx

from ..errors import ModelError
from ..graph import graph_from_model
from ..modelcheck import check_external_data, check_text, file_sha256
from ..qdq import attach_qdq, is_qdq_model, strip_qdq
from .session import Options, Session

__all__ = ["open_model"]


def open_model(path, input_shapes=None, options: Options = Options()) -> Session:
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelError(f"{p} is a folder, not an ONNX model file")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception:
        raise ModelError(f"{p.name} is not a readable ONNX model (corrupt or wrong format)") from None
    if not model.graph.node:
        raise ModelError(f"{p.name} is not a readable ONNX model (it has no graph nodes)")
    check_text(model)
    check_external_data(model, p.parent)
    sha = file_sha256(p)
    qdq = None
    if is_qdq_model(model):
        try:
            model, qdq = strip_qdq(model, p.parent)
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(f"cannot read the QDQ quantization of {p.name}: {e}") from None
    graph = graph_from_model(model, input_shapes or {}, path=p, sha256=sha)
    if qdq is not None:
        attach_qdq(graph, qdq)
    return Session(graph, options, qdq=qdq)
