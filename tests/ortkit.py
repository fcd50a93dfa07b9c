"""onnxruntime session options as the tests need them."""

from __future__ import annotations

import onnxruntime as ort


def precise_options(level=None) -> ort.SessionOptions:
    """qtquant's own session options (default, or ``level``): int8 products accumulate exactly on any
    CPU (:mod:`qtquant.model.int8path`), so a test's SQNR is the export's and not the CPU's: on AVX2 without
    VNNI the default u8s8 kernels add byte products in saturating 16-bit pairs (a fused Gemm of
    test_export_bias read 26.0 dB there against 39.8 dB exact, test_export's uint8 detector 15.25
    against 31.15 dB)."""
    from qtquant.model.runtime import quiet_options

    so = quiet_options()
    if level is not None:
        so.graph_optimization_level = level
    return so


class RandomReader:
    """onnxruntime's CalibrationDataReader: ``n`` seeded random images for input ``x`` (1x3x16x16)."""

    def __init__(self, n: int = 4, shape=(1, 3, 16, 16), seed: int = 0):
        import numpy as np

        rng = np.random.default_rng(seed)
        self.data = iter([{"x": rng.random(shape, dtype=np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def ort_qdq_file(src: str, dst: str, *, symmetric: bool = True, per_channel: bool = True, n: int = 4,
                 shape=(1, 3, 16, 16)) -> str:
    """``src`` quantized by onnxruntime's ``quantize_static`` (QDQ, int8 weights) into ``dst``: a QDQ file
    made by another tool, as a user brings one (``shape``: its input ``x``'s)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(src, dst, RandomReader(n, shape), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=per_channel,
                    extra_options={"ActivationSymmetric": symmetric})
    return dst
