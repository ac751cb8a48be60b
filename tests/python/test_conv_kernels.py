"""Conv kernels in the plan without a GPU: a conv and its epilogue become one
kernel whose library form (the CPU stand-in, and the fallback where the
kernel cannot run: the conv through ATen, then the epilogue's own kernel;
test_conv_library_form.py) computes what eager computes.
tests/python/test_conv_gpu.py runs the kernels themselves."""

import re

import pytest
import torch

import test_conv_direct_gpu as direct
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_options


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
    # The other kernels write x and the weight channels-last, or are the library form's epilogue.
    others = [o for i, o in enumerate(plan.kernels) if o.name != k.name and i != k.library_steps[1].kernel]
    assert [[n.op for n in o.nodes] for o in others] == [["copy"], ["copy"]]
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


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """f32 rounded to tf32 (nearest, ties away), as ff_round_tf32."""
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


class TransposedEpilogue(torch.nn.Module):
    """A transposed conv (stride 2, window 4), a residual and a relu."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(8, 12, 4, stride=2, padding=1)

    def forward(self, x, skip):
        return torch.relu(self.up(x) + skip)


def test_a_transposed_tf32_conv_is_one_hopper_kernel_with_its_epilogue(monkeypatch):
    """A 1xTF32 transposed conv (kernels allowed everywhere) becomes one Hopper
    kernel with the residual and relu, its operands rounded by the copies
    that lay them out, and builds for sm_90a without spills; its library form
    computes what eager does. In IEEE math it stays a cuDNN call."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    torch.manual_seed(0)
    model = TransposedEpilogue()
    x, skip = torch.randn(2, 8, 9, 11), torch.randn(2, 12, 18, 22)
    captured = capture(model, [x, skip], name="transposed")
    sig = [c["signature"] for c in core.convolutions(captured.text)]
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    tf32 = {"conv_channels_last": {s: True for s in sig}, "conv_tf32": {s: True for s in sig}}
    plan = core.compile(captured.text, compile_options(arch=90, convs=tf32)).plan
    (k,) = [k for k in plan.kernels if k.kind == "conv"]
    assert "_tf32_sm90_" in k.name and [n.op for n in k.nodes] == ["convolution", "add", "add", "relu"], str(plan)
    others = [o for i, o in enumerate(plan.kernels) if o.name != k.name and i != k.library_steps[1].kernel]
    assert [[n.op for n in o.nodes] for o in others] == [["copy", "round_tf32"]] * 2
    is_cubin, _, log = core.nvrtc_compile(k.translation_unit, k.name, 90, options=["-Xptxas=-v"])
    assert is_cubin and set(re.findall(r"(\d+) bytes spill stores", log)) == {"0"}, log
    out, _ = Executor(plan, torch.device("cpu"))(captured.graph_inputs(model, [x, skip]))
    with torch.no_grad():  # eager's conv on the operands rounded to tf32 as the plan's copies round them
        up = model.up
        want = torch.relu(
            torch.nn.functional.conv_transpose2d(round_tf32(x), round_tf32(up.weight), up.bias, 2, 1) + skip
        )
        torch.testing.assert_close(out[0], want, rtol=1e-5, atol=1e-5)
    ieee = {"conv_channels_last": {s: True for s in sig}, "conv_tf32": {s: False for s in sig}}
    assert not [
        k for k in core.compile(captured.text, compile_options(arch=90, convs=ieee)).plan.kernels if k.kind == "conv"
    ]
