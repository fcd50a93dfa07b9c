"""Comparing two quantizations of one model, and gating one against a budget (Qt-free).

:mod:`.match` pairs tensors across files, :mod:`.diff` builds the side-by-side figures,
:mod:`.budget` reads a budget and checks a model against it, :mod:`.html` writes the reports."""

from .diff import ModelDiff, diff_sides
from .match import DifferentModelsError, match_tensors
from .sides import Side

__all__ = ["Side", "ModelDiff", "diff_sides", "match_tensors", "DifferentModelsError"]
