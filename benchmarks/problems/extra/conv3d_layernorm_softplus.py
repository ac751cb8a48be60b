import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(8, 16, 3, padding=1)
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        return torch.nn.functional.softplus(self.ln(self.conv(x)))


def get_inputs():
    return [torch.randn(16, 8, 16, 32, 32)]


def get_init_inputs():
    return []
