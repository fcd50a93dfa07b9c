"""qtquant.torch on PyTorch's PT2E flow (torch.export + torchao.quantization.pt2e, CPU): the plan
quantizer, one observer per group, identical scales after QAT and convert_pt2e, the ONNX round
trip through qtquant analyze, unmapped-name reporting, and no deprecation warning from qtquant.
Skipped when torch or torchao is not installed."""

from __future__ import annotations

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PT2E tests need PyTorch (pip install -e '.[torch]')")
pytest.importorskip("torchao.quantization.pt2e", reason="PT2E tests need torchao (pip install -e '.[torch]')")

from torch import nn  # noqa: E402
from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train  # noqa: E402
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e  # noqa: E402
from torchao.quantization.pt2e.quantizer import (  # noqa: E402
    QuantizationAnnotation,
    QuantizationSpec,
    Quantizer,
)
from torchao.quantization.pt2e.fake_quantize import FakeQuantize  # noqa: E402
from torchao.quantization.pt2e.observer import MovingAverageMinMaxObserver  # noqa: E402

from torchkit import MultiScaleAttention  # noqa: E402
import qtquant  # noqa: E402
from qtquant.cli import main as cli_main  # noqa: E402
from qtquant.base.errors import PlanError, PlanWarning  # noqa: E402
from qtquant.torch import PlanQuantizer, check_shared, export_onnx  # noqa: E402

pytestmark = pytest.mark.torch


# -- a base quantizer of our own: every conv output and the cat output get their own spec ----------
# (what executorch's ARM annotator does for cat, pytorch/executorch#20600).  Not a stock one, so the
# tests do not depend on torchao's private testing module; XNNPACK's is tried below when importable.
def _act_spec(qat=True):
    obs = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver) if qat else MovingAverageMinMaxObserver
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine,
                            observer_or_fake_quant_ctr=obs)


class OwnObserverQuantizer(Quantizer):
    def annotate(self, model):
        spec = _act_spec()
        for n in model.graph.nodes:
            if n.op == "call_function" and n.target in (torch.ops.aten.conv2d.default, torch.ops.aten.cat.default):
                n.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={n.args[0]: spec} if n.target is torch.ops.aten.conv2d.default else {},
                    output_qspec=spec, _annotated=True)
        return model

    def validate(self, model):
        pass


def _xnnpack():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchao marks its copy deprecated (moved to executorch)
            from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

            return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_qat=True))
    except ImportError:
        pytest.skip("XNNPACKQuantizer is not importable from this torchao")


def _x86():
    try:
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    except ImportError:
        pytest.skip("X86InductorQuantizer is not importable from this torchao")
    return xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config(is_qat=True))


BASES = {"own": OwnObserverQuantizer, "xnnpack": _xnnpack, "x86": _x86}


def _plan(groups):
    return {"format": "qtquant-plan", "model": "m.onnx", "groups": [
        {"id": i, "members": [{"tensor": t, "producer": p, "producer_op": op} for t, p, op in g]}
        for i, g in enumerate(groups)]}


def float_names_plan():
    """Names as torch.onnx.export writes them for the float model (module scopes)."""
    k = [(f"/k_branches.{i}/conv/Conv_output_0", f"/k_branches.{i}/conv/Conv", "Conv") for i in range(3)]
    v = [(f"/v_branches.{i}/conv/Conv_output_0", f"/v_branches.{i}/conv/Conv", "Conv") for i in range(3)]
    return _plan([k + [("/Concat_output_0", "/Concat", "Concat")],
                  v + [("/Concat_1_output_0", "/Concat_1", "Concat")]])


def exported(seed=0):
    torch.manual_seed(seed)
    x = torch.randn(2, 4, 8, 8)
    return torch.export.export(MultiScaleAttention().train(), (x,)).module(), x


def qat_steps(model, steps=4, seed=1):
    """A few real QAT steps (SGD on a regression target), then the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    move_exported_model_to_train(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(2, 4, 8, 8, generator=g)
        loss = model(x).pow(2).mean()  # any loss: the tests check the quantizers, not the fit
        opt.zero_grad()
        loss.backward()
        opt.step()
    move_exported_model_to_eval(model)


def observers_of_group(prepared, names):
    """Distinct observer instances on the outputs of ``names`` and on the cat inputs they feed."""
    mods = dict(prepared.named_modules(remove_duplicate=False))
    nodes = {n.name: n for n in prepared.graph.nodes}
    found = set()
    for name in names:
        for u in nodes[name].users:
            if u.op == "call_module" and u.target.startswith("activation_post_process"):
                found.add(id(mods[u.target]))
                for c in u.users:  # an observer on the cat's input edge (a requantize) counts too
                    if c.op == "call_module" and c.target.startswith("activation_post_process"):
                        found.add(id(mods[c.target]))
    return found


GROUPS = (["conv2d_1", "conv2d_2", "conv2d_3", "cat"], ["conv2d_4", "conv2d_5", "conv2d_6", "cat_1"])


def cat_input_scales(converted) -> dict[str, list[float]]:
    """Straight from the converted graph: the scale of the dequantize feeding each cat input."""
    out = {}
    for n in converted.graph.nodes:
        if n.target is torch.ops.aten.cat.default:
            out[n.name] = [float(t.args[1]) for t in n.args[0]]
    return out


def cli_json(argv, capsys) -> dict:
    capsys.readouterr()
    assert cli_main(argv) == 0
    return json.loads(capsys.readouterr().out)


# -- one observer per group -------------------------------------------------------------------
@pytest.mark.parametrize("base", ["own", pytest.param("xnnpack", marks=pytest.mark.slow)])
def test_prepare_qat_pt2e_one_observer_per_group(base):
    gm, _ = exported()
    untied = prepare_qat_pt2e(gm, BASES[base]())
    assert all(len(observers_of_group(untied, g)) >= 3 for g in GROUPS)  # the base alone: one per branch

    gm, _ = exported()
    q = PlanQuantizer(BASES[base](), float_names_plan())
    prepared = prepare_qat_pt2e(gm, q)
    assert q.report.ok and q.report.unmapped == [], q.report.text()
    assert [g.status for g in q.report.groups] == ["tied", "tied"]
    g0 = q.report.groups[0]
    assert [m.target for m in g0.members][:3] == ["conv2d_1", "conv2d_2", "conv2d_3"]
    assert g0.members[-1].target == "cat" and g0.shared == "conv2d_1"
    for g in GROUPS:
        assert len(observers_of_group(prepared, g)) == 1, g
    assert len(observers_of_group(prepared, GROUPS[0]) | observers_of_group(prepared, GROUPS[1])) == 2


# -- QAT, convert, identical scales, ONNX round trip ---------------------------------------------
@pytest.mark.slow
def test_qat_convert_identical_scales_and_onnx_round_trip(tmp_path, capsys):
    # before: the base quantizer alone, exported and analyzed
    gm, x = exported()
    base_only = prepare_qat_pt2e(gm, OwnObserverQuantizer())
    qat_steps(base_only)
    before = tmp_path / "before.onnx"
    export_onnx(convert_pt2e(base_only), (x,), before, input_names=["x"])
    a = cli_json(["analyze", str(before), "--json", "--no-perf"], capsys)
    assert a["summary"]["concats"] == 2 and a["summary"]["rescales"] == 6
    # the plan qtquant writes for that file, read back by the plan quantizer
    plan_path = tmp_path / "plan.json"
    assert cli_main(["fix", str(before), "--auto-share", "--auto-share-max-bits-lost", "3",
                     "--plan-out", str(plan_path), "-o", str(tmp_path / "fixed.onnx"), "--no-fidelity"]) == 0
    gm, _ = exported()
    q = PlanQuantizer(OwnObserverQuantizer(), plan_path)
    prepared = prepare_qat_pt2e(gm, q)
    assert q.report.ok, q.report.text()
    assert [m.via for m in q.report.groups[0].members][0] == "module path (traced op)"
    qat_steps(prepared)
    assert check_shared(prepared, plan_path) == []
    converted = convert_pt2e(prepared)
    assert check_shared(converted, plan_path) == []
    # convert_pt2e rewrites the prepared graph in place (its observer modules stay as attributes):
    # the check reads the graph, so the old handle is checked as the converted model it now is
    assert check_shared(prepared, plan_path) == []
    scales = cat_input_scales(converted)
    assert len(scales) == 2
    for name, s in scales.items():
        assert len(set(s)) == 1, (name, s)
    assert scales["cat"][0] != scales["cat_1"][0]  # one scale per group, not one for the model
    after = tmp_path / "after.onnx"
    export_onnx(converted, (x,), after, input_names=["x"])
    b = cli_json(["analyze", str(after), "--json", "--no-perf"], capsys)
    assert b["summary"]["concats"] == 2
    assert b["summary"]["rescales"] == 0 and b["summary"]["mismatched_concats"] == 0
    # the plan was made from export_onnx's names, which carry module paths
    names = {n.name for n in __import__("onnx").load(str(after)).graph.node}
    assert {"/k_branches.0.conv/Conv", "/cat/Concat", "/cat_1/Concat"} <= names


def test_check_shared_catches_untied_converted_pt2e():
    gm, x = exported()
    untied = prepare_pt2e(gm, OwnObserverQuantizer())
    with torch.no_grad():
        untied(x)
    assert len(check_shared(untied, float_names_plan())) == 2
    bad = check_shared(convert_pt2e(untied), float_names_plan())
    assert len(bad) == 2 and all("scales differ" in p and " input 1 scale" in p for p in bad)


def test_x86_inductor_quantizer_wrapped():
    gm, x = exported()
    q = PlanQuantizer(_x86(), float_names_plan())
    prepared = prepare_qat_pt2e(gm, q)
    assert q.report.ok, q.report.text()
    for g in GROUPS:
        assert len(observers_of_group(prepared, g)) == 1
    with torch.no_grad():
        prepared(x)
    assert check_shared(convert_pt2e(prepared), float_names_plan()) == []


class ConvBnRelu(nn.Module):
    def __init__(self, gain):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()
        with torch.no_grad():
            self.conv.weight.mul_(gain)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class BnHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = ConvBnRelu(1.0), ConvBnRelu(3.0)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], 1)


@pytest.mark.slow
def test_conv_bn_relu_pattern_member_means_the_pattern_output():
    """XNNPACK annotates conv + bn + relu as one QAT pattern: a plan naming the conv means its relu's output."""
    plan = _plan([[("/a/conv/Conv_output_0", "/a/conv/Conv", "Conv"), ("/b/relu/Relu_output_0", "/b/relu/Relu",
                                                                        "Relu"), ("/Concat_output_0", "/Concat",
                                                                                  "Concat")]])
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8)
    q = PlanQuantizer(_xnnpack(), plan)
    prepared = prepare_qat_pt2e(torch.export.export(BnHeads().train(), (x,)).module(), q)
    assert q.report.ok, q.report.text()
    a, b, cat = q.report.groups[0].members
    assert a.target == "relu" and a.via.endswith("quantized at relu")
    assert b.target == "relu_1" and cat.target == "cat"
    qat_steps(prepared)
    assert check_shared(prepared, plan) == []
    converted = convert_pt2e(prepared)
    assert check_shared(converted, plan) == []
    assert len(set(cat_input_scales(converted)["cat"])) == 1


# -- unmapped names ----------------------------------------------------------------------------
def test_unmapped_names_are_reported_warned_or_refused():
    plan = float_names_plan()
    plan["groups"][0]["members"].insert(1, {"tensor": "ghost_out", "producer": "/no_such/Conv",
                                            "producer_op": "Conv"})
    gm, _ = exported()
    with pytest.raises(PlanError, match="do not map"):
        prepare_qat_pt2e(gm, PlanQuantizer(OwnObserverQuantizer(), plan, strict=True))

    gm, _ = exported()
    q = PlanQuantizer(OwnObserverQuantizer(), plan)
    with pytest.warns(PlanWarning, match="ghost_out"):
        prepared = prepare_qat_pt2e(gm, q)
    assert not q.report.ok
    [u] = q.report.unmapped
    assert u.tensor == "ghost_out" and u.group == 0 and "no_such" in u.reason and "aliases=" in u.reason
    assert [g.status for g in q.report.groups] == ["partial", "tied"]
    assert "unmapped (group 0): ghost_out" in q.report.text()
    for g in GROUPS:  # the members that map still share
        assert len(observers_of_group(prepared, g)) == 1

    gm, _ = exported()
    q = PlanQuantizer(OwnObserverQuantizer(), plan, aliases={"ghost_out": "conv2d_2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanWarning)
        prepare_qat_pt2e(gm, q)
    assert q.report.ok
    assert q.report.groups[0].members[1].via == "alias conv2d_2"


def test_plan_precision_is_reported_not_applied():
    plan = {**float_names_plan(), "version": 2, "precision": {"/k_branches.0/conv/Conv_output_0": "int16"}}
    gm, _ = exported()
    q = PlanQuantizer(OwnObserverQuantizer(), plan)
    prepare_qat_pt2e(gm, q)
    assert q.report.ok
    assert any("precision of 1 tensor(s) (int16)" in n for n in q.report.notes), q.report.notes


def test_bad_plan_is_one_plan_error(tmp_path):
    with pytest.raises(PlanError, match="not found"):
        PlanQuantizer(OwnObserverQuantizer(), tmp_path / "missing.json")


# -- no deprecation warning from qtquant's own code -----------------------------------------------
def test_pt2e_path_raises_no_deprecation_warning_from_qtquant(tmp_path):
    root = os.path.dirname(qtquant.__file__)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        import qtquant.torch as qt  # noqa: F401  (already imported: the path below is what counts)

        gm, x = exported()
        q = qt.PlanQuantizer(OwnObserverQuantizer(), float_names_plan())
        prepared = prepare_qat_pt2e(gm, q)
        with torch.no_grad():
            prepared(x)
        check_shared(prepared, float_names_plan())
        export_onnx(prepared, (x,), tmp_path / "p.onnx")
        converted = convert_pt2e(prepared)
        check_shared(converted, float_names_plan())
        export_onnx(converted, (x,), tmp_path / "c.onnx")
    ours = [i for i in w if issubclass(i.category, (DeprecationWarning, FutureWarning))
            and os.path.abspath(i.filename).startswith(root)]
    assert ours == [], [f"{i.filename}:{i.lineno}: {i.message}" for i in ours]


def test_qtquant_never_imports_the_deprecated_torch_ao_quantization():
    """qtquant's modules import nothing from torch.ao.quantization, at module or function level:
    the FX bridge only reads models the user made with it (observer classes are looked up in
    sys.modules).  torchao itself loads parts of torch.ao.quantization; that is not ours."""
    import ast
    import pathlib

    root = pathlib.Path(qtquant.__file__).parent
    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{f.relative_to(root)}:{node.lineno} {n}" for n in names if n.startswith("torch.ao")]
    assert found == []
