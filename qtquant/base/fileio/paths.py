"""The first check of every reader: the path names an existing file, not a folder."""

from __future__ import annotations

from pathlib import Path

__all__ = ["existing_file"]


def existing_file(path, error: type[Exception], *, noun: str, folder_noun: str | None = None) -> Path:
    """``path`` as a Path, or ``error`` with one line: "<noun> file not found: ..." or
    "... is a folder, not a <folder_noun> file"."""
    p = Path(path)
    if not p.exists():
        raise error(f"{noun} file not found: {p}")
    if p.is_dir():
        raise error(f"{p} is a folder, not a {folder_noun or noun} file")
    return p
