"""Statistics files: ``qtquant calibrate --stats-out``, ``--stats`` and ``--merge``.

A statistics file is one ``.npz`` archive read with ``allow_pickle=False`` (no pickle anywhere: a
file from a cluster cannot run code on the laptop that opens it).  It holds the compact histograms
and the check samples as plain arrays (the cache's layout, :func:`qtquant.calib.cache.pack_result`)
and, under the key ``header``, a JSON header (UTF-8 bytes) validated by :class:`StatsHeader`: the
model's sha256 and input shapes, the data configuration, the histogram layout (stride, bins) and
one entry per *shard* (the data a file was calibrated on; a merged file lists them all).

Opening a file for another model, other input shapes or other data settings is a one-line
:class:`~qtquant.base.errors.StatsFileError` (CLI exit 3, a dialog in the app).  Merging checks the
files agree on everything but the data, and merges in the order given; histograms and MinMax
merge exactly (:mod:`qtquant.calib.stats`), so ``merge(stats(A), stats(B)) == stats(A ∪ B)``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, ValidationError, field_validator

from ..base.errors import QtQuantError, StatsFileError
from ..base.fileio import atomic_file, check_output_path
from ..base.fileio.paths import existing_file
from ..base.fileio.schema import FileModel, check_format, check_version, one_line
from ..model.runtime import input_specs
from ..base.tables import samples_text
from ..base.vocab import SYNTHETIC
from .cache import DATA_FIELDS, TensorEntry, holdout_fits, pack_result, unpack_holdout, unpack_stats
from .engine import CHECK_CAP, CalibConfig, CalibrationResult, compute_ranges
from .holdout import CalibConfigError
from .sources import data_digest, open_source
from .stats import BINS

__all__ = ["STATS_FORMAT", "STATS_VERSION", "StatsHeader", "Shard", "write_stats", "read_stats_header",
           "load_stats", "merge_stats", "explicit_data_fields", "RANGE_FIELDS"]

STATS_FORMAT = "qtquant-statistics"
STATS_VERSION = 1
_HEADER = "header"
_PREPROCESSING = ("resize", "color", "pixel_range", "mean", "std", "layout")
_PER_SHARD = ("source", "count", "seed", "holdout")  # what differs between shards of one merged file
_OPTION = {"source": "--calib", "count": "--calib-count", "pixel_range": "--pixel-range"}
# observers that read the histogram itself (a search tries them all)
_FULL_HISTOGRAM = ("percentile", "mse", "kl", "search", "search-per-node")


class Shard(FileModel):
    """The data one calibration ran on."""

    source: str
    data_sha256: str  # of the source's fingerprint (files with size and mtime; SYNTHETIC)
    count: int
    seed: int
    holdout: int | float | None = None  # a count, a fraction or None (auto)
    batches: int


class StatsHeader(FileModel):
    format: str
    version: int
    model_sha256: str
    model_name: str = ""
    input_shapes: dict[str, list[int]]
    cut: tuple[str, ...] = Field((), strict=False)  # --cut: the tensors the model was cut at (() = whole)
    config: dict  # the CalibConfig of the first shard (observer, percentile, scheme, data settings)
    stride: int
    bins: int
    shards: tuple[Shard, ...] = Field(strict=False, min_length=1)
    batches: int
    seconds: float = 0.0
    notes: tuple[str, ...] = Field((), strict=False)
    tensors: tuple[TensorEntry, ...] = Field(strict=False)
    holdout: tuple[dict[str, str], ...] = Field(strict=False)
    in_sample: bool

    _format = field_validator("format")(lambda v: check_format(v, STATS_FORMAT, "qtquant statistics file"))
    _version = field_validator("version", mode="before")(
        lambda v: check_version(v, STATS_VERSION, "statistics file"))


def _config_dict(config: CalibConfig) -> dict:
    return {f.name: (list(v) if isinstance(v, tuple) else v)
            for f in dataclasses.fields(config) for v in (getattr(config, f.name),)}


def _shapes(graph) -> dict[str, list[int]]:
    return {k: [int(d) for d in v[0]] for k, v in sorted(input_specs(graph).items())}


def _write(path: Path, header: StatsHeader, arrays: dict) -> Path:
    blob = json.dumps(header.model_dump(mode="json"), separators=(",", ":")).encode("utf-8")
    with atomic_file(path) as tmp, open(tmp, "wb") as f:  # a file object: np.savez would append ".npz"
        # (Any: numpy's stubs type the mapping against savez's own allow_pickle keyword, which no
        # member name here -- the header, hist_<i>, holdout_<j>_<k> -- can meet)
        members: dict[str, Any] = {_HEADER: np.frombuffer(blob, np.uint8), **arrays}
        np.savez(f, **members)
    return path


def write_stats(path, graph, result: CalibrationResult) -> Path:
    """Write ``result`` (calibrated on ``graph``) to ``path`` atomically; never over the model."""
    p = check_output_path(path, inputs=[graph.path], what="statistics file")
    cfg = result.config
    source = open_source(input_specs(graph), cfg)
    arrays, tensors, holdout = pack_result(result)
    shard = Shard(source=cfg.source, data_sha256=data_digest(source), count=cfg.count, seed=cfg.seed,
                  holdout=cfg.holdout, batches=result.batches)
    header = StatsHeader(format=STATS_FORMAT, version=STATS_VERSION, model_sha256=graph.sha256,
                         model_name=graph.path.name if graph.path else "", input_shapes=_shapes(graph),
                         cut=graph.cut,
                         config=_config_dict(cfg), stride=cfg.stride, bins=cfg.bins, shards=[shard],
                         batches=result.batches, seconds=float(result.seconds), notes=list(result.notes),
                         tensors=tensors, holdout=holdout, in_sample=bool(result.in_sample))
    return _write(p, header, arrays)


def _open(path) -> tuple[StatsHeader, np.lib.npyio.NpzFile]:
    p = existing_file(path, StatsFileError, noun="statistics")
    try:
        z = np.load(p, allow_pickle=False)
    except Exception:  # noqa: BLE001 - not a zip, truncated, an object array: one line for any of them
        raise StatsFileError(f"{p.name} is not a qtquant statistics file (not a readable .npz archive)") from None
    try:
        if not isinstance(z, np.lib.npyio.NpzFile) or _HEADER not in z.files:
            raise StatsFileError(f"{p.name} is not a qtquant statistics file (no header)")
        raw = z[_HEADER]
        if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > 256 << 20:
            raise StatsFileError(f"{p.name} is not a qtquant statistics file (bad header)")
        try:
            doc = json.loads(raw.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise StatsFileError(f"{p.name} is not a qtquant statistics file (the header is not JSON)") from None
        try:
            return StatsHeader.model_validate(doc), z
        except ValidationError as e:
            raise StatsFileError(one_line(e, p.name, "qtquant statistics file")) from None
    except BaseException:
        z.close()
        raise


def read_stats_header(path) -> StatsHeader:
    """The header of a statistics file (one-line :class:`StatsFileError` when it is not one)."""
    header, z = _open(path)
    z.close()
    return header


def stats_input_shapes(path, model_sha256: str = "", model_name: str = "") -> dict[str, tuple[int, ...]]:
    """The input shapes a statistics file was calibrated with: what opening a model with it uses
    when none are given (the laptop side of a cluster run needs no ``--input-shape``).  With the
    model's ``model_sha256``, a file of another model is refused first: its shapes name another
    model's inputs ("unknown input name 'x'", which the user never typed)."""
    header = read_stats_header(path)
    if model_sha256:
        _check_model(header, Path(path).name, model_sha256, model_name)
    return {k: tuple(v) for k, v in header.input_shapes.items()}


def _check_model(header: StatsHeader, name: str, sha256: str, model_name: str) -> None:
    if header.model_sha256 != sha256:
        made = f" ({header.model_name})" if header.model_name else ""
        raise StatsFileError(f"{name} holds the statistics of another model{made}: its sha256 is "
                             f"{header.model_sha256[:12]}…, {model_name or 'this model'} has {sha256[:12]}…")


def explicit_data_fields(config: CalibConfig) -> set[str]:
    """The settings of ``config`` that differ from the defaults: what a user asked for on the
    command line.  Data settings among them are checked against a statistics file; an observer or
    percentile among them replaces the file's (the rest come from the file)."""
    default = CalibConfig()
    return {k for k in (*DATA_FIELDS, *RANGE_FIELDS) if k != "source" and getattr(config, k) != getattr(default, k)} \
        | ({"source"} if config.source != default.source else set())


# How a file's statistics become ranges: the file's own unless chosen again (a percentile
# calibration opened without --observer keeps its percentile ranges, not the default MinMax).
RANGE_FIELDS = ("observer", "percentile")


def _observer_text(observer: str, percentile: float) -> str:
    return f"{observer} {percentile:g}" if observer == "percentile" else observer


def _text(v) -> str:
    if v is None:
        return "auto"
    if isinstance(v, (list, tuple)):
        return ",".join(f"{x:g}" for x in v)
    return str(v)


def _file_config(header: StatsHeader, name: str) -> CalibConfig:
    try:
        return CalibConfig.from_dict(header.config)
    except CalibConfigError as e:
        raise StatsFileError(f"{name}: its calibration settings are invalid: {e}") from None


def _same_source(a: str, b: str) -> bool:
    if a == b:
        return True
    if SYNTHETIC in (a, b):
        return False
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except OSError:
        return False


def _check_data(header: StatsHeader, name: str, file_cfg: CalibConfig, want: CalibConfig, explicit, graph) -> None:
    merged = len(header.shards) > 1
    for k in sorted(set(explicit) - set(RANGE_FIELDS)):
        opt = _OPTION.get(k, "--" + k.replace("_", "-"))
        if merged and k in _PER_SHARD:
            raise StatsFileError(f"{name} was merged from {len(header.shards)} statistics files; {opt} cannot "
                                 f"be checked against it (leave it out to use the file's data)")
        mine, theirs = getattr(want, k), getattr(file_cfg, k)
        same = _same_source(str(mine), str(theirs)) if k == "source" else mine == theirs
        if not same:
            raise StatsFileError(f"{name} was calibrated with {opt} {_text(theirs)}, not {_text(mine)} "
                                 f"(leave {opt} out to use the file's statistics, or calibrate again)")
    if "source" in explicit and not merged:
        try:
            digest = data_digest(open_source(input_specs(graph), file_cfg))
        except QtQuantError:
            digest = ""
        if digest != header.shards[0].data_sha256:
            raise StatsFileError(f"the calibration data {file_cfg.source} changed since {name} was written "
                                 f"(files added, removed or modified); calibrate again")


def load_stats(path, graph, config: CalibConfig | None = None, *, explicit=()) -> CalibrationResult:
    """The calibration stored in ``path``, checked against ``graph``.

    The ranges follow the file's observer and percentile unless ``explicit`` names them (then
    ``config``'s, and a note says so), and ``config``'s scheme; its data settings named in
    ``explicit`` (see :func:`explicit_data_fields`) must be the file's.  Any mismatch raises a
    one-line :class:`StatsFileError`.
    """
    name = Path(path).name
    header, z = _open(path)
    with z:
        _check_model(header, name, graph.sha256, graph.path.name if graph.path else "")
        shapes = _shapes(graph)
        if header.input_shapes != shapes:
            fmt = lambda d: ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in d.items())  # noqa: E731
            raise StatsFileError(f"{name} was calibrated with input shapes {fmt(header.input_shapes)}, "
                                 f"not {fmt(shapes)}")
        file_cfg = _file_config(header, name)
        want = config if config is not None else file_cfg
        _check_data(header, name, file_cfg, want, set(explicit), graph)
        observer = want.observer if "observer" in explicit else file_cfg.observer
        percentile = want.percentile if "percentile" in explicit else file_cfg.percentile
        if observer in _FULL_HISTOGRAM and (header.stride > 1 or header.bins < BINS):
            raise StatsFileError(f"{name} holds the coarse histograms of a MinMax calibration; --observer "
                                 f"{observer} needs full ones: calibrate with --observer {observer}")
        try:
            stats = unpack_stats(header.tensors, z)
            holdout = unpack_holdout(header.holdout, z)
        except Exception:  # noqa: BLE001 - arrays missing or inconsistent with the header (fuzzed)
            raise StatsFileError(f"{name} is damaged (its arrays do not match its header)") from None
    missing = [n for n in graph.observed_tensors if n not in stats]
    if missing:
        cut = tuple(header.cut)
        again = (f"it was calibrated on the model cut at {', '.join(cut)}: give --cut {','.join(cut)}"
                 if cut and cut != graph.cut else "calibrate again")
        raise StatsFileError(f"{name} has no statistics for tensor {missing[0]!r} ({len(missing)} missing); {again}")
    if not holdout_fits(graph, holdout):
        raise StatsFileError(f"{name}: its check samples do not fit the model's inputs")
    sources = tuple(sh.source for sh in header.shards) if len(header.shards) > 1 else ()  # a merged file's
    cfg = dataclasses.replace(file_cfg, observer=observer, percentile=percentile, scheme=want.scheme,
                              count=max(file_cfg.count, header.batches) if sources else file_cfg.count)
    notes = list(header.notes) + [f"statistics from {name} ({header.batches} samples"
                                  + (f", merged from {len(sources)} files)" if sources else ")")]
    if (observer, percentile) != (file_cfg.observer, file_cfg.percentile):
        notes.append(f"ranges by --observer {_observer_text(observer, percentile)}; {name} was calibrated with "
                     f"{_observer_text(file_cfg.observer, file_cfg.percentile)}")
    return CalibrationResult(stats, compute_ranges(stats, cfg), cfg, holdout, header.batches, header.seconds,
                             notes, header.in_sample, sources=sources)


def merge_stats(paths, out) -> StatsHeader:
    """Merge statistics files computed on disjoint data into ``out`` (atomically).  They must be
    of the same model, input shapes, preprocessing and histogram layout; the check samples are
    the files' own, pooled (:func:`_pooled_check`).  Returns the written header."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise StatsFileError("--merge needs two or more statistics files")
    out = check_output_path(out, inputs=paths, what="merged statistics file")
    first = None
    stats: dict = {}
    shards: list[Shard] = []
    headers: list[tuple[Path, StatsHeader]] = []
    seconds, batches = 0.0, 0
    for p in paths:
        header, z = _open(p)
        with z:
            if first is None:
                first = header
                first_name = p.name
            else:
                for what, a, b in (("model", header.model_sha256, first.model_sha256),
                                   ("input shapes", header.input_shapes, first.input_shapes),
                                   ("histogram layout (observer family)", (header.stride, header.bins),
                                    (first.stride, first.bins)),
                                   ("preprocessing", {k: header.config.get(k) for k in _PREPROCESSING},
                                    {k: first.config.get(k) for k in _PREPROCESSING})):
                    if a != b:
                        raise StatsFileError(f"cannot merge {p.name} into {first_name}: another {what}")
            try:
                part = unpack_stats(header.tensors, z)
            except Exception:  # noqa: BLE001 - see load_stats
                raise StatsFileError(f"{p.name} is damaged (its arrays do not match its header)") from None
        headers.append((p, header))
        if first is not header and set(part) != set(stats):
            raise StatsFileError(f"cannot merge {p.name} into {first_name}: other observed tensors")
        for sh in header.shards:
            for prev in shards:
                if (prev.data_sha256, prev.seed, prev.count, prev.holdout, prev.source) == \
                        (sh.data_sha256, sh.seed, sh.count, sh.holdout, sh.source):
                    raise StatsFileError(f"{p.name} repeats the data of an earlier file ({sh.source}); "
                                         f"merge statistics of disjoint data only")
            shards.append(sh)
        for n, s in part.items():
            stats[n] = stats[n].merge(s) if n in stats else s
        batches += header.batches
        seconds += header.seconds
    holdout, in_sample, check_note = _pooled_check(headers)
    # The files' own notes describe each one's split ("calibrating on all 4 samples; the check runs
    # in-sample on them"), which the merged statistics no longer have: say what they do have.
    notes = [f"merged from {len(paths)} statistics files ({len(shards)} shards: "
             + "; ".join(f"{sh.batches} samples of {sh.source}"
                         + (f" (seed {sh.seed})" if sh.source == SYNTHETIC else "") for sh in shards) + ")",
             check_note]  # last: `qtquant calibrate --merge` prints it
    assert first is not None  # (two files or more were read)
    result = CalibrationResult(stats, {}, _file_config(first, first_name), holdout, batches, seconds, notes,
                               in_sample)
    arrays, tensors, hold = pack_result(result)
    header = first.model_copy(update=dict(shards=tuple(shards), batches=batches, seconds=seconds, in_sample=in_sample,
                                          notes=tuple(notes), tensors=tuple(tensors), holdout=tuple(hold)))
    _write(out, header, arrays)
    return header


def _pooled_check(headers) -> tuple[list[dict], bool, str]:
    """(check feeds, in-sample, the note saying what they are) of a merged file, from its files'
    ``(path, header)`` in merge order: every file's check samples, in that order, up to
    :data:`~qtquant.calib.engine.CHECK_CAP` (as one run on all the data keeps its first ones), so
    that a merge of shards checks on what one run over them would.  Samples held out of their
    calibration are the fairer check: where any file has them, the in-sample ones are left out."""
    held = [(p, h) for p, h in headers if h.holdout and not h.in_sample]
    use = held or [(p, h) for p, h in headers if h.holdout]
    if not use:
        return [], bool(headers[0][1].in_sample), "no check samples: none of the files has any"
    total = sum(len(h.holdout) for _, h in use)
    feeds: list[dict] = []
    names = []
    for p, h in use:
        room = CHECK_CAP - len(feeds)
        if room <= 0:
            break
        _, z = _open(p)
        with z:
            try:
                feeds += unpack_holdout(h.holdout[:room], z)
            except Exception:  # noqa: BLE001 - see load_stats
                raise StatsFileError(f"{p.name} is damaged (its arrays do not match its header)") from None
        names.append(p.name)
    of = ", ".join(names)
    cap = f" (the first {len(feeds)} of {total}: at most {CHECK_CAP} are kept)" if total > len(feeds) else ""
    note = f"the check runs on {samples_text(len(feeds), not held, short=True)} (from {of}){cap}"
    if not held:
        return feeds, True, note
    left = [p.name for p, h in headers if h.holdout and h.in_sample]
    if left:
        note += f"; the in-sample check samples of {', '.join(left)} are left out (held-out ones are the fairer check)"
    return feeds, False, note
