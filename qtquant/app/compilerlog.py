"""A compile log opened beside the model: read, placed on the session's graph, installed on the
session (its ``compiler_log`` event).  The CLI's ``--compiler-log`` and the app's File › Open
Compile Log (or a log dropped on the window) both come here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..horizon.log import CompileLog, read_compile_log
from ..horizon.match import LogMatch, match_compile_log

if TYPE_CHECKING:
    from .session import Session

__all__ = ["place_compile_log", "open_compile_log", "LOG_SUFFIXES"]

LOG_SUFFIXES = (".txt", ".log")
"""What a dropped file must end with to be taken for a compile log."""


def place_compile_log(session: Session, log: CompileLog, *, any_shape: bool = False, scales: bool = True) -> LogMatch:
    """Match ``log`` to the session's graph and install it; :class:`~qtquant.base.errors.CompileLogError`
    (nothing installed) for a log of another model or, unless ``any_shape``, another input shape."""
    match = match_compile_log(session.graph, log, any_shape=any_shape)
    session.set_compiler_log(match, scales=scales)
    return match


def open_compile_log(session: Session, path: str | Path, *, any_shape: bool = False, scales: bool = True) -> LogMatch:
    return place_compile_log(session, read_compile_log(path), any_shape=any_shape, scales=scales)
