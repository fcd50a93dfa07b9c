"""User groups: tensors tied to one shared observer."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Group", "GroupSet"]


@dataclass(frozen=True)
class Group:
    id: int
    members: tuple[str, ...]
    name: str = ""


@dataclass
class GroupSet:
    groups: list[Group] = field(default_factory=list)

    def as_lists(self) -> list[tuple[str, ...]]:
        return [g.members for g in self.groups]

    def __len__(self) -> int:
        return len(self.groups)
