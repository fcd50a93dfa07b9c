"""qtquant for PyTorch QAT: take a sharing plan back to the training code.

Needs the optional extra ``pip install qtquant[torch]``; the rest of qtquant never imports torch.

- :func:`apply_plan` ties each plan group's members to ONE FakeQuantize/observer instance in a
  torch.ao prepared model (FX ``prepare_qat_fx``/``prepare_fx``, or eager ``prepare_qat``).
- :func:`check_shared` lists groups whose scales are not identical (prepared or converted model).
- :func:`export_onnx` writes a prepared or converted model as a QDQ ONNX file qtquant reads,
  with producer names that map back to the model.
"""

from .apply import ApplyReport, GroupResult, TiedMember, Unmapped, apply_plan, check_shared
from .export import export_onnx, tidy_qdq

__all__ = ["apply_plan", "check_shared", "export_onnx", "tidy_qdq", "ApplyReport", "GroupResult",
           "TiedMember", "Unmapped"]
