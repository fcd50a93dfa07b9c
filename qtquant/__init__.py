"""qtquant: find and fix Concat scale mismatches in INT8-quantized ONNX models.

The core (everything outside ``qtquant.gui``) never imports Qt.  ``qtquant.open_model(path)``
is the one way to open a model, float or QDQ-quantized: it returns a session.
"""

__version__ = "0.1.0"

from .base.errors import QtQuantError  # noqa: E402
from .model.graph import Graph, load_graph  # noqa: E402,F401  (load_graph: float files only, kept for old callers)

__all__ = ["QtQuantError", "Graph", "open_model", "__version__"]


def __getattr__(name):
    # Lazily: the application layer pulls in calibration and onnxruntime, which
    # ``import qtquant`` (for __version__, say) should not pay for.
    if name == "open_model":
        from .app import open_model

        return open_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
