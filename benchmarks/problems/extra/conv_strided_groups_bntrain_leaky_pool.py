import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 3, stride=2, padding=1, groups=4)
        self.bn = nn.BatchNorm2d(128)

    def forward(self, x):
        y = torch.nn.functional.leaky_relu(self.bn(self.conv(x)), 0.1)
        return torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)


def get_inputs():
    return [torch.randn(64, 64, 96, 96)]


def get_init_inputs():
    return []
