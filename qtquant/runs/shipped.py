"""How the fidelity check runs the shipped (exported) file: onnxruntime's default session options,
which passes it leaves out on big graphs and why, when the file runs as segments, the cross-check's
optimisation level, and the sentences reports use to say so.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from ..model.int8path import host_int8_path
from ..model.runtime import make_session
from .segments import chained_session, iter_segments

__all__ = ["layout_passes_off", "session_text", "LAYOUT_PASS_NODES", "LAYOUT_PASSES", "shipped_session",
           "SPLIT_NODES", "SEGMENT_NODES", "reference_level", "REFERENCE_OFF_TEXT", "REFERENCE_SKIPPED_TEXT",
           "split_parts", "segments_of"]


# Above this many nodes the shipped-model check leaves out onnxruntime's NhwcTransformer (below).
LAYOUT_PASS_NODES = 10_000
LAYOUT_PASSES = ("NhwcTransformer",)
# Segments: onnxruntime's graph optimisation runs on one thread (QDQ exports of the block CNN, CPU
# seconds to create a session on a loaded machine: 16,652 nodes 2.6, 33,332 nodes 4.8, 66,662 nodes
# 12.9-14.1; as 4 segments 10.6), so above SPLIT_NODES the shipped file runs as segments of about
# SEGMENT_NODES nodes, cut where only int8 tensors cross, whose sessions are created side by side.
# Small segments cost less in all: the same quarter of that 66,662-node export took 1.57-2.14 CPU
# seconds as one session of 16,678 nodes, 1.03-1.55 as 4 of about 4,200, 0.91-1.32 as 8 of about
# 2,100, 0.83-1.08 as 16 (same instruction counts under callgrind: smaller graphs stay in cache).
SPLIT_NODES = 30_000
SEGMENT_NODES = 2_000


def layout_passes_off(model: onnx.ModelProto) -> tuple[str, ...]:
    """The onnxruntime transformers a check of ``model`` at default options leaves out: none, or on
    a graph over :data:`LAYOUT_PASS_NODES` nodes the NhwcTransformer.

    That pass only moves int8 convolutions to channels-last and pushes the transposes it wraps
    them in through the graph; every node it adds is named by a scan of the whole graph
    (onnxruntime's ``Graph::GenerateNodeName``), so its cost grows with the square of the graph:
    on a QDQ export of a 20,000-node CNN it was half of a 56 s session creation (2 cores, loaded),
    on yolov8n_320 nothing.  Outputs were bit-identical with and without it on yolov8n_320,
    ppocrv4_det and that CNN (a test checks it on a built model); reports say when it was left out
    (:func:`session_text`)."""
    return LAYOUT_PASSES if len(model.graph.node) > LAYOUT_PASS_NODES else ()


def reference_level(model: onnx.ModelProto) -> str | None:
    """The optimisation level of the cross-check's Q/DQ-in-float reference of ``model``: basic;
    above :data:`LAYOUT_PASS_NODES` nodes none (``"disabled"``): basic optimisations only fold the
    weights' DequantizeLinear and drop redundant nodes, which on a 20,000-node CNN's export cost
    about twice the session's own creation (CPU seconds, 2 cores); above :data:`SPLIT_NODES` None:
    no cross-check (its session, even unoptimised, was a quarter of the check's CPU time on that
    CNN's 66,662-node export, on 2 cores that the shipped file's segments already fill)."""
    n = len(model.graph.node)
    return None if n > SPLIT_NODES else "disabled" if n > LAYOUT_PASS_NODES else "basic"


REFERENCE_OFF_TEXT = (f"the cross-check's Q/DQ-in-float reference ran with onnxruntime's graph optimisations off "
                      f"(above {LAYOUT_PASS_NODES:,} nodes)")
REFERENCE_SKIPPED_TEXT = (f"no cross-check against Q/DQ evaluated in float (left out above {SPLIT_NODES:,} nodes: "
                          "one more session of the whole export)")


def session_text(disabled=(), segments: int = 1) -> str:
    """How a shipped-model session ran, for reports."""
    import onnxruntime as ort

    split = "" if segments <= 1 else (
        f"; the file ran as {segments} segments cut at int8 hand-over tensors, their sessions created side by "
        f"side (above {SPLIT_NODES:,} nodes: onnxruntime optimises a graph on one thread; the outputs are "
        "bit-identical to one session of the whole file)")
    int8 = host_int8_path().kernels_text
    if not disabled:
        return f"onnxruntime {ort.__version__}, default session options{split}, CPU; {int8}"
    return (f"onnxruntime {ort.__version__}, default session options but {', '.join(disabled)} (a layout pass, "
            f"left out above {LAYOUT_PASS_NODES:,} nodes: its cost grows with the square of the graph and its "
            f"outputs are bit-identical){split}, CPU; {int8}")


def split_parts(model: onnx.ModelProto) -> int:
    """Segments :func:`shipped_session` cuts ``model`` into (1: none)."""
    n = len(model.graph.node)
    return -(-n // SEGMENT_NODES) if n > SPLIT_NODES else 1


def segments_of(model: onnx.ModelProto, shape_of):
    """The segments :func:`shipped_session` runs ``model`` in (None: whole), an iterator that builds
    each when it is asked for (:func:`~qtquant.runs.segments.iter_segments`); the cuts are found here.
    Python work: a caller with other Python work to do beside the sessions' creation does this first."""
    parts = split_parts(model)
    return iter_segments(model, parts, shape_of) if parts > 1 and shape_of is not None else None


def shipped_session(model: onnx.ModelProto, base_dir: Path | None = None, *, shape_of=None, level="default",
                    spinning: bool = False, segments=False, exact_int8: bool = True):
    """A session of the exported ``model`` as the fidelity check runs it: default options (above
    :data:`LAYOUT_PASS_NODES` nodes without the layout pass), and above :data:`SPLIT_NODES` nodes,
    when :func:`~qtquant.runs.segments.split_model` finds cuts, a :class:`~qtquant.runs.segments.ChainedSession`
    of its segments created on two threads (onnxruntime releases the GIL while it optimises).
    ``level="disabled"``: no graph optimisation (the cross-check's reference of a big graph).
    ``segments``: :func:`segments_of` the model, when the caller has them already.
    ``exact_int8=False``: the int8 kernels a user's default session gets on this CPU
    (:func:`~qtquant.model.runtime.make_session`)."""
    off = layout_passes_off(model) if level == "default" else ()
    segs = segments_of(model, shape_of) if segments is False else segments
    if segs is None:
        return make_session(model, base_dir, spinning=spinning, level=level, disabled=off, exact_int8=exact_int8)
    return chained_session(segs, lambda m: make_session(m, base_dir, spinning=spinning, level=level, disabled=off,
                                                        exact_int8=exact_int8))
