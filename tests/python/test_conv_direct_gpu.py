"""GPU tests of the direct conv kernels (codegen/cuda/conv_direct.cc): convs
with few multiply-adds per output, in any layout and groups, run as one
generated kernel with their epilogue, and keep the fp32 contract: error
against fp64 at most twice eager's, NaN and inf as eager. Skipped without a
GPU; the CPU checks are the fusion goldens conv_direct_* (kernel emulator
against the interpreter)."""

import contextlib

import pytest
import torch
import torch.nn as nn

import fuseforge
from fuseforge.runtime.precision import conv_fp32_precision

pytestmark = pytest.mark.gpu


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, dilation=1, groups=1, bias=True, dims=2):
        super().__init__()
        conv = nn.Conv3d if dims == 3 else nn.Conv2d
        self.conv = conv(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 1.5


CASES = {
    "first_layer": (dict(cin=3, cout=16, k=3), (8, 3, 64, 64), False),
    "six_channels_odd_size": (dict(cin=6, cout=10, k=3, padding=1, bias=False), (5, 6, 37, 29), False),
    "depthwise_strided": (dict(cin=32, cout=32, k=3, stride=2, padding=1, groups=32), (4, 32, 33, 33), False),
    "depthwise_multiplier_dilated": (dict(cin=8, cout=16, k=5, padding=4, dilation=2, groups=8), (3, 8, 40, 40), False),
    "grouped_channels_last": (dict(cin=8, cout=12, k=3, groups=2), (4, 8, 50, 50), True),
    "conv3d_first_layer_padded": (dict(cin=3, cout=16, k=3, padding=1, dims=3), (4, 3, 10, 24, 24), False),
    "conv3d_strided": (dict(cin=4, cout=8, k=3, stride=2, padding=1, dims=3), (3, 4, 9, 20, 21), False),
}


def _direct_kernels(fast):
    return [
        k.name
        for s in fast.specializations()
        for k in s.compiled.plan.kernels
        if k.kind == "conv" and "_direct_" in k.name
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_direct_conv_keeps_the_fp32_contract(case):
    kw, shape, channels_last = CASES[case]
    torch.manual_seed(0)
    model = ConvBlock(**kw).cuda().eval()
    x = torch.randn(shape, device="cuda")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    fast = fuseforge.optimize(model)
    # The direct kernel takes IEEE convs only; eager's 3-D convs of these
    # shapes may run TF32 under the default flags, so eager's convs run IEEE.
    math = conv_fp32_precision("ieee") if kw.get("dims") == 3 else contextlib.nullcontext()
    with torch.no_grad(), math:
        got = fast(x)
        want = model(x)
        ref = model.double()(x.double())
        model.float()
    assert _direct_kernels(fast), "expected a direct conv kernel"
    ours, eager = (got.double() - ref).abs().max().item(), (want.double() - ref).abs().max().item()
    assert ours <= 2 * eager + 1e-6, (ours, eager)


def test_direct_conv_propagates_nan_and_inf_as_eager():
    model = ConvBlock(cin=3, cout=8, k=3).cuda().eval()
    x = torch.randn(2, 3, 20, 20, device="cuda")
    x[0, 0, 5, 5] = float("nan")
    x[1, 2, 10, 10] = float("inf")
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        got, want = fast(x), model(x)
    assert _direct_kernels(fast)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_the_probe_times_the_direct_kernel_and_rejects_a_wrong_result(monkeypatch):
    """conv_probe's timing of the direct kernel alone (where the cost model
    cannot tell it from cuDNN's): a positive time for a kernel that matches
    cuDNN's IEEE conv, none where the result strays."""
    from fuseforge._native import core
    from fuseforge.runtime import conv_probe

    text = """graph @g(%x: f32[4,8,10,24,24], %w: f32[16,8,3,3,3] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1, 1], groups=1, output_padding=[0, 0, 0], padding=[1, 1, 1], stride=[1, 1, 1], transposed=false} : f32[4,16,10,24,24]
  return %0
}
"""
    (conv,) = core.convolutions(text)
    device = torch.device("cuda")
    kernel, out = conv_probe.direct_kernel(conv, conv_probe._arch(device))
    assert out == [4, 16, 10, 24, 24] and "_direct_" in kernel.name
    timed = conv_probe.measure_direct(conv, device, kernel, out)
    assert 0 < timed["direct_ms"] < 100, timed
    plain = conv_probe._call
    monkeypatch.setattr(conv_probe, "_call", lambda c, x, w: plain(c, x, w) + 0.01)
    assert conv_probe.measure_direct(conv, device, kernel, out)["direct_ms"] is None


class ChannelReduction(nn.Module):
    """A first-layer conv, a reduction over its channels, then tanh: the
    direct kernel takes the reduction in and writes only its result."""

    def __init__(self, how, keepdim):
        super().__init__()
        self.conv = nn.Conv2d(3, 20, 3, padding=1)
        self.how, self.keepdim = how, keepdim

    def forward(self, x):
        y = self.conv(x) * 0.5
        y = getattr(torch, self.how)(y, 1, keepdim=self.keepdim)
        return torch.tanh(y) * 2.0


@pytest.mark.parametrize(
    "how,keepdim", [("amin", True), ("amax", False), ("sum", True), ("mean", False), ("logsumexp", True)]
)
def test_a_reduction_over_the_channels_joins_the_direct_conv(how, keepdim):
    torch.manual_seed(0)
    model = ChannelReduction(how, keepdim).cuda()
    x = torch.randn(4, 3, 33, 70, device="cuda")
    x[1, 2, 10, 10] = float("nan")
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        got, want = fast(x), model(x)
        ref = model.double()(x.double())
        model.float()
    (plan,) = [s.compiled.plan for s in fast.specializations()]
    k, epilogue = plan.kernels  # the direct kernel, and its library form's reduction kernel
    assert "_direct_" in k.name and how in [n.op for n in k.nodes], str(plan)
    assert k.library_steps[1].kernel == 1 and epilogue.kind == "reduction", str(plan)
    assert [s.kernel for s in plan.run if s.kind == "launch"] == [0], str(plan)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    finite = want.isfinite()
    ours = (got.double() - ref)[finite].abs().max().item()
    eager = (want.double() - ref)[finite].abs().max().item()
    assert ours <= 2 * eager + 1e-6, (ours, eager)
