"""A recording build after an edit is the last full build with its scales, zero points and biases
made again (qtquant.export.rescale): the same bytes, records and walk as a full build, over a
sequence of edits; what it cannot reproduce is built in full."""

from dataclasses import replace

import numpy as np
import pytest

from builders import save, yolov8n
from qtquant.app import Options, open_model
from qtquant.app.commands import CommandStack, SetPolicyCommand, SetPrecisionCommand
from qtquant.quant.autoshare import auto_share
from qtquant.quant.concat import concat_members
from qtquant.export import qdq, rescale
from qtquant.runs.fingerprints import value_key
from qtquant.quant.groups import share, unshare
from qtquant.runs.programs import Walk
from qtquant.base.vocab import Scheme


@pytest.fixture(scope="module")
def yolo_path(tmp_path_factory):
    return save(yolov8n(size=64, nc=4), tmp_path_factory.mktemp("yolo") / "yolo.onnx")


def _open(path, scheme=Scheme.SYMMETRIC_INT8):
    s = open_model(path, options=replace(Options(), scheme=scheme))
    s.run_calibration()
    return s


def _full(session, **kw):
    """A full recording build, leaving the kept bases as they were."""
    kept = session.graph.derived.get(rescale.BASES)
    saved = dict(kept)
    kept.clear()
    try:
        return qdq.build_qdq_model(session, record=True, **kw)
    finally:
        kept.clear()
        kept.update(saved)


def _last(graph):
    """The basis kept last for ``graph`` (None if none)."""
    kept = graph.derived.get(rescale.BASES)
    return list(kept.values())[-1] if kept else None


def _same(a, b):
    assert a.model.SerializeToString() == b.model.SerializeToString()
    for f in ("activations", "domains", "weights", "biases", "constants", "int16", "float_kept", "notes",
              "scale_of", "bias_adjusted", "clipped", "cut"):
        assert getattr(a, f) == getattr(b, f), f
    wa, wb, read = Walk.of_build(a), Walk.of_build(b), Walk(b.model)
    assert wa.key == wb.key == read.key and wa.inputs == wb.inputs == read.inputs
    assert wa.inits.keys() == read.inits.keys()
    assert all(wa.inits[n].SerializeToString() == read.inits[n].SerializeToString() for n in read.inits)
    assert wa.keys == wb.keys and all(value_key(read.inits[n]) == k for n, k in wa.keys.items())


def _patched(session, **kw):
    """A recording build that must come from the kept basis (not built in full)."""
    before = dict(session.graph.derived.get(rescale.BASES))
    b = qdq.build_qdq_model(session, record=True, **kw)
    after = session.graph.derived.get(rescale.BASES)
    # a full build would have kept a basis of its own
    assert before and after.keys() == before.keys() and all(after[k] is v for k, v in before.items())
    return b


def _heads(g):
    concats = [n for n in g.nodes.values() if n.op_type == "Concat"]
    return [list(c.inputs) for c in concats if all(g.producer(i) is not None and g.producer(i).op_type == "Conv"
                                                    for i in c.inputs)]


def _mid(g):
    resize = next(n for n in g.nodes.values() if n.op_type == "Resize")
    return concat_members(g, next(n for n in g.consumers(resize.outputs[0]) if n.op_type == "Concat").name)


@pytest.mark.parametrize("scheme", list(Scheme))
def test_a_patched_build_is_a_full_builds_bytes_over_a_sequence_of_edits(yolo_path, scheme):
    s = _open(yolo_path, scheme)
    g = s.graph
    first = qdq.build_qdq_model(s, record=True)
    assert _last(g).build is first
    st = CommandStack(s)
    head, mid = _heads(g)[0], _mid(g)
    steps = [lambda: share(s, head), lambda: share(s, mid), lambda: st.push(SetPolicyCommand("max-input")),
             lambda: auto_share(s, 1.0), lambda: unshare(s, s.groups.group_of(head[0]).id), st.undo,
             lambda: s.groups.clear()]
    for step in steps:
        step()
        s.groups_changed()
        got = _patched(s)
        _same(got, _full(s))
        # (and the plain export's bytes: what `qtquant fix` writes)
        assert got.model.SerializeToString() == qdq.build_qdq_model(s).model.SerializeToString()
    # back to the first state: the first build's bytes
    assert _patched(s).model.SerializeToString() == first.model.SerializeToString()


def test_moved_zero_points_and_float_outputs_patch_too(yolo_path):
    s = _open(yolo_path, Scheme.ASYMMETRIC_UINT8)
    outs = frozenset(s.graph.outputs)
    qdq.build_qdq_model(s, record=True, float_tensors=outs)
    for members in _heads(s.graph)[:2]:
        share(s, members)
        _same(_patched(s, float_tensors=outs), _full(s, float_tensors=outs))


def test_what_a_patch_cannot_reproduce_is_built_in_full(yolo_path, monkeypatch):
    s = _open(yolo_path)
    g = s.graph
    qdq.build_qdq_model(s, record=True)
    basis = _last(g)
    # other float tensors: another key, built in full (and kept as a basis of its own)
    outs = frozenset(g.outputs[:1])
    b = qdq.build_qdq_model(s, record=True, float_tensors=outs)
    assert _last(g).build is b and _last(g) is not basis and len(g.derived.get(rescale.BASES)) == 2
    # int16: built in full, no basis kept for it (a patch does not make int16 scales), the int8 one left
    st = CommandStack(s)
    st.push(SetPrecisionCommand.for_domain(s, _heads(g)[0][0], "int16"))
    n = len(g.derived.get(rescale.BASES))
    b = qdq.build_qdq_model(s, record=True)
    assert b.int16 and len(g.derived.get(rescale.BASES)) == n
    _same(b, _full(s))
    st.undo()
    share(s, _heads(g)[1])  # the edit after the undo is patched from the int8 basis
    _same(_patched(s), _full(s))
    # a weight scale the bias fit would raise: built in full
    share(s, _heads(g)[0])
    monkeypatch.setattr(rescale, "quantize_weight", lambda graph, w, axis: (None, np.zeros(()), None))
    b = qdq.build_qdq_model(s, record=True)
    assert _last(g) is not basis and _last(g).build is b
    monkeypatch.undo()
    _same(b, _full(s))
    # a model whose own names could meet the exporter's qtq_ names keeps no basis
    last = _last(g)
    rescale.remember(g, last, {"qtq_d7_scale_of_the_user"})
    assert rescale.basis_of(g, last.key) is None


def test_an_export_keeps_no_basis_and_does_not_use_one(yolo_path):
    s = _open(yolo_path)
    g = s.graph
    g.derived.drop(rescale.BASES)
    qdq.build_qdq_model(s)
    assert not g.derived.get(rescale.BASES)
    qdq.build_qdq_model(s, record=True)
    basis = _last(g)
    share(s, _heads(g)[0])
    plain = qdq.build_qdq_model(s)
    assert plain.made is None and _last(g) is basis  # built in full, the basis left alone
    assert plain.model.SerializeToString() == _patched(s).model.SerializeToString()
