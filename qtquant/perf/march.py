"""March profiles: the hardware numbers the perf simulator runs on (DESIGN §4).

A profile is a JSON file under ``resources/marches/`` (or a user's own, ``--march-file``).
Every number in it is an object ``{"value": ..., "source": "..."}`` or
``{"value": ..., "estimate": "why this value"}``, so a reader can always tell a
published figure from a guess.  Loading validates all of it and turns any problem into
a one-line :class:`~qtquant.errors.MarchError`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MarchError
from ..resources import resource_path

__all__ = ["MarchProfile", "load_march", "march_names", "PARAMS"]

# name -> (type, must be > 0).  Types: "num", "int", "ops" (list of op-type strings).
PARAMS: dict[str, tuple[str, bool]] = {
    "frequency_ghz": ("num", True),  # BPU clock
    "peak_tops": ("num", True),  # int8 TOPS of the whole chip (2 ops per MAC)
    "cores": ("int", True),  # BPU cores that share peak_tops
    "cores_per_model": ("int", True),  # cores one model runs on (Horizon: one, unless split)
    "utilization": ("num", True),  # MAC-array utilization of a well-aligned conv, 0..1
    "channel_align": ("int", True),  # channel multiple the MAC array is built for
    "vector_elems_per_cycle": ("num", True),  # elementwise unit throughput (int8 elements)
    "ddr_gbps": ("num", True),  # sustained DDR bandwidth available to the BPU, GB/s
    "sram_gbps": ("num", True),  # on-chip buffer bandwidth, GB/s
    "sram_mb": ("num", True),  # on-chip feature buffer, MB (1e6 bytes)
    "op_overhead_us": ("num", False),  # fixed cost per scheduled op
    "fused_activations": ("ops", False),  # ops folded into the preceding Conv/Gemm
}


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
    fused_activations: frozenset
    path: str = ""
    provenance: dict = field(default_factory=dict, compare=False)  # param -> ("source"|"estimate", text)

    # -- derived rates (per second) ---------------------------------------------------------
    @property
    def macs_per_s(self) -> float:
        """Peak MAC/s available to one model (TOPS count a MAC as 2 ops)."""
        return self.peak_tops * 1e12 / 2 * self.cores_per_model / self.cores

    @property
    def vector_elems_per_s(self) -> float:
        return self.vector_elems_per_cycle * self.frequency_ghz * 1e9

    @property
    def ddr_bytes_per_s(self) -> float:
        return self.ddr_gbps * 1e9

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
            v = getattr(self, k)
            d[k] = sorted(v) if isinstance(v, frozenset) else v
        return d


def march_names() -> list[str]:
    folder = resource_path("marches")
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json"))


def _looks_like_path(s: str) -> bool:
    return s.lower().endswith(".json") or os.sep in s or "/" in s


def load_march(name_or_path) -> MarchProfile:
    """Load a bundled march by name (``bayes-e``) or a profile file by path."""
    if isinstance(name_or_path, MarchProfile):
        return name_or_path
    s = str(name_or_path or "").strip()
    if not s:
        raise MarchError("no march given (choose from " + ", ".join(march_names()) + ")")
    if isinstance(name_or_path, Path) or _looks_like_path(s):
        p = Path(s)
        if not p.is_file():
            raise MarchError(f"march profile file not found: {p}")
    else:
        p = resource_path("marches", f"{s}.json")
        if not p.is_file():
            raise MarchError(f"unknown march {s!r} (choose from {', '.join(march_names())}, "
                             f"or give a profile with --march-file PROFILE.json)")
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
    where = f"march profile {p.name}"
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise MarchError(f"{where} is not a text file") from None
    except json.JSONDecodeError as e:
        raise MarchError(f"{where} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except OSError as e:
        raise MarchError(f"cannot read {where}: {e.strerror or e}") from None
    return profile_from_dict(doc, where=where, path=str(p))


def profile_from_dict(doc, *, where: str = "march profile", path: str = "") -> MarchProfile:
    """Validate a parsed profile document (see ``resources/marches/*.json`` for the format)."""
    if not isinstance(doc, dict):
        raise MarchError(f"{where} must be a JSON object")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MarchError(f'{where} needs a "name" string')
    params = doc.get("params")
    if not isinstance(params, dict):
        raise MarchError(f'{where} needs a "params" object')
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise MarchError(f'{where}: unknown parameter "{unknown[0]}" (known: {", ".join(PARAMS)})')
    values: dict = {}
    prov: dict = {}
    for key, (kind, positive) in PARAMS.items():
        entry = params.get(key)
        if entry is None:
            raise MarchError(f'{where}: missing parameter "{key}"')
        if not isinstance(entry, dict) or "value" not in entry:
            raise MarchError(f'{where}: "{key}" must be an object with "value" and "source" or "estimate"')
        has_src = isinstance(entry.get("source"), str) and entry["source"].strip()
        has_est = isinstance(entry.get("estimate"), str) and entry["estimate"].strip()
        if not (has_src or has_est):
            raise MarchError(f'{where}: "{key}" states neither its "source" nor that it is an "estimate"')
        v = entry["value"]
        if kind == "ops":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise MarchError(f'{where}: "{key}" must be a list of op type names')
            v = frozenset(v)
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
                raise MarchError(f'{where}: "{key}" must be a number, got {json.dumps(v)[:40]}')
            if kind == "int":
                if int(v) != v:
                    raise MarchError(f'{where}: "{key}" must be a whole number, got {v}')
                v = int(v)
            if positive and v <= 0:
                raise MarchError(f'{where}: "{key}" must be greater than 0, got {v}')
            if v < 0:
                raise MarchError(f'{where}: "{key}" must not be negative, got {v}')
        values[key] = v
        prov[key] = ("source", entry["source"]) if has_src else ("estimate", entry["estimate"])
    if values["utilization"] > 1:
        raise MarchError(f'{where}: "utilization" is a fraction and must be at most 1, got {values["utilization"]}')
    if values["cores_per_model"] > values["cores"]:
        raise MarchError(f'{where}: "cores_per_model" ({values["cores_per_model"]}) exceeds "cores" ({values["cores"]})')
    desc = doc.get("description", "")
    return MarchProfile(name=name.strip(), description=desc if isinstance(desc, str) else "",
                        path=path, provenance=prov, **values)
