"""Open a model file as a :class:`~qtquant.app.Session` (float or QDQ)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from ..base.errors import ModelError
from ..base.gcpause import gc_paused
from ..model.graph import graph_from_model, reading_model
from ..model.modelcheck import FileDigest, check_external_data, check_text
from ..model.qdq import attach_qdq, check_quantized_form, is_qdq_model, strip_qdq
from .options import Options
from .session import Session

if TYPE_CHECKING:
    from ..base.fileio.paths import StrPath
    from ..model.nodetable import NodeTable
    from ..model.shape_child import Early
    from ..model.shapes import InputShapes

__all__ = ["open_model"]


@gc_paused
def open_model(path: StrPath, input_shapes: InputShapes = None, options: Options = Options(), *,
               cut: str | Iterable[str] = (), stats: StrPath | None = None) -> Session:
    """``cut``: tensor names (or ``a,b`` text) the graph is cut at: the session works on the
    subgraph that ends there (:func:`qtquant.model.graph.cut_model`).  ``stats``: the statistics file the
    session is to use (``qtquant calibrate --stats-out``; the caller loads it): without
    ``input_shapes``, the model opens at the shapes it was made at (a dynamic model needs none given).
    A QDQ file with ``stats`` is refused: its scales are its own, and statistics would replace them."""
    with reading_model(path) as (model, p, table, early, sha):
        return _open(model, p, table, early, sha, input_shapes, options, cut, stats)


def _open(model: onnx.ModelProto, p: Path, table: NodeTable | None, early: Early | None, sha: FileDigest,
          input_shapes: InputShapes, options: Options, cut: str | Iterable[str], stats: StrPath | None) -> Session:
    check_text(model, table)
    check_external_data(model, p.parent, table)
    check_quantized_form(model, table, p.name)
    qdq = None
    if is_qdq_model(model, table):
        if early is not None:
            early.discard()  # the graph is the file's without its Q/DQ pairs
            early = None
        if stats:
            raise ModelError(f"{p.name} is already quantized (QDQ); a statistics file is for float models")
        try:
            model, qdq = strip_qdq(model, p.parent)
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(f"cannot read the QDQ quantization of {p.name}: {e}") from None
        table = None  # other nodes now
    if stats and not input_shapes:
        from ..calib.statsfile import stats_input_shapes

        input_shapes = stats_input_shapes(stats, sha.result() if isinstance(sha, FileDigest) else sha, p.name)
    graph = graph_from_model(model, input_shapes or {}, path=p, sha256=sha, cut=cut, text_checked=True, table=table,
                             early=early)
    if qdq is not None:
        attach_qdq(graph, qdq)
    return Session(graph, options, qdq=qdq)
