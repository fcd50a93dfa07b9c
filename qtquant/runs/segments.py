"""Cutting an exported model into consecutive segments that hand over only int8 tensors, and running
the segments' sessions one after the other as if they were one (:class:`ChainedSession`).

Why: onnxruntime optimises a graph on one thread, so the sessions of a big export's segments can be
created side by side; :mod:`qtquant.runs.shipped` decides when.  The cuts are where every crossing tensor
is a QuantizeLinear output, so the chained outputs are bit-identical to one session of the file.
"""

from __future__ import annotations

import onnx

from ..model.nodetable import SUBGRAPH_ATTRS
from ..model.ops import SUBGRAPH_OPS
from ..model.runtime import has_external_data

__all__ = ["ChainedSession", "split_model", "iter_segments", "chained_session", "const_nodes"]


_MAX_CUT = 8  # tensors crossing one cut at most


def chained_session(segments, make) -> "ChainedSession":
    """A :class:`ChainedSession` of ``segments`` (an iterable of models, e.g. :func:`iter_segments`),
    each session made by ``make(model)`` on one of two threads: onnxruntime optimises a graph on
    one thread and releases the GIL meanwhile, so two segments' sessions are created side by side,
    and the next segment is built here while they are."""
    from concurrent.futures import ThreadPoolExecutor

    parts, made = [], []
    with ThreadPoolExecutor(2, thread_name_prefix="qtquant-segment") as pool:
        for m in segments:
            parts.append(([i.name for i in m.graph.input], [o.name for o in m.graph.output]))
            made.append(pool.submit(make, m))
        sessions = [f.result() for f in made]
    return ChainedSession(parts, sessions)


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


def const_nodes(info, consts: set[str]) -> list[bool]:
    """Per node (``info``: (op, inputs, outputs) each): computes only from the initializers
    ``consts`` and such nodes (weights' DequantizeLinear, Constant)."""
    out, known = [], set(consts)
    for _, ins, outs in info:  # (a loop, not all() over a generator: 66,662 nodes on the 20k CNN's export)
        for x in ins:
            if x and x not in known:
                out.append(False)
                break
        else:
            known.update(outs)
            out.append(True)
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
    if not _static(shape):
        return None
    zp = inits.get(ins[2]) if len(ins) > 2 and ins[2] else None
    if zp is not None:
        elem = zp.data_type
    else:
        elem = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), onnx.TensorProto.UINT8)
    return elem, tuple(shape)


def _static(shape):
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)


def _cuts(info, order, handover_type) -> tuple[list, dict]:
    """The points of ``order`` only eligible hand-over tensors cross (see :func:`split_model`):
    [(position, crossing tensors)], and each hand-over tensor's ``handover_type`` answer.
    ``handover_type(i, op, ins, o)``: when output ``o`` of node ``i`` may cross a cut, a callable
    giving its (elem type, shape), else None."""
    producer = {o: i for i, (_, _, outs) in enumerate(info) for o in outs if o}
    uses: dict[str, int] = {}
    for _, ins, _ in info:
        for x in set(ins):
            if x in producer:
                uses[x] = uses.get(x, 0) + 1
    # eligible live tensors; (elem, shape) of every eligible tensor seen
    handover: dict[str, object] = {}
    types: dict[str, object] = {}
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
            t = handover_type(i, op, ins, o)
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
    segs = iter_segments(model, parts, shape_of)
    return None if segs is None else list(segs)


def iter_segments(model: onnx.ModelProto, parts: int, shape_of, *, cross: str = "int8"):
    """:func:`split_model`'s segments one at a time, each built when asked for (None when the
    model cannot be cut): a caller that creates a session per segment starts on the first while
    the next ones are built (Python work that onnxruntime's session creation, which releases the
    GIL, runs beside).

    ``cross="outputs"``: the cuts are where only graph outputs of a known static shape cross
    instead (calibration's augmented model, whose observed tensors are all outputs): no
    optimisation of the whole model fuses nodes across a graph output, so each segment's kernels
    are the whole model's, and so are the values."""
    g = model.graph
    nodes = list(g.node)
    if parts < 2 or has_external_data(model):
        return None
    info = [(n.op_type, tuple(n.input), tuple(n.output)) for n in nodes]  # read from the protos once
    if any(op in SUBGRAPH_OPS for op, _, _ in info) or any(
            a.type in SUBGRAPH_ATTRS
            for n in nodes if n.domain for a in n.attribute):
        return None
    inits = {t.name: t for t in g.initializer}
    graph_in = {i.name: i for i in g.input}
    graph_out = {o.name: o for o in g.output}
    const = const_nodes(info, set(inits) | {t.values.name for t in g.sparse_initializer})
    order = _order(info, const)
    if cross == "int8":
        def handover_type(i, op, ins, o):
            # Only the shape decides; the type (a zero point's, read from its proto) is read for
            # the few tensors that cross a chosen cut (value() below).
            if op != "QuantizeLinear" or o in graph_out or not _static(shape_of(ins[0])):
                return None
            return lambda: _handover_type(nodes[i], ins, inits, shape_of)
    elif cross == "outputs":
        def handover_type(i, op, ins, o):
            v = graph_out.get(o)
            shape = shape_of(o) if v is not None else None
            if not (_static(shape) and v.type.tensor_type.elem_type):
                return None
            return lambda: (v.type.tensor_type.elem_type, tuple(shape))
    else:
        raise ValueError(f"unknown cross {cross!r}")
    cuts, types = _cuts(info, order, handover_type)
    if not cuts:
        return None
    step = len(order) / parts
    chosen: list[int] = []
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
        elem, shape = types[name]()
        return onnx.helper.make_tensor_value_info(name, elem, shape)

    def build(k):
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
        # (a graph output crossing a cut is one of both segments, typed by its shape in the next)
        sg.output.extend(graph_out[o] if o in graph_out else value(o) for i in idx for o in info[i][2]
                         if o in graph_out or last_use.get(o, -1) > k)
        return m

    return (build(k) for k in range(len(bounds) - 1))
