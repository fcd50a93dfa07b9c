"""Paths: the first check of every reader (the path names an existing file, not a folder), and the
folder a dialog first offers for what comes of a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeAlias

__all__ = ["existing_file", "default_output_folder", "StrPath"]

StrPath: TypeAlias = "str | os.PathLike[str]"
"""A path as callers give it: text or a Path."""


def existing_file(path: StrPath, error: type[Exception], *, noun: str, folder_noun: str | None = None) -> Path:
    """``path`` as a Path, or ``error`` with one line: "<noun> file not found: ..." or
    "... is a folder, not a <folder_noun> file"."""
    p = Path(path)
    if not p.exists():
        raise error(f"{noun} file not found: {p}")
    if p.is_dir():
        raise error(f"{p} is a folder, not a {folder_noun or noun} file")
    return p


def default_output_folder(model_path: StrPath | None) -> Path:
    """Where a dialog first offers to write what comes of ``model_path`` (an export, a project): the
    model's folder, unless it is hidden (the demo model lives in a cache folder such as
    ``~/.cache/qtquant``), then the home folder."""
    home = Path.home()
    if model_path is None:
        return home
    folder = Path(model_path).expanduser().resolve().parent
    if any(part.startswith(".") for part in folder.parts):
        return home
    return folder
