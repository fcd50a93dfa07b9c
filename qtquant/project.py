"""``.qtquant`` project files: model path and hash, input shapes, calibration
configuration, options, groups, and a link to cached statistics.

JSON only (never pickle), written atomically.  Opening a project whose model changed
reports it; the caller decides whether to re-map the groups by tensor name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .calib import CalibConfig
from .domains import Policy
from .errors import PlanError, QtQuantError
from .fileio import atomic_write_text
from .quant import Scheme

__all__ = ["PROJECT_FORMAT", "PROJECT_VERSION", "Project", "OpenReport", "project_from_session",
           "save_project", "load_project", "open_project"]

PROJECT_FORMAT = "qtquant-project"
PROJECT_VERSION = 2  # 2: calibration holdout is auto/N/fraction (1 always held back 2 samples)


@dataclass
class Project:
    model: str  # as written: relative to the project file when possible
    model_sha256: str = ""
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    calib: dict = field(default_factory=dict)
    scheme: str = Scheme.SYMMETRIC_INT8.value
    policy: str = Policy.UNION.value
    march: str = "bayes-e"
    max_bits_lost: float = 1.0
    groups: list[dict] = field(default_factory=list)  # {"name": str, "members": [tensor, ...]}
    stats_cache: str | None = None
    path: Path | None = None  # where it was read from (not serialized)

    def model_path(self) -> Path:
        p = Path(self.model)
        if not p.is_absolute() and self.path is not None:
            p = self.path.parent / p
        return p

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("path")
        return {"format": PROJECT_FORMAT, "version": PROJECT_VERSION, **d}


@dataclass
class OpenReport:
    model_changed: bool = False
    missing: list[str] = field(default_factory=list)  # group members not in the (changed) model
    dropped_groups: int = 0
    stats_from_cache: bool = False

    def message(self) -> str:
        if not self.model_changed:
            return ""
        msg = "the model changed since the project was saved"
        if self.missing:
            msg += f"; {len(self.missing)} grouped tensor(s) no longer exist: {', '.join(self.missing[:5])}"
            if len(self.missing) > 5:
                msg += ", ..."
        return msg


def _rel(target: Path, base_dir: Path) -> str:
    try:
        return os.path.relpath(target.resolve(), base_dir.resolve())
    except ValueError:  # another drive on Windows
        return str(target.resolve())


def project_from_session(session, path, stats_cache=None) -> Project:
    path = Path(path)
    g = session.graph
    o = session.options
    calib = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(o.calib).items()}
    return Project(
        model=_rel(g.path, path.parent) if g.path else "",
        model_sha256=g.sha256,
        input_shapes={k: list(v) for k, v in g.input_shapes.items()},
        calib=calib, scheme=o.scheme.value, policy=o.policy.value, march=o.march,
        max_bits_lost=float(o.max_bits_lost),
        groups=[{"name": gr.name, "members": list(gr.members)} for gr in session.groups],
        stats_cache=_rel(Path(stats_cache), path.parent) if stats_cache else None,
    )


def save_project(session, path, stats_cache=None) -> Path:
    proj = project_from_session(session, path, stats_cache)
    return atomic_write_text(path, json.dumps(proj.to_dict(), indent=2) + "\n")


def _expect(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise PlanError(f"{path.name} is not a valid qtquant project: {what}")


def load_project(path) -> Project:
    p = Path(path)
    if not p.exists():
        raise PlanError(f"project file not found: {p}")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # ValueError: bad UTF-8 or JSON, 4300+ digit ints
        raise PlanError(f"{p.name} is not a readable qtquant project ({type(e).__name__})") from None
    _expect(isinstance(doc, dict), p, "not a JSON object")
    _expect(doc.get("format") == PROJECT_FORMAT, p, f"'format' must be {PROJECT_FORMAT!r}")
    ver = doc.get("version")
    _expect(isinstance(ver, int) and not isinstance(ver, bool), p, "'version' must be an integer")
    if ver > PROJECT_VERSION:
        raise PlanError(f"{p.name} was written by a newer qtquant (project version {ver}; this one reads "
                        f"up to {PROJECT_VERSION})")
    _expect(isinstance(doc.get("model"), str) and doc["model"], p, "'model' must be a path")
    shapes = doc.get("input_shapes", {})
    _expect(isinstance(shapes, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                                           and d > 0 for d in v)
        for k, v in shapes.items()), p, "'input_shapes' must map names to lists of positive integers")
    groups = doc.get("groups", [])
    _expect(isinstance(groups, list) and all(
        isinstance(gr, dict) and isinstance(gr.get("members"), list)
        and all(isinstance(m, str) for m in gr["members"]) and isinstance(gr.get("name", ""), str)
        for gr in groups), p, "'groups' must be a list of {name, members: [tensor names]}")
    calib = doc.get("calib", {})
    _expect(isinstance(calib, dict), p, "'calib' must be an object")
    if ver < 2 and calib.get("holdout") == 2:
        # Version 1 wrote its fixed default; a user never chose it.  Read it as today's default
        # (auto), or an old project keeps checking on 2 samples held back from a small set.
        calib = {k: v for k, v in calib.items() if k != "holdout"}
    for key, typ in (("scheme", str), ("policy", str), ("march", str), ("model_sha256", str)):
        _expect(isinstance(doc.get(key, ""), typ), p, f"{key!r} must be a string")
    _expect(doc.get("scheme", Scheme.SYMMETRIC_INT8.value) in {s.value for s in Scheme}, p, "unknown 'scheme'")
    _expect(doc.get("policy", "union") in {x.value for x in Policy}, p, "unknown 'policy'")
    mbl = doc.get("max_bits_lost", 1.0)
    _expect(isinstance(mbl, (int, float)) and not isinstance(mbl, bool), p, "'max_bits_lost' must be a number")
    sc = doc.get("stats_cache")
    _expect(sc is None or isinstance(sc, str), p, "'stats_cache' must be a path or null")
    return Project(model=doc["model"], model_sha256=doc.get("model_sha256", ""), input_shapes=shapes,
                   calib=calib, scheme=doc.get("scheme", Scheme.SYMMETRIC_INT8.value),
                   policy=doc.get("policy", "union"), march=doc.get("march", "bayes-e"),
                   max_bits_lost=float(mbl), groups=groups, stats_cache=sc, path=p)


def _calib_config(d: dict) -> CalibConfig:
    known = {f.name for f in dataclasses.fields(CalibConfig)}
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known}
    try:
        return CalibConfig(**kw)
    except (TypeError, ValueError) as e:
        raise PlanError(f"project calibration settings are invalid: {e}") from None


def open_project(path, *, remap: bool = True, calibrate: bool = False):
    """Open a project: returns ``(session, OpenReport)``.

    When the model's hash differs, groups are re-mapped by tensor name if ``remap``
    (members missing from the model are dropped and listed), else dropped.
    """
    from .loader import open_model
    from .session import Options

    proj = load_project(path)
    opts = Options(scheme=Scheme(proj.scheme), policy=Policy(proj.policy), march=proj.march,
                   max_bits_lost=proj.max_bits_lost, calib=_calib_config(proj.calib))
    session = open_model(proj.model_path(), {k: tuple(v) for k, v in proj.input_shapes.items()}, opts)
    report = OpenReport(model_changed=bool(proj.model_sha256) and proj.model_sha256 != session.graph.sha256)
    if proj.stats_cache and not session.quantized_file:
        cache_dir = Path(proj.stats_cache)
        if not cache_dir.is_absolute():
            cache_dir = proj.path.parent / cache_dir
        try:
            from .calib.cache import load_cached

            res = load_cached(session.graph, opts.calib, cache_dir)
        except (ImportError, QtQuantError, OSError, ValueError):
            res = None
        if res is not None:
            session.set_calibration(res)
            report.stats_from_cache = True
    if calibrate and session.calibration is None and not session.quantized_file:
        session.run_calibration()
    if report.model_changed and not remap:
        report.dropped_groups = len(proj.groups)
        return session, report
    for gr in proj.groups:
        members = [m for m in gr["members"] if m in session.graph.tensors]
        report.missing += [m for m in gr["members"] if m not in session.graph.tensors]
        if len(members) < 2:
            report.dropped_groups += 1
            continue
        try:
            session.groups.share(session, members, name=gr.get("name", ""))
        except QtQuantError:
            report.dropped_groups += 1
    if len(session.groups):
        session.groups_changed()
    return session, report
