"""Statistics cache: reopening a model does not recalibrate.

A cache entry is two files in ``cache_dir``: ``calib-<key>.npz`` (histograms and the check
samples, plain arrays, read with ``allow_pickle=False``) and ``calib-<key>.json`` (everything else,
including whether the check samples are held out or in-sample).
No pickle anywhere: a cache file from elsewhere cannot run code.

The key hashes the model's sha256, the input shapes, and the data configuration: the source with
the size and mtime of every file it lists, count, seed, holdout and preprocessing, and the
constants of the automatic hold-out rule.  Observer,
percentile and scheme are not in the key: the statistics do not depend on them, and the ranges
are recomputed from the statistics on load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError, field_validator

from ..base.errors import CalibrationDataError, QtQuantError
from ..base.fileio import atomic_file, atomic_write_text
from ..base.fileio.schema import FileModel, check_format, one_line, read_json
from ..model.runtime import input_specs
from .engine import CHECK_CAP, CalibConfig, CalibrationResult, calibrate, compute_ranges
from .holdout import AUTO_HOLDOUT_FRACTION, AUTO_HOLDOUT_MIN
from .sources import open_source
from .stats import TensorStats

__all__ = ["cache_key", "cache_paths", "save_cache", "load_cached", "calibrate_cached", "read_cache_meta",
           "CacheMeta", "CACHE_FORMAT", "TensorEntry", "DATA_FIELDS", "data_settings", "pack_result",
           "unpack_stats", "unpack_holdout", "holdout_fits"]

# 2: --holdout may be auto or a fraction, and the check samples may be in-sample ("in_sample").
# A format-1 entry (holdout 2, always held out) is a miss, never read as the new meaning.
# 3: compact histograms (the occupied window of ``bins`` per sign, narrow counts; see stats.py).
CACHE_FORMAT = 3
DATA_FIELDS = ("count", "seed", "holdout", "resize", "color", "pixel_range", "mean", "std", "layout")


def data_settings(config: CalibConfig) -> dict:
    """The data settings of ``config`` as plain JSON values (what the statistics depend on)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k in DATA_FIELDS for v in (getattr(config, k),)}


def _key_payload(graph, config: CalibConfig) -> dict:
    source = open_source(input_specs(graph), config)
    return {
        "format": CACHE_FORMAT,
        "model_sha256": graph.sha256,
        "input_shapes": {k: list(v) for k, v in sorted(graph.input_shapes.items())},
        "source": source.fingerprint(),
        "data": data_settings(config),
        "stride": config.stride,  # a subsampled histogram is not what a percentile user expects
        "bins": config.bins,
        # The split follows from these too: another rule would calibrate on other samples.
        "split": [AUTO_HOLDOUT_MIN, AUTO_HOLDOUT_FRACTION, CHECK_CAP],
        # A cut graph observes fewer tensors than its file: its statistics are its own.
        **({"cut": list(graph.cut)} if graph.cut else {}),
    }


class TensorEntry(FileModel):
    """One observed tensor: :meth:`TensorStats.to_meta` and the name of its histogram array."""

    name: str
    hist: str | None = None  # key in the .npz: the occupied window of counts, from bin ``lo``
    bins: int = 2048  # bins per sign
    lo: int = 0
    min: float
    max: float
    exp: int | None = None
    count: int
    stride: int
    samples: int
    ma_min: tuple[int, float, float] = Field(strict=False)  # (samples, moving average, its weight)
    ma_max: tuple[int, float, float] = Field(strict=False)


class CacheMeta(FileModel):
    """The ``calib-<key>.json`` half of a cache entry (the arrays are in the ``.npz`` it names)."""

    format: int
    key: str
    model_sha256: str = ""
    batches: int
    seconds: float = 0.0
    notes: tuple[str, ...] = Field((), strict=False)
    tensors: tuple[TensorEntry, ...] = Field(strict=False)
    holdout: tuple[dict[str, str], ...] = Field(strict=False)  # per check sample: input name -> .npz key
    in_sample: bool
    arrays: str = ""

    _format = field_validator("format")(lambda v: check_format(v, CACHE_FORMAT, "statistics cache of this qtquant"))


def read_cache_meta(path) -> CacheMeta:
    """A cache entry's metadata; anything unreadable or malformed raises a one-line
    :class:`CalibrationDataError` (:func:`load_cached` takes it for a miss)."""
    p = Path(path)
    doc = read_json(p, noun="statistics cache", error=CalibrationDataError)
    try:
        return CacheMeta.model_validate(doc)
    except ValidationError as e:
        raise CalibrationDataError(one_line(e, p.name, "qtquant statistics cache")) from None


def cache_key(graph, config: CalibConfig) -> str:
    """Hex key of (model, input shapes, data configuration); the data folder is listed, not read."""
    payload = json.dumps(_key_payload(graph, config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def cache_paths(cache_dir, key: str) -> tuple[Path, Path]:
    base = Path(cache_dir) / f"calib-{key[:24]}"
    return base.with_suffix(".json"), base.with_suffix(".npz")


def pack_result(result: CalibrationResult) -> tuple[dict, list[TensorEntry], list[dict[str, str]]]:
    """``result``'s statistics and check samples as plain arrays (for ``np.savez``), the tensor
    entries naming them, and per check sample ``{input name: array key}``."""
    arrays, tensors = {}, []
    for i, (name, s) in enumerate(result.stats.items()):
        if s.counts is not None:
            arrays[f"hist_{i}"] = s.counts
        tensors.append(TensorEntry(name=name, hist=f"hist_{i}" if s.counts is not None else None, **s.to_meta()))
    holdout = []
    for j, feed in enumerate(result.holdout):
        entry = {}
        for k, (name, arr) in enumerate(feed.items()):
            arrays[f"holdout_{j}_{k}"] = np.asarray(arr)
            entry[name] = f"holdout_{j}_{k}"
        holdout.append(entry)
    return arrays, tensors, holdout


def unpack_stats(tensors, z) -> dict[str, TensorStats]:
    """Statistics from tensor entries and the opened ``.npz`` ``z`` (ValueError/KeyError if inconsistent)."""
    return {t.name: TensorStats.from_meta(t.model_dump(), z[t.hist] if t.hist else None) for t in tensors}


def unpack_holdout(holdout, z) -> list[dict]:
    return [{name: z[ref] for name, ref in entry.items()} for entry in holdout]


def holdout_fits(graph, holdout: list[dict]) -> bool:
    """The check samples still fit the model's inputs (names, shapes and dtypes)."""
    specs = input_specs(graph)
    return all(set(feed) == set(specs) and all(tuple(feed[k].shape) == specs[k][0] and feed[k].dtype == specs[k][1]
                                               for k in specs) for feed in holdout)


def save_cache(graph, result: CalibrationResult, cache_dir) -> Path:
    """Store ``result``'s statistics for ``graph``; returns the JSON file's path."""
    key = cache_key(graph, result.config)
    jpath, npath = cache_paths(cache_dir, key)
    arrays, tensors, holdout = pack_result(result)
    meta = CacheMeta(format=CACHE_FORMAT, key=key, model_sha256=graph.sha256, batches=result.batches,
                     seconds=float(result.seconds), notes=list(result.notes), tensors=tensors, holdout=holdout,
                     in_sample=bool(result.in_sample), arrays=npath.name)
    # The .npz goes first: a .json on disk means a complete entry.
    npath.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(npath) as tmp, open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a path
        np.savez(f, **arrays)
    atomic_write_text(jpath, json.dumps(meta.model_dump(mode="json"), indent=1) + "\n")
    return jpath


def load_cached(graph, config: CalibConfig, cache_dir) -> CalibrationResult | None:
    """The cached calibration for ``graph`` and ``config``, or None (missing, stale or unreadable).

    The returned ranges follow ``config``'s observer, percentile and scheme.
    """
    if cache_dir is None:
        return None
    try:
        key = cache_key(graph, config)
    except QtQuantError:
        return None  # the data is gone or changed shape: nothing valid to reuse
    jpath, npath = cache_paths(cache_dir, key)
    if not jpath.is_file() or not npath.is_file():
        return None
    try:
        meta = read_cache_meta(jpath)
    except QtQuantError:
        return None
    if meta.key != key:
        return None
    try:
        with np.load(npath, allow_pickle=False) as z:
            stats = unpack_stats(meta.tensors, z)
            holdout = unpack_holdout(meta.holdout, z)
    except Exception:  # noqa: BLE001 - any unreadable or inconsistent array file is a cache miss (fuzzed)
        return None
    if any(n not in stats for n in graph.observed_tensors):
        return None  # written by a qtquant that observed other tensors
    if not holdout_fits(graph, holdout):  # held-back samples must still fit the model's inputs
        return None
    return CalibrationResult(stats, compute_ranges(stats, config), config, holdout, meta.batches, meta.seconds,
                             list(meta.notes), meta.in_sample)


def calibrate_cached(graph, config: CalibConfig, cache_dir, progress=None, cancel=None) -> CalibrationResult:
    """:func:`load_cached`, else :func:`~qtquant.calib.engine.calibrate` and :func:`save_cache`."""
    res = load_cached(graph, config, cache_dir)
    if res is not None:
        return res
    res = calibrate(graph, config, progress=progress, cancel=cancel)
    if cache_dir is not None:
        try:
            save_cache(graph, res, cache_dir)
        except (QtQuantError, OSError):
            pass  # a read-only project folder still calibrates; it just cannot cache
    return res
