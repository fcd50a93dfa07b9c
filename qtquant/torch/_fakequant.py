"""Fake quantization with fixed qparams: the one module every export path swaps in, because the
TorchScript ONNX exporter writes it as a QuantizeLinear + DequantizeLinear pair."""

from __future__ import annotations

import torch

__all__ = ["FrozenFakeQuant", "INT8_DTYPES", "onnx_range"]

# torch.ao observers use the quantized dtypes, torchao's PT2E observers the plain integer ones
INT8_DTYPES = (torch.quint8, torch.qint8, torch.uint8, torch.int8)


def onnx_range(qmin: int, qmax: int) -> tuple[int, int]:
    """The 8-bit range QDQ can write for an observer's range.

    QDQ has only the full uint8 / int8 ranges; the narrower ones in use (reduce_range 0..127 and
    -64..63, symmetric weights -127..127) hold values that already fit, so they widen without
    changing a single quantized value."""
    if qmin >= 0:
        return 0, 255
    return -128, 127


class FrozenFakeQuant(torch.nn.Module):
    """Fake quantization with fixed qparams: exports as QuantizeLinear + DequantizeLinear."""

    def __init__(self, scale: torch.Tensor, zero_point: torch.Tensor, qmin: int, qmax: int, axis: int | None):
        super().__init__()
        self.register_buffer("scale", scale.detach().to(torch.float32).clone().reshape(-1))
        self.register_buffer("zero_point", zero_point.detach().to(torch.int32).clone().reshape(-1))
        self.qmin, self.qmax, self.axis = qmin, qmax, axis

    def forward(self, x):
        if self.axis is None:
            return torch.fake_quantize_per_tensor_affine(x, self.scale[0], self.zero_point[0], self.qmin, self.qmax)
        return torch.fake_quantize_per_channel_affine(x, self.scale, self.zero_point, self.axis,
                                                      self.qmin, self.qmax)
