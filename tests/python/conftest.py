import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("*/*.py"))

# The tests' kernels and timings go to a cache directory of their own (kept
# between runs, for its kernels), not the user's: cuDNN conv times taken while
# parallel test groups share the GPU would decide the user's later plans (a
# bench run after the GPU tests, before it had a cache of its own, ran two dev
# problems 1.3x and 2.3x slower). An explicit FUSEFORGE_CACHE_DIR stands.
os.environ.setdefault("FUSEFORGE_CACHE_DIR", str(ROOT / "build" / "test-cache"))


def kernel_convs(convs: list[dict], tf32: bool | None = None) -> list[dict]:
    """The convs (core.convolutions) that conv kernels cover: forward 2-D and
    3-D convs without groups, and transposed 2-D ones without groups or
    dilation whose math is TF32 (`tf32`, or their fp32_precision where None)
    and whose input channels are a multiple of 4."""

    def covered(c):
        if c["groups"] != 1 or len(c["input"][1]) not in (4, 5):
            return False
        if not c["transposed"]:
            return True
        math = c["fp32_precision"] == "tf32" if tf32 is None else tf32
        return (
            math
            and c["dtype"] == "f32"
            and len(c["input"][1]) == 4
            and c["dilation"] == [1, 1]
            and c["input"][1][1] % 4 == 0
        )

    return [c for c in convs if covered(c)]


#: A small problem file (a Linear layer, relu, a scale); {prelude} and {init}
#: put code at the top and inside get_init_inputs.
TINY_PROBLEM = """
import torch
import torch.nn as nn
{prelude}

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    {init}
    return [8]
"""


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def problems():
    return PROBLEMS


@pytest.fixture(autouse=True)
def _cudnn_switch():
    """FUSEFORGE_TEST_CUDNN=0 (scripts/sanitize.sh's racecheck pass) runs
    convolutions without cuDNN, eager's and fuseforge's alike: racecheck fails
    inside cuDNN's Hopper conv kernels ("failed to handle a hardware exception",
    seen on the H100) before it reaches the generated kernels after them."""
    if os.environ.get("FUSEFORGE_TEST_CUDNN") != "0":
        yield
        return
    import torch

    saved = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = saved


@pytest.fixture
def no_grad():
    """The test runs under torch.no_grad(): calls of an optimized module take
    its inference plan (with grad on, a model with parameters that require
    grad trains through its forward/backward pair instead)."""
    import torch

    with torch.no_grad():
        yield
