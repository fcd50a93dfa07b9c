"""The per-edit re-run of the exported model gives what a fresh default session of the whole
exported model gives, bit for bit, while running only the part an edit changed."""

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builders import RESCALING_MARCH, save, yolov8n
from qtquant.app import Options, open_model
from qtquant.app.commands import CommandStack, SetPolicyCommand, SetPrecisionCommand
from qtquant.quant.autoshare import auto_share
from qtquant.cli import main
from qtquant.quant.concat import concat_members
from qtquant.export.qdq import build_qdq_model
from qtquant.fidelity.measure import checked_outputs_of, measure_session, run_feeds
from qtquant.quant.groups import share, unshare
from qtquant.export import qdq
from qtquant.export.rewrite import MEMO_MIN_BYTES, ValueMemo, raw_value_key
from qtquant.runs.fingerprints import Fingerprinter, fingerprints, value_key
from qtquant.runs.incremental import IncrementalRunner
from qtquant.runs.programs import Walk, moved_domains
from qtquant.files.plan import save_plan
from qtquant.base.vocab import Policy, Scheme


@pytest.fixture(scope="module")
def yolo_path(tmp_path_factory):
    return save(yolov8n(size=64, nc=4), tmp_path_factory.mktemp("yolo") / "yolo.onnx")


@pytest.fixture
def yolo(yolo_path):
    s = open_model(yolo_path, options=Options(march=RESCALING_MARCH))  # the shares below change scales there
    s.run_calibration()
    return s


def _consumer_concat(graph, tensor):
    return next(n for n in graph.consumers(tensor) if n.op_type == "Concat").name


def _head(graph):
    """The first detection level's box and class convs (they meet in a Concat)."""
    concats = [n for n in graph.nodes.values() if n.op_type == "Concat"]
    lvl = next(n for n in concats if all(graph.producer(i) is not None and graph.producer(i).op_type == "Conv"
                                         for i in n.inputs))
    return list(lvl.inputs)


def _fresh(session, outs, feeds):
    """A fresh default session of the whole exported model: what ships."""
    model = build_qdq_model(session).model
    return model, run_feeds(model, session.graph.base_dir, outs, feeds, None, "default")


def _moved(session):
    dm = session.domains
    return lambda: build_qdq_model(session, moved_domains(dm)).model


def _equal(a, b, outs):
    return len(a) == len(b) and all(np.array_equal(x[o], y[o]) and x[o].dtype == y[o].dtype
                                    for x, y in zip(a, b) for o in outs)


def _first_run(session):
    """(outputs, check feeds, a runner after its first run, the exported model, a fresh session's
    outputs); the first run equals the fresh session's bit for bit."""
    outs = checked_outputs_of(session.graph)
    feeds = list(session.calibration.holdout)
    runner = IncrementalRunner(feeds)
    model, ref = _fresh(session, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(session)), ref, outs)
    return outs, feeds, runner, model, ref


def test_each_edit_reruns_only_what_changed_and_matches_a_fresh_session_bit_for_bit(yolo):
    g = yolo.graph
    outs, feeds, runner, model, ref = _first_run(yolo)
    how, first, total = runner.last
    assert how == "optimised program" and first == total  # the first run is the whole program

    head = _head(g)
    mid = concat_members(g, _consumer_concat(g, g.nodes[next(n for n in g.nodes if g.nodes[n].op_type == "Resize")]
                                             .outputs[0]))
    ran = {}
    policy = yolo.options.policy

    def edit(label, fn):
        fn()
        yolo.groups_changed()
        model, ref = _fresh(yolo, outs, feeds)
        got = runner.run(model, outs, moved=_moved(yolo))
        assert _equal(got, ref, outs), label
        ran[label] = runner.last

    edit("head", lambda: share(yolo, head))
    edit("mid", lambda: share(yolo, mid))
    edit("policy", lambda: yolo.set_options(policy=Policy.MAX_INPUT))
    edit("auto", lambda: auto_share(yolo, 1.0))
    edit("undo head", lambda: unshare(yolo, yolo.groups.group_of(head[0]).id))
    edit("int16", lambda: yolo.set_precision([mid[0]], "int16"))
    edit("int16, unshare mid", lambda: unshare(yolo, yolo.groups.group_of(mid[0]).id))
    edit("int16, then a share", lambda: share(yolo, head))
    # A head edit re-runs the head only; a mid-network Concat re-runs from there on; a precision
    # change is another structure: met the first time, it runs in a fresh default session (its
    # program would cost more than that); met again, it gets a program of its own, which runs
    # whole once and then only what an edit changed.
    assert all(ran[k][0] == "optimised program" for k in ("head", "mid", "policy", "auto", "undo head")), ran
    assert 0 < ran["head"][1] < ran["mid"][1] < total
    assert ran["int16"][0] == "fresh default session" and ran["int16"][1] == ran["int16"][2]
    assert ran["int16, unshare mid"][0] == "optimised program"
    assert ran["int16, unshare mid"][1] == ran["int16, unshare mid"][2]  # a new program runs whole
    assert ran["int16, then a share"][0] == "optimised program"
    assert 0 < ran["int16, then a share"][1] < ran["int16, then a share"][2]
    # Back to a model measured before: only the float tail after the last int8 tensor runs.
    yolo.groups.clear()
    yolo.set_options(policy=policy)
    yolo.set_precision([mid[0]], "int8")
    yolo.groups_changed()
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
    assert runner.last[0] == "optimised program" and runner.last[1] < ran["head"][1]



def test_a_new_structure_gets_its_program_in_the_next_check_that_meets_it(yolo):
    """The models of one check (token ``check``) that meet a structure no earlier check met run in
    fresh default sessions; a later check makes its program.  Outputs are a fresh session's either way."""
    g = yolo.graph
    outs, feeds, runner, model, ref = _first_run(yolo)
    head = _head(g)
    yolo.set_precision([head[0]], "int16")
    yolo.groups_changed()
    first_check = object()
    for members in ([], head):  # the check's two models: the unedited domains, then the edit's
        if members:
            share(yolo, members)
            yolo.groups_changed()
        model, ref = _fresh(yolo, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(yolo), check=first_check), ref, outs)
        assert runner.last[0] == "fresh default session"
    unshare(yolo, yolo.groups.group_of(head[0]).id)
    yolo.groups_changed()
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(yolo), check=object()), ref, outs)
    assert runner.last[0] == "optimised program" and len(runner._programs) == 2

def test_a_small_budget_only_costs_runs(yolo):
    outs = checked_outputs_of(yolo.graph)
    feeds = list(yolo.calibration.holdout)
    runner = IncrementalRunner(feeds, keep_bytes=1, const_bytes=1)  # nothing kept: every run is the whole model
    for members in ([], _head(yolo.graph)):
        if members:
            share(yolo, members)
        model, ref = _fresh(yolo, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
        assert runner.last[1] == runner.last[2]


def test_fingerprints_follow_values_not_names():
    from onnx import TensorProto, helper

    def model(scale, name):
        nodes = [helper.make_node("QuantizeLinear", ["x", name, "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", name, "z"], ["y"])]
        inits = [helper.make_tensor(name, TensorProto.FLOAT, [], [scale]),
                 helper.make_tensor("z", TensorProto.INT8, [], [0])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    a, b, c = fingerprints(model(0.5, "s")), fingerprints(model(0.5, "other")), fingerprints(model(0.25, "s"))
    assert a["q"] == b["q"] and a["y"] == b["y"]
    assert a["q"] != c["q"] and a["x"] == c["x"]
    m = model(0.5, "s")
    m.graph.node.reverse()  # not topological: not followed
    assert fingerprints(m) is None


def test_the_warm_check_after_edits_gives_the_figures_of_analyze_on_the_exported_plan(yolo, yolo_path, tmp_path,
                                                                                     capsys):
    g = yolo.graph
    measure_session(yolo, follow_edits=True)
    head = _head(g)
    share(yolo, head)
    measure_session(yolo, follow_edits=True)
    auto_share(yolo, 1.0)
    measure_session(yolo, follow_edits=True)
    unshare(yolo, yolo.groups.group_of(head[0]).id)
    warm = measure_session(yolo, follow_edits=True)  # caches warm: a part of the program re-ran
    plan = save_plan(yolo, tmp_path / "plan.json")
    assert main(["analyze", yolo_path, "--no-perf", "--plan", str(plan), "--json", "--march", RESCALING_MARCH]) == 0
    doc = json.loads(capsys.readouterr().out)
    cold = doc["summary"]["fidelity"]
    mine = json.loads(json.dumps(warm.to_dict()))
    assert mine["samples"] == cold["samples"]
    assert mine["outputs"] == cold["outputs"]  # every output, slice and 'before' figure, exactly
    # (group ids are numbered afresh when a plan is applied)
    assert [{**m, "group": None} for m in mine["members"]] == [{**m, "group": None} for m in cold["members"]]


@pytest.mark.int8host  # on AVX2, precision mode's u8 copies of moved values (programs.S8_TO_U8) are followed
@pytest.mark.parametrize("scheme", list(Scheme))
def test_both_schemes_on_the_detector(det_path, scheme):
    s = open_model(det_path, options=replace(Options(), scheme=scheme))
    s.run_calibration()
    outs, feeds = checked_outputs_of(s.graph), list(s.calibration.holdout)
    runner = IncrementalRunner(feeds)
    for members in ([], ["box", "score"], ["c0_out", "c1_out", "cat1_out"]):
        if members:
            share(s, members)
        model, ref = _fresh(s, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(s)), ref, outs)
    if scheme is Scheme.SYMMETRIC_INT8:
        assert runner.last[0] == "optimised program" and runner.last[1] < runner.last[2]
    # (asymmetric: moving the zero points moves onnxruntime's program here, so the edits run in a
    # fresh default session; exact either way)


def test_what_the_program_cannot_follow_runs_in_a_fresh_default_session(yolo, monkeypatch):
    import qtquant.runs.incremental as inc

    monkeypatch.setattr(inc, "MAX_NODES", 10)
    outs, feeds = checked_outputs_of(yolo.graph), list(yolo.calibration.holdout)
    runner = IncrementalRunner(feeds)
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
    assert runner.last[0] == "fresh default session"
    monkeypatch.setattr(inc, "MAX_NODES", 10 ** 6)
    runner = IncrementalRunner(feeds)
    runner.run(model, outs)  # no way to move the values: the program is not reused after an edit
    assert runner.last[0] == "optimised program"
    share(yolo, _head(yolo.graph))
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs), ref, outs)
    assert runner.last[0] == "fresh default session"


def test_the_runner_keeps_only_one_byte_hand_overs_and_asks_for_nothing_else(yolo, monkeypatch):
    # Asking onnxruntime for every tensor of the program keeps them all alive over the check
    # samples (ppocrv4_det at 640x640 peaked at 10 GB): only int8/uint8 tensors are kept, within budget.
    import qtquant.runs.incremental as inc

    asked = []
    real = inc.run_session

    def spy(sess, names, feeds, cancel, **kw):
        asked.append({a.name: a.type for a in sess.get_outputs()})
        return real(sess, names, feeds, cancel, **kw)

    monkeypatch.setattr(inc, "run_session", spy)
    outs, feeds, runner, model, ref = _first_run(yolo)
    assert asked and runner._kept
    extra = {n: t for n, t in asked[-1].items() if n not in outs}
    assert extra and set(extra.values()) <= {"tensor(uint8)", "tensor(int8)", "tensor(bool)"}
    assert runner._bytes <= runner.keep_bytes

    # A tight budget keeps less, and the figures stay those of a fresh session.
    small = IncrementalRunner(feeds, keep_bytes=4096)
    assert _equal(small.run(model, outs, moved=_moved(yolo)), ref, outs)
    assert small._bytes <= 4096


def test_a_check_no_edit_follows_runs_fresh_default_sessions_with_the_same_figures(yolo_path):
    from qtquant.fidelity.checkruns import RUNS

    figs = {}
    for follow in (False, True):
        s = open_model(yolo_path, options=Options(march=RESCALING_MARCH))
        s.run_calibration()
        share(s, _head(s.graph))
        figs[follow] = measure_session(s, follow_edits=follow).to_dict()
        runner = s.graph.derived.get(RUNS).runner
        # qtquant analyze / fix: no runner, so no second optimisation for its reuse check
        assert (runner is not None) is follow
    assert figs[False] == figs[True]


def test_domains_with_equal_scales_are_kept_apart_so_an_edit_can_move_one(tmp_path):
    """Two branches with the same weights get the same scale; onnxruntime's ConstantSharing merges
    their scale initializers in the program.  The runner keeps them apart (the moved model's
    program), so sharing one branch into a Concat re-runs the program, bit-identical to a fresh
    default session, instead of falling back to one."""
    from onnx import TensorProto, helper

    from builders import conv_node
    from qtquant.runs.programs import _optimise

    inits = []
    nodes = [conv_node(inits, "x", 3, 4, 3, "twin_a", gain=2.0, seed=5),
             conv_node(inits, "x", 3, 4, 3, "twin_b", gain=2.0, seed=5),  # the same weights: the same range
             conv_node(inits, "x", 3, 4, 3, "other", gain=9.0, seed=1)]
    nodes += [helper.make_node("Concat", ["twin_a_out", "other_out"], ["cat_a"], name="cat_a", axis=1),
              helper.make_node("Add", ["twin_b_out", "twin_b_out"], ["y_b"], name="dbl")]
    g = helper.make_graph(nodes, "twins", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("cat_a", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("y_b", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    s = open_model(save(m, tmp_path / "twins.onnx"), options=Options(calib=replace(Options().calib, count=4)))
    s.run_calibration()
    assert s.domains.scale_of("twin_a_out") == s.domains.scale_of("twin_b_out")
    outs, feeds, runner, model, ref = _first_run(s)
    (p,) = runner._programs.values()
    plain = {t.name for t in _optimise(model).graph.initializer}  # a default session's program: merged
    assert p.reusable and len({t.name for t in p.optimised.graph.initializer}) > len(plain)  # kept apart
    share(s, ["twin_a_out", "other_out"])
    s.groups_changed()
    model, ref = _fresh(s, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(s)), ref, outs)
    assert runner.last[0] == "optimised program"


def test_an_edit_that_splits_a_domain_of_the_first_run_is_followed(yolo):
    """The file holds one scale initializer per domain (and one zero point per value): when the
    first run's model shares a domain that a later edit splits (an ungroup), the slots of that one
    initializer take two values.  The program keeps one initializer per slot, so the split still
    re-runs the program from where it changed, bit-identical to a fresh default session."""
    head = _head(yolo.graph)
    share(yolo, head)
    yolo.groups_changed()
    outs, feeds, runner, model, ref = _first_run(yolo)
    unshare(yolo, yolo.groups.group_of(head[0]).id)
    yolo.groups_changed()
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
    how, ran, total = runner.last
    assert how == "optimised program" and 0 < ran < total


def test_a_check_says_where_its_time_went_outside_its_figures(yolo):
    """Fidelity.trace: ms per step of the check (what benchmarks/gui_refresh.py breaks an edit's
    refresh into), never part of the report, its JSON or its equality."""
    measure_session(yolo, follow_edits=True)
    share(yolo, _head(yolo.graph))
    fid = measure_session(yolo, follow_edits=True)
    assert {"build", "program", "prepare", "session", "run", "figures", "members", "total"} <= set(fid.trace)
    assert all(v >= 0 for v in fid.trace.values())
    assert "trace" not in json.dumps(fid.to_dict())
    other = measure_session(yolo, follow_edits=True)  # answered from the cache: other times
    assert other == fid and "build" not in other.trace
    # A precision change runs the baseline and the edit on a pool thread: their steps still count.
    # (A structure the check meets first runs in fresh default sessions: no program step.)
    yolo.set_precision([_head(yolo.graph)[0]], "int16")
    wide = measure_session(yolo, follow_edits=True)
    assert wide.trace.get("session", 0) > 0 and wide.trace.get("run", 0) > 0 and "program" not in wide.trace


def test_dequantized_weights_are_computed_once_for_every_sample_and_edit(yolo, monkeypatch):
    """onnxruntime's program keeps a DequantizeLinear for each weight that does not fuse into an
    int8 kernel; its output is the same for every sample, so it is computed once, in a session of
    its own, and fed to the re-runs (bit-identical: onnxruntime's kernel computes it)."""
    import qtquant.runs.incremental as inc

    made = []
    real = inc._disabled_session

    def spy(model):
        made.append(onnx.ModelProto.FromString(model.SerializeToString()))
        return real(model)

    monkeypatch.setattr(inc, "_disabled_session", spy)
    outs, feeds, runner, model, ref = _first_run(yolo)
    prog = next(iter(runner._programs.values()))
    assert prog.consts  # the test model has weight DequantizeLinears outside int8 kernels
    consts = [m for m in made if not m.graph.input]
    assert len(consts) == 1 and {o.name for o in consts[0].graph.output} <= prog.consts
    # Kept apart from the int8 hand-overs, one array for all samples, in a budget of their own.
    assert runner._const_kept and runner._const_bytes == sum(a.nbytes for a in runner._const_kept.values())
    assert all(v[0].dtype.itemsize == 1 for v in runner._kept.values())

    del made[:]
    share(yolo, _head(yolo.graph))
    yolo.groups_changed()
    model, ref = _fresh(yolo, outs, feeds)
    assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
    # The edit moved activation scales only: no weight is dequantized again.
    assert made and not any(not m.graph.input for m in made)
    ran = [m for m in made if m.graph.input][-1]
    assert not any(n.input and all(i in prog.consts or i in prog.inits for i in n.input if i)
                   and n.output[0] in prog.consts for n in ran.graph.node)


def test_constants_have_a_budget_of_their_own(yolo):
    """Over the budget the oldest constants go, and what is not kept is computed again for the
    run that needs it (once, not per sample): the figures stay a fresh session's."""
    outs = checked_outputs_of(yolo.graph)
    feeds = list(yolo.calibration.holdout)
    runner = IncrementalRunner(feeds, const_bytes=4096)
    for members in ([], _head(yolo.graph)):
        if members:
            share(yolo, members)
            yolo.groups_changed()
        model, ref = _fresh(yolo, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
        assert runner._const_bytes <= 4096


# What a recording build hands the check (QdqBuild.made): the same walk as reading the model back,
# the same bytes as a plain build; an edit's fingerprints from the program's own ones.

def _check(session, **kw):
    b = qdq.build_qdq_model(session, record=True, **kw)
    plain = qdq.build_qdq_model(session, **kw)
    assert plain.made is None  # an export keeps no second reference to its initializers
    assert b.model.SerializeToString() == plain.model.SerializeToString()
    got, read = Walk.of_build(b), Walk(b.model)
    assert b.made is not None
    assert got.key == read.key and got.inputs == read.inputs and got.followable == read.followable
    assert got.inits.keys() == read.inits.keys()
    assert all(got.inits[n].SerializeToString() == read.inits[n].SerializeToString() for n in read.inits)
    assert got.keys and all(value_key(read.inits[n]) == k for n, k in got.keys.items() if n in read.inits)
    return b


def test_a_recording_build_walks_as_its_model_reads_and_writes_the_same_bytes(yolo):
    first = _check(yolo)
    _check(yolo, float_tensors=frozenset(yolo.graph.outputs[:1]))
    g = share(yolo, _head(yolo.graph))
    shared = _check(yolo)
    # the edit moved values, not the structure: the same key, other value keys for the moved scales
    w0, w1 = Walk.of_build(first), Walk.of_build(shared)
    assert w0.key == w1.key and w0.keys != w1.keys
    st = CommandStack(yolo)
    st.push(SetPolicyCommand("max-input"))
    _check(yolo)
    st.push(SetPrecisionCommand.for_domain(yolo, _head(yolo.graph)[0], "int16"))
    _check(yolo)  # opset 21, another structure
    st.push(SetPrecisionCommand.for_domain(yolo, _head(yolo.graph)[1], "float"))
    _check(yolo)
    st.undo()
    st.undo()
    st.undo()
    unshare(yolo, g.id)
    again = _check(yolo)
    assert again.model.SerializeToString() == first.model.SerializeToString()


def test_reused_weights_give_the_bytes_of_a_fresh_build_after_an_edit(yolo):
    qdq.build_qdq_model(yolo, record=True)  # fills the memo
    share(yolo, _head(yolo.graph))
    warm = qdq.build_qdq_model(yolo, record=True).model.SerializeToString()
    yolo.graph.derived.drop(qdq.BASES)  # a fresh base, shell and memo
    cold = qdq.build_qdq_model(yolo).model.SerializeToString()
    assert warm == cold


def test_the_value_memo_returns_an_arrays_initializer_and_key_and_keeps_to_its_budget():
    memo = ValueMemo(budget=3 * (2 * MEMO_MIN_BYTES + 64))
    a = np.arange(MEMO_MIN_BYTES, dtype=np.int8)
    t, key = memo.init(a, TensorProto.INT8, "w")
    assert t.SerializeToString() == onnx.TensorProto(name="w", data_type=TensorProto.INT8, dims=a.shape,
                                                     raw_data=a.tobytes()).SerializeToString()
    assert key == raw_value_key(TensorProto.INT8, a.shape, a.tobytes())
    assert memo.init(a, TensorProto.INT8, "w")[0] is t  # the same array and name: nothing made again
    assert memo.init(a, TensorProto.INT8, "w_1")[0].name == "w_1"
    b = a.copy()  # equal values, another array: its own entry
    assert memo.init(b, TensorProto.INT8, "w")[0] is not t
    small = np.zeros(4, np.int8)
    st, sk = memo.init(small, TensorProto.INT8, "z")
    assert st.raw_data == small.tobytes() and sk == raw_value_key(TensorProto.INT8, (4,), small.tobytes())
    for _ in range(4):  # newer ones push the oldest out
        memo.init(np.ones(MEMO_MIN_BYTES, np.int8), TensorProto.INT8, "o")
    assert memo.bytes <= memo.budget
    again = memo.init(a, TensorProto.INT8, "w")[0]
    assert again is not t and again.SerializeToString() == t.SerializeToString()  # dropped, made afresh


def _chain():
    nodes, inits = [], [helper.make_tensor("z", TensorProto.INT8, [], [0])]
    x = "x"
    for k in range(4):
        inits.append(helper.make_tensor(f"s{k}", TensorProto.FLOAT, [], [0.5 + k]))
        nodes.append(helper.make_node("QuantizeLinear", [x, f"s{k}", "z"], [f"q{k}"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"q{k}", f"s{k}", "z"], [f"d{k}"]))
        nodes.append(helper.make_node("Relu", [f"d{k}"], [f"r{k}"]))
        x = f"r{k}"
    side = helper.make_node("Neg", ["x"], ["n"])
    g = helper.make_graph(nodes + [side], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("n", TensorProto.FLOAT, [2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_an_edits_fingerprints_from_the_programs_own_equal_computing_them_all():
    m = _chain()
    fp = Fingerprinter(m)
    own = fp._full({})
    assert fp() == own
    for values in ({"s2": helper.make_tensor("s2", TensorProto.FLOAT, [], [9.0])},
                   {"s0": helper.make_tensor("other", TensorProto.FLOAT, [], [0.5])},  # the same value
                   {"s1": helper.make_tensor("s1", TensorProto.FLOAT, [], [7.0]),
                    "z": helper.make_tensor("z", TensorProto.INT8, [], [3])},
                   {"d1": helper.make_tensor("d1", TensorProto.FLOAT, [2], [1.0, 2.0])}):  # not an initializer
        got = fp(values)
        assert got == fp._full(values)
    moved = fp({"s2": helper.make_tensor("s2", TensorProto.FLOAT, [], [9.0])})
    assert moved["r1"] == own["r1"] and moved["n"] == own["n"]
    assert moved["q2"] != own["q2"] and moved["r3"] != own["r3"]
    m.graph.node.reverse()  # not topological: not followed, with or without values
    fp = Fingerprinter(m)
    assert fp() is None and fp({"s2": helper.make_tensor("s2", TensorProto.FLOAT, [], [9.0])}) is None


def test_a_build_without_its_record_is_walked_from_the_model(yolo):
    b = qdq.build_qdq_model(yolo)
    assert b.made is None
    w = Walk.of_build(b)
    assert w.key == Walk(b.model).key and isinstance(b.model, onnx.ModelProto)


def _copied_sub_model(prog, nodes, inits):
    """What the runner made before it joined serialized pieces: ``nodes`` of ``prog`` and the
    initializers among ``inits`` they read, copied into a ModelProto."""
    sub = onnx.ModelProto()
    sub.ir_version = prog.ir_version
    sub.opset_import.extend(prog.opset_import)
    sub.graph.name = prog.graph.name
    sub.graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    sub.graph.initializer.extend(inits[i] for i in used if i in inits)
    return sub


def test_a_re_runs_model_from_serialized_pieces_is_the_model_of_those_nodes(yolo):
    """The re-run's model is joined from each node and initializer serialized once per program: it
    parses to what copying them into a ModelProto gives (bar the initializers' order)."""
    import qtquant.runs.incremental as inc

    outs, feeds, runner, model, ref = _first_run(yolo)
    p = next(iter(runner._programs.values()))
    g = p.optimised.graph
    nodes = list(g.node)[len(g.node) // 3:]
    name = next(iter(p.inits))
    moved = onnx.TensorProto()
    moved.CopyFrom(p.inits[name])
    moved.name = name
    moved.raw_data = bytes(len(moved.raw_data)) if moved.raw_data else b""
    for values in ({}, {name: moved}):
        got = inc._pieces(p).sub_model(nodes, values)
        got.input.append(g.input[0])
        got.output = [onnx.ValueInfoProto(name=nodes[-1].output[0])]
        want = _copied_sub_model(p.optimised, nodes, {**p.inits, **values})
        want.graph.input.append(g.input[0])
        want.graph.output.append(onnx.ValueInfoProto(name=nodes[-1].output[0]))
        parsed = onnx.ModelProto.FromString(got.SerializeToString())
        for m in (parsed, want):
            inits = sorted(m.graph.initializer, key=lambda t: t.name)
            del m.graph.initializer[:]
            m.graph.initializer.extend(inits)
        assert parsed.SerializeToString() == want.SerializeToString()
    assert inc._pieces(p) is inc._pieces(p)  # once per program


def test_a_reruns_session_waits_for_its_release(yolo):
    """The re-run's session is destroyed by release_sessions (the fidelity worker's child calls it
    once its reply is sent), or when the next re-run retires its own: one waits at most."""
    import weakref

    from qtquant.runs import incremental

    outs, feeds, runner, model, ref = _first_run(yolo)
    incremental.release_sessions()
    made = []
    real = incremental._disabled_session

    def spy(m):
        s = real(m)
        made.append(weakref.ref(s))
        return s

    incremental._disabled_session = spy
    try:
        share(yolo, _head(yolo.graph))
        model, ref = _fresh(yolo, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
        assert made and made[-1]() is not None and incremental._retired == [made[-1]()]
        first = made[-1]
        unshare(yolo, yolo.groups.groups[0].id)
        model, ref = _fresh(yolo, outs, feeds)
        assert _equal(runner.run(model, outs, moved=_moved(yolo)), ref, outs)
        assert first() is None and len(incremental._retired) == incremental.RETIRED_MAX
        incremental.release_sessions()
        assert all(w() is None for w in made)
    finally:
        incremental._disabled_session = real
