"""The one atomic writer: write a scratch file next to the target, fsync it, rename it over
the target, fsync the folder.  A crash, a kill or a full disk leaves the old file whole, and
once a write returns, the new file survives a power cut too (the rename is only durable when
the folder is synced).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import BadInputError
from .paths import StrPath

__all__ = ["atomic_dir", "atomic_file", "atomic_write_bytes", "atomic_write_text", "check_output_path", "commit"]

SCRATCH_PREFIX = ".qtquant-"


def check_output_path(out: StrPath, *, inputs: Iterable[StrPath | None] = (), what: str = "output",
                      outputs: Iterable[tuple[StrPath | None, str]] = ()) -> Path:
    """Resolve ``out`` and refuse paths that would clobber an input or cannot be written.
    ``outputs``: ``(path, what)`` of the command's other outputs, which it must not share (a CSV
    written over the HTML report a moment before)."""
    p = Path(out)
    if p.exists() and p.is_dir():
        raise BadInputError(f"{what} {p} is a folder; give a file name")
    if not _parent(p).exists():
        raise BadInputError(f"the folder for {what} {p} does not exist")
    if not os.access(_parent(p), os.W_OK | os.X_OK):  # known now, not after the slow part
        raise BadInputError(f"cannot write {what} {p}: its folder is not writable")
    rp = p.resolve()
    for i in inputs:
        if i is None:
            continue
        ip = Path(i)
        if rp == ip.resolve() or (p.exists() and ip.exists() and os.path.samefile(p, ip)):
            raise BadInputError(f"refusing to overwrite the input {ip.name}; choose another {what} path")
    for o, other in outputs:
        if o is not None and rp == Path(o).resolve():
            raise BadInputError(f"{what} {p.name} is also the {other}; give each output its own path")
    return p


def _parent(p: Path) -> Path:
    return p.parent if str(p.parent) else Path(".")


@contextlib.contextmanager
def atomic_dir(final_dir: StrPath) -> Iterator[Path]:
    """A scratch folder in ``final_dir`` (same file system, so os.replace is atomic); removed after."""
    final_dir = Path(final_dir)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=str(final_dir)))
    except OSError as e:
        raise BadInputError(f"cannot write to {final_dir}: {e.strerror or e}") from None
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))  # (no such flag on Windows)
    except OSError:  # Windows cannot open a folder; its renames are journaled by NTFS
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems (network shares) refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def commit(tmp_file: StrPath, final: StrPath) -> None:
    """fsync ``tmp_file``, rename it over ``final``, fsync ``final``'s folder."""
    with open(tmp_file, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp_file, final)
    _fsync_dir(_parent(Path(final)))


@contextlib.contextmanager
def atomic_file(path: StrPath) -> Iterator[Path]:
    """Yield a scratch path; whatever is written there replaces ``path`` when the block ends cleanly.

    For writers that want a path of their own (``np.savez``, ``onnx.save``, an image's ``save``).
    An OSError becomes a one-line :class:`BadInputError`.
    """
    p = Path(path)
    with atomic_dir(_parent(p)) as tmp:
        t = tmp / p.name
        try:
            yield t
            commit(t, p)
        except OSError as e:
            raise BadInputError(f"cannot write {p}: {e.strerror or e}") from None


def atomic_write_bytes(path: StrPath, data: bytes, *, inputs: Iterable[StrPath | None] | None = None,
                       what: str = "output") -> Path:
    """Write ``data`` atomically; with ``inputs``, first refuse a path that is one of them."""
    p = Path(path) if inputs is None else check_output_path(path, inputs=inputs, what=what)
    with atomic_file(p) as t:
        t.write_bytes(data)
    return p


def atomic_write_text(path: StrPath, text: str, *, inputs: Iterable[StrPath | None] | None = None,
                      what: str = "output") -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), inputs=inputs, what=what)
