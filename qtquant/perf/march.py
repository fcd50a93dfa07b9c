"""March profiles: the hardware numbers the perf simulator runs on (DESIGN §4).

A profile is a JSON file under ``resources/marches/`` (or a user's own, ``--march-file``).
Every number in it is an object ``{"value": ..., "source": "..."}`` or
``{"value": ..., "estimate": "why this value"}``, so a reader can always tell a
published figure from a guess.  Loading validates all of it and turns any problem into
a one-line :class:`~qtquant.base.errors.MarchError`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import (AfterValidator, BeforeValidator, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from ..base.errors import MarchError
from ..model.ops import FusionRule, fusion_rule_from
from ..base.fileio.schema import FileModel, first_problem, one_line, problem, read_json
from ..base.resources import resource_path
from ..base.vocab import ConcatScaleRule

__all__ = ["MarchProfile", "FigureKind", "FitError", "FitInfo", "load_march", "march_names", "profile_from_dict",
           "PARAMS", "unknown_march",
           "looks_like_path"]


# -- the schema of a profile file ------------------------------------------------------------------

def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"must be a number, got {json.dumps(v, default=str)[:40]}")
    return float(v)


def _whole(v):
    v = _number(v)
    if int(v) != v:
        raise ValueError(f"must be a whole number, got {v:g}")
    return int(v)


def _rule(v):
    try:
        return ConcatScaleRule(v)
    except ValueError:
        raise ValueError(f"must be one of {', '.join(r.value for r in ConcatScaleRule)}, "
                         f"got {json.dumps(v, default=str)[:40]}") from None


Positive = Annotated[float, BeforeValidator(_number), Field(gt=0)]
NonNegative = Annotated[float, BeforeValidator(_number), Field(ge=0)]
Fraction = Annotated[float, BeforeValidator(_number), Field(gt=0, le=1)]
Count = Annotated[int, BeforeValidator(_whole), Field(gt=0)]
V = TypeVar("V")


class Param(FileModel, Generic[V]):
    """One number of a profile and where it comes from: a published ``source``, an
    ``estimate`` that says why this value, or ``fitted`` ("fitted to …": which figures, by
    which script), so a reader can always tell a fact from a guess from a fit."""

    value: V
    source: str = ""
    estimate: str = ""
    fitted: str = ""

    @model_validator(mode="after")
    def _provenance(self):
        if not (self.source.strip() or self.estimate.strip() or self.fitted.strip()):
            raise ValueError('states neither its "source", nor that it is an "estimate", nor what it was "fitted" to')
        return self

    @property
    def provenance(self) -> tuple[str, str]:
        for kind in ("fitted", "source", "estimate"):
            text = getattr(self, kind).strip()
            if text:
                return kind, text
        return "estimate", ""


_OPS = Annotated[list[str], Field(max_length=200)]


def _limit_set(name: str) -> str:
    from .bpu_limits import LIMIT_SETS

    if name not in LIMIT_SETS:
        raise ValueError(f"is not a known set of BPU limits (known: {', '.join(sorted(LIMIT_SETS))})")
    return name


class FusionSpec(FileModel):
    """The profile's ``fusion`` object (see :class:`qtquant.model.ops.FusionRule` for the meaning)."""

    model_config = ConfigDict(extra="forbid")

    producers: _OPS = ["Conv", "ConvTranspose", "Gemm", "MatMul"]
    folded: _OPS = ["BatchNormalization", "Add", "Sub", "Mul", "Div"]
    write_back: _OPS = []
    residual_add: bool = False
    lut: _OPS = []
    concat_in_place: bool = False
    vector_regions: bool = False
    softmax_passes: Annotated[int, Field(ge=1, le=16)] = 1


class FigureKind(str, Enum):
    """What a public latency figure measures: the compiler's static estimate of the BPU part, or the
    board's one-thread latency (that estimate plus the runtime's CPU work, perf/board.py)."""

    STATIC = "static"
    BOARD = "board"


class FitError(FileModel):
    """One figure of a fit, as the fit predicted it: in sample, and left out (leave-one-out)."""

    figure: str
    kind: Annotated[FigureKind, BeforeValidator(FigureKind)]
    family: str  # perf/fit.py family_of: what kind of network it is, for "the nearest family"
    public_us: float
    fitted_us: float
    loo_us: float | None = None

    @property
    def loo_error(self) -> float | None:
        return None if self.loo_us is None else (self.loo_us - self.public_us) / self.public_us


class FitInfo(FileModel):
    """Which numbers of the profile were fitted (by ``script`` to ``figures``): each must say so.
    ``errors``: each figure's in-sample and leave-one-out prediction (the report's ±N%)."""

    script: str
    figures: list[str] = []
    params: list[str]
    errors: list[FitError] = []


class Params(FileModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt parameter must not silently fall back

    frequency_ghz: Param[Positive]  # BPU clock
    peak_tops: Param[Positive]  # int8 TOPS of the whole chip (2 ops per MAC)
    cores: Param[Count]  # BPU cores that share peak_tops
    cores_per_model: Param[Count]  # cores one model runs on (Horizon: one, unless split)
    utilization: Param[Fraction]  # MAC-array utilization of a well-aligned conv
    channel_align: Param[Count]  # channel multiple the MAC array is built for
    vector_elems_per_cycle: Param[Positive]  # elementwise unit throughput (int8 elements)
    ddr_gbps: Param[Positive]  # sustained DDR bandwidth available to the BPU, GB/s
    # Constants (weights, biases) streamed from DDR in long bursts, GB/s; absent: ddr_gbps.
    weight_gbps: Param[Positive] | None = None
    sram_gbps: Param[Positive]  # on-chip buffer bandwidth, GB/s
    sram_mb: Param[Positive]  # on-chip feature buffer, MB (1e6 bytes)
    op_overhead_us: Param[NonNegative]  # fixed cost per scheduled op
    # Residency (perf/context.py CostContext.in_ddr): a tensor one vector-unit pass or one pointwise layer
    # reads streams through the buffer tile by tile (unless a Concat writes it); an attention matrix does
    # not.  Absent: size alone decides.
    stream_tiles: Param[bool] | None = None
    # The share of that limit an attention matrix may take and stay on chip (with stream_tiles).  Absent: 1.
    attention_onchip_share: Param[Fraction] | None = None
    # A Reshape that splits or merges real dimensions is a copy (perf/costs.py view_cost).  Absent: a view.
    relayout_reshape: Param[bool] | None = None
    # An image input (4-D, 3 channels) is read as NV12, 1.5 bytes per pixel.  Absent: 3 bytes (int8 RGB).
    image_input_nv12: Param[bool] | None = None
    # What the compiler merges into one layer (qtquant.model.ops.FusionRule).
    fusion: Param[FusionSpec] | None = None
    # Older profiles: one list of ops fused into the producer (read as a write-back list).
    fused_activations: Param[list[str]] | None = None
    # Efficiency of each op class against the plain rates above (1 = the rate as stated):
    # MAC-array layers that are depthwise/grouped, or MatMuls of two activations (attention);
    # vector-unit classes (see perf/context.py vector_class).
    depthwise_efficiency: Param[Positive] | None = None
    matmul_efficiency: Param[Positive] | None = None
    eltwise_efficiency: Param[Positive] | None = None
    lut_efficiency: Param[Positive] | None = None
    resize_efficiency: Param[Positive] | None = None
    pool_efficiency: Param[Positive] | None = None
    reduce_efficiency: Param[Positive] | None = None
    copy_efficiency: Param[Positive] | None = None
    region_efficiency: Param[Positive] | None = None  # an element-wise region (fusion.vector_regions)
    # The board estimate (perf/board.py): what the runtime adds on the CPU to one inference of one
    # thread (hrt_model_exec perf): a fixed cost per call, and each float32 output element
    # dequantised (each float input element quantised).  Never part of the BPU static estimate.
    board_call_us: Param[NonNegative] | None = None
    board_ns_per_element: Param[NonNegative] | None = None
    # The BPU clock of the board figures (the board estimate's BPU part runs at it; the static estimate,
    # what the compiler prints, at frequency_ghz).  Absent: frequency_ghz.
    board_bpu_ghz: Param[Positive] | None = None
    # Older profiles: one CPU term per board figure (read as board_call_us).
    board_cpu_overhead_us: Param[NonNegative] | None = None
    # How the compiler picks a Concat's output scale (qtquant.concatrule); absent: its own scale.
    concat_output_scale: Param[Annotated[ConcatScaleRule, BeforeValidator(_rule)]] | None = None
    # Placement (perf/placement.py): ONNX op types the compiler runs on the board's CPU, and the one input
    # rank at which it runs a Softmax on the BPU (reduced over its last axis; 0: any).  Absent: all on the BPU.
    cpu_ops: Param[_OPS] | None = None
    softmax_bpu_rank: Param[Annotated[int, Field(ge=0, le=8)]] | None = None
    # The limits within which its BPU runs the ops it supports (perf/bpu_limits.py: a set's name).
    bpu_limits: Param[Annotated[str, AfterValidator(_limit_set)]] | None = None


PARAMS = tuple(Params.model_fields)


class ProfileFile(FileModel):
    name: str
    description: str = ""
    params: Params
    fit: FitInfo | None = None
    # Mixed precision's numbers (qtquant.perf.precision validates them when a price needs them,
    # so a profile used without int16/float tensors never fails on them).
    precision: Any = None

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not v.strip():
            raise ValueError("must not be blank")
        return v.strip()

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, v):
        return v if isinstance(v, str) else ""  # shown only: a bad one is just absent

    @model_validator(mode="after")
    def _fitted(self):
        for k in (self.fit.params if self.fit else ()):
            if k.startswith("precision."):  # a number of the precision section
                entry = self.precision.get(k.split(".", 1)[1]) if isinstance(self.precision, dict) else None
                if not isinstance(entry, dict) or not str(entry.get("fitted", "")).strip().lower() \
                        .startswith("fitted to"):
                    raise ValueError(f'"{k}" is listed as fitted (fit.params) but does not say what it was '
                                     f'fitted to (give it "fitted": "fitted to ...")')
                continue
            p = getattr(self.params, k, None) if k in PARAMS else None
            if k not in PARAMS:
                raise ValueError(f'"fit" lists unknown parameter "{k}"')
            if p is None or not p.fitted.strip().lower().startswith("fitted to"):
                raise ValueError(f'"{k}" is listed as fitted (fit.params) but does not say what it was '
                                 f'fitted to (give it "fitted": "fitted to ...")')
        return self

    @model_validator(mode="after")
    def _cores(self):
        used, cores = self.params.cores_per_model.value, self.params.cores.value
        if used > cores:
            raise ValueError(f'"cores_per_model" ({used}) exceeds "cores" ({cores})')
        return self


@dataclass(frozen=True)
class MarchProfile:
    name: str
    description: str
    frequency_ghz: float
    peak_tops: float
    cores: int
    cores_per_model: int
    utilization: float
    channel_align: int
    vector_elems_per_cycle: float
    ddr_gbps: float
    sram_gbps: float
    sram_mb: float
    op_overhead_us: float
    fusion: FusionRule = FusionRule()
    stream_tiles: bool = False
    attention_onchip_share: float = 1.0
    weight_gbps: float = 0.0  # 0: as ddr_gbps
    relayout_reshape: bool = False
    image_input_nv12: bool = False
    depthwise_efficiency: float = 1.0
    matmul_efficiency: float = 1.0
    eltwise_efficiency: float = 1.0
    lut_efficiency: float = 1.0
    resize_efficiency: float = 1.0
    pool_efficiency: float = 1.0
    reduce_efficiency: float = 1.0
    copy_efficiency: float = 1.0
    region_efficiency: float = 1.0
    board_call_us: float = 0.0
    board_ns_per_element: float = 0.0
    board_bpu_ghz: float = 0.0  # 0: frequency_ghz
    fitted_params: tuple = ()  # names the profile's "fit" lists
    fit_errors: tuple = field(default=(), compare=False)  # FitError per figure of the profile's fit
    concat_output_scale: ConcatScaleRule = ConcatScaleRule.OWN
    cpu_ops: frozenset = frozenset()  # ONNX op types run on the CPU (perf/placement.py)
    softmax_bpu_rank: int = 0  # a Softmax runs on the BPU only at this input rank, over its last axis (0: any)
    bpu_limits: str = ""  # the set of shape and attribute limits of its BPU ops (perf/bpu_limits.py; "": none)
    path: str = ""
    provenance: dict = field(default_factory=dict, compare=False)  # param -> ("source"|"estimate"|"fitted", text)
    # The file's "precision" section as read (None: absent): perf/precision.py reads it from here,
    # so the profile file is read in one place.
    precision_section: Any = field(default=None, compare=False)

    @property
    def fused_activations(self) -> frozenset:
        """Every op name the fusion rule merges (write-back and lookup-table lists)."""
        return self.fusion.write_back | self.fusion.lut

    def vector_efficiency(self, cls: str) -> float:
        return getattr(self, f"{cls}_efficiency", 1.0)

    # -- derived rates (per second) ---------------------------------------------------------
    @property
    def macs_per_s(self) -> float:
        """Peak MAC/s available to one model (TOPS count a MAC as 2 ops)."""
        return self.peak_tops * 1e12 / 2 * self.cores_per_model / self.cores

    @property
    def vector_elems_per_s(self) -> float:
        return self.vector_elems_per_cycle * self.frequency_ghz * 1e9

    @property
    def board_ghz(self) -> float:
        """The board's BPU clock: ``board_bpu_ghz``, absent the static estimate's ``frequency_ghz``."""
        return self.board_bpu_ghz or self.frequency_ghz

    @property
    def board_clock_ratio(self) -> float:
        """How much faster the board's BPU clock runs than the static estimate's: the compute, vector,
        on-chip and per-op terms of a layer shrink by it on the board; DDR time does not."""
        return self.board_ghz / self.frequency_ghz

    @property
    def ddr_bytes_per_s(self) -> float:
        return self.ddr_gbps * 1e9

    @property
    def weight_bytes_per_s(self) -> float:
        return (self.weight_gbps or self.ddr_gbps) * 1e9

    @property
    def sram_bytes_per_s(self) -> float:
        return self.sram_gbps * 1e9

    @property
    def onchip_tensor_bytes(self) -> float:
        # A tensor stays on chip when it fits in half the buffer: the producer's output and the
        # consumer's input must be resident at the same time.
        return self.sram_mb * 1e6 / 2

    def to_dict(self) -> dict:
        d = {"name": self.name, "description": self.description}
        for k in PARAMS:
            if k in ("fused_activations", "board_cpu_overhead_us"):
                continue  # older spellings ("fusion", "board_call_us")
            v = getattr(self, k)
            if isinstance(v, FusionRule):
                v = {f: (sorted(x) if isinstance(x, frozenset) else x) for f, x in vars(v).items()}
            d[k] = sorted(v) if isinstance(v, frozenset) else v
        return d


def march_names() -> list[str]:
    folder = resource_path("marches")
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json"))


def unknown_march(name: str) -> str:
    """What an unknown march name is told (``--march`` on the command line, :func:`load_march`)."""
    return (f"unknown march {name!r} (choose from {', '.join(march_names())}, "
            f"or give a profile with --march-file PROFILE.json)")


def looks_like_path(s: str) -> bool:
    return s.lower().endswith(".json") or os.sep in s or "/" in s


def load_march(name_or_path) -> MarchProfile:
    """Load a bundled march by name (``bayes-e``) or a profile file by path."""
    if isinstance(name_or_path, MarchProfile):
        return name_or_path
    s = str(name_or_path or "").strip()
    if not s:
        raise MarchError("no march given (choose from " + ", ".join(march_names()) + ")")
    if isinstance(name_or_path, Path) or looks_like_path(s):
        p = Path(s)
        if not p.is_file():
            raise MarchError(f"march profile file not found: {p}")
    else:
        p = resource_path("marches", f"{s}.json")
        if not p.is_file():
            raise MarchError(unknown_march(s))
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError as e:
        raise MarchError(f"cannot read march profile {p.name}: {e.strerror or e}") from None
    prof = _CACHE.get(key)
    if prof is None:
        prof = _CACHE[key] = _load_file(p)
    return prof


_CACHE: dict = {}  # (path, mtime, size) -> MarchProfile: the GUI loads the march on every edit


def _load_file(p: Path) -> MarchProfile:
    return profile_from_dict(read_json(p, noun="march profile", error=MarchError),
                             where=f"march profile {p.name}", path=str(p))


def _message(e: ValidationError, where: str) -> str:
    loc, err = first_problem(e)
    if loc[:1] != ("params",) or len(loc) < 2:
        return one_line(e, where, "qtquant march profile")
    key = loc[1]
    if err["type"] == "extra_forbidden":
        return f'{where}: unknown parameter "{key}" (known: {", ".join(PARAMS)})'
    if len(loc) == 2 and err["type"] == "missing":
        return f'{where}: missing parameter "{key}"'
    if len(loc) == 2 and err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f'{where}: "{key}" must be an object with "value" and "source" or "estimate"'
    return f'{where}: "{key}" {problem(err)}'


def profile_from_dict(doc, *, where: str = "march profile", path: str = "") -> MarchProfile:
    """Validate a parsed profile document (see ``resources/marches/*.json`` for the format)."""
    try:
        f = ProfileFile.model_validate(doc)
    except ValidationError as e:
        raise MarchError(_message(e, where)) from None
    params = {k: getattr(f.params, k) for k in PARAMS if getattr(f.params, k) is not None}
    values = {k: p.value for k, p in params.items() if k not in ("fusion", "fused_activations")}
    if "fusion" in params:
        values["fusion"] = fusion_rule_from(params["fusion"].value.model_dump())
    elif "fused_activations" in params:  # an older profile: one list of fused ops
        ops = set(params["fused_activations"].value)
        values["fusion"] = FusionRule(write_back=frozenset(ops - {"Add"}), residual_add="Add" in ops)
        params["fusion"] = params.pop("fused_activations")
    else:
        params.pop("fused_activations", None)
    if "cpu_ops" in values:
        values["cpu_ops"] = frozenset(values["cpu_ops"])  # the profile is hashed (one simulator per march)
    old = params.pop("board_cpu_overhead_us", None)
    values.pop("board_cpu_overhead_us", None)
    if old is not None and "board_call_us" not in params:  # an older profile's one CPU term
        params["board_call_us"], values["board_call_us"] = old, old.value
    return MarchProfile(name=f.name, description=f.description, path=path,
                        fitted_params=tuple(f.fit.params) if f.fit else (),
                        fit_errors=tuple(f.fit.errors) if f.fit else (),
                        provenance={k: p.provenance for k, p in params.items()},
                        precision_section=f.precision, **values)
