"""Conv kernels in the plan without a GPU: a conv and its epilogue become one
kernel whose ATen form (the CPU stand-in, and the fallback where the kernel
cannot run) computes what eager computes. tests/python/test_conv_gpu.py runs
the kernels themselves."""
import re

import pytest
import torch

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_options

import test_conv_direct_gpu as direct


class ConvEpilogue(torch.nn.Module):
    """A conv with bias, min with a constant, a per-channel add, a scale, and a residual."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.bias = torch.nn.Parameter(torch.randn(16, 1, 1))

    def forward(self, x, r):
        return (torch.minimum(self.conv(x), torch.tensor(0.5)) + self.bias) * 2.0 + r


def _plan(text, policy, monkeypatch, convs=None):
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", policy)
    return core.compile(text, compile_options(convs=convs)).plan


def test_a_conv_and_its_epilogue_are_one_kernel_computing_what_eager_does(monkeypatch):
    torch.manual_seed(0)
    model = ConvEpilogue()
    x, r = torch.randn(2, 8, 10, 10), torch.randn(2, 16, 10, 10)
    captured = capture(model, [x, r], name="conv_epilogue")
    convs = core.convolutions(captured.text)
    plan = _plan(captured.text, "always", monkeypatch, {"conv_channels_last": {c["signature"]: True for c in convs}})
    (k,) = [k for k in plan.kernels if k.kind == "conv"]
    assert [n.op for n in k.nodes] == ["convolution", "add", "minimum", "add", "mul", "add"], str(plan)
    # The other kernels write x and the weight channels-last.
    assert [[n.op for n in other.nodes] for other in plan.kernels if other.name != k.name] == [["copy"], ["copy"]]
    out, _ = Executor(plan, torch.device("cpu"))(captured.graph_inputs(model, [x, r]))
    with torch.no_grad():
        torch.testing.assert_close(out[0], model(x, r), rtol=1e-5, atol=1e-5)
    # Off: the conv stays a library call.
    assert not [k for k in _plan(captured.text, "off", monkeypatch).kernels if k.kind == "conv"]
    with pytest.raises(ValueError, match="FUSEFORGE_CONV_KERNELS is 'fast'.*unknown"):
        _plan(captured.text, "fast", monkeypatch)


def test_direct_conv_cases_plan_one_kernel_that_builds_without_spills(monkeypatch):
    """The direct-kernel GPU test's convs (few multiply-adds an output, any
    groups, NCHW or channels-last input) each become one direct kernel with
    their relu and scale, under the default policy and the IEEE math the CPU
    decides; each builds for sm_90 without register spills. Policy off keeps
    them library calls."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    for name, (kw, shape, channels_last) in direct.CASES.items():
        x = torch.randn(shape)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        captured = capture(direct.ConvBlock(**kw), [x], name=name)
        monkeypatch.delenv("FUSEFORGE_CONV_KERNELS", raising=False)
        plan = core.compile(captured.text, compile_options(arch=90)).plan
        (k,) = [k for k in plan.kernels if k.kind == "conv"]
        assert "_direct_" in k.name and [n.op for n in k.nodes][-2:] == ["relu", "mul"], (name, str(plan))
        assert not [s for s in plan.run if s.kind == "call"], (name, str(plan))
        is_cubin, _, log = core.nvrtc_compile(k.translation_unit, k.name, 90, options=["-Xptxas=-v"])
        assert is_cubin and re.findall(r"(\d+) bytes spill stores", log) == ["0"], (name, log)
        assert not [k for k in _plan(captured.text, "off", monkeypatch).kernels if k.kind == "conv"]
