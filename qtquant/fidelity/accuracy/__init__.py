"""The accuracy debugger: where accuracy goes, and what keeping a node in higher
precision buys.  See docs/accuracy.md.

- :mod:`.check`: the bench (check samples, float reference, QDQ variants measured like the
  fidelity check);
- :mod:`.tensors`: cumulative and local SQNR per quantized tensor;
- :mod:`.sensitivity`: the two-pass ranking;
- :mod:`.report`: ``qtquant accuracy``'s report;
- :mod:`.share`: auto-share by measured accuracy (``--max-sqnr-drop``) and its trade-off curve.
"""

from .check import Bench, Variant
from .report import AccuracyReport, analyze_accuracy
from .sensitivity import DEFAULT_TOP, Sensitivity
from .tensors import TensorError, tensor_errors

__all__ = ["Bench", "Variant", "AccuracyReport", "analyze_accuracy", "Sensitivity", "TensorError",
           "tensor_errors", "DEFAULT_TOP"]
