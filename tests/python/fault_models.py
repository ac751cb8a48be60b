"""Models the CPU and GPU fault tests share."""

import torch


class Pointwise(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.relu(x) * 2 - 1).clamp(0.1, 0.9) + torch.maximum(x, torch.zeros_like(x))


class RowSoftmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1) * x.amax(dim=1, keepdim=True)
