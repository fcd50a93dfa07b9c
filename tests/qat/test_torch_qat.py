"""qtquant.torch on real torch.ao QAT (CPU): the README walk-through end to end, name mapping,
the unmappable-name report, eager mode and verification.  Skipped when torch is not installed."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from torch import nn  # noqa: E402
from torch.ao.quantization import get_default_qat_qconfig_mapping  # noqa: E402
from torch.ao.quantization.backend_config import (  # noqa: E402
    BackendPatternConfig,
    ObservationType,
    get_native_backend_config,
)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_qat_fx  # noqa: E402

from torchkit import Branch, MultiScaleAttention  # noqa: E402
from qtquant.cli import main as cli_main  # noqa: E402
from qtquant.base.errors import PlanError  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.torch import apply_plan, check_shared, export_onnx  # noqa: E402

pytestmark = pytest.mark.torch

CAT_WARNING = "must share the same quantization parameters"


# -- the motivating block is tests/torchkit.py's MultiScaleAttention -----------------------------
def own_cat_observer_backend():
    """torch.ao's native backend config, except that torch.cat keeps its own output observer.

    Stock torch.ao FX already makes a cat's inputs and output share the first input's
    observer; backends that follow Horizon's convention (and eager-mode FloatFunctional.cat)
    give each branch and the cat their own observer.  That is the case the plan fixes.
    """
    bc = get_native_backend_config()
    cat = bc._pattern_complex_format_to_config[torch.cat]
    bc.set_backend_pattern_config(BackendPatternConfig(torch.cat).set_observation_type(
        ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT).set_dtype_configs(cat.dtype_configs))
    return bc


def calibrate(model, batches=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(2, 4, 8, 8, generator=g))


def prepared(backend_config=None, seed=0):
    torch.manual_seed(seed)
    m = MultiScaleAttention().train()
    x = torch.randn(2, 4, 8, 8)
    kw = {"backend_config": backend_config} if backend_config is not None else {}
    return prepare_qat_fx(m, get_default_qat_qconfig_mapping("x86"), example_inputs=(x,), **kw), x


def cli_json(argv, capsys) -> dict:
    capsys.readouterr()
    assert cli_main(argv) == 0
    return json.loads(capsys.readouterr().out)


def concat_qdq_scales(path) -> dict[str, list[float]]:
    """Read straight from the file, without qtquant: the DequantizeLinear scale feeding each
    Concat input, and the QuantizeLinear scale of its output (last entry)."""
    m = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    inits.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
                  if n.op_type == "Constant" and n.attribute[0].name == "value"})
    prod = {o: n for n in m.graph.node for o in n.output}
    cons = {}
    for n in m.graph.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    out = {}
    for n in m.graph.node:
        if n.op_type != "Concat":
            continue
        scales = []
        for i in n.input:
            dq = prod[i]
            assert dq.op_type == "DequantizeLinear"
            scales.append(float(inits[dq.input[1]].reshape(-1)[0]))
        q = next(c for c in cons[n.output[0]] if c.op_type == "QuantizeLinear")
        scales.append(float(inits[q.input[1]].reshape(-1)[0]))
        out[n.name] = scales
    return out


# -- the README walk-through ----------------------------------------------------------------
@pytest.mark.slow
def test_walkthrough_fx_qat_end_to_end(tmp_path, capsys):
    bc = own_cat_observer_backend()
    # 1-2. an FX-prepared QAT model, calibrated
    model, x = prepared(bc)
    calibrate(model)
    # 3. export to ONNX (QDQ)
    before = tmp_path / "before.onnx"
    export_onnx(model, (x,), before, input_names=["x"])
    # 4. qtquant analyze shows the mismatches
    a = cli_json(["analyze", str(before), "--json", "--no-perf"], capsys)
    assert a["summary"]["concats"] == 2
    assert a["summary"]["mismatched_concats"] == 2 and a["summary"]["rescales"] == 6
    # 5. qtquant fix --auto-share --plan-out plan.json
    plan_path = tmp_path / "plan.json"
    assert cli_main(["fix", str(before), "--auto-share", "--auto-share-max-bits-lost", "3",
                     "--plan-out", str(plan_path), "-o", str(tmp_path / "fixed.onnx"), "--no-fidelity"]) == 0
    plan = json.loads(plan_path.read_text())
    assert [len(g["members"]) for g in plan["groups"]] == [4, 4]  # 3 branches + the Concat output
    assert check_shared(model, plan)  # not shared yet: scales differ

    # Without the plan, convert_fx lowers torch.cat to a quantized cat that silently reuses
    # the first input's scale and requantizes the others (torch warns at run time).
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        convert_fx(copy.deepcopy(model).eval(), backend_config=bc)(x)
    assert any(CAT_WARNING in str(i.message) for i in w)

    # 6. apply_plan
    report = apply_plan(model, plan_path)
    assert report.ok and report.unmapped == []
    assert [g.status for g in report.groups] == ["tied", "tied"]
    assert report.tied == 6
    g0 = report.groups[0]
    assert [m.target for m in g0.members] == ["k_branches.0.conv", "k_branches.1.conv", "k_branches.2.conv", "cat"]
    shared = [model.get_submodule(m.observer) for m in g0.members]
    assert all(s is shared[0] for s in shared)  # ONE FakeQuantize instance
    # 7. calibrate again: one set of statistics per group
    calibrate(model, seed=2)
    assert check_shared(model, plan) == []
    # 8. convert
    converted = convert_fx(copy.deepcopy(model).eval(), backend_config=bc)
    assert check_shared(converted, plan, example_inputs=(x,)) == []
    for grp in ("k_branches", "v_branches"):
        scales = {(converted.get_submodule(f"{grp}.{i}.conv").scale,
                   converted.get_submodule(f"{grp}.{i}.conv").zero_point) for i in range(3)}
        assert len(scales) == 1, scales
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        converted(x)
    assert not any(CAT_WARNING in str(i.message) for i in w)
    # 9. export to ONNX again
    after = tmp_path / "after.onnx"
    onx = export_onnx(converted, (x,), after, input_names=["x"])
    onnx.checker.check_model(onx, full_check=True)
    # 10. qtquant analyze: 0 rescales at the shared Concats
    b = cli_json(["analyze", str(after), "--json", "--no-perf"], capsys)
    assert b["summary"]["concats"] == 2
    assert b["summary"]["rescales"] == 0 and b["summary"]["mismatched_concats"] == 0
    per_concat = concat_qdq_scales(after)
    assert len(per_concat) == 2
    for name, scales in per_concat.items():
        assert max(scales) == pytest.approx(min(scales), rel=1e-6), (name, scales)
    # the fake-quant model (what QAT trains) exports with the same shared scales
    session = open_model(export_onnx(model, (x,), tmp_path / "after_qat.onnx") and tmp_path / "after_qat.onnx")
    assert [c.rescales for c in session.concats()] == [0, 0]


def test_export_prepared_model_reads_back_with_fx_names(tmp_path):
    model, x = prepared(own_cat_observer_backend())
    calibrate(model, batches=2)
    path = tmp_path / "m.onnx"
    onx = export_onnx(model, (x,), path)
    onnx.checker.check_model(onx, full_check=True)
    names = {n.name for n in onx.graph.node}
    # producers of observed tensors are named after their FX node / module path
    assert {"/k_branches.0.conv/Conv", "/cat/Concat", "/cat_1/Concat", "/mul/Mul"} <= names
    # weight QuantizeLinear is folded: weights are int8 initializers behind a DequantizeLinear
    assert sum(n.op_type == "QuantizeLinear" for n in onx.graph.node) == 14
    s = open_model(path)
    assert [c.rescales for c in s.concats()] == [3, 3]
    assert model.training  # the model itself was left alone


def _plan(groups, scheme="uint8-asym"):
    return {"format": "qtquant-plan", "version": 1, "model": "m.onnx", "policy": "union", "scheme": scheme,
            "groups": [{"id": i, "scale": 0.1, "zero_point": 0, "concats": [], "members": [
                {"tensor": t, "producer": p, "producer_op": op, "bits_lost": 0.0} for t, p, op in g]}
                for i, g in enumerate(groups)]}


def _float_export_names_plan():
    """Names as torch.onnx.export writes them for the *float* model (full module scopes)."""
    k = [(f"/k_branches.{i}/conv/Conv_output_0", f"/k_branches.{i}/conv/Conv", "Conv") for i in range(3)]
    v = [(f"/v_branches.{i}/conv/Conv_output_0", f"/v_branches.{i}/conv/Conv", "Conv") for i in range(3)]
    return _plan([k + [("/Concat_output_0", "/Concat", "Concat")], v + [("/Concat_1_output_0", "/Concat_1",
                                                                         "Concat")]])


def test_float_export_names_map_and_concat_found_by_structure():
    model, _ = prepared(own_cat_observer_backend())
    report = apply_plan(model, _float_export_names_plan())
    assert report.ok, report.text()
    g0, g1 = report.groups
    assert [m.via for m in g0.members] == ["module path"] * 3 + ["Concat fed by the group"]
    assert g1.members[-1].target == "cat_1"
    calibrate(model, batches=2)
    assert check_shared(model, _float_export_names_plan()) == []


def test_unmappable_names_are_reported_not_guessed():
    model, _ = prepared(own_cat_observer_backend())
    plan = _float_export_names_plan()
    plan["groups"][0]["members"].insert(1, {"tensor": "ghost_out", "producer": "/no_such/Conv",
                                            "producer_op": "Conv"})
    # an FX-export name whose scope lost the module path: '/conv_1/Conv' is not a module
    plan["groups"][1]["members"] = [{"tensor": "/conv_3/Conv_output_0", "producer": "/conv_3/Conv",
                                     "producer_op": "Conv"},
                                    {"tensor": "/v_branches.1/conv/Conv_output_0",
                                     "producer": "/v_branches.1/conv/Conv", "producer_op": "Conv"}]
    before = {n: id(m) for n, m in model.named_modules()}
    with pytest.raises(PlanError, match="do not map"):
        apply_plan(model, plan, strict=True)
    assert {n: id(m) for n, m in model.named_modules()} == before  # strict: nothing changed

    report = apply_plan(model, plan)
    assert not report.ok
    bad = {u.tensor: u for u in report.unmapped}
    assert set(bad) == {"ghost_out", "/conv_3/Conv_output_0"}
    assert "no_such" in bad["ghost_out"].reason and "aliases=" in bad["ghost_out"].reason
    assert bad["/conv_3/Conv_output_0"].group == 1
    # the rest of group 0 is still tied; group 1 has one mappable member left: nothing tied
    assert report.groups[0].status == "partial" and len(report.groups[0].members) == 4
    assert report.groups[1].status == "skipped"
    assert "ghost_out" in report.text() and "unmapped" in report.text()
    # an alias fixes the name the mapper could not
    fixed = apply_plan(model, plan, aliases={"/conv_3/Conv": "v_branches.0.conv",
                                             "ghost_out": "k_branches.1.conv"})
    assert fixed.ok and fixed.groups[1].status == "tied"
    assert [m.via for m in fixed.groups[1].members][0] == "alias v_branches.0.conv"


def test_stock_fx_already_shares_cat_inputs():
    model, _ = prepared()  # stock backend config: cat shares its first input's observer
    report = apply_plan(model, _float_export_names_plan())
    assert report.ok
    assert [g.status for g in report.groups] == ["already-shared", "already-shared"]
    assert report.tied == 0


class _Fused(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x))) * 2


class _Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": _Fused(), "b": _Fused()})

    def forward(self, x):
        return torch.cat([self.heads["a"](x), self.heads["b"](x)], 1)


def test_partial_scopes_fused_modules_and_traced_ops():
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    model = prepare_qat_fx(_Heads().train(), get_default_qat_qconfig_mapping("x86"), example_inputs=(x,),
                           backend_config=own_cat_observer_backend())
    # ModuleDict levels drop out of ONNX scopes ('/a/Mul' for heads.a); relu was fused into conv
    plan = _plan([[("/a/Mul_output_0", "/a/Mul", "Mul"),
                   ("/b/relu/Relu_output_0", "/b/relu/Relu", "Relu")]])
    report = apply_plan(model, plan)
    assert report.ok, report.text()
    a, b = report.groups[0].members
    assert a.target == "mul" and "partial scope" in a.via
    assert b.target == "heads.b.conv" and b.via == "fused into heads.b.conv"


class _EagerMSA(nn.Module):
    """Eager-mode QAT, the horizon_plugin_pytorch convention: FloatFunctional cats."""

    def __init__(self):
        super().__init__()
        from torch.ao.nn.quantized import FloatFunctional
        from torch.ao.quantization import DeQuantStub, QuantStub

        self.quant, self.dequant = QuantStub(), DeQuantStub()
        self.k_branches = nn.ModuleList([Branch(4, k, g) for k, g in ((3, 1.0), (7, 2.0), (9, 3.0))])
        self.k_cat = FloatFunctional()

    def forward(self, x):
        x = self.quant(x)
        return self.dequant(self.k_cat.cat([b(x) for b in self.k_branches], dim=1))


def test_eager_mode_activation_post_process_attributes():
    from torch.ao.quantization import convert, get_default_qat_qconfig, prepare_qat

    torch.manual_seed(0)
    m = _EagerMSA().train()
    m.qconfig = get_default_qat_qconfig("x86")
    prepare_qat(m, inplace=True)
    plan = _plan([[(f"/k_branches.{i}/conv/Conv_output_0", f"/k_branches.{i}/conv/Conv", "Conv") for i in range(3)]
                  + [("/Concat_output_0", "/Concat", "Concat")]])
    report = apply_plan(m, plan)
    # a FloatFunctional.cat is not a module call: ONNX puts it at the root scope
    assert [u.tensor for u in report.unmapped] == ["/Concat_output_0"]
    report = apply_plan(m, plan, aliases={"/Concat": "k_cat"})
    assert report.ok, report.text()
    assert report.groups[0].members[0].observer == "k_branches.0.conv.activation_post_process"
    calibrate(m, batches=2)
    assert check_shared(m, plan, aliases={"/Concat": "k_cat"}) == []
    q = convert(m.eval())
    scales = {q.k_branches[i].conv.scale for i in range(3)} | {q.k_cat.scale}
    assert len(scales) == 1


def test_refuses_fixed_qparams_and_bad_plans(tmp_path):
    model, _ = prepared(own_cat_observer_backend())
    plan = _plan([[("/q/Conv_output_0", "/q/Conv", "Conv"), ("sig", "/sigmoid/Sigmoid", "Sigmoid")]])
    report = apply_plan(model, plan)
    assert report.groups[0].status == "refused" and "fixed qparams" in report.groups[0].notes[0]
    assert not report.ok
    with pytest.raises(PlanError, match="newer"):
        apply_plan(model, {**plan, "version": 99})
    with pytest.raises(PlanError, match="not a qtquant plan"):
        apply_plan(model, {**plan, "format": "something"})
    with pytest.raises(PlanError, match="not found"):
        apply_plan(model, tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PlanError, match="bad.json is not valid JSON"):
        apply_plan(model, tmp_path / "bad.json")
    with pytest.raises(PlanError, match="no observers"):
        apply_plan(MultiScaleAttention(), plan)


def test_check_shared_reports_uncalibrated_and_needs_inputs_for_converted():
    bc = own_cat_observer_backend()
    model, x = prepared(bc)
    plan = _float_export_names_plan()
    apply_plan(model, plan)
    problems = check_shared(model, plan)
    assert problems and all("calibrate first" in p for p in problems)
    calibrate(model, batches=2)
    converted = convert_fx(copy.deepcopy(model).eval(), backend_config=bc)
    assert "example_inputs" in check_shared(converted, plan)[0]
    assert check_shared(converted, plan, example_inputs=(x,)) == []
    # the same check catches a converted model whose branches were never tied
    untied, _ = prepared(bc)
    calibrate(untied, batches=2)
    bad = check_shared(convert_fx(untied.eval(), backend_config=bc), plan, example_inputs=(x,))
    assert len(bad) == 2 and all("scales differ" in p for p in bad)


def test_union_merge_widens_shared_range():
    model, _ = prepared(own_cat_observer_backend())
    calibrate(model, batches=2)
    ranges = [(model.get_submodule(f"activation_post_process_{i}").activation_post_process.min_val.item(),
               model.get_submodule(f"activation_post_process_{i}").activation_post_process.max_val.item())
              for i in (2, 3, 4, 5)]
    apply_plan(model, _float_export_names_plan())
    shared = model.get_submodule("activation_post_process_2")
    assert shared.activation_post_process.min_val.item() == min(r[0] for r in ranges)
    assert shared.activation_post_process.max_val.item() == max(r[1] for r in ranges)
    s, _ = shared.calculate_qparams()
    assert float(shared.scale) == pytest.approx(float(s))
    assert np.isfinite(float(shared.scale))


def test_plan_object_from_qtquant_plan_and_ptq_observers(tmp_path):
    """A qtquant.files.plan.Plan object works like its JSON; PTQ (prepare_fx, MinMax observers) too."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    from qtquant.files.plan import load_plan

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_float_export_names_plan()))
    bc = own_cat_observer_backend()
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8)
    model = prepare_fx(MultiScaleAttention().eval(), get_default_qconfig_mapping("x86"), example_inputs=(x,),
                       backend_config=bc)
    report = apply_plan(model, load_plan(path))
    assert report.ok and report.tied == 6, report.text()
    calibrate(model, batches=2)
    assert check_shared(model, path) == []
    converted = convert_fx(model, backend_config=bc)
    assert check_shared(converted, path, example_inputs=(x,)) == []
    s = open_model(export_onnx(converted, (x,), tmp_path / "ptq.onnx") and tmp_path / "ptq.onnx")
    assert [c.rescales for c in s.concats()] == [0, 0]


def test_union_updates_track_the_union_not_the_mean():
    """A shared moving-average fake-quant called once per member drifts toward the mean of the
    members' ranges; union_updates makes it follow the union (the plan's policy)."""
    bc = own_cat_observer_backend()
    ranges = {}
    for mode in ("separate", "union", "per-call"):
        model, _ = prepared(bc)
        if mode != "separate":
            report = apply_plan(model, _float_export_names_plan(), union_updates=(mode == "union"))
            assert report.ok
            assert any("once per step" in n for n in report.groups[0].notes) == (mode == "union")
        calibrate(model, batches=6)
        obs = [model.get_submodule(f"activation_post_process_{i}").activation_post_process for i in (2, 3, 4)]
        ranges[mode] = (min(o.min_val.item() for o in obs), max(o.max_val.item() for o in obs))
        if mode != "separate":
            assert check_shared(model, _float_export_names_plan()) == []
    lo, hi = ranges["separate"]  # the union of the branches' own moving-average ranges
    width = hi - lo
    assert abs(ranges["union"][0] - lo) < 0.05 * width and abs(ranges["union"][1] - hi) < 0.05 * width
    per_call = ranges["per-call"][1] - ranges["per-call"][0]
    assert per_call < 0.8 * width  # plain sharing clips the widest branch
