"""The plain values a view-model gives the canvas: a node's look, an edge's, their badges and the
legend (the overlays that fill them live in :mod:`qtquant.app.views.looks` and
:mod:`qtquant.app.views.compiler`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...base.vocab import Overlay
from .palette import text_on

__all__ = ["Badge", "NodeLook", "EdgeLook", "Legend", "Looks", "PLAIN", "FADED_LOOK"]


@dataclass(frozen=True, slots=True)
class Badge:
    text: str
    bg: str
    fg: str = ""  # "": readable on bg

    def __post_init__(self) -> None:
        if not self.fg:
            object.__setattr__(self, "fg", text_on(self.bg))


@dataclass(frozen=True, slots=True)
class NodeLook:
    fill: str | None = None  # None: the item's own category colour
    badges: tuple[Badge, ...] = ()
    faded: bool = False
    border_width: float = 1.0


@dataclass(frozen=True, slots=True)
class EdgeLook:
    color: str | None = None  # None: the default edge colour
    width: float = 1.3
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Legend:
    mode: str = Overlay.NONE
    title: str = ""
    lo: str = ""
    hi: str = ""


@dataclass
class Looks:
    nodes: dict[str, NodeLook] = field(default_factory=dict)  # node name -> its look
    edges: dict[tuple[str, str], EdgeLook] = field(default_factory=dict)  # (tensor, dst node) -> its look
    edge_default: EdgeLook | None = None
    legend: Legend = Legend()


PLAIN = NodeLook()
FADED_LOOK = NodeLook(faded=True)
