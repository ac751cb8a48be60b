"""Pool kernels on a GPU (skipped without one): max/avg pooling with the
pointwise work around it, against eager and an fp64 reference.

    pytest -m gpu -s tests/python/test_pool_gpu.py

For each case: the plan runs the pool as a generated kernel, its outputs
match eager, its error against fp64 is no worse than eager's, two runs give
the same bits; NaN and inf in a window land where eager's do.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseforge
from fn_model import Fn
from test_reduction_gpu import _flat, _rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_grad")]


def _r(*shape, dtype=torch.float32, channels_last=False):
    def make(dev):
        x = torch.randn(*shape, device=dev, dtype=dtype)
        if channels_last:
            x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        return x

    return make


# name: (forward, input makers (of a device), modules); test_pool.py checks on
# the CPU that each plan has its pool kernel.
CASES = {
    "conv_relu_maxpool": (
        lambda m, x: F.max_pool2d(torch.relu(m.conv(x)), 2),
        [_r(16, 8, 66, 66)],
        {"conv": nn.Conv2d(8, 32, 3)},
    ),
    "conv3d_relu_maxpool_channels_last": (
        lambda m, x: F.max_pool3d(torch.relu(m.conv(x)), 2),
        [_r(4, 8, 18, 34, 34, channels_last=True)],
        {"conv": nn.Conv3d(8, 32, 3)},
    ),
    "bias_maxpool_padded_dilated": (
        lambda m, x: torch.sigmoid(F.max_pool2d(x + m.b, 3, 2, 1, dilation=2, ceil_mode=True)),
        [_r(32, 64, 57, 57)],
        {"b": nn.Parameter(torch.randn(64, 1, 1))},
    ),
    "avgpool_silu": (lambda m, x: F.silu(F.avg_pool3d(x, 2)), [_r(8, 48, 24, 48, 48)], {}),
    "avgpool_padded_excluded": (
        lambda m, x: F.avg_pool2d(x * 2.0, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        [_r(32, 64, 55, 55, channels_last=True)],
        {},
    ),
    "avgpool_divisor_1d": (
        lambda m, x, r: F.avg_pool2d(x, (1, 4), (1, 3), (0, 2), divisor_override=3) + r,
        [_r(64, 32, 4, 1000), _r(64, 32, 4, 334)],
        {},
    ),
    "maxpool1d_half": (lambda m, x: F.max_pool1d(torch.tanh(x), 4, 3, 1), [_r(64, 256, 1001, dtype=torch.float16)], {}),
    # A softmax over the channels taken into the pool's kernel.
    "conv3d_softmax_maxpool": (
        lambda m, x: F.max_pool3d(torch.softmax(m.conv(x), dim=1), 2),
        [_r(8, 8, 18, 34, 34)],
        {"conv": nn.Conv3d(8, 24, 3)},
    ),
    "log_softmax_scale_avgpool_channels_last": (
        lambda m, x: F.avg_pool2d(torch.log_softmax(x, dim=1) * m.w, 3, 2, 1, count_include_pad=False),
        [_r(32, 20, 63, 65, channels_last=True)],
        {"w": nn.Parameter(torch.rand(20, 1, 1) + 0.5)},
    ),
    # Pools of one input with the same windows, side by side in one kernel.
    "avgpool1d_minus_maxpool1d": (
        lambda m, x: F.avg_pool1d(x, 6, 2, 2) - F.max_pool1d(x, 6, 2, 2),
        [_r(16, 40, 4001)],
        {},
    ),
    "relu_avg_max_pool2d_sigmoid_channels_last": (
        lambda m, x: torch.sigmoid(
            F.avg_pool2d(torch.relu(x), 3, 2, 1, count_include_pad=False) + F.max_pool2d(torch.relu(x), 3, 2, 1)
        ),
        [_r(16, 64, 57, 57, channels_last=True)],
        {},
    ),
    "avg_max_pool3d_ceil_product": (
        lambda m, x: F.avg_pool3d(x, 2, ceil_mode=True) * F.max_pool3d(x, 2, ceil_mode=True),
        [_r(4, 16, 17, 34, 35)],
        {},
    ),
}


def build_case(name: str, device: str = "cuda"):
    fn, makers, mods = CASES[name]
    torch.manual_seed(0)
    model = Fn(fn, **mods).to(device).eval()
    torch.manual_seed(1)
    return model, [mk(device) for mk in makers]


def _pool_kernels(fast) -> list:
    return [k for s in fast.specializations() for k in s.compiled.plan.kernels if k.kind == "pool"]


@pytest.mark.parametrize("name", list(CASES))
def test_pool_kernel_matches_eager_and_fp64(name):
    model, xs = build_case(name)
    ref_model, eager_model = copy.deepcopy(model).double(), copy.deepcopy(model)
    fast = fuseforge.optimize(model)
    got = _flat(fast(*xs))
    assert _pool_kernels(fast), f"{name}: no pool kernel in the plan"
    want, again = _flat(eager_model(*xs)), _flat(fast(*xs))
    ref = _flat(ref_model(*[x.double() for x in xs]))
    for i, (g, w, a, r) in enumerate(zip(got, want, again, ref)):
        assert g.dtype == w.dtype and g.shape == w.shape
        # torch.export records a conv3d of a channels_last_3d input as
        # contiguous (eager's is channels-last): the IR's strides are export's.
        assert g.stride() == w.stride() or "conv3d" in name
        assert torch.equal(g, a), f"{name}: two runs differ"
        tol = 1e-2 if g.dtype in (torch.float16, torch.bfloat16) else 1e-4
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
        e_ff, e_eager = _rel_error(g, r), _rel_error(w, r)
        print(f"{name}[{i}]: error vs fp64 fuseforge {e_ff:.3e}, eager {e_eager:.3e}")
        assert e_ff <= 1.5 * e_eager + 4 * torch.finfo(g.dtype).eps, f"{name}[{i}]: {e_ff:.3e} vs eager's {e_eager:.3e}"


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_nan_and_inf_in_windows_as_eager(channels_last):
    """A NaN anywhere in a max window wins (ATen's rule), +-inf pass through
    max and avg, and the pointwise work after the pool sees them."""
    x = torch.randn(4, 16, 20, 20, device="cuda")
    x[0, 1, 3, 3] = float("nan")
    x[1, 2, 8, 9] = float("inf")
    x[2, 3, 0, 0] = float("-inf")
    x[3, 4, 10:12, 10:12] = float("-inf")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    model = Fn(
        lambda m, x: (torch.relu(F.max_pool2d(x * 2, 2)) + 1, F.avg_pool2d(x, 3, 2, 1) * 3, F.max_pool2d(-x, 3, 1, 1))
    )
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    assert len(_pool_kernels(fast)) == 3
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g.isnan(), w.isnan()), f"output {i}: NaNs differ"
        assert torch.equal(torch.isinf(g), torch.isinf(w)), f"output {i}: infinities differ"
        finite = torch.isfinite(w)
        torch.testing.assert_close(g[finite], w[finite], rtol=1e-5, atol=1e-6)


def test_pools_side_by_side_give_eagers_nan_and_inf():
    """An average and a max pool of one input in one kernel: a NaN in a window
    makes both NaN, an inf the average inf and the max inf (or NaN for their
    difference), as eager's."""
    x = torch.randn(4, 16, 20, 20, device="cuda")
    x[0, 1, 3, 3] = float("nan")
    x[1, 2, 8, 9] = float("inf")
    x[2, 3, 0, 0] = float("-inf")
    model = Fn(lambda m, x: (F.avg_pool2d(x, 3, 2, 1) - F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1) * 2))
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    (k,) = _pool_kernels(fast)
    assert [n.op for n in k.nodes] == ["avg_pool", "max_pool", "sub", "mul"]
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g.isnan(), w.isnan()), f"output {i}: NaNs differ"
        assert torch.equal(torch.isinf(g), torch.isinf(w)), f"output {i}: infinities differ"
        finite = torch.isfinite(w)
        torch.testing.assert_close(g[finite], w[finite], rtol=1e-5, atol=1e-6)


def test_softmax_in_a_pool_kernel_gives_eagers_nan_and_inf():
    """A softmax over the channels taken into the pool's kernel: a NaN makes
    its pixel's softmax NaN, an all -inf pixel gives NaN, a +inf one NaN
    beside it, as eager's; the rest within 1e-6 of eager."""
    x = torch.randn(2, 6, 8, 10, device="cuda")
    x[0, 2, 1, 1] = float("nan")
    x[1, :, 4, 4] = float("-inf")
    x[0, 3, 6, 8] = float("inf")
    x[1, 0, 2, 2] = float("-inf")
    model = Fn(lambda m, x: F.max_pool2d(torch.softmax(x, dim=1), 2) + 1)
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    (k,) = _pool_kernels(fast)
    assert "softmax" in k.name
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-6, atol=1e-6)
