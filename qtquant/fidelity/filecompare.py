"""The written file against the QDQ file it was made from, both run as a user runs them.

A QDQ file brings its own scales and no float original, so ``qtquant fix`` on one had no accuracy
figure at all.  Yet the written file is not the input with a few scales shared: the export follows
the target's scheme (int8 weights per output channel, no Q/DQ inside what the target fuses), so
even with no edit the two files compute different numbers (onnxruntime's ``quantize_static``
YOLOv8n, per-tensor weights: 32.1-32.9 dB apart on photos).  What the user needs to know is how
far the file that ships is from the file they had: each output of the written file, measured
against the input file's, on the samples ``--calib`` names (synthetic data unless it names real ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..base.errors import ModelError
from .metrics import Figure, sums_for
from ..model.qdqcheck import breaches_reason
from ..base.vocab import SYNTHETIC

__all__ = ["FileComparison", "QdqCounts", "qdq_counts", "compare_with_input"]

# What the comparison's sentences call the three programs
INPUT_FILE, WRITTEN_FILE, FLOAT_VIEW = "the input file", "the written file", "the input file's float view"


@dataclass
class FileComparison:
    """Each output of the written file against the input file's, over the same samples."""

    samples: int
    data: str  # where the samples came from (SYNTHETIC, a folder ...)
    figures: dict[str, Figure] = field(default_factory=dict)  # output -> written against input
    # output -> ((lo, hi) of the input file's values, (lo, hi) of the written file's), over the samples
    ranges: dict[str, tuple] = field(default_factory=dict)
    # Both files against the input file's float view (its weights dequantized, no Q/DQ), on the same
    # samples: SQNR against a quantized reference is lopsided (a file that lost its signal makes any
    # other look far off), so each file's own distance to one float reference goes beside it.
    input_vs_float: dict[str, Figure] = field(default_factory=dict)
    written_vs_float: dict[str, Figure] = field(default_factory=dict)
    input_counts: "QdqCounts | None" = None  # what the input file quantizes
    written_counts: "QdqCounts | None" = None
    skipped: str = ""  # why no comparison ran (a cut graph, outputs renamed ...)

    @property
    def synthetic(self) -> bool:
        return self.data == SYNTHETIC

    def text(self) -> list[str]:
        if self.skipped or self.input_counts is None or self.written_counts is None:
            return [f"against the input file: not measured ({self.skipped or 'no counts'})"]
        basis = (f"{self.samples} {'synthetic ' if self.synthetic else ''}sample{'s' if self.samples != 1 else ''}"
                 + ("" if self.synthetic else f" of {self.data}"))
        lines = [f"against the input file (the QDQ file as it was, run in onnxruntime), on {basis}; it quantized "
                 f"{self.input_counts.text()}, the written file {self.written_counts.text()} (the target's scheme: "
                 "weights per output channel, no Q/DQ inside what it fuses):"]
        for name, f in self.figures.items():
            (a, b), (c, d) = self.ranges[name]
            spans = f"input file's values in [{a:.4g}, {b:.4g}], the written file's in [{c:.4g}, {d:.4g}]"
            lines.append(f"  {name}: {f.word} ({spans})" if f.blank is not None else f"  {name}: {f.sqnr_db:.2f} dB "
                         f"SQNR, cosine {f.cosine:.5f}, max abs difference {f.max_abs:.4g} ({spans})")
            if name in self.input_vs_float:
                lines.append(f"  {' ' * len(name)}  against the input file's float view: the input file "
                             f"{_db(self.input_vs_float[name])}, the written file {_db(self.written_vs_float[name])}")
        if self.synthetic:
            lines.append("  (synthetic samples show how far the files are apart, not accuracy on real inputs: "
                         "give --calib with representative data)")
        return lines

    def to_dict(self) -> dict:
        return {"samples": self.samples, "data": self.data, "skipped": self.skipped or None,
                "input": self.input_counts.__dict__ if self.input_counts else None,
                "written": self.written_counts.__dict__ if self.written_counts else None,
                "outputs": {k: {**f.to_dict(), "input_range": list(self.ranges[k][0]),
                                "written_range": list(self.ranges[k][1]),
                                "input_vs_float_view": self.input_vs_float[k].to_dict() if k in self.input_vs_float
                                else None,
                                "written_vs_float_view": self.written_vs_float[k].to_dict()
                                if k in self.written_vs_float else None} for k, f in self.figures.items()}}


def _db(f: Figure) -> str:
    return f.word if f.blank is not None else f"{f.sqnr_db:.2f} dB"


@dataclass
class QdqCounts:
    """What a QDQ file quantizes, counted from its nodes."""

    activations: int = 0  # tensors computed at run time with a QuantizeLinear
    weights: int = 0  # 8-bit (or 16-bit) weights, stored so or quantized by a Q/DQ chain
    per_channel: int = 0  # of those, with a scale per channel
    biases: int = 0  # int32 biases

    def text(self) -> str:
        return (f"{self.activations} activations, {self.weights} weights ({self.per_channel} per channel) and "
                f"{self.biases} int32 biases")


def qdq_counts(path: Path) -> QdqCounts:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    constant = set(inits) | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    c = QdqCounts()
    seen = set()
    for n in g.node:
        if len(n.input) < 2:
            continue
        x, scale = n.input[0], inits.get(n.input[1])
        per_channel = scale is not None and len(scale.dims) > 0 and any(d > 1 for d in scale.dims)
        if n.op_type == "QuantizeLinear":
            if x in constant:  # ModelOpt's layout: a float weight quantized by its chain
                c.weights += x not in seen
                c.per_channel += x not in seen and per_channel
                seen.add(x)
            else:
                c.activations += 1
        elif n.op_type == "DequantizeLinear" and x in inits and x not in seen:
            seen.add(x)
            if inits[x].data_type == onnx.TensorProto.INT32:
                c.biases += 1
            else:
                c.weights += 1
                c.per_channel += per_channel
    return c


def _session(model):
    """An onnxruntime session of ``model`` (a file's path, or the float view's proto), quietly."""
    from ..model.runtime import ort_session, quiet_options

    return ort_session(model, quiet_options())


def _feed_for(sess, feed: dict) -> dict:
    """``feed`` cast to each input's declared element type (a float16 input file: float16)."""
    out = {}
    for i in sess.get_inputs():
        x = feed[i.name]
        want = {"tensor(float16)": np.float16, "tensor(double)": np.float64}.get(i.type)
        out[i.name] = x.astype(want) if want is not None and x.dtype != want else x
    return out


def compare_with_input(session, written: Path, config=None) -> FileComparison:
    """``written`` (the export of ``session``) against the QDQ file the session opened, on
    ``config``'s samples (the session's calibration settings by default: source, count, seed,
    preprocessing)."""
    from ..calib.sources import open_source
    from ..model.runtime import input_specs

    graph = session.graph
    config = config if config is not None else session.options.calib
    comp = FileComparison(0, str(config.source), input_counts=qdq_counts(graph.path),
                          written_counts=qdq_counts(Path(written)))
    if graph.cut:
        comp.skipped = "the written graph is cut (--cut): its outputs are not the input file's"
        return comp
    try:
        before = _session(graph.path)
    except ModelError as e:  # (onnxruntime's quantizer can write a file its runtime refuses: axis before opset 13)
        info = graph.qdq_info
        if info is not None and info.breaches:  # the known cause, said in words
            why = breaches_reason(info.opset, info.breaches)
        else:
            why = str(e).removeprefix("onnxruntime cannot run this model: ")
        comp.skipped = f"onnxruntime cannot run the input file: {why}"
        return comp
    after = _session(Path(written))
    view = _view_session(graph)
    names = [o.name for o in after.get_outputs() if o.name in {x.name for x in before.get_outputs()}]
    if not names:
        comp.skipped = "the files share no output name"
        return comp
    source = open_source(input_specs(graph), config)
    refs = source.refs[:max(1, config.count)]
    sums, to_view = {}, {}  # made at the first sample: integer outputs are compared by agreement
    spans = {n: [np.inf, -np.inf] for n in names}  # the written file's (ErrorSums keeps the reference's)
    for _, feed in source.feeds(source.load_order(refs)):
        ref = dict(zip(names, before.run(names, _feed_for(before, feed))))
        got = dict(zip(names, after.run(names, _feed_for(after, feed))))
        flt = dict(zip(names, view.run(names, _feed_for(view, feed)))) if view is not None else {}
        for n in names:
            if n not in sums:
                sums[n] = sums_for(ref[n])
                if view is not None:
                    to_view[n] = (sums_for(ref[n]), sums_for(ref[n]))
            r, g = np.asarray(ref[n]), np.asarray(got[n])  # (each accumulator reads them at its own precision)
            sums[n].add(r, g)
            if n in to_view:
                to_view[n][0].add(flt[n], r)
                to_view[n][1].add(flt[n], g)
            if g.size:
                spans[n] = [min(spans[n][0], float(g.min())), max(spans[n][1], float(g.max()))]
        comp.samples += 1
    for n, s in sums.items():
        comp.figures[n] = s.figure(n, None, INPUT_FILE, WRITTEN_FILE)
        comp.ranges[n] = ((s.lo, s.hi), tuple(spans[n]))
        if n in to_view:
            comp.input_vs_float[n] = to_view[n][0].figure(n, None, FLOAT_VIEW, INPUT_FILE)
            comp.written_vs_float[n] = to_view[n][1].figure(n, None, FLOAT_VIEW, WRITTEN_FILE)
    return comp



def _view_session(graph):
    """A session of the file's float view (the graph's model: Q/DQ stripped, weights dequantized), or
    None where onnxruntime cannot make one of it."""
    try:
        return _session(graph.model)
    except ModelError:
        return None
