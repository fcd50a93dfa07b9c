"""Torch modules the qtquant.torch tests share (torch.ao QAT and PT2E): the motivating block.

Import it after ``pytest.importorskip("torch")``: it imports torch at module level.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Branch", "MultiScaleAttention"]


class Branch(nn.Module):
    def __init__(self, c, k, gain):
        super().__init__()
        self.conv = nn.Conv2d(c, c, k, padding=k // 2)
        with torch.no_grad():
            self.conv.weight.mul_(gain)

    def forward(self, x):
        return self.conv(x)


class MultiScaleAttention(nn.Module):
    """k and v are each concatenated from 3x3, 7x7 and 9x9 window branches of different gains."""

    def __init__(self, c=4):
        super().__init__()
        self.q = nn.Conv2d(c, 3 * c, 1)
        self.k_branches = nn.ModuleList([Branch(c, k, g) for k, g in ((3, 1.0), (7, 2.0), (9, 3.0))])
        self.v_branches = nn.ModuleList([Branch(c, k, g) for k, g in ((3, 0.5), (7, 1.0), (9, 1.5))])
        self.proj = nn.Conv2d(3 * c, c, 1)

    def forward(self, x):
        q = self.q(x)
        k = torch.cat([b(x) for b in self.k_branches], dim=1)
        v = torch.cat([b(x) for b in self.v_branches], dim=1)
        return self.proj(torch.sigmoid(q * k) * v)
