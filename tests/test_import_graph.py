"""The package's import structure: a light root, no import cycles, no private names across modules."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_qtquant_loads_no_onnx():
    # The root's names load on first use: `import qtquant` (for __version__, or as the parent of a
    # submodule) must not pay for onnx, onnxruntime or numpy.
    code = ("import sys, qtquant; heavy = [m for m in ('onnx', 'onnxruntime', 'numpy') if m in sys.modules]; "
            "print(','.join(heavy)); qtquant.Graph, qtquant.QtQuantError, qtquant.open_model")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
