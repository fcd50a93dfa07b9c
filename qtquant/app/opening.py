"""The open-a-model use case: a model file as a session, with the statistics file and the compile log
opened beside it.  ``qtquant analyze/fix/perf/...`` (:func:`qtquant.cli.common.open_session`) and the
window's Open (its load job) both build an :class:`OpenRequest` and call :func:`open_session`.

Calibration is not part of it: the CLI runs it at once, the window in the background once the graph
is drawn.  A plan given with the model is applied after it (:func:`qtquant.app.plans.apply_plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .loader import open_model
from .options import Options
from .session import Session

if TYPE_CHECKING:
    from ..horizon.log import CompileLog
    from ..model.shapes import InputShapes

__all__ = ["OpenRequest", "open_session"]


@dataclass(frozen=True)
class OpenRequest:
    path: Path | str
    input_shapes: InputShapes = None  # {name: shape} or "NAME=1x3x640x640" texts; None: the shapes it was made at
    options: Options = field(default_factory=Options)
    cut: tuple[str, ...] = ()  # tensor names the graph is cut at (--cut, the open dialog's "Cut at")
    stats: Path | str | None = None  # a statistics file used instead of calibrating (qtquant calibrate --stats-out)
    # The data settings the user chose, which must match the statistics file's (the rest are the file's).
    stats_explicit: frozenset[str] = frozenset()
    compile_log: CompileLog | None = None  # placed on the graph (its thresholds the scales unless not log_scales)
    log_any_shape: bool = False  # a log compiled at another input shape is applied by name
    log_scales: bool = True

    def __post_init__(self) -> None:
        from ..model.cut import parse_cut

        object.__setattr__(self, "cut", parse_cut(self.cut))  # (--cut text "a,b" or names)


def open_session(request: OpenRequest, *, opened: Callable[[Session], None] | None = None) -> Session:
    """Open ``request.path``, place the compile log, then read the statistics file.  ``opened(session)``
    runs once the model is open and the log placed, before the statistics: work that needs no scales
    (a check of names given with the model, a warm-up) starts there."""
    s = open_model(request.path, request.input_shapes, request.options, cut=request.cut, stats=request.stats)
    if request.compile_log is not None:
        from .compilerlog import place_compile_log

        place_compile_log(s, request.compile_log, any_shape=request.log_any_shape, scales=request.log_scales)
    if opened is not None:
        opened(s)
    if request.stats:  # (a QDQ file with statistics: refused by open_model)
        s.load_statistics(request.stats, explicit=request.stats_explicit)
    return s
