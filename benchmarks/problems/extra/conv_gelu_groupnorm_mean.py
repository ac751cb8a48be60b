import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)
        self.gn = nn.GroupNorm(8, 64)

    def forward(self, x):
        return self.gn(torch.nn.functional.gelu(self.conv(x))).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(64, 32, 64, 64)]


def get_init_inputs():
    return []
