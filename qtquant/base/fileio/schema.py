"""What every file schema shares: the pydantic base, reading JSON safely, one-line errors.

Each file format declares its schema next to its reader (``plan.py``, ``project.py``,
``perf/march.py``, ``calib/cache.py``) on :class:`FileModel`.  A file is data from somewhere
else: it is read as JSON text only, never unpickled or evaluated, and a bad one must end in
the project's one-line error, never in pydantic's multi-line ``ValidationError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from .paths import StrPath, existing_file

__all__ = ["FileModel", "NotThisFile", "MAX_FILE_BYTES", "read_json", "loc_text", "problem", "first_problem",
           "one_line", "check_format", "check_version"]

T = TypeVar("T")

MAX_FILE_BYTES = 64 << 20  # plans, projects, profiles and cache metadata are small; refuse to slurp a huge one


class FileModel(BaseModel):
    """Base of the file schemas.

    Strict: ``"1"`` is not a number and ``true`` is not an id, as a hand-edited file gets them
    wrong.  Unknown keys are ignored, so a later minor addition stays readable.  ``null`` means
    the same as an absent key (a default, or "is missing" when the key is required).
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    # Fields the reader fills in from the validation context (where the file came from): a
    # file's own key of that name is never read.
    reader_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        ctx = info.context or {}
        data = {k: v for k, v in data.items() if v is not None and k not in cls.reader_fields}
        data.update({k: ctx[k] for k in cls.reader_fields if ctx.get(k) is not None})
        return data


def check_format(value: object, expected: T, what: str) -> T:
    """A ``format`` field's validator: anything but ``expected`` refuses the whole file."""
    if value != expected:
        raise NotThisFile(f"is not a {what} (format is {value!r}, expected {expected!r})")
    return expected


def check_version(value: int | None, newest: int, noun: str) -> int:
    """A ``version`` field's validator: required, and not newer than this qtquant reads."""
    if value is None:
        raise PydanticCustomError("missing", "Field required")
    if value > newest:
        raise NotThisFile(f"was written by a newer qtquant ({noun} version {value}; "
                          f"this qtquant reads version {newest} or older)")
    return value


class NotThisFile(ValueError):
    """Raised in a validator when the whole file is refused; the text follows the file's name
    ("was written by a newer qtquant ...")."""


# pydantic error type -> what the value should have been, in Python's names (the names a reader
# of the JSON meets in the messages).
_WANT = {"int_type": "int", "int_parsing": "int", "int_from_float": "int", "float_type": "int or float",
         "float_parsing": "int or float", "string_type": "str", "list_type": "list", "tuple_type": "list",
         "dict_type": "object", "model_type": "object", "bool_type": "bool", "model_attributes_type": "object"}


def loc_text(loc: Sequence[int | str]) -> str:
    """``("groups", 0, "members")`` -> ``groups[0].members``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problem(err: ErrorDetails) -> str:
    """One pydantic error as a predicate about its value: ``must be int, not str``."""
    t, v, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if t == "missing":
        return "is missing"
    if t in _WANT:
        # bool is an int in Python; a file saying "id": true is malformed, and says so.
        if isinstance(v, bool) and t != "bool_type":
            return "has the wrong type (bool)"
        return f"must be {_WANT[t]}, not {'null' if v is None else type(v).__name__}"
    if t in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if t == "greater_than":
        return f"must be greater than {ctx['gt']}, got {v!r}"
    if t == "greater_than_equal":
        return f"must be {ctx['ge']} or more, got {v!r}"
    if t == "less_than_equal":
        return f"must be at most {ctx['le']}, got {v!r}"
    if t == "finite_number":
        return f"must be a finite number, got {v!r}"
    if t == "extra_forbidden":
        return "is not a known key"
    if t == "string_too_short":
        return "must not be empty"
    msg = err["msg"]
    return msg[:1].lower() + msg[1:]  # pydantic's own words for the rare rest


def first_problem(exc: ValidationError) -> tuple[tuple[int | str, ...], ErrorDetails]:
    """The first error (in field order, so the format and version are judged before the body)."""
    err = exc.errors(include_url=False)[0]
    return tuple(err["loc"]), err


def one_line(exc: ValidationError, src: str, what: str) -> str:
    """The file ``src``'s first problem as one line; ``what`` names the format ("qtquant plan")."""
    loc, err = first_problem(exc)
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, NotThisFile):
        return f"{src} {ctx_error}"
    if not loc and err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f"{src} is not a {what} (the top level is not a JSON object)"
    where = loc_text(loc)
    return f"{src}: {where} {problem(err)}" if where else f"{src}: {problem(err)}"


def read_json(path: StrPath, *, noun: str, error: type[Exception], max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The decoded JSON document at ``path``; any problem reading it raises ``error`` with one line.

    ``noun`` names the kind of file in the messages ("plan", "project", "march profile").
    """
    p = existing_file(path, error, noun=noun)
    try:
        if p.stat().st_size > max_bytes:
            raise error(f"{p.name} is too large to be a {noun} file")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{p.name} is not a {noun} file (not UTF-8 text)") from None
    except OSError as e:
        raise error(f"cannot read {noun} {p}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{p.name} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise error(f"{p.name} is nested too deeply to be a {noun} file") from None
    except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
        raise error(f"{p.name} is not a readable {noun} file ({e})") from None
