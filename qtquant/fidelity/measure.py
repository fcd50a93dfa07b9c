"""Fidelity: how far the exported model is from the float one (DESIGN §3 "Fidelity").

What ships is measured: the QDQ model the exporter writes (built in memory by
:mod:`qtquant.export.qdq`, the same bytes) runs in onnxruntime the way a user's session runs
it, with default session options on the CPU provider, so Q/DQ pairs are fused into
onnxruntime's int8 kernels.  (One exception, said in the report: above
:data:`~qtquant.runs.shipped.LAYOUT_PASS_NODES` nodes the NhwcTransformer layout pass is left out, see
:func:`~qtquant.runs.shipped.layout_passes_off`.)  Above :data:`~qtquant.runs.shipped.SPLIT_NODES` nodes
the file runs as segments cut at int8 hand-over tensors, their sessions created side by side
(:func:`~qtquant.runs.shipped.shipped_session`: the same outputs bit for bit; said in the report too).
The float model runs beside it on the check samples (held out from calibration when there are
enough of them, else the calibration samples, and the report says which); an in-sample check
of ``qtquant analyze`` takes the float values calibration kept of those very samples
(``CalibrationResult.check_values``) instead.  The float run, the shipped session and the
cross-check's session are created side by side on two threads.

For each float output: SQNR in dB, cosine and max abs error, before (the model as opened: no
user group, every tensor int8) and after (the session's groups and precision).  An output that
is a Concat, directly or through relabelling ops, is also measured per slice (one per Concat
input, :mod:`qtquant.quant.outputs`), and its headline figure is its worst slice: the boxes of a
detection head must not hide its scores.
A part whose float reference carries no signal on the check samples gets a sentence, not a
number.  Each group member also gets the quantization SQNR of that tensor alone, own scale
versus shared.

With ``cross_check`` the same model also runs with basic optimisations only (Q/DQ evaluated
in float, the fake-quant reference); where the two disagree by more than
:data:`KERNEL_TOLERANCE_DB`, the report says so.  On big exports that reference runs without
optimisations, and above :data:`~qtquant.runs.shipped.SPLIT_NODES` nodes not at all
(:func:`~qtquant.runs.shipped.reference_level`; the report says which).

The GUI re-runs this after every edit, so results are cached per graph and calibration: float
outputs once per calibration, the "before" run once per baseline domain map, and the "after"
runs of the last few domain maps (an equal map builds the same model, so an undo or redo back
to a measured state runs nothing); figures once per run, a group member's SQNR once per scale.
In the GUI (``follow_edits``) a new map's model runs through :mod:`qtquant.runs.incremental`:
onnxruntime's optimised program of the exported file, kept per structure, with the edit's values,
re-run only from where they changed (the same outputs as a fresh default session, bit for bit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import functools
import math
import threading
import time

import numpy as np

from ..base.errors import BadInputError
from .report import FLOAT_MODEL, QDQ_VIEW, Fidelity, MemberFidelity, OutputFidelity
from .checkruns import (HOST_DEFAULT, RUNS, compared_outputs, prefetchable, qdq_outputs_many, run_outputs,
                        runtime_text, trace)
from ..model.int8path import EXACT_INT8_ENTRY, host_int8_path
from .metrics import ErrorSums, cosine, signal_noise_db, sqnr_db, sums_for
from ..quant.outputs import FloatOutput, OutputMode, float_output_tensors, output_slices
from ..quant.precision import PrecisionMap
from ..model.scales import bits_lost, qparams_for_range
from ..model.runtime import with_outputs
from ..runs.shipped import REFERENCE_SKIPPED_TEXT

if TYPE_CHECKING:
    from ..calib.state import SessionState

__all__ = ["Fidelity", "OutputFidelity", "MemberFidelity", "measure_session", "sqnr_db", "cosine",
           "fake_quant", "KERNEL_TOLERANCE_DB", "output_mode_of", "samples_blamed"]

OPENED = PrecisionMap()  # the "before" export's precision: every tensor int8, as the model was opened

# Fused int8 kernels round differently from Q/DQ in float; beyond this the difference is a finding.
KERNEL_TOLERANCE_DB = 0.5
# Headlines of this CPU's default kernels further than this from the exact ones get the host line.
HOST_TOLERANCE_DB = 0.05


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
        # An integer output (an ArgMax's class) is counted by agreement, as a whole: no slices.
        whole = sums_for(ref_runs[0][o]) if ref_runs else ErrorSums()
        parts = [(s, ErrorSums()) for s in slices.get(o, ())] if isinstance(whole, ErrorSums) else []
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


def _host_default_line(host, exact, default, outs) -> str:
    """One line where this CPU's default int8 kernels give another headline than the exact ones
    (more than :data:`HOST_TOLERANCE_DB` apart), with both figures; else empty."""
    moved = []
    for o in outs:
        e, d = exact[o].headline, default[o].headline
        if e.measured and d.measured and math.isfinite(e.sqnr_db) and math.isfinite(d.sqnr_db) \
                and abs(e.sqnr_db - d.sqnr_db) > HOST_TOLERANCE_DB:
            moved.append(f"{e.label} {d.sqnr_db:.2f} dB where the exact program gives {e.sqnr_db:.2f} dB")
    if not moved:
        return ""
    key, value = EXACT_INT8_ENTRY
    return (f"this CPU ({host.isa}): onnxruntime's default int8 kernels saturate u8×s8 pairs, so a default session of "
            f"the exported file computes {'; '.join(moved)}; a session with the config entry {key}={value} computes "
            "the exact figures above")


def samples_blamed(fn):
    """``fn(session, ...)``, where an onnxruntime failure on the check samples names their data's
    likely cause (synthetic samples give integer inputs zeros: :func:`~qtquant.calib.sources.data_blamed`)."""
    @functools.wraps(fn)
    def wrapper(session, *args, **kwargs):
        from ..calib.sources import data_blamed

        cal = session.calibration
        with data_blamed(session.graph, cal.config if cal is not None else None):
            return fn(session, *args, **kwargs)
    return wrapper


@samples_blamed
def measure_session(session: SessionState, *, cancel=None, quantize_outputs: bool | None = None,
                    output_mode: OutputMode | None = None, cross_check: bool = False, meanwhile=None,
                    follow_edits: bool = False) -> Fidelity:
    """Per-output (and per-slice) SQNR/cosine before and after the session's groups.

    ``meanwhile``: a callable run in this thread while onnxruntime creates the check's sessions
    (which releases the GIL): ``qtquant analyze`` runs the perf simulation there, after the QDQ
    models are built so that it does not hold them back.

    ``follow_edits``: more checks of the same graph follow, one per edit (the GUI's worker): the
    exported model runs through :mod:`qtquant.runs.incremental`, whose first check pays a second
    onnxruntime optimisation (the reuse check) so that each later edit re-runs only what it
    changed.  Without it (``qtquant analyze``, ``fix``) every model runs in a fresh default
    session; the figures are the same bit for bit.

    ``output_mode`` (or the older ``quantize_outputs`` flag) picks the export being measured:
    AUTO (the default export), QUANTIZE (``--quantize-outputs``) or FLOAT (``--float-outputs``);
    neither given: the session's own ``options.output_mode``.
    """
    t_start = time.perf_counter()
    steps = trace(reset=True)
    if output_mode is None and quantize_outputs is None:
        output_mode = session.options.output_mode
    mode = output_mode_of(quantize_outputs, output_mode)
    cal = session.calibration
    if cal is None or not cal.holdout:
        raise BadInputError("the fidelity check needs check samples (held-back or in-sample); calibrate first")
    feeds = list(cal.holdout)
    graph = session.graph
    cache = graph.derived.get(RUNS)
    if cache.calib_id is not cal:
        cache.calib_id, cache.float_out, cache.tensors, cache.runs = cal, None, {}, {}
        cache.figures, cache.member_sqnr, cache.runner, cache.runtime = {}, {}, None, {}
        cache.sparse = None
        cache.member_signal = {}
    if cache.slices is None:
        cache.slices = output_slices(graph)
    outs = compared_outputs(graph)
    revision = session.revision
    after_dm = session.domains
    before_dm = session.baseline_domains
    float_tensors, why = float_output_tensors(graph, before_dm, mode, session.options.float_output_max_bits_lost)

    # Float run: outputs, plus the group members we have not fetched yet.
    members = [(g.id, t) for g in session.groups for t in g.members
               if t in after_dm.member_range and graph.tensors[t].kind != "weight"]
    need = [t for _, t in members if t not in cache.tensors]
    need = list(dict.fromkeys(need))
    # A share moves every member's scale, and each member's SQNR is some ten passes over its
    # values on the check samples (tens of ms each on yolov8n_320's neck): with their float values
    # at hand they are measured on a thread of their own while this one builds and runs the model
    # (numpy's loops and onnxruntime's runs both release the GIL).
    side = _side_pool().submit(_member_figures, cache, members, after_dm, before_dm) if members and not need else None
    kept = cal.check_values
    if kept and len(kept) == len(feeds) and all(n in kept[0] for n in outs + need):
        kept = kept[0]  # what calibration kept covers this check (see below)
    else:
        kept = None
    if cache.float_out is None:
        # Fetch every shareable activation in the first float run when they fit in memory:
        # later edits then cost no float run at all (the GUI re-measures after each edit).
        # From calibration's values: those it observed (a later member it did not is fetched then).
        pre = prefetchable(graph, len(feeds))
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
                return run_outputs(with_outputs(graph.model, names), graph.base_dir, names, feeds, cancel)

    # "Before" is the model as opened: no user group and every tensor int8, so a precision edit
    # shows its own change.  With no groups and no precision edit the session's export is that
    # one: the same run (on a 20,000-node model one QDQ session is some 15 s to create).
    same = (after_dm is before_dm or after_dm == before_dm) and not session.options.precision
    wanted = [(before_dm, "default", OPENED)] + ([] if same else [(after_dm, "default", None)])
    if cross_check:
        wanted.append((after_dm, "basic", None))
    host = host_int8_path()
    if not host.default_exact:  # a user's default session computes other numbers here: measure those too
        wanted.append((after_dm, HOST_DEFAULT, None))
    got, res = qdq_outputs_many(session, cache, outs, feeds, cancel, float_tensors, wanted, float_run, meanwhile,
                                 follow_edits)
    res = from_calib if from_calib is not None else res
    if res is not None:
        if cache.float_out is None:
            cache.float_out = [{o: r[o] for o in outs} for r in res]
        for t in need:
            cache.tensors[t] = [r[t] for r in res]
    before = got[0]
    after = before if same else got[1]
    ranges = cal.ranges
    t_fig = time.perf_counter()
    fid = Fidelity(outs, _run_figures(cache, ranges, after_dm, after, outs),
                   _run_figures(cache, ranges, before_dm, before, outs),
                   samples=len(feeds), in_sample=cal.in_sample, revision=revision,
                   runtime=cache.runtime.get(id(before), runtime_text()), float_outputs=[w.text() for w in why],
                   sparse=_sparse_outputs(cache, outs),
                   reference=QDQ_VIEW if session.qdq is not None else FLOAT_MODEL)
    if not host.default_exact:
        fid.host_default = _host_default_line(host, fid.after, _figures(ranges, after_dm, cache.slices, cache.float_out,
                                                                         got[-1], outs), outs)
    if cross_check:
        fake = got[2 if not same else 1]
        if fake is None:  # left out on a very big graph: say so
            fid.runtime += f"; {REFERENCE_SKIPPED_TEXT}"
        else:
            if cache.runtime.get(id(fake)):  # a big graph's reference ran without optimisations: say so
                fid.runtime += f"; {cache.runtime[id(fake)]}"
            fid.findings += _kernel_findings(fid.after, _figures(ranges, after_dm, cache.slices, cache.float_out,
                                                                 fake, outs), outs)

    t_mem = time.perf_counter()
    fid.members += side.result() if side is not None else _member_figures(cache, members, after_dm, before_dm)
    end = time.perf_counter()
    steps.update(figures=(t_mem - t_fig) * 1e3, members=(end - t_mem) * 1e3, total=(end - t_start) * 1e3)
    fid.trace = dict(steps)
    return fid


# A map output (rank 4, at least 16x16: a detector's or a segmenter's) whose float reference fires on
# under this share of its elements gets a note: PP-OCRv4 det on the seven photos fires on 0.70% of its
# 320x320 map.  Not a classifier's scores, where one class of a thousand firing is the normal case.
SPARSE_SHARE = 0.02
FIRES = 0.1  # an element "fires" at this share of the output's largest magnitude or more
MAP_MIN = 256  # elements of one channel of a map output (16x16)


def _sparse_outputs(cache, outs) -> dict[str, tuple[int, int]]:
    """output -> (elements that fire, elements) for the map outputs whose float reference fires on
    under SPARSE_SHARE of them; computed once per calibration (the float run is)."""
    if cache.sparse is None:
        cache.sparse = {}
        for o in outs:
            parts = [np.abs(np.asarray(r[o], dtype=np.float64)) for r in cache.float_out or ()
                     if np.asarray(r[o]).dtype.kind == "f" and np.ndim(r[o]) == 4
                     and np.shape(r[o])[2] * np.shape(r[o])[3] >= MAP_MIN]
            n = sum(p.size for p in parts)
            top = max((float(p.max()) for p in parts if p.size), default=0.0)
            if not n or not top > 0:
                continue
            hit = sum(int(np.count_nonzero(p >= FIRES * top)) for p in parts)
            if hit < SPARSE_SHARE * n:
                cache.sparse[o] = (hit, n)
    return dict(cache.sparse)


_side: list = []


def _side_pool():
    """One thread for the life of the process (starting one per check cost up to 20 ms on a loaded machine)."""
    if not _side:
        from concurrent.futures import ThreadPoolExecutor

        _side.append(ThreadPoolExecutor(1, thread_name_prefix="qtquant-members"))
    return _side[0]


def _member_figures(cache, members, after_dm, before_dm) -> list[MemberFidelity]:
    out = []
    for gid, t in members:
        qa, qb = after_dm.qparams_of(t), before_dm.qparams_of(t)
        if qa is None or qb is None:
            continue
        d = after_dm.domain_of(t)
        out.append(MemberFidelity(t, gid, bits_lost(after_dm.member_range[t], (d.lo, d.hi), after_dm.scheme),
                                  _member_sqnr(cache, t, qb), _member_sqnr(cache, t, qa)))
    return out


def _member_sqnr(cache, t, qp) -> float:
    # A member's SQNR at a scale depends on nothing else: after an edit only the members whose
    # scale changed are measured again.
    key = (t, qp)
    if key not in cache.member_sqnr:
        parts = cache.tensors[t]
        n = sum(int(np.size(v)) for v in parts)
        # Scratch arrays reused from one member to the next (this thread's): a fresh array of a
        # neck tensor over the check samples is megabytes of new pages, and their faults cost
        # more than the arithmetic on a busy machine.
        vals = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in parts], out=_scratch(n, np.float32, 0))
        # metrics.sqnr_db's sums, its signal kept per tensor (a share moves every member's scale).
        # The same values as fake_quant and float64 (ref - test)² would give, in fewer passes and
        # temporaries: after a share every member of the group is measured again.
        wide = _scratch(n, np.float64, 2)
        if t not in cache.member_signal:
            np.copyto(wide, vals)
            cache.member_signal[t] = float(np.sum(np.square(wide, out=wide)))
        diff = np.subtract(vals, _fake_quant_into(vals, qp, _scratch(n, np.float32, 1)), out=wide, dtype=np.float64)
        noise = float(np.sum(np.square(diff, out=diff)))
        cache.member_sqnr[key] = signal_noise_db(cache.member_signal[t], noise)
    return cache.member_sqnr[key]


_scratches = threading.local()


_SCRATCH_MAX = 1 << 22  # elements: bigger members get fresh arrays, so a thread keeps at most ~64 MB


def _scratch(n: int, dtype, slot: int) -> np.ndarray:
    """A length-``n`` array of ``dtype`` from this thread's scratch ``slot`` (grown up to
    :data:`_SCRATCH_MAX`, never shrunk: a 640x640 detector's first feature map over the check
    samples would otherwise stay held, hundreds of MB, for the whole session)."""
    if n > _SCRATCH_MAX:
        return np.empty(n, dtype)
    bufs = getattr(_scratches, "bufs", None)
    if bufs is None:
        bufs = _scratches.bufs = {}
    b = bufs.get(slot)
    if b is None or b.dtype != dtype or b.size < n:
        b = bufs[slot] = np.empty(n, dtype)
    return b[:n]


def _fake_quant_into(x: np.ndarray, qp, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`fake_quant` of a float32 ``x`` computed in place in ``out`` (default: a new array),
    same values.  A zero point of 0 is not added and taken away: that only turns -0.0 into +0.0,
    which no difference or square tells apart."""
    s, zp = np.float32(qp.scale), np.float32(qp.zero_point)
    q = np.divide(x, s, out=out)
    np.rint(q, out=q)
    if zp:
        q += zp
    np.clip(q, qp.qmin, qp.qmax, out=q)
    if zp:
        q -= zp
    q *= s
    return q


def _run_figures(cache, ranges, dm, res, outs) -> dict[str, OutputFidelity]:
    """:func:`_figures` of a cached run against the float run, computed once per run."""
    key = (id(res), dm.scheme, tuple(outs))
    hit = cache.figures.get(key)
    if hit is None or hit[0] is not res:
        live = {id(r) for runs in cache.runs.values() for _, r in runs}
        cache.figures = {k: v for k, v in cache.figures.items() if k[0] in live}
        hit = cache.figures[key] = (res, _figures(ranges, dm, cache.slices, cache.float_out, res, outs))
    return dict(hit[1])


# The accuracy debugger (qtquant.fidelity.accuracy) measures its variants with the same runs and figures.
output_figures = _figures
run_feeds = run_outputs
checked_outputs_of = compared_outputs

__all__ += ["FloatOutput", "runtime_text", "output_figures", "run_feeds", "checked_outputs_of"]
