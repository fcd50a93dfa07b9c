"""Fidelity: how far the exported model is from the float one (DESIGN §3 "Fidelity").

What ships is measured: the QDQ model the exporter writes (built in memory by
:mod:`qtquant.export.qdq`, the same bytes) runs in onnxruntime the way a user's session runs
it, with default session options on the CPU provider, so Q/DQ pairs are fused into
onnxruntime's int8 kernels.  (One exception, said in the report: above
:data:`~qtquant.runtime.LAYOUT_PASS_NODES` nodes the NhwcTransformer layout pass is left out, see
:func:`~qtquant.runtime.layout_passes_off`.)  Above :data:`~qtquant.runtime.SPLIT_NODES` nodes
the file runs as segments cut at int8 hand-over tensors, their sessions created side by side
(:func:`~qtquant.runtime.shipped_session`: the same outputs bit for bit; said in the report too).
The float model runs beside it on the check samples (held out from calibration when there are
enough of them, else the calibration samples, and the report says which); an in-sample check
of ``qtquant analyze`` takes the float values calibration kept of those very samples
(``CalibrationResult.check_values``) instead.  The float run, the shipped session and the
cross-check's session are created side by side on two threads.

For each float output: SQNR in dB, cosine and max abs error, before (no user groups) and
after (the session's groups).  An output that is a Concat, directly or through relabelling
ops, is also measured per slice (one per Concat input, :mod:`qtquant.outputs`), and its
headline figure is its worst slice: the boxes of a detection head must not hide its scores.
A part whose float reference carries no signal on the check samples gets a sentence, not a
number.  Each group member also gets the quantization SQNR of that tensor alone, own scale
versus shared.

With ``cross_check`` the same model also runs with basic optimisations only (Q/DQ evaluated
in float, the fake-quant reference); where the two disagree by more than
:data:`KERNEL_TOLERANCE_DB`, the report says so.  On big exports that reference runs without
optimisations, and above :data:`~qtquant.runtime.SPLIT_NODES` nodes not at all
(:func:`~qtquant.runtime.reference_level`; the report says which).

The GUI re-runs this after every edit, so results are cached per graph and calibration: float
outputs once per calibration, the "before" run once per baseline domain map, and the "after"
runs of the last few domain maps (an equal map builds the same model, so an undo or redo back
to a measured state runs nothing); figures once per run, a group member's SQNR once per scale.
In the GUI (``follow_edits``) a new map's model runs through :mod:`qtquant.incremental`:
onnxruntime's optimised program of the exported file, kept per structure, with the edit's values,
re-run only from where they changed (the same outputs as a fresh default session, bit for bit).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from .errors import BadInputError
from .incremental import IncrementalRunner, moved_domains, run_session
from .metrics import ErrorSums, Figure, cosine, signal_noise_db, sqnr_db
from .outputs import FloatOutput, OutputMode, float_output_tensors, output_slices
from .quant import bits_lost, qparams_for_range
from .runtime import (REFERENCE_OFF_TEXT, REFERENCE_SKIPPED_TEXT, layout_passes_off, make_session, reference_level,
                      segments_of, session_text, shipped_session, split_parts, with_outputs)
from .tables import fmt_num

__all__ = ["Fidelity", "OutputFidelity", "MemberFidelity", "measure_session", "sqnr_db", "cosine",
           "fake_quant", "KERNEL_TOLERANCE_DB", "output_mode_of"]

# Fused int8 kernels round differently from Q/DQ in float; beyond this the difference is a finding.
KERNEL_TOLERANCE_DB = 0.5


def fake_quant(x: np.ndarray, qp) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear in numpy (round half to even, saturate)."""
    # float32 throughout, as the file stores the scale and onnxruntime computes.
    s = np.float32(qp.scale)
    q = np.clip(np.rint(np.asarray(x, dtype=np.float32) / s) + np.float32(qp.zero_point), qp.qmin, qp.qmax)
    return ((q - np.float32(qp.zero_point)) * s).astype(np.float32)


def output_mode_of(quantize_outputs: bool | None, mode: OutputMode | None) -> OutputMode:
    if mode is not None:
        return mode
    if quantize_outputs is None:
        return OutputMode.AUTO
    return OutputMode.QUANTIZE if quantize_outputs else OutputMode.FLOAT


@dataclass
class MemberFidelity:
    tensor: str
    group: int | None
    bits_lost: float
    before_sqnr_db: float
    sqnr_db: float


@dataclass
class OutputFidelity:
    """One model output: the whole tensor and, when it is a Concat, each slice."""

    output: str
    whole: Figure
    slices: list[Figure] = field(default_factory=list)

    @property
    def headline(self) -> Figure:
        """The worst measured slice (the whole output when it has no slices)."""
        measured = [s for s in self.slices if s.measured]
        if measured:
            return min(measured, key=lambda s: s.sqnr_db)
        return self.whole

    def to_dict(self) -> dict:
        """The headline's figures at the top (what a reader of ``sqnr_db`` must see: the worst
        slice), the whole tensor and each slice below."""
        return {**self.headline.to_dict(), "headline": self.headline.label, "whole": self.whole.to_dict(),
                "slices": [s.to_dict() for s in self.slices]}


@dataclass
class Fidelity:
    outputs: list[str]
    after: dict[str, OutputFidelity]
    before: dict[str, OutputFidelity]
    members: list[MemberFidelity] = field(default_factory=list)
    samples: int = 0
    in_sample: bool = False
    revision: int = 0  # the session revision it was measured at (the GUI drops stale results)
    runtime: str = ""
    findings: list[str] = field(default_factory=list)
    float_outputs: list[str] = field(default_factory=list)  # why outputs stayed float (auto mode)

    # Headline figures per output: the worst slice's.  NaN where there is no signal.
    def _headlines(self, side: dict, attr: str) -> dict[str, float]:
        return {o: _val(getattr(side[o].headline, attr)) for o in self.outputs}

    sqnr_db = property(lambda self: self._headlines(self.after, "sqnr_db"))
    cosine = property(lambda self: self._headlines(self.after, "cosine"))
    before_sqnr_db = property(lambda self: self._headlines(self.before, "sqnr_db"))
    before_cosine = property(lambda self: self._headlines(self.before, "cosine"))

    @property
    def sample_text(self) -> str:
        n = f"{self.samples} sample{'s' if self.samples != 1 else ''}"
        return f"{n} in-sample (the calibration samples)" if self.in_sample else f"{n} held out from calibration"

    def delta_db(self, output: str) -> float:
        return self.sqnr_db[output] - self.before_sqnr_db[output]

    def headline_text(self, output: str, before: bool = False) -> str:
        """'output0[4:22] 0.0 dB', or the no-signal sentence."""
        h = (self.before if before else self.after)[output].headline
        return f"{h.label}: no signal" if h.no_signal else f"{h.label} {_f(h.sqnr_db)} dB"

    def to_dict(self) -> dict:
        def num(x):
            return x if x is not None and math.isfinite(x) else None

        return {
            "samples": self.samples, "in_sample": self.in_sample, "held_out": not self.in_sample,
            "runtime": self.runtime,
            "outputs": {o: {**self.after[o].to_dict(), "before": self.before[o].to_dict()}
                        for o in self.outputs},
            "findings": list(self.findings),
            "float_outputs": list(self.float_outputs),
            "members": [{"tensor": m.tensor, "group": m.group, "bits_lost": num(m.bits_lost),
                         "before_sqnr_db": num(m.before_sqnr_db), "sqnr_db": num(m.sqnr_db)}
                        for m in self.members],
        }

    def text(self) -> str:
        rows, notes = [], []
        for o in self.outputs:
            a, b = self.after[o], self.before[o]
            for k, (fa, fb) in enumerate([(a.whole, b.whole)] + list(zip(a.slices, b.slices))):
                rows.append((("  " if k else "") + fa.label, _cell(fb), _cell(fa), _change(fb, fa)))
                if fa.no_signal:
                    notes.append(f"{fa.label}: {fa.no_signal}")
        from .tables import text_table

        lines = [f"fidelity of the exported model ({self.runtime}) on {self.sample_text}: "
                 "SQNR dB / cosine vs the float model; an output's headline is its worst slice",
                 text_table(rows, ("output", "before", "after", "change"))]
        for o in self.outputs:
            if self.after[o].slices:
                lines.append(f"headline {o}: {self.headline_text(o, True)} -> {self.headline_text(o)}")
        lines += notes
        lines += [f"finding: {f}" for f in self.findings]
        lines += [f"float output: {f}" for f in self.float_outputs]
        if self.members:
            lines.append("group members: quantization SQNR dB, own scale -> shared scale")
            for m in self.members:
                lines.append(f"  g{m.group} {m.tensor}: {_f(m.before_sqnr_db)} -> {_f(m.sqnr_db)} "
                             f"({m.bits_lost:.2f} bits lost)")
        return "\n".join(lines)


def _val(x):
    return float("nan") if x is None else x


def _cell(f: Figure) -> str:
    return "no signal" if f.no_signal else f"{_f(f.sqnr_db)} / {f.cosine:.5f}"


def _change(b: Figure, a: Figure) -> str:
    if b.no_signal or a.no_signal:
        return ""
    return _f(a.sqnr_db - b.sqnr_db if math.isfinite(a.sqnr_db) and math.isfinite(b.sqnr_db) else math.nan,
              signed=True)


def _f(x: float, signed: bool = False) -> str:
    return fmt_num(x, signed=signed)


class _Cache:
    def __init__(self):
        self.calib_id = None
        self.float_out: list[dict] | None = None  # per sample: output -> array
        self.tensors: dict[str, list[np.ndarray]] = {}  # member tensor -> per-sample float values
        # (float tensors, level, precision) -> [(dm, per-sample outputs)], the baseline first, then
        # the latest few maps: an undo or redo to a map measured before is measured already.
        self.runs: dict[tuple, list] = {}
        self.slices = None
        self.figures: dict[tuple, tuple] = {}  # (id(run), scheme, outputs) -> (run, figures)
        self.member_sqnr: dict[tuple, float] = {}  # (tensor, qparams) -> SQNR dB
        self.member_signal: dict[str, float] = {}  # tensor -> its Σref² over the check samples
        self.runner = None  # qtquant.incremental.IncrementalRunner of the check samples
        self.runtime: dict[int, str] = {}  # id(a shipped-model run) -> how its session ran


_caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _float_outputs(graph):
    import onnx

    return [o for o in graph.outputs if graph.tensors.get(o) is not None
            and graph.tensors[o].elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                               onnx.TensorProto.DOUBLE, 0)]


def runtime_text(model=None, segments: int = 1) -> str:
    """How the shipped model runs in the check: default session options (on a big ``model``
    without a layout pass, :func:`~qtquant.runtime.layout_passes_off`; in ``segments``, see
    :func:`~qtquant.runtime.shipped_session`)."""
    return session_text(layout_passes_off(model) if model is not None else (), segments)


def _run(model, base_dir, names, feeds, cancel, level="basic"):
    off = layout_passes_off(model) if level == "default" else ()
    # spinning threads starve the GUI
    sess = make_session(model, base_dir, spinning=False, level=level, disabled=off)
    return run_session(sess, names, feeds, cancel)


def _shape_of(graph):
    """The float model's static shapes by tensor name (what a QuantizeLinear of the export reads)."""
    def shape_of(name):
        t = graph.tensors.get(name)
        return None if t is None else t.shape
    return shape_of


def _reference_run(model, graph, names, feeds, cancel):
    """The cross-check's run of ``model``: Q/DQ evaluated in float (basic optimisations; on a big
    graph none at all, :func:`~qtquant.runtime.reference_level`, and in segments)."""
    sess = shipped_session(model, graph.base_dir, shape_of=_shape_of(graph), level=reference_level(model))
    return run_session(sess, names, feeds, cancel)


KEEP_STATES = 6  # domain maps whose runs are kept besides the baseline's


def _run_key(session, float_tensors, level):
    # The precision is part of the program that ships: the same domains at other precisions are another run.
    return (float_tensors, level, getattr(getattr(session, "options", None), "precision", None))


def _cached_run(cache, key, dm):
    # Equal maps build the same model, so a map equal to one measured before reuses its run.
    runs = cache.runs.setdefault(key, [])
    for i, (m, res) in enumerate(runs):
        if m is dm or m == dm:
            if i:
                runs.append(runs.pop(i))
            return res
    return None


def _store_run(session, cache, key, dm, res) -> None:
    base = session.baseline_domains
    runs = cache.runs.setdefault(key, [])
    runs.append((dm, res))
    first = next((r for r in runs if r[0] is base or r[0] == base), None)
    cache.runs[key] = ([first] if first else []) + [r for r in runs if r is not first][-KEEP_STATES:]


def _shipped_runs(session, cache, jobs, outs, feeds, cancel, float_tensors, follow_edits=False,
                  segments=None) -> list:
    """The default-level runs of ``jobs`` ((dm, model) pairs), one after another (the runner
    keeps state).  With ``follow_edits``: onnxruntime's program of the exported file, re-run only
    where the edit changed it (qtquant.incremental; the same outputs as a fresh default session,
    bit for bit).  Without: each model in a fresh default session (no edit follows, so the
    runner's second optimisation for its reuse check would buy nothing)."""
    from .export import qdq

    res = []
    for dm, model in jobs:
        if not follow_edits or split_parts(model) > 1:
            # A fresh default session (also the runner's above its MAX_NODES); above SPLIT_NODES in
            # segments created side by side (runtime.shipped_session: bit-identical outputs), said.
            sess = shipped_session(model, session.graph.base_dir, shape_of=_shape_of(session.graph),
                                   segments=(segments or {}).get(id(model), False))
            res.append(run_session(sess, outs, feeds, cancel))
            cache.runtime[id(res[-1])] = runtime_text(model, getattr(sess, "segments", 1))
            continue
        if cache.runner is None:
            cache.runner = IncrementalRunner(feeds)
        res.append(cache.runner.run(model, outs, cancel, session.graph.base_dir,
                                    moved=lambda dm=dm: qdq.build_qdq_model(session, moved_domains(dm),
                                                                            float_tensors=float_tensors).model))
    return res


def _qdq_outputs_many(session, cache, outs, feeds, cancel, float_tensors, wanted, first=None, meanwhile=None,
                      follow_edits=False):
    """Per ``(dm, level)`` of ``wanted``: the QDQ model's outputs on ``feeds``; and the result of
    ``first`` (a callable: the float run), run before them in the same pool.  ``meanwhile()`` is
    called in this thread once the models are built and their sessions under way.

    Each domain map's model is built once, whatever the levels it runs at, and the sessions not
    cached yet are created side by side on two threads: onnxruntime releases the GIL while it
    optimises a graph, and on a 20,000-node export that is seconds per session, so the float run
    and the cross-check's basic-level session take no wall time beside the default one."""
    got, todo = [], []
    for dm, level in wanted:
        key = _run_key(session, float_tensors, level)
        res = _cached_run(cache, key, dm)
        if res is None and not any(k == key and (d is dm or d == dm) for k, d, _ in todo):
            todo.append((key, dm, level))
        got.append((key, dm, res))
    first_result = None
    if todo or first is not None:
        from concurrent.futures import ThreadPoolExecutor

        from .export import qdq

        models = []
        # One run and nothing beside it (the GUI's check after an edit): this thread runs it.
        alone = first is None and meanwhile is None and len(todo) == 1
        with _Inline() if alone else ThreadPoolExecutor(2, thread_name_prefix="qtquant-fidelity") as pool:
            pre = pool.submit(first) if first is not None else None
            futs = {}
            try:
                for key, dm, level in todo:
                    model = next((m for d, m in models if d is dm or d == dm), None)
                    if model is None:  # built here, while the float run goes on in onnxruntime
                        model = qdq.build_qdq_model(session, dm, float_tensors=float_tensors).model
                        models.append((dm, model))
                shipped = [(dm, next(m for d, m in models if d is dm or d == dm))
                           for _, dm, level in todo if level == "default"]
                if shipped:
                    # A big export's segments are cut here, before the pool thread starts: cutting is
                    # Python work, and beside ``meanwhile`` (the perf simulation) it only took turns.
                    segs = {id(m): segments_of(m, _shape_of(session.graph)) for _, m in shipped
                            if split_parts(m) > 1}
                    futs["default"] = pool.submit(_shipped_runs, session, cache, shipped, outs, feeds, cancel,
                                                  float_tensors, follow_edits, segs)
                for i, (_, dm, level) in enumerate(todo):
                    if level != "default":
                        model = next(m for d, m in models if d is dm or d == dm)
                        if reference_level(model) is not None:  # (None: too big, no cross-check)
                            futs[i] = pool.submit(_reference_run, model, session.graph, outs, feeds, cancel)
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None
            except BaseException:
                for f in [pre, *futs.values()]:
                    if f is not None:
                        f.cancel()  # the ones not started; the pool waits for the others
                raise
            shipped_res = iter(futs["default"].result() if "default" in futs else ())
            done = [next(shipped_res) if level == "default" else futs[i].result() if i in futs else None
                    for i, (_, _, level) in enumerate(todo)]
            first_result = pre.result() if pre is not None else None
        for (key, dm, level), res in zip(todo, done):
            if res is None:
                continue  # a cross-check left out
            _store_run(session, cache, key, dm, res)
            if level == "default":
                cache.runtime.setdefault(id(res), runtime_text(next(m for d, m in models if d is dm or d == dm)))
            elif reference_level(next(m for d, m in models if d is dm or d == dm)) != "basic":
                cache.runtime[id(res)] = REFERENCE_OFF_TEXT
    if meanwhile is not None:
        meanwhile()
    out = [res if res is not None else _cached_run(cache, key, dm) for key, dm, res in got]
    return out, first_result


class _Inline:
    """A pool whose ``submit`` runs the call at once in this thread: starting two threads for one
    run cost up to 20 ms of an edit's check on a loaded machine."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def submit(fn, *args):
        from concurrent.futures import Future

        f = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # raised where the pool's future would raise it: at .result()
            f.set_exception(e)
        return f


def _qdq_outputs(session, dm, cache, outs, feeds, cancel, float_tensors, level="default"):
    return _qdq_outputs_many(session, cache, outs, feeds, cancel, float_tensors, [(dm, level)])[0][0]


PREFETCH_BYTES = 256 << 20


def _prefetchable(graph, samples: int) -> list[str]:
    """The activations the first float run fetches for later edits' group members, within
    PREFETCH_BYTES: a Concat's inputs and output first (what shares join), then the rest in graph
    order while they fit.  (All or nothing made a model whose activations pass the budget pay a
    float run of its own at every edit that brought a new member: yolov8n_320 ~300 ms.)"""
    sizes = {}
    for t in graph.quantized_tensors:
        shape = graph.tensors[t].shape
        if not shape or any(d is None for d in shape):
            return []  # unknown sizes: fetch members on demand instead
        sizes[t] = int(np.prod(shape, dtype=np.int64)) * 4 * samples
    first = [t for n in graph.nodes_of("Concat") for t in (*n.inputs, *n.outputs) if t in sizes]
    names, total = [], 0
    for t in dict.fromkeys(first + list(sizes)):
        if total + sizes[t] <= PREFETCH_BYTES:
            names.append(t)
            total += sizes[t]
    return names


def _step(ranges, scheme, tensor) -> float | None:
    """One quantization step of ``tensor`` at its own calibrated range.  Not its domain's scale:
    a narrow member of a shared domain varies less than the shared step and still carries signal.
    None for a tensor calibration did not observe (only a constant reference is then no signal)."""
    r = ranges.get(tensor)
    if r is None or not all(math.isfinite(x) for x in r):
        return None
    return float(qparams_for_range(r[0], r[1], scheme).scale)


def _figures(ranges, dm, slices, ref_runs, test_runs, outs) -> dict[str, OutputFidelity]:
    res = {}
    for o in outs:
        whole = ErrorSums()
        parts = [(s, ErrorSums()) for s in slices.get(o, ())]
        for r, t in zip(ref_runs, test_runs):
            ref, test = np.asarray(r[o]), np.asarray(t[o])
            whole.add(ref, test)
            for s, acc in parts:
                acc.add(s.take(ref), s.take(test))
        # One quantization step of the output, or of the slice's source (its own scale).
        res[o] = OutputFidelity(o, whole.figure(o, _step(ranges, dm.scheme, o)),
                                [acc.figure(s.label, _step(ranges, dm.scheme, s.source)) for s, acc in parts])
    return res


def _kernel_findings(after_ship, after_fake, outs) -> list[str]:
    found = []
    for o in outs:
        for fs, ff in zip([after_ship[o].whole, *after_ship[o].slices], [after_fake[o].whole, *after_fake[o].slices]):
            if not (fs.measured and ff.measured) or not (math.isfinite(fs.sqnr_db) and math.isfinite(ff.sqnr_db)):
                continue
            if abs(fs.sqnr_db - ff.sqnr_db) > KERNEL_TOLERANCE_DB:
                found.append(f"{fs.label}: onnxruntime's optimised int8 kernels give {fs.sqnr_db:.2f} dB where "
                             f"Q/DQ evaluated in float gives {ff.sqnr_db:.2f} dB (tolerance "
                             f"{KERNEL_TOLERANCE_DB} dB); the figures above are the shipped ones. The first "
                             "diverging tensor is not located: fused kernels expose no intermediate tensors")
    return found


def measure_session(session, *, cancel=None, quantize_outputs: bool | None = None,
                    output_mode: OutputMode | None = None, cross_check: bool = False, meanwhile=None,
                    follow_edits: bool = False) -> Fidelity:
    """Per-output (and per-slice) SQNR/cosine before and after the session's groups.

    ``meanwhile``: a callable run in this thread while onnxruntime creates the check's sessions
    (which releases the GIL): ``qtquant analyze`` runs the perf simulation there, after the QDQ
    models are built so that it does not hold them back.

    ``follow_edits``: more checks of the same graph follow, one per edit (the GUI's worker): the
    exported model runs through :mod:`qtquant.incremental`, whose first check pays a second
    onnxruntime optimisation (the reuse check) so that each later edit re-runs only what it
    changed.  Without it (``qtquant analyze``, ``fix``) every model runs in a fresh default
    session; the figures are the same bit for bit.

    ``output_mode`` (or the older ``quantize_outputs`` flag) picks the export being measured:
    AUTO (the default export), QUANTIZE (``--quantize-outputs``) or FLOAT (``--float-outputs``);
    neither given: the session's own ``options.output_mode``.
    """
    if output_mode is None and quantize_outputs is None:
        output_mode = session.options.output_mode
    mode = output_mode_of(quantize_outputs, output_mode)
    cal = session.calibration
    feeds = list(cal.holdout) if cal is not None else []
    if not feeds:
        raise BadInputError("the fidelity check needs check samples (held-back or in-sample); calibrate first")
    graph = session.graph
    # Per graph, not per session object: the app hands a new Snapshot to every check, and the
    # float run and prefetched activations hold for the graph and calibration alike.
    cache = _caches.get(graph)
    if cache is None:
        cache = _caches[graph] = _Cache()
    if cache.calib_id is not cal:
        cache.calib_id, cache.float_out, cache.tensors, cache.runs = cal, None, {}, {}
        cache.figures, cache.member_sqnr, cache.runner, cache.runtime = {}, {}, None, {}
        cache.member_signal = {}
    if cache.slices is None:
        cache.slices = output_slices(graph)
    outs = _float_outputs(graph)
    revision = session.revision
    after_dm = session.domains
    before_dm = session.baseline_domains
    limit = getattr(getattr(session, "options", None), "max_bits_lost", 1.0)
    float_tensors, why = float_output_tensors(graph, before_dm, mode, limit)

    # Float run: outputs, plus the group members we have not fetched yet.
    members = [(g.id, t) for g in session.groups for t in g.members
               if t in after_dm.member_range and graph.tensors[t].kind != "weight"]
    need = [t for _, t in members if t not in cache.tensors]
    need = list(dict.fromkeys(need))
    kept = getattr(cal, "check_values", None)
    if kept and len(kept) == len(feeds) and all(n in kept[0] for n in outs + need):
        kept = kept[0]  # what calibration kept covers this check (see below)
    else:
        kept = None
    if cache.float_out is None:
        # Fetch every shareable activation in the first float run when they fit in memory:
        # later edits then cost no float run at all (the GUI re-measures after each edit).
        # From calibration's values: those it observed (a later member it did not is fetched then).
        pre = _prefetchable(graph, len(feeds))
        need = list(dict.fromkeys(need + (pre if kept is None else [t for t in pre if t in kept])))
    float_run = from_calib = None
    if cache.float_out is None or need:
        names = outs + [t for t in need if t not in outs]
        if kept is not None:
            # An in-sample check's samples went through the float model in calibration, which kept
            # every observed tensor's values: the same float reference, without a float run.
            from_calib = [{n: v[n] for n in names} for v in cal.check_values]
        else:
            def float_run():
                return _run(with_outputs(graph.model, names), graph.base_dir, names, feeds, cancel)

    # With no groups the session's map equals the baseline: the same export, so the same run
    # (on a 20,000-node model one QDQ session is some 15 s to create).
    same = after_dm is before_dm or after_dm == before_dm
    wanted = [(before_dm, "default")] + ([] if same else [(after_dm, "default")])
    if cross_check:
        wanted.append((after_dm, "basic"))
    got, res = _qdq_outputs_many(session, cache, outs, feeds, cancel, float_tensors, wanted, float_run, meanwhile,
                                 follow_edits)
    res = from_calib if from_calib is not None else res
    if res is not None:
        if cache.float_out is None:
            cache.float_out = [{o: r[o] for o in outs} for r in res]
        for t in need:
            cache.tensors[t] = [r[t] for r in res]
    before = got[0]
    after = before if same else got[1]
    ranges = getattr(cal, "ranges", None) or {}
    fid = Fidelity(outs, _run_figures(cache, ranges, after_dm, after, outs),
                   _run_figures(cache, ranges, before_dm, before, outs),
                   samples=len(feeds), in_sample=bool(getattr(cal, "in_sample", False)), revision=revision,
                   runtime=cache.runtime.get(id(before), runtime_text()), float_outputs=[w.text() for w in why])
    if cross_check:
        fake = got[-1]
        if fake is None:  # left out on a very big graph: say so
            fid.runtime += f"; {REFERENCE_SKIPPED_TEXT}"
        else:
            if cache.runtime.get(id(fake)):  # a big graph's reference ran without optimisations: say so
                fid.runtime += f"; {cache.runtime[id(fake)]}"
            fid.findings += _kernel_findings(fid.after, _figures(ranges, after_dm, cache.slices, cache.float_out,
                                                                 fake, outs), outs)

    for gid, t in members:
        qa, qb = after_dm.qparams_of(t), before_dm.qparams_of(t)
        if qa is None or qb is None:
            continue
        d = after_dm.domain_of(t)
        fid.members.append(MemberFidelity(
            t, gid, bits_lost(after_dm.member_range[t], (d.lo, d.hi), after_dm.scheme),
            _member_sqnr(cache, t, qb), _member_sqnr(cache, t, qa)))
    return fid


def _member_sqnr(cache, t, qp) -> float:
    # A member's SQNR at a scale depends on nothing else: after an edit only the members whose
    # scale changed are measured again.
    key = (t, qp)
    if key not in cache.member_sqnr:
        vals = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in cache.tensors[t]])
        # metrics.sqnr_db's sums, its signal kept per tensor (a share moves every member's scale)
        ref = vals.astype(np.float64)
        if t not in cache.member_signal:
            cache.member_signal[t] = float(np.sum(ref ** 2))
        noise = float(np.sum((ref - fake_quant(vals, qp).astype(np.float64)) ** 2))
        cache.member_sqnr[key] = signal_noise_db(cache.member_signal[t], noise)
    return cache.member_sqnr[key]


def _run_figures(cache, ranges, dm, res, outs) -> dict[str, OutputFidelity]:
    """:func:`_figures` of a cached run against the float run, computed once per run."""
    key = (id(res), dm.scheme, tuple(outs))
    hit = cache.figures.get(key)
    if hit is None or hit[0] is not res:
        live = {id(r) for runs in cache.runs.values() for _, r in runs}
        cache.figures = {k: v for k, v in cache.figures.items() if k[0] in live}
        hit = cache.figures[key] = (res, _figures(ranges, dm, cache.slices, cache.float_out, res, outs))
    return dict(hit[1])


# The accuracy debugger (qtquant.accuracy) measures its variants with the same runs and figures.
output_figures = _figures
run_feeds = _run
float_outputs_of = _float_outputs

__all__ += ["FloatOutput", "runtime_text", "output_figures", "run_feeds", "float_outputs_of"]
