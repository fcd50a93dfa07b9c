"""The README-like header every deploy output carries: what it does, what it cannot do on that
toolchain, what was checked here, and the decisions it could not state (:class:`~.facts.Note`).

Formats with comments carry it in the file (``#`` lines in YAML, the module docstring in Python);
every target also writes it as ``README-<target>.md`` beside its files (JSON and a TensorRT cache
have no comments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..base.fileio import atomic_write_text
from .facts import DeployFacts, Note

__all__ = ["Header"]


@dataclass
class Header:
    title: str
    does: list[str]
    cannot: list[str]
    checked: list[str]
    notes: list[Note] = field(default_factory=list)
    use: list[str] = field(default_factory=list)  # the round trip, as commands

    def sections(self, facts: DeployFacts) -> list[tuple[str, list[str]]]:
        src = f"{facts.model}" + (f" (sha256 {facts.model_sha256[:16]}...)" if facts.model_sha256 else "")
        groups = f"{len(facts.groups)} group(s), " + ", ".join(
            f"{len(facts.of(p))} {p.value}" for p in sorted({c.precision for c in facts.choices})) if facts.choices \
            else f"{len(facts.groups)} group(s), every other tensor int8"
        return [("", [f"{self.title}", f"Written by qtquant deploy from {src}: {groups}."]),
                ("What it does", self.does), ("How to use it", self.use),
                ("What it cannot do on this toolchain", self.cannot),
                ("Checked by qtquant (on this machine)", self.checked),
                ("Decisions it cannot state as made (listed, not dropped)",
                 [n.line() for n in self.notes] or ["none"])]

    def markdown(self, facts: DeployFacts) -> str:
        out = []
        for title, lines in self.sections(facts):
            if not title:
                out += [f"# {lines[0]}", "", *lines[1:], ""]
                continue
            if not lines:
                continue
            out += [f"## {title}", ""]
            out += [f"    {x}" if title == "How to use it" else f"- {x}" for x in lines]
            out.append("")
        return "\n".join(out)

    def comment(self, facts: DeployFacts, prefix: str = "# ") -> str:
        """The header as comment lines (``prefix`` on each; markdown headings as plain titles)."""
        def plain(x: str) -> str:
            return x.lstrip("#").strip() + ":" if x.startswith("## ") else x.lstrip("#").strip() if x[:1] == "#" else x
        return "\n".join((prefix + plain(x)).rstrip() for x in self.markdown(facts).splitlines()) + "\n"

    def write_readme(self, out: Path, target: str, facts: DeployFacts, inputs=()) -> Path:
        """``README-<target>.md`` in ``out``."""
        return atomic_write_text(out / f"README-{target}.md", self.markdown(facts), inputs=list(inputs),
                                 what="deploy README")
