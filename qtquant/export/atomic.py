"""Write-then-rename, so a crash or a full disk never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import BadInputError

__all__ = ["atomic_dir", "atomic_write_text", "check_output_path", "commit"]


def check_output_path(out, *, inputs=(), what: str = "output") -> Path:
    """Resolve ``out`` and refuse paths that would clobber an input or cannot be written."""
    p = Path(out)
    if p.exists() and p.is_dir():
        raise BadInputError(f"{what} {p} is a folder; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise BadInputError(f"the folder for {what} {p} does not exist")
    rp = p.resolve()
    for i in inputs:
        if i is None:
            continue
        ip = Path(i)
        if rp == ip.resolve() or (p.exists() and ip.exists() and os.path.samefile(p, ip)):
            raise BadInputError(f"refusing to overwrite the input {ip.name}; choose another {what} path")
    return p


@contextlib.contextmanager
def atomic_dir(final_dir: Path):
    """A scratch folder next to ``final_dir`` (same file system, so os.replace is atomic)."""
    final_dir = Path(final_dir)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".qtquant-", dir=str(final_dir)))
    except OSError as e:
        raise BadInputError(f"cannot write to {final_dir}: {e.strerror or e}") from None
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def commit(tmp_file: Path, final: Path) -> None:
    """fsync then rename ``tmp_file`` over ``final``."""
    with open(tmp_file, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp_file, final)


def atomic_write_text(path, text: str) -> Path:
    p = Path(path)
    with atomic_dir(p.parent if str(p.parent) else Path(".")) as tmp:
        t = tmp / p.name
        try:
            t.write_text(text, encoding="utf-8")
            commit(t, p)
        except OSError as e:
            raise BadInputError(f"cannot write {p}: {e.strerror or e}") from None
    return p
