"""onnxruntime sessions over a :class:`~qtquant.graph.Graph`.

All inference in qtquant goes through here: calibration, shape fallback and fidelity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from .errors import ModelError

__all__ = ["make_session", "run_with_outputs", "zeros_feed", "with_outputs", "input_specs", "layout_passes_off",
           "session_text", "LAYOUT_PASS_NODES", "shipped_session", "split_model", "ChainedSession", "SPLIT_NODES",
           "SEGMENT_NODES", "reference_level", "REFERENCE_OFF_TEXT", "REFERENCE_SKIPPED_TEXT", "split_parts",
           "segments_of"]


def with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (in that order, after the originals)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    vi = {v.name: v for v in m.graph.value_info}
    for n in names:
        if n in have:
            continue
        if n in vi:
            m.graph.output.append(vi[n])
        else:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
        have.add(n)
    return m


def _has_external(model) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def make_session(model: onnx.ModelProto, base_dir: Path | None = None, *, threads: int = 0,
                 spinning: bool = True, arena: bool = True, level: str = "basic", disabled=()):
    """An InferenceSession for an in-memory model whose external data lives in ``base_dir``.

    ``spinning=False`` stops idle pool threads from busy-waiting: better when other threads of
    the process (calibration's histogram thread) need the cores.  ``arena=False`` allocates
    with malloc instead of onnxruntime's CPU arena, whose fragmentation made peak memory creep
    up over hundreds of runs that hand their outputs to Python.

    ``level="default"`` keeps onnxruntime's default graph optimisations, as a user's session
    has them: that is how the fidelity check runs the exported model (Q/DQ pairs fused into
    int8 kernels).  ``"basic"`` keeps every intermediate tensor observable; ``"disabled"`` optimises
    nothing.  ``disabled``: names of onnxruntime graph transformers to leave out (see :func:`layout_passes_off`).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not arena:
        so.enable_cpu_mem_arena = False
    if level == "basic":
        # Fusions that drop intermediate tensors would hide the activations we ask for as outputs.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif level == "disabled":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif level != "default":
        raise ValueError(f"unknown optimisation level {level!r}")
    try:
        if _has_external(model) and base_dir is not None:
            # The bytes carry no weights (they stay in their files, so >2 GB models work);
            # onnxruntime reads them from base_dir and itself refuses paths escaping it.
            # (A symlinked temp folder does not work: onnxruntime resolves the links and
            # refuses targets outside the folder.)
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        str(Path(base_dir).resolve()))
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=list(disabled) or None)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"onnxruntime cannot run this model: {first[:300]}") from None


# Above this many nodes the shipped-model check leaves out onnxruntime's NhwcTransformer (below).
LAYOUT_PASS_NODES = 10_000
LAYOUT_PASSES = ("NhwcTransformer",)
# Segments: onnxruntime's graph optimisation runs on one thread (QDQ exports of the block CNN, CPU
# seconds to create a session on a loaded machine: 16,652 nodes 2.6, 33,332 nodes 4.8, 66,662 nodes
# 12.9-14.1; as 4 segments 10.6), so above SPLIT_NODES the shipped file runs as segments of about
# SEGMENT_NODES nodes, cut where only int8 tensors cross, whose sessions are created side by side.
SPLIT_NODES = 30_000
SEGMENT_NODES = 20_000


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
    if not disabled:
        return f"onnxruntime {ort.__version__}, default session options{split}, CPU"
    return (f"onnxruntime {ort.__version__}, default session options but {', '.join(disabled)} (a layout pass, "
            f"left out above {LAYOUT_PASS_NODES:,} nodes: its cost grows with the square of the graph and its "
            f"outputs are bit-identical){split}, CPU")


def input_specs(graph) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    out = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else np.dtype(np.float32)
        out[name] = (tuple(int(d or 1) for d in (t.shape or ())), np.dtype(dt))
    return out


def zeros_feed(graph) -> dict[str, np.ndarray]:
    return {n: np.zeros(s, dtype=d) for n, (s, d) in input_specs(graph).items()}


def run_with_outputs(graph, names, feed) -> dict[str, np.ndarray]:
    names = list(names)
    sess = make_session(with_outputs(graph.model, names), graph.base_dir)
    res = sess.run(names, feed)
    return dict(zip(names, res))


_MAX_CUT = 8  # tensors crossing one cut at most
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})  # the standard ops with graph attributes


class ChainedSession:
    """Sessions of consecutive segments of one model, run one after the other; ``run`` answers as
    an InferenceSession of the whole model does (graph outputs by name)."""

    def __init__(self, parts, sessions):
        self.parts = parts  # [(inputs, outputs)] per segment
        self.sessions = sessions

    @property
    def segments(self) -> int:
        return len(self.sessions)

    def run(self, names, feed):
        vals = dict(feed)
        for (ins, outs), sess in zip(self.parts, self.sessions):
            vals.update(zip(outs, sess.run(outs, {n: vals[n] for n in ins})))
        return [vals[n] for n in names]


def _const_nodes(info, consts: set[str]) -> list[bool]:
    """Per node: computes only from initializers (weights' DequantizeLinear, Constant)."""
    out, known = [], set(consts)
    for _, ins, outs in info:
        c = all(not x or x in known for x in ins)
        if c:
            known.update(outs)
        out.append(c)
    return out


def _order(info, const: list[bool]) -> list[int]:
    """A topological order in which each constant node and each DequantizeLinear comes just before
    its first consumer (the exporter writes the weights' DQ first and an activation's DQs right after
    its QuantizeLinear): only int8 tensors then stay alive between the node units."""
    sink = [c or op == "DequantizeLinear" for c, (op, _, _) in zip(const, info)]
    made = {o: i for i, (_, _, outs) in enumerate(info) if sink[i] for o in outs}
    done = [False] * len(info)
    order = []

    def emit(i):
        stack = [(i, False)]
        while stack:
            j, expanded = stack.pop()
            if done[j]:
                continue
            if expanded:
                done[j] = True
                order.append(j)
                continue
            stack.append((j, True))
            stack += [(made[x], False) for x in info[j][1] if x in made and not done[made[x]]]

    for i, (_, ins, _) in enumerate(info):
        if sink[i]:
            continue
        for x in ins:
            if x in made and not done[made[x]]:
                emit(made[x])
        done[i] = True
        order.append(i)
    for i in range(len(info)):  # what nothing reads (a DQ writing a model output), in file order
        if not done[i]:
            emit(i)
    return order


def _handover_type(node, ins, inits, shape_of):
    """(elem type, shape) of a QuantizeLinear's output (``ins``: its inputs), or None when its
    shape is not known."""
    shape = shape_of(ins[0])
    if shape is None or any(not isinstance(d, int) or d <= 0 for d in shape):
        return None
    zp = inits.get(ins[2]) if len(ins) > 2 and ins[2] else None
    if zp is not None:
        elem = zp.data_type
    else:
        elem = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), onnx.TensorProto.UINT8)
    return elem, tuple(shape)


def _cuts(info, order, nodes, inits, graph_out, shape_of) -> tuple[list, dict]:
    """The points of ``order`` only eligible hand-over tensors cross (see :func:`split_model`):
    [(position, crossing tensors)], and the hand-over tensors' (elem type, shape)."""
    producer = {o: i for i, (_, _, outs) in enumerate(info) for o in outs if o}
    uses: dict[str, int] = {}
    for _, ins, _ in info:
        for x in set(ins):
            if x in producer:
                uses[x] = uses.get(x, 0) + 1
    handover, types = {}, {}  # eligible live tensors; (elem, shape) of every eligible tensor seen
    live: dict[str, int] = {}  # tensor -> uses left after the point
    bad = 0  # live tensors that cannot cross a cut
    cuts = []
    for pos, i in enumerate(order):
        if pos and not bad and 0 < len(live) <= _MAX_CUT:
            cuts.append((pos, tuple(live)))
        op, ins, outs = info[i]
        for x in set(ins):
            if x in live:
                if x in handover:
                    bad += 1  # consumed on both sides of a later point: not a hand-over there
                    del handover[x]
                live[x] -= 1
                if not live[x]:
                    del live[x]
                    bad -= 1
        for o in outs:
            if not o or not uses.get(o):
                continue
            live[o] = uses[o]
            t = (_handover_type(nodes[i], ins, inits, shape_of) if op == "QuantizeLinear" and o not in graph_out
                 else None)
            if t is not None:
                handover[o] = types[o] = t
            else:
                bad += 1
    return cuts, types


def split_model(model: onnx.ModelProto, parts: int, shape_of) -> list[onnx.ModelProto] | None:
    """``model`` as up to ``parts`` consecutive segments, or None when it cannot be cut.

    A cut is a point of a topological order that only outputs of QuantizeLinear nodes cross (at
    most :data:`_MAX_CUT` of them), none of them consumed before the cut nor a graph output, of a
    known static shape (``shape_of(name)``: the shape of the float tensor a QuantizeLinear reads, or
    None).  So every node unit onnxruntime fuses (DequantizeLinear, op, QuantizeLinear) lies
    within one segment, and what crosses is what one int8 kernel hands the next.  A segment's
    inputs are graph inputs and hand-over tensors, its outputs graph outputs and hand-over
    tensors; each carries the initializers it reads.  Models with subgraphs or external data are
    not cut."""
    g = model.graph
    nodes = list(g.node)
    if parts < 2 or _has_external(model):
        return None
    info = [(n.op_type, tuple(n.input), tuple(n.output)) for n in nodes]  # read from the protos once
    if any(op in _SUBGRAPH_OPS for op, _, _ in info) or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for n in nodes if n.domain for a in n.attribute):
        return None
    inits = {t.name: t for t in g.initializer}
    graph_in = {i.name: i for i in g.input}
    graph_out = {o.name: o for o in g.output}
    const = _const_nodes(info, set(inits) | {t.values.name for t in g.sparse_initializer})
    order = _order(info, const)
    cuts, types = _cuts(info, order, nodes, inits, graph_out, shape_of)
    if not cuts:
        return None
    step = len(order) / parts
    chosen = []
    for k in range(1, parts):
        pos, _ = min(cuts, key=lambda c: (abs(c[0] - k * step), len(c[1])))
        if (not chosen or pos > chosen[-1]) and pos < len(order):
            chosen.append(pos)
    if not chosen:
        return None
    bounds = [0, *chosen, len(order)]
    seg_of = [0] * len(nodes)
    for k in range(len(bounds) - 1):
        for i in order[bounds[k]:bounds[k + 1]]:
            seg_of[i] = k
    last_use: dict[str, int] = {}  # tensor -> last segment reading it
    for i, (_, ins, _) in enumerate(info):
        for x in ins:
            if last_use.get(x, -1) < seg_of[i]:
                last_use[x] = seg_of[i]

    def value(name):
        elem, shape = types[name]
        return onnx.helper.make_tensor_value_info(name, elem, shape)

    models = []
    for k in range(len(bounds) - 1):
        idx = sorted(order[bounds[k]:bounds[k + 1]])  # the file's own order within the segment
        made = {o for i in idx for o in info[i][2] if o}
        reads = dict.fromkeys(x for i in idx for x in info[i][1] if x and x not in made)
        m = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                            producer_version=model.producer_version, domain=model.domain,
                            model_version=model.model_version)
        m.opset_import.extend(model.opset_import)
        m.functions.extend(model.functions)
        sg = m.graph
        sg.name = f"{g.name}_{k}"
        sg.node.extend(nodes[i] for i in idx)  # (one copy of each node, into its segment)
        sg.initializer.extend(inits[x] for x in reads if x in inits)
        sg.input.extend(graph_in[x] if x in graph_in else value(x) for x in reads if x not in inits)
        sg.output.extend(graph_out[o] if o in graph_out else value(o) for i in idx for o in info[i][2]
                         if o in graph_out or last_use.get(o, -1) > k)
        models.append(m)
    return models


def split_parts(model: onnx.ModelProto) -> int:
    """Segments :func:`shipped_session` cuts ``model`` into (1: none)."""
    n = len(model.graph.node)
    return -(-n // SEGMENT_NODES) if n > SPLIT_NODES else 1


def segments_of(model: onnx.ModelProto, shape_of) -> list[onnx.ModelProto] | None:
    """The segments :func:`shipped_session` runs ``model`` in (None: whole).  Python work: a caller
    with other Python work to do beside the sessions' creation does this first."""
    parts = split_parts(model)
    return split_model(model, parts, shape_of) if parts > 1 and shape_of is not None else None


def shipped_session(model: onnx.ModelProto, base_dir: Path | None = None, *, shape_of=None, level="default",
                    spinning: bool = False, segments=False):
    """A session of the exported ``model`` as the fidelity check runs it: default options (above
    :data:`LAYOUT_PASS_NODES` nodes without the layout pass), and above :data:`SPLIT_NODES` nodes,
    when :func:`split_model` finds cuts, a :class:`ChainedSession` of its segments created on
    two threads (onnxruntime releases the GIL while it optimises).  ``level="disabled"``: no graph
    optimisation (the cross-check's reference of a big graph).  ``segments``: :func:`segments_of`
    the model, when the caller has them already."""
    off = layout_passes_off(model) if level == "default" else ()
    segs = segments_of(model, shape_of) if segments is False else segments
    if segs is None:
        return make_session(model, base_dir, spinning=spinning, level=level, disabled=off)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2, thread_name_prefix="qtquant-segment") as pool:
        sessions = list(pool.map(lambda m: make_session(m, base_dir, spinning=spinning, level=level,
                                                        disabled=off), segs))
    return ChainedSession([([i.name for i in m.graph.input], [o.name for o in m.graph.output]) for m in segs],
                          sessions)
