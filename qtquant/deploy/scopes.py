"""Module paths read from ONNX node names (torch.onnx.export's call scopes), without torch.

``/model.2/cv1/act/Mul`` was written for a call of module ``model.2.cv1.act``: the scope levels
joined by ``.``.  qtquant.torch's resolver reads the same scopes against a real model; the deploy
targets use them where no model is at hand (a generated file names modules before it meets one).
"""

from __future__ import annotations

__all__ = ["split_scope", "scope_path"]


def split_scope(name: str | None) -> tuple[list[str], str]:
    """``/a.0/conv/Conv_1`` -> (["a.0", "conv"], "Conv_1"); names without '/' have no scope."""
    if not name or "/" not in name:
        return [], name or ""
    parts = [p for p in name.strip("/").split("/") if p]
    if not parts:
        return [], ""
    return parts[:-1], parts[-1]


def scope_path(name: str | None) -> str:
    """The module path an ONNX node name was written for ("" when it has no scope)."""
    return ".".join(split_scope(name)[0])
