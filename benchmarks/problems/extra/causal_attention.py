import math
import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal attention spelled out: the mask from triu of ones (indices an
    arange of literal bounds), filled with -inf before the softmax."""

    def forward(self, q, k, v):
        t = q.size(-2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=q.device), diagonal=1)
        return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v


def get_inputs():
    shape = (16, 16, 512, 64)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
