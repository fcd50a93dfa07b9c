"""qtquant: find and fix Concat scale mismatches in INT8-quantized ONNX models.

The core (everything outside ``qtquant.gui``) never imports Qt.
"""

__version__ = "0.1.0"

from .errors import QtQuantError  # noqa: E402
from .graph import Graph, load_graph  # noqa: E402

__all__ = ["QtQuantError", "Graph", "load_graph", "__version__"]
