import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(64, 128, 7, padding=3)
        self.norm = nn.InstanceNorm1d(128)

    def forward(self, x):
        return torch.tanh(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(64, 64, 4096)]


def get_init_inputs():
    return []
