"""onnxruntime session options as the tests need them."""

from __future__ import annotations

import onnxruntime as ort


def precise_options(level=None) -> ort.SessionOptions:
    """Default options (or ``level``) with onnxruntime's precision mode for x86 int8 kernels, for an
    SQNR that is the export's and not the CPU's: on AVX2 without VNNI the u8s8 kernels add byte
    products in saturating 16-bit pairs (a fused Gemm of test_export_bias read 26.0 dB there against
    39.8 dB with the mode, test_export's uint8 detector 15.25 against 31.15 dB; the same with
    optimisations off)."""
    so = ort.SessionOptions()
    if level is not None:
        so.graph_optimization_level = level
    so.add_session_config_entry("session.x64quantprecision", "1")
    return so
