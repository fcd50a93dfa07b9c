"""Locating the data files under the top-level ``resources/`` folder.

In a source checkout (editable install) they sit next to the package; ``qtquant/_resources``
is a link to that folder, through which a wheel ships them as package data (pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["resource_path"]

_HERE = Path(__file__).resolve().parent


def resource_path(*parts: str) -> Path:
    for base in (_HERE.parent / "resources", _HERE / "_resources"):
        p = base.joinpath(*parts)
        if p.exists():
            return p
    return (_HERE.parent / "resources").joinpath(*parts)
