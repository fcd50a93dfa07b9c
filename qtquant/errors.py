"""One exception hierarchy for every user-facing error.

The CLI turns any :class:`QtQuantError` into a one-line message and its exit code (3 for bad
input, 2 for a :class:`UsageError`, DESIGN §6); the GUI turns it into a dialog.  Anything else
escaping is a bug.
"""

import re

__all__ = [
    "QtQuantError",
    "UsageError",
    "BadInputError",
    "ModelError",
    "ShapeError",
    "CalibrationDataError",
    "StatsFileError",
    "PlanError",
    "PlanWarning",
    "ShareRefused",
    "MarchError",
    "CompileLogError",
    "Cancelled",
    "from_name",
    "to_name",
    "first_line",
]


class QtQuantError(Exception):
    """Base of every error meant for the user.  ``str(err)`` is one line."""

    exit_code = 3

    def __str__(self) -> str:  # keep messages on one line whatever callers pass
        msg = super().__str__()
        return " ".join(msg.split())


class UsageError(QtQuantError):
    """A command line that cannot run as given: a missing argument, options that do not go
    together, a value out of its option's range.  Exit 2, as argparse's own errors (DESIGN §6);
    the same values read from a project or statistics file are bad input (3)."""

    exit_code = 2


class BadInputError(QtQuantError):
    """Something the user handed us cannot be used."""


class ModelError(BadInputError):
    """Missing, unreadable, corrupt or unsupported model."""


class ShapeError(BadInputError):
    """An input shape that does not fit the model, or an unknown input name."""


class CalibrationDataError(BadInputError):
    """Calibration data that cannot be read or does not fit the model."""


class StatsFileError(BadInputError):
    """A statistics file (``qtquant calibrate --stats-out``) that cannot be read, or that belongs
    to another model, other input shapes or other data settings."""


class PlanError(BadInputError):
    """A sharing plan or project file that cannot be used."""


class PlanWarning(UserWarning):
    """A plan that applies only in part (members that do not map to the model); the caller's
    report object lists each one.  A warning, not an error: the rest of the plan still applies."""


class ShareRefused(QtQuantError):
    """A requested share violates the scale-domain constraints (DESIGN §3)."""


class MarchError(BadInputError):
    """Unknown march name or bad march profile file."""


class CompileLogError(BadInputError):
    """A compiler log (Horizon ``hb_mapper`` / ``hrt_model_exec``) that cannot be read, or that
    belongs to another model."""


class Cancelled(QtQuantError):
    """A long job was cancelled by the user."""


def to_name(err: BaseException) -> tuple[str, str]:
    """What a child process reports of ``err`` for :func:`from_name` to rebuild: a project error
    by its class name and message, anything else as a message that names its type."""
    if isinstance(err, QtQuantError):
        return type(err).__name__, str(err)
    return "", f"{type(err).__name__}: {err}"


def from_name(name: str, message: str, fallback: str = "{message}") -> QtQuantError:
    """The error a child process reported with :func:`to_name`.  It sends the name, not the
    object: a foreign exception (onnxruntime's, say) may not unpickle in the parent, and is no
    error the CLI or the GUI knows how to show.  Unknown or non-qtquant names become a
    :class:`QtQuantError` with ``fallback`` (``{message}`` is filled in)."""
    cls = globals().get(name) if name else None
    if isinstance(cls, type) and issubclass(cls, QtQuantError):
        return cls(message)
    return QtQuantError(fallback.format(message=message))


def first_line(e: BaseException, limit: int = 300, default: str | None = None) -> str:
    """The first line of another library's error (onnxruntime's run several lines with a stack),
    or ``default`` (its type's name) when it says nothing: what a one-line message quotes."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else default or type(e).__name__
    # onnxruntime names the file it loaded before the cause: the caller names it already, and a long
    # path pushed the cause past the limit
    line = _ORT_LOAD.sub("", line)
    if len(line) <= limit:
        return line
    # Cut at a word, marked: a quote that stops mid-word ("... Er") reads as the whole message.
    cut = line[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


_ORT_LOAD = re.compile(r"Load model from .*? failed: ?")
