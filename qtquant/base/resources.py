"""Locating the data files under the top-level ``resources/`` folder.

In a source checkout (editable install) they sit next to the package; ``qtquant/_resources``
is a link to that folder, through which a wheel ships them as package data (pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["resource_path"]

_PACKAGE = Path(__file__).resolve().parent.parent  # qtquant/


def resource_path(*parts: str) -> Path:
    for base in (_PACKAGE.parent / "resources", _PACKAGE / "_resources"):
        p = base.joinpath(*parts)
        if p.exists():
            return p
    return (_PACKAGE.parent / "resources").joinpath(*parts)
