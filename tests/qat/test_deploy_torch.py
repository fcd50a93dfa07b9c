"""The x5-qat module against a torch model whose module names match its ONNX export.

horizon_plugin_pytorch is NOT installed here: the module's plugin calls are not exercised.  What is:
its data and name mapping on the real model (qtquant's resolver), its fixed-scale qconfigs built
with torch.ao's FixedQParamsFakeQuantize standing in for the plugin's FixedScaleObserver, and the
same plan applied through qtquant's own FX bridge, which gives equal scales inside each group."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.ao.quantization import FixedQParamsFakeQuantize, QConfig  # noqa: E402
from torch.ao.quantization import get_default_qat_qconfig_mapping  # noqa: E402
from torch.ao.quantization.quantize_fx import prepare_qat_fx  # noqa: E402

from builders import RESCALING_MARCH  # noqa: E402
from torchkit import MultiScaleAttention  # noqa: E402
from qtquant.app import Options, open_model  # noqa: E402
from qtquant.quant.autoshare import auto_share  # noqa: E402
from qtquant.deploy import deploy  # noqa: E402
from qtquant.files.plan import plan_dict  # noqa: E402
from qtquant.torch import apply_plan, check_shared  # noqa: E402
from test_torch_qat import calibrate, own_cat_observer_backend  # noqa: E402

pytestmark = pytest.mark.torch


def _float_export(tmp_path):
    torch.manual_seed(0)
    model = MultiScaleAttention().eval()
    x = torch.randn(1, 4, 8, 8)
    path = tmp_path / "msa.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False, opset_version=17)
    return model, x, path


def _module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_x5_qat_module_maps_every_member_and_groups_share_one_scale(tmp_path):
    assert importlib.util.find_spec("horizon_plugin_pytorch") is None, "the plugin is not installed here"
    model, x, path = _float_export(tmp_path)
    session = open_model(path, options=Options(march=RESCALING_MARCH))
    session.run_calibration()
    auto_share(session, 8)
    assert len(session.groups) == 2
    res = deploy(session, "x5-qat", tmp_path / "out")
    mod = _module(next(p for p in res.files if p.suffix == ".py"))
    with pytest.raises(ImportError, match="horizon_plugin_pytorch is not installed"):
        mod.plugin_qconfig(0.1, "qint8")

    # every group member maps to a module of the model or is listed unmapped, with the reason
    mapped, unmapped = mod.module_names(model)
    members = {m["tensor"] for g in mod.GROUPS for m in g["members"]}
    assert members <= set(mapped) | {u["tensor"] for u in unmapped}
    modules = dict(model.named_modules())
    assert all(name in modules for name in mapped.values())
    assert sorted(mapped.values()) == [f"{b}_branches.{i}.conv" for b in "kv" for i in range(3)]
    assert {u["tensor"] for u in unmapped} == {"/Concat_output_0", "/Concat_1_output_0"}  # the cats: no module
    assert all("FloatFunctional" in u["reason"] for u in unmapped), unmapped

    # the module's qconfigs, built with torch.ao's fixed-qparams fake-quant in the plugin's place
    def fixed(scale, dtype):
        assert dtype == "qint8"
        return QConfig(activation=FixedQParamsFakeQuantize.with_args(
            observer=torch.ao.quantization.observer.FixedQParamsObserver.with_args(
                # (quint8 at zero point 128: the symmetric int8 grid as torch.ao's native backend takes it)
                scale=scale, zero_point=128, dtype=torch.quint8, quant_min=0, quant_max=255)),
            weight=torch.ao.quantization.default_weight_fake_quant)

    qd = mod.qconfig_dict(model, make=fixed)
    qmap = get_default_qat_qconfig_mapping("x86")
    for name, qc in qd["module_name"]:
        qmap.set_module_name(name, qc)
    prepared = prepare_qat_fx(model.train(), qmap, example_inputs=(x,), backend_config=own_cat_observer_backend())
    got = {}
    for n in prepared.graph.nodes:
        if n.op == "call_module" and n.target in mapped.values():
            obs = [u for u in n.users if u.op == "call_module" and "activation_post_process" in u.target]
            got[n.target] = float(prepared.get_submodule(obs[0].target).scale)
    for g in mod.GROUPS:
        names = [mapped[m["tensor"]] for m in g["members"] if m["tensor"] in mapped]
        assert names and all(got[n] == pytest.approx(g["scale"], rel=1e-6) for n in names), (got, g["scale"])

    # the same plan through qtquant's own FX bridge: equal scales inside each group
    torch.manual_seed(0)
    qat = prepare_qat_fx(MultiScaleAttention().train(), get_default_qat_qconfig_mapping("x86"),
                         example_inputs=(x,), backend_config=own_cat_observer_backend())
    plan = plan_dict(session)
    report = apply_plan(qat, plan)
    assert report.ok, report.text()
    calibrate(qat)
    assert check_shared(qat, plan) == []
