"""qtquant for PyTorch QAT: take a sharing plan back to the training code.

Needs the optional extra ``pip install qtquant[torch]`` (torch and torchao); the rest of qtquant
never imports torch.  Two paths (docs/qat.md says when to use which):

- PT2E (``torch.export`` + ``torchao.quantization.pt2e``, PyTorch's supported flow):
  :class:`PlanQuantizer` wraps any PT2E ``Quantizer`` so each plan group shares one
  observer through ``SharedQuantizationSpec``.  Imports torchao only when first used.
- FX / eager torch.ao (``prepare_qat_fx``, ``prepare_qat``; Horizon's horizon_plugin_pytorch):
  :func:`apply_plan` ties each plan group's members to ONE FakeQuantize/observer instance.

For both: :func:`check_shared` lists groups whose scales are not identical (prepared or
converted model) and :func:`export_onnx` writes a prepared or converted model as a QDQ ONNX
file qtquant reads, with producer names that map back to the model.
"""

from .apply import ApplyReport, GroupResult, TiedMember, Unmapped, apply_plan, check_shared
from .export import export_onnx, tidy_qdq

__all__ = ["PlanQuantizer", "apply_plan", "check_shared", "export_onnx", "tidy_qdq", "ApplyReport", "GroupResult",
           "TiedMember", "Unmapped"]


def __getattr__(name):
    # torchao is imported on first use of the PT2E path, so the FX path works without it
    if name == "PlanQuantizer":
        from .pt2e import PlanQuantizer

        return PlanQuantizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
