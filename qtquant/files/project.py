"""``.qtquant`` project files: model path and hash, input shapes, calibration
configuration, options, groups, and a link to cached statistics.

JSON only (never pickle), written atomically.  Opening one as a session is the application's
job (:func:`qtquant.app.projects.open_project`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import Field, ValidationError, field_validator, model_validator

from ..calib import CalibConfig
from ..calib.holdout import CalibConfigError
from ..calib.state import SessionState
from ..base.errors import PlanError
from ..base.fileio import atomic_write_text
from ..base.fileio.schema import FileModel, check_format, check_version, one_line, read_json
from ..base.vocab import (DEFAULT_AUTO_SHARE_MAX_BITS_LOST, DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST, DEFAULT_MARCH,
                          DEFAULT_POLICY, DEFAULT_SCHEME, Policy, Precision, Scheme)

__all__ = ["PROJECT_FORMAT", "PROJECT_VERSION", "Project", "ProjectGroup", "project_from_session", "save_project",
           "load_project", "model_matches"]

PROJECT_FORMAT = "qtquant-project"
# 4: the auto-share and float-output thresholds apart (3 had one max_bits_lost for both); 3: per-tensor
# precision and the --cut; 2: calibration holdout is auto/N/fraction (1: 2 samples)
PROJECT_VERSION = 6


class ProjectGroup(FileModel):
    name: str = ""
    members: tuple[str, ...] = Field(strict=False)  # tensor names


def _one_of(values):
    def check(v):
        if v not in values:
            raise ValueError(f"must be one of {', '.join(values)}, got {v!r}")
        return v
    return check


class Project(FileModel):
    """The ``.qtquant`` file (its schema); ``path`` is where it was read from, never written."""

    format: str | None = Field(None, validate_default=True)
    version: int | None = Field(None, validate_default=True)
    model: str = Field(min_length=1)  # as written: relative to the project file when possible
    model_sha256: str = ""
    input_shapes: dict[str, list[Annotated[int, Field(gt=0)]]] = Field(default_factory=dict)
    calib: dict = Field(default_factory=dict)  # CalibConfig's fields; CalibConfig.from_dict judges them
    scheme: str = DEFAULT_SCHEME.value
    policy: str = DEFAULT_POLICY.value
    march: str = DEFAULT_MARCH
    auto_share_max_bits_lost: float = DEFAULT_AUTO_SHARE_MAX_BITS_LOST
    float_output_max_bits_lost: float = DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST
    groups: tuple[ProjectGroup, ...] = Field((), strict=False)
    cut: tuple[str, ...] = Field((), strict=False)  # --cut: the tensors the model is cut at; () = whole file
    # tensor -> int16 / float (every other tensor is int8)
    precision: dict[str, Annotated[Precision, Field(strict=False)]] = Field(default_factory=dict)
    stats_cache: str | None = None
    # The hb_mapper compile log placed on the model (relative to the project file when possible), whether
    # its thresholds are the scales, and whether it was accepted at another input shape.
    compiler_log: str | None = None
    compiler_log_scales: bool = True
    compiler_log_any_shape: bool = False
    # Outputs the deployment hands over as integers, dequantised by the application (perf/board.py).
    int_outputs: tuple[str, ...] = Field((), strict=False)
    board_bpu_ghz: float = 0.0  # the board's BPU clock (0: the march's; perf/board.py)
    view: dict = Field(default_factory=dict)  # the canvas's module hierarchy: app.scene.ViewState.to_dict()
    path: Path | None = Field(None, exclude=True)
    reader_fields = ("path",)

    _format = field_validator("format")(lambda v: check_format(v, PROJECT_FORMAT, "qtquant project"))
    _version = field_validator("version")(lambda v: check_version(v, PROJECT_VERSION, "project"))
    _scheme = field_validator("scheme")(_one_of([s.value for s in Scheme]))
    _policy = field_validator("policy")(_one_of([x.value for x in Policy]))

    @model_validator(mode="before")
    @classmethod
    def _holdout_of_version_1(cls, data):
        calib = data.get("calib") if isinstance(data, dict) else None
        ver = data.get("version") if isinstance(calib, dict) else None
        if isinstance(ver, int) and ver < 2 and calib.get("holdout") == 2:
            # Version 1 wrote its fixed default; a user never chose it.  Read it as today's default
            # (auto), or an old project keeps checking on 2 samples held back from a small set.
            data = {**data, "calib": {k: v for k, v in calib.items() if k != "holdout"}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _one_threshold_before_version_4(cls, data):
        ver = data.get("version") if isinstance(data, dict) else None
        if isinstance(ver, int) and ver < 4 and data.get("max_bits_lost") is not None:
            # Up to version 3 one max_bits_lost was both the auto-share threshold and the
            # float-output one: it sets both, so an old project opens as it was saved.
            data = {**data, "auto_share_max_bits_lost": data["max_bits_lost"],
                    "float_output_max_bits_lost": data["max_bits_lost"]}
        return data

    def model_path(self) -> Path:
        return self._beside(self.model)

    def compiler_log_path(self) -> Path | None:
        return self._beside(self.compiler_log) if self.compiler_log else None

    def _beside(self, name: str) -> Path:
        """A path the file names, relative to the project file's folder unless absolute."""
        p = Path(name)
        if not p.is_absolute() and self.path is not None:
            p = self.path.parent / p
        return p

    def to_dict(self) -> dict:
        return {**self.model_dump(mode="json"), "format": PROJECT_FORMAT, "version": PROJECT_VERSION}

    def calib_config(self) -> CalibConfig:
        """The calibration settings the file names (a :class:`PlanError` where they cannot be used)."""
        try:
            return CalibConfig.from_dict(self.calib)
        except CalibConfigError as e:
            raise PlanError(f"project calibration settings are invalid: {e}") from None


def _rel(target: Path, base_dir: Path) -> str:
    """Relative when ``target`` is in ``base_dir``'s tree (a folder moved or copied as a whole keeps
    working), absolute otherwise (a project moved on its own still finds a model elsewhere)."""
    t, b = target.resolve(), base_dir.resolve()
    if t.is_relative_to(b):
        return os.path.relpath(t, b)
    return str(t)


def model_matches(proj: Project, path) -> bool:
    """``path`` is the model the project was saved with (same SHA-256; a project without a hash
    takes any file)."""
    from ..model.modelcheck import file_sha256

    return not proj.model_sha256 or file_sha256(Path(path)) == proj.model_sha256


class ViewFacts(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class ProjectSession(SessionState, Protocol):
    """A session as a project saves it: its state and what of the module hierarchy the canvas shows."""

    @property
    def view_state(self) -> ViewFacts | None: ...


def project_from_session(session: ProjectSession, path, stats_cache=None) -> Project:
    path = Path(path)
    g = session.graph
    o = session.options
    log = session.compiler_log
    if g.path is None:
        raise PlanError("a project refers to its model file: this model was not opened from a file")
    calib = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(o.calib).items()}
    return Project(
        format=PROJECT_FORMAT, version=PROJECT_VERSION,
        model=_rel(g.path, path.parent),
        model_sha256=g.sha256,
        input_shapes={k: [int(d) for d in v] for k, v in g.input_shapes.items()},
        calib=calib, scheme=o.scheme.value, policy=o.policy.value, march=o.march,
        auto_share_max_bits_lost=o.auto_share_max_bits_lost, float_output_max_bits_lost=o.float_output_max_bits_lost,
        groups=[{"name": gr.name, "members": list(gr.members)} for gr in session.groups],
        cut=list(g.cut),
        precision=dict(o.precision),
        stats_cache=_rel(Path(stats_cache), path.parent) if stats_cache else None,
        compiler_log=_rel(Path(log.log.path), path.parent) if log is not None and log.log.path else None,
        compiler_log_scales=session.compiler_ranges is not None or log is None,
        compiler_log_any_shape=log is not None and log.shape_differs,
        int_outputs=list(o.int_outputs),
        board_bpu_ghz=o.board_bpu_ghz,
        view=session.view_state.to_dict() if session.view_state is not None else {},
    )


def save_project(session: ProjectSession, path, stats_cache=None) -> Path:
    proj = project_from_session(session, path, stats_cache)
    return atomic_write_text(path, json.dumps(proj.to_dict(), indent=2) + "\n")


def load_project(path) -> Project:
    p = Path(path)
    doc = read_json(p, noun="project", error=PlanError)
    try:
        return Project.model_validate(doc, context={"path": p})
    except ValidationError as e:
        raise PlanError(one_line(e, p.name, "qtquant project")) from None
