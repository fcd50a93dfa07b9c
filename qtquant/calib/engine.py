"""The calibration engine: run the model on calibration data and reduce every batch into statistics.

onnxruntime runs the model with the observed activation tensors added as outputs (only tensors
that get an observer, never shape tensors).  Each model run is reduced into mergeable
:class:`~qtquant.calib.stats.TensorStats` at once, so memory stays flat in the number of batches,
and the statistics of several processes (``jobs``) merge into exactly the single-process result.

One "batch" is one model run at the model's input shape (one sample).  Stacking several samples
into a larger batch does not pay on CPU: on yolov8n at 320x320 (2 cores), batch 2 ran at 19.7 ms
per sample, batch 1 at 20.9 ms, and batches 4 and 8 were slower (22.4 ms, 90 ms), while it would
multiply the memory of every run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..base.errors import BadInputError, Cancelled
from ..model.runtime import input_specs
from ..base.tables import plural, samples_text
from ..base.vocab import (COLOR_ORDERS, DEFAULT_CALIB_COUNT, DEFAULT_OBSERVER, DEFAULT_PERCENTILE, DEFAULT_SCHEME,
                     LAYOUTS, OBSERVERS, PIXEL_RANGES, RESIZE_MODES, SYNTHETIC, Observer, scheme_name)
from .holdout import AUTO_HOLDOUT_FRACTION, AUTO_HOLDOUT_MIN, CalibConfigError, held_back_count, parse_holdout
from .methods import MINMAX, SEARCH_OBSERVERS, MethodChoice, choice_ranges
from .observers import abs_percentile, observe, signed_quantile
from .sources import SampleRef, Source, open_source, parse_channels
from .keep import keep_order
from .runner import ChunkRunner, run_chunk
from .stats import BINS, MINMAX_BINS, TensorStats

if TYPE_CHECKING:
    from .searchreport import SearchReport

__all__ = ["CalibConfig", "CalibrationResult", "TensorStats", "calibrate", "run_chunk", "ChunkRunner",
           "split_samples", "Split", "DEFAULT_COUNT", "CHECK_CAP"]

AUTO_MINMAX_STRIDE = 8
DEFAULT_COUNT = DEFAULT_CALIB_COUNT
# At most this many check feeds are kept in memory (and in the cache): an in-sample check over
# thousands of samples, or a large --holdout, would otherwise hold every input tensor of the run
# (32 inputs of 1x3x640x640 float32 are 157 MB).
CHECK_CAP = 32





def _scheme_name(value) -> str:
    try:
        return scheme_name(value)
    except ValueError:
        raise CalibConfigError(f"unknown scheme {value!r} (choose sym or asym)") from None


@dataclass(frozen=True)
class CalibConfig:
    """What to calibrate on and how.  Field names match the CLI options (DESIGN §6)."""

    source: str = SYNTHETIC  # SYNTHETIC, a .npy/.npz file, a folder of them, or an image folder
    count: int = DEFAULT_COUNT  # calibration samples (fewer when the data has fewer)
    observer: str = DEFAULT_OBSERVER.value  # one of OBSERVERS
    percentile: float = DEFAULT_PERCENTILE
    seed: int = 0  # shuffling and synthetic data
    # Samples held back for the fidelity check (never calibrated on): None = auto (see
    # held_back_count), an int = that many (0: the check runs in-sample), a float in (0, 1) = that
    # fraction of the samples.  Strings ("auto", "5", "0.2") are accepted and normalised.
    holdout: int | float | None = None
    jobs: int = 1  # worker processes (with ray: Ray workers, 1 = one per cluster CPU)
    ray: str = ""  # "" = local; "auto" or a Ray cluster address (see rayrun.py)
    resize: str = RESIZE_MODES[0]  # image fitting: stretch | letterbox | center-crop
    color: str = COLOR_ORDERS[0]  # rgb | bgr
    pixel_range: str = PIXEL_RANGES[0]  # 0-1 | 0-255
    mean: tuple | str | None = None  # per-channel, in the pixel range
    std: tuple | str | None = None
    layout: str = LAYOUTS[0]  # nchw | nhwc
    scheme: str = DEFAULT_SCHEME.short  # sym (int8, zero point 0) | asym (uint8)
    hist_stride: int = 0  # histogram of every n-th value; 0 = auto (see CalibConfig.stride)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen: normalise once)
        set_("source", str(self.source))
        set_("ray", str(self.ray or "").strip())
        choices = {"observer": OBSERVERS, "resize": RESIZE_MODES, "color": COLOR_ORDERS,
                   "pixel_range": PIXEL_RANGES, "layout": LAYOUTS}
        for k, allowed in choices.items():
            v = str(getattr(self, k)).lower()
            if v not in allowed:
                raise CalibConfigError(f"unknown {k.replace('_', '-')} {getattr(self, k)!r} "
                                       f"(choose from {', '.join(allowed)})")
            set_(k, v)
        set_("scheme", _scheme_name(self.scheme))
        set_("holdout", parse_holdout(self.holdout))
        for k, low in (("count", 1), ("jobs", 1), ("hist_stride", 0)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise CalibConfigError(f"calibration {k} must be an integer of at least {low}, got {v!r}")
            set_(k, int(v))
        try:
            pct = float(self.percentile)
        except (TypeError, ValueError):
            pct = float("nan")
        if not (0.0 < pct <= 100.0):
            raise CalibConfigError(f"--percentile must be in (0, 100], got {self.percentile!r}")
        set_("percentile", pct)
        set_("seed", int(self.seed))
        for k in ("mean", "std"):
            try:
                set_(k, parse_channels(getattr(self, k), k))
            except BadInputError as e:
                raise CalibConfigError(str(e)) from None

    @classmethod
    def from_dict(cls, d: dict) -> "CalibConfig":
        """A config from remembered or stored settings (a project file, the dialog's values).

        Keys that are not fields are ignored: older and newer files carry settings this version
        does not know.  JSON lists become tuples.  A bad value raises :class:`CalibConfigError`.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known}
        try:
            return cls(**kw)
        except CalibConfigError:
            raise
        except (TypeError, ValueError) as e:  # e.g. int() of a list: still one line for the user
            raise CalibConfigError(str(e)) from None

    @property
    def synthetic(self) -> bool:
        """Calibrating on seeded synthetic samples, not on data."""
        return self.source == SYNTHETIC

    @property
    def stride(self) -> int:
        """Histogram stride in effect.  Observers that read the histogram (percentile, mse, kl)
        get every value; minmax observers only need it for plots and the pooled policy, so there
        it takes every 8th value of each sample, which keeps MinMax calibration as cheap as
        onnxruntime's reduce-only MinMax."""
        if self.hist_stride:
            return self.hist_stride
        return AUTO_MINMAX_STRIDE if self.observer in (Observer.MINMAX, Observer.MA_MINMAX) else 1

    @property
    def bins(self) -> int:
        """Histogram bins per sign: the MinMax observers read only min and max, so theirs (for
        plots and the pooled policy) is coarse, which keeps 20,000 tensors' statistics small.  Like
        :attr:`stride`, a ``hist_stride`` set by hand asks for the full histogram."""
        return MINMAX_BINS if self.stride == AUTO_MINMAX_STRIDE and not self.hist_stride else BINS


@dataclass
class CalibrationResult:
    """Statistics of every observed tensor and the ranges the configured observer picks from them.

    ``holdout`` holds the feeds the fidelity check runs on (at most :data:`CHECK_CAP`): samples
    held back from calibration, or, when ``in_sample``, copies of calibration samples.
    """

    stats: dict[str, TensorStats]
    ranges: dict[str, tuple[float, float]]
    config: CalibConfig
    holdout: list = field(default_factory=list)  # feed dicts of the fidelity check
    batches: int = 0  # samples (model runs) calibrated on
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    in_sample: bool = False  # the check feeds are calibration samples, not held-out ones
    # Per check feed (``holdout`` order), the float values of the model inputs and of the observed
    # tensors that fit (the outputs and Concat tensors first, see :mod:`.keep`) as the calibration
    # run computed them: an in-sample check's float reference without a second float run (see
    # :data:`~qtquant.calib.keep.VALUES_BUDGET`).  Empty when not kept (held-out checks, child processes).
    check_values: list = field(default_factory=list, repr=False)
    # A merged statistics file (qtquant calibrate --merge): the data each shard was calibrated on,
    # in merge order (empty otherwise: ``config.source`` says it).
    sources: tuple[str, ...] = ()
    # Samples held back from calibration (the check runs on at most CHECK_CAP of them): with more,
    # "205 samples + 32 held out" left 19 of 256 photos unaccounted for.
    held_back: int = 0
    # What a method search (--observer search / search-per-node) chose; the ranges follow it.  None
    # until the search has run (the ranges are then MinMax's, its starting point).
    choice: MethodChoice | None = None
    search: "SearchReport | None" = field(default=None, repr=False)  # what the search measured

    @property
    def searched(self) -> bool:
        """The observer is a search (whose choice, once made, the ranges follow)."""
        return self.config.observer in SEARCH_OBSERVERS

    @property
    def method_text(self) -> str:
        """The observer in words: "mse", or a search's "search (chose mse)"."""
        how = str(self.config.observer)
        if self.choice is not None:
            more = f", {len(self.choice.per_tensor)} tensors another" if self.choice.per_tensor else ""
            how += f" (chose {self.choice.model.label}{more})"
        return how

    @property
    def samples(self) -> int:
        return self.batches

    def data_label(self, short: bool = False) -> str:
        """What the statistics were computed on, for reports: the source, or a merged file's
        sources; ``short``: file and folder names only."""
        srcs = self.sources or (str(self.config.source),)
        return ", ".join(dict.fromkeys((Path(s).name or s) if short else s for s in srcs))

    @property
    def check_samples(self) -> int:
        """How many samples the fidelity check runs on."""
        return len(self.holdout)

    @property
    def check_description(self) -> str:
        """The check set in words, for reports: "7 in-sample samples", "20 held-out samples"."""
        n = len(self.holdout)
        if not n:
            return "no check samples"
        return samples_text(n, self.in_sample, short=True)

    def pooled_range(self, members, percentile: float) -> tuple[float, float] | None:
        """Percentile range over the merged histograms of ``members`` (the ``pooled`` policy)."""
        have = [self.stats[m] for m in members if m in self.stats and self.stats[m].count]
        if not have:
            return None
        pooled = TensorStats.pooled(have)
        if self.config.scheme == "sym":
            t = abs_percentile(pooled, percentile)
            return max(pooled.min, -t), min(pooled.max, t)
        cut = (100.0 - percentile) / 200.0
        return max(pooled.min, signed_quantile(pooled, cut)), min(pooled.max, signed_quantile(pooled, 1 - cut))

    def recompute(self, **changes) -> "CalibrationResult":
        """The same statistics under another ``observer`` / ``percentile`` / ``scheme`` (no model run)."""
        other = set(changes) - _RECOMPUTABLE
        if other:
            # The statistics and the check feeds came from the data settings; a config that
            # claimed other ones would describe samples that were never run.
            raise CalibConfigError(f"{', '.join(sorted(other))} cannot change without recalibrating")
        cfg = dataclasses.replace(self.config, **changes)
        keep = cfg.observer == self.config.observer
        choice = self.choice if keep else None
        return dataclasses.replace(self, config=cfg, ranges=compute_ranges(self.stats, cfg, choice),
                                   holdout=list(self.holdout), notes=list(self.notes), choice=choice,
                                   search=self.search if keep else None)

    def with_choice(self, choice: MethodChoice, search: "SearchReport | None" = None) -> "CalibrationResult":
        """The same statistics with the ranges of a search's ``choice`` (no model run); ``search``:
        the report of the search that made it (its summary joins the notes)."""
        return dataclasses.replace(self, ranges=compute_ranges(self.stats, self.config, choice), choice=choice,
                                   holdout=list(self.holdout), search=search,
                                   notes=list(self.notes) + ([search.summary()] if search is not None else []))

    def merge(self, other: "CalibrationResult") -> "CalibrationResult":
        """Statistics over this result's samples followed by ``other``'s; the check (its feeds and
        whether it is in-sample) stays this result's."""
        names = list(dict.fromkeys([*self.stats, *other.stats]))
        empty = TensorStats()
        stats = {n: self.stats.get(n, empty).merge(other.stats.get(n, empty)) for n in names}
        return CalibrationResult(stats, compute_ranges(stats, self.config, self.choice), self.config,
                                 list(self.holdout), self.batches + other.batches,
                                 self.seconds + other.seconds, list(self.notes) + list(other.notes),
                                 self.in_sample, held_back=self.held_back, choice=self.choice)


_RECOMPUTABLE = {"observer", "percentile", "scheme", "jobs", "ray"}


def compute_ranges(stats: dict[str, TensorStats], config: CalibConfig,
                   choice: MethodChoice | None = None) -> dict[str, tuple[float, float]]:
    """Every tensor's range under ``config``'s observer; a search's ``choice`` where the observer
    is a search (MinMax's ranges, its starting point, until the search has run)."""
    if config.observer in SEARCH_OBSERVERS:
        return choice_ranges(stats, choice or MethodChoice(MINMAX), config.scheme)
    out = {}
    for n, s in stats.items():
        r = observe(s, config.observer, config.scheme, config.percentile)
        if r is not None:
            out[n] = r
    return out


class Split(NamedTuple):
    """How the samples are used: ``calib`` to calibrate on, ``held`` held back from it."""

    calib: list
    held: list
    notes: list

    @property
    def in_sample(self) -> bool:
        return not self.held

    @property
    def check(self) -> list:
        """The samples the fidelity check runs on: the held-back ones, else the calibration ones
        (at most :data:`CHECK_CAP` either way)."""
        return list((self.held or self.calib)[:CHECK_CAP])


def _plural(n: int, word: str = "sample") -> str:
    return plural(n, word)


def split_samples(refs: list[SampleRef], config: CalibConfig) -> Split:
    """(calibration refs, held-back refs, notes).  The held-back samples come from the end of the
    shuffled order, so they do not change with ``count``; at least one sample is always
    calibrated on.  With none held back the check runs in-sample (``Split.in_sample``)."""
    n = len(refs)
    hold = held_back_count(n, config.holdout)
    use = min(config.count, n - hold)
    calib, held = refs[:use], (refs[n - hold:] if hold else [])
    src = "synthetic data" if config.synthetic else config.source
    notes = []
    if not hold:
        what = f"all {_plural(use)}" if use == n else f"{use} of {_plural(n)}"
        k = min(use, CHECK_CAP)
        on = "on them" if k == use else f"on {k} of them (at most {CHECK_CAP} are kept for the check)"
        if config.holdout is None:
            why = f"hold-out needs {AUTO_HOLDOUT_MIN} or more samples, or --holdout N"
        elif config.holdout == 0:
            why = "--holdout 0"
        else:
            why = f"{src} has too few samples to hold any back for --holdout {config.holdout:g}"
        notes.append(f"calibrating on {what}; the check runs in-sample {on} ({why})")
    else:
        k = min(hold, CHECK_CAP)
        cap = "" if k == hold else f"; the check runs on {k} of them (at most {CHECK_CAP} are kept)"
        if config.holdout is None:
            notes.append(f"calibrating on {use} of {_plural(n)}; {hold} held out for the check "
                         f"(auto: {AUTO_HOLDOUT_FRACTION:.0%} from {AUTO_HOLDOUT_MIN} samples on){cap}")
        elif use < config.count or (isinstance(config.holdout, int) and hold < config.holdout) or cap:
            short = isinstance(config.holdout, int) and hold < config.holdout
            asked = f" (not the {config.holdout} --holdout asked for: one sample at least is calibrated on)" \
                if short else ""
            notes.append(f"{src} has {_plural(n)}: calibrating on {use}, holding back {hold}{asked}{cap}")
    return Split(calib, held, notes)


def _check_feeds(source: Source, refs: list[SampleRef]) -> list[dict]:
    # Copies: a feed can be a view of a whole loaded .npz array or of a memory-mapped .npy, and
    # the check keeps its feeds for the life of the result.
    return [{k: np.array(v, copy=True) for k, v in feed.items()} for _, feed in source.feeds(source.load_order(refs))]


def calibrate(graph, config: CalibConfig = CalibConfig(), progress=None, cancel=None, *,
              isolate: bool = False, keep_check_values: bool = False) -> CalibrationResult:
    """Calibrate ``graph`` on ``config.source``.

    ``progress(done, total)`` is called after each batch; ``cancel()`` is polled between batches and
    a true value raises :class:`~qtquant.base.errors.Cancelled`.  Safe to call from a worker thread.
    ``isolate`` runs the model in a child process even with one job: onnxruntime's session of a
    big model takes the GIL for a long time when it is destroyed (20,000 nodes: 0.6 s), which a
    GUI in the same process would feel as a freeze.
    ``keep_check_values``: an in-sample, single-process run keeps its check samples' values
    (:attr:`CalibrationResult.check_values`, the fidelity check's float reference); off by default,
    since they are held as long as the result.
    """
    t0 = time.perf_counter()
    if cancel is not None and cancel():
        raise Cancelled("calibration cancelled")
    source = open_source(input_specs(graph), config)
    split = split_samples(source.refs, config)
    calib_refs = source.load_order(split.calib)
    names = list(graph.observed_tensors)
    jobs = min(config.jobs, len(calib_refs))
    in_process = not config.ray and not (jobs > 1 or (isolate and calib_refs))
    # An in-sample check's feeds are calibration samples: copied as this process's run loads them
    # rather than loaded (decoded) a second time up front.
    check = None if in_process and split.in_sample else _check_feeds(source, split.check)
    check_values = []
    if config.ray and calib_refs:
        from .rayrun import run_ray

        stats = run_ray(graph, names, source, calib_refs, config.ray, config.jobs, stride=config.stride,
                        bins=config.bins, progress=progress, cancel=cancel)
    elif jobs > 1 or (isolate and calib_refs):
        from .parallel import run_parallel

        stats = run_parallel(graph, names, source, calib_refs, max(jobs, 1), stride=config.stride, progress=progress,
                             cancel=cancel, bins=config.bins)
    else:
        # An in-sample check runs on calibration samples: keep their values for its float reference.
        kept: dict[SampleRef, Any] | None = dict.fromkeys(split.check) if split.in_sample and keep_check_values \
            else None
        # (the run fills in each check sample's feed as it loads it)
        feeds: dict[SampleRef, Any] | None = dict.fromkeys(split.check) if check is None else None
        stats = run_chunk(graph.model, graph.base_dir, names, source, calib_refs, progress=progress, cancel=cancel,
                          stride=config.stride, bins=config.bins, kept=kept,
                          keep_order=keep_order(graph, names) if kept else None, check_feeds=feeds)
        order = source.load_order(split.check)  # the order of the check feeds
        if feeds is not None:
            check = [feeds[r] for r in order]
        assert check is not None  # (the check's feeds: loaded up front, or kept above)
        if kept and all(kept.get(r) is not None for r in order) and all(
                n in kept[r] and np.array_equal(kept[r][n], v) for r, feed in zip(order, check)
                for n, v in feed.items()):
            check_values = [kept[r] for r in order]  # (the same inputs as the check's feeds: checked)
    assert check is not None  # (None only for an in-sample run in this process, which fills it)
    return CalibrationResult(stats, compute_ranges(stats, config), config, check, len(calib_refs),
                             time.perf_counter() - t0, source.notes + split.notes, split.in_sample, check_values,
                             held_back=len(split.held))
