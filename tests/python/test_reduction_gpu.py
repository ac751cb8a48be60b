"""Reduction kernels on a GPU (skipped without one): every reduction form the
reduction scheduler generates against eager and against an fp64 reference.

    pytest -m gpu -s tests/python/test_reduction_gpu.py

For each case: the plan runs the reduction as a generated kernel (not a
library call), its outputs match eager, its error against fp64 is no worse
than eager's (1.5x plus a floor of a few ulps; -s prints both), two runs give
the same bits, NaNs land where eager's do, argmax/argmin ties pick eager's
index, and train-mode batch norm leaves the running statistics eager leaves
after 3 steps.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseforge
from fn_model import Fn

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_grad")]


def _rms(m, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.w


def _manual_softmax(m, x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _r(*shape, dtype=torch.float32):
    return lambda dev: torch.randn(*shape, device=dev, dtype=dtype)


def _channels_last(*shape):
    return lambda dev: torch.randn(*shape, device=dev).to(memory_format=torch.channels_last)


def _transposed(*shape):
    return lambda dev: torch.randn(*reversed(shape), device=dev).t()


# name: (forward, input makers (of a device), modules); test_reduction.py
# checks on the CPU that each plan has its reduction kernels.
CASES = {
    # rows (reduced elements contiguous)
    "sum_rows": (lambda m, x: x.sum(-1), [_r(4096, 1000)], {}),
    "mean_keepdim_short_rows": (lambda m, x: x.mean((2, 3), keepdim=True), [_r(64, 512, 7, 7)], {}),
    "amax_amin_prod_any": (
        lambda m, x: (x.amax(1), x.amin(1), (x * 0.01 + 1).prod(1), (x > 3.5).any(1)),
        [_r(333, 777)],
        {},
    ),
    "var_std_correction": (lambda m, x: (x.var(1), x.std(1, correction=0), *torch.var_mean(x, 1)), [_r(512, 3000)], {}),
    "long_rows_few": (lambda m, x: x.sum((1, 2, 3)), [_r(64, 32, 80, 80)], {}),
    # few long rows, split into partials (split_long_reduction)
    "var_mean_channels_split": (lambda m, x: torch.var_mean(x, (0, 2, 3)), [_r(32, 48, 64, 64)], {}),
    "var_mean_channels_last_split": (lambda m, x: torch.var_mean(x, (0, 2, 3)), [_channels_last(32, 48, 64, 64)], {}),
    "sum_one_long_dim_split": (lambda m, x: (x.sum(1), torch.logsumexp(x, 1, keepdim=True)), [_r(4, 1 << 20)], {}),
    # many long rows: part of each thread's share waits in shared memory (two rows per SM)
    "softmax_long_rows": (lambda m, x: torch.softmax(x, -1), [_r(512, 32768)], {}),
    "log_softmax_rows": (lambda m, x: torch.log_softmax(x, -1), [_r(2048, 1000)], {}),
    "logsumexp_rows": (lambda m, x: torch.logsumexp(x, -1), [_r(2048, 4096)], {}),
    "layer_norm_residual": (
        lambda m, x, r: m.ln(x + r),
        [_r(32, 256, 1024), _r(32, 256, 1024)],
        {"ln": nn.LayerNorm(1024)},
    ),
    "rmsnorm_manual": (_rms, [_r(16, 512, 4096)], {"w": nn.Parameter(torch.rand(4096) + 0.5)}),
    "manual_softmax_two_passes": (_manual_softmax, [_r(1024, 3000)], {}),
    "group_norm_silu": (lambda m, x: F.silu(m.gn(x)), [_r(16, 256, 32, 32)], {"gn": nn.GroupNorm(32, 256)}),
    # the mean reads the norm's [N, G, C/G, H*W] result (reduction_before_view): the apply is its prologue
    "group_norm_then_mean": (
        lambda m, x: F.gelu(m.gn(x)).mean((2, 3)),
        [_r(16, 64, 32, 32)],
        {"gn": nn.GroupNorm(8, 64)},
    ),
    "instance_norm_relu": (
        lambda m, x: torch.relu(m.inorm(x) * 0.5),
        [_r(16, 96, 48, 48)],
        {"inorm": nn.InstanceNorm2d(96, affine=True)},
    ),
    "channels_last_softmax": (lambda m, x: torch.softmax(x, 1), [_channels_last(32, 64, 28, 28)], {}),
    # along W of a channels-last input, written contiguous: through a tile of the block's columns
    "layer_norm_w_channels_last": (
        lambda m, x: F.softplus(m.ln(x)),
        [_channels_last(64, 16, 64, 32)],
        {"ln": nn.LayerNorm(32)},
    ),
    # written contiguous: the result transposed through shared memory
    "channels_last_softmax_to_contiguous": (
        lambda m, x: torch.softmax(x, 1).contiguous() * 2,
        [_channels_last(32, 96, 27, 27)],
        {},
    ),
    # columns (a kept dim unit-stride)
    "amax_channels": (lambda m, x: torch.sigmoid(x.amax(1, keepdim=True)) * 2, [_r(32, 48, 96, 96)], {}),
    "softmax_channels": (lambda m, x: torch.tanh(torch.softmax(x, 1) * 0.5), [_r(32, 96, 48, 48)], {}),
    "logsumexp_middle": (lambda m, x: torch.logsumexp(x, 1), [_r(64, 512, 1024)], {}),
    "sum_transposed_view": (lambda m, x: x.sum(1), [_transposed(32768, 1000)], {}),
    "batch_norm_1d_train": (lambda m, x: torch.relu(m.bn(x)), [_r(4096, 4096)], {"bn": nn.BatchNorm1d(4096)}),
    # 16-bit inputs (fp32 accumulation)
    "softmax_half": (lambda m, x: torch.softmax(x, -1), [_r(2048, 4096, dtype=torch.float16)], {}),
    "softmax_half_long_rows": (lambda m, x: torch.softmax(x, -1), [_r(512, 32768, dtype=torch.float16)], {}),
    "layer_norm_bf16": (
        lambda m, x: m.ln(x),
        [_r(4096, 768, dtype=torch.bfloat16)],
        {"ln": nn.LayerNorm(768).to(torch.bfloat16)},
    ),
    "sum_half_columns": (lambda m, x: x.sum(0), [_r(2048, 32768, dtype=torch.float16)], {}),
}


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def build_case(name: str, device: str = "cuda"):
    """The case's model (train mode for batch norms) and inputs on `device`."""
    fn, makers, mods = CASES[name]
    torch.manual_seed(0)
    model = Fn(fn, **mods).to(device)
    model.train(name.startswith("batch_norm"))
    torch.manual_seed(1)
    return model, [mk(device) for mk in makers]


def _reduction_kernels(fast) -> list:
    return [k for s in fast.specializations() for k in s.compiled.plan.kernels if k.kind == "reduction"]


def _rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| over the finite entries of ref, in fp64."""
    x, ref = x.double(), ref.double()
    finite = torch.isfinite(ref)
    num = (x[finite] - ref[finite]).norm().item()
    return num / max(ref[finite].norm().item(), 1e-300)


@pytest.mark.parametrize("name", list(CASES))
def test_reduction_kernel_matches_eager_and_fp64(name):
    model, xs = build_case(name)
    ref_model = copy.deepcopy(model).double() if not name.startswith("batch_norm") else None
    eager_model = copy.deepcopy(model)
    fast = fuseforge.optimize(model)
    got = _flat(fast(*xs))
    assert _reduction_kernels(fast), f"{name}: no reduction kernel in the plan"
    want = _flat(eager_model(*xs))
    again = _flat(fast(*xs)) if ref_model is not None else got
    for g, w, a in zip(got, want, again):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, a), f"{name}: two runs differ (the merge order must be fixed)"
        if not g.is_floating_point():
            assert torch.equal(g, w), f"{name}: integer/bool results differ from eager"
            continue
        tol = 1e-2 if g.dtype in (torch.float16, torch.bfloat16) else 1e-4
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    if ref_model is None:
        return
    ref = _flat(ref_model(*[x.double() for x in xs]))
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        if not g.is_floating_point():
            continue
        e_ff, e_eager = _rel_error(g, r), _rel_error(w, r)
        floor = 4 * torch.finfo(g.dtype).eps
        print(f"{name}[{i}]: error vs fp64 fuseforge {e_ff:.3e}, eager {e_eager:.3e}")
        assert e_ff <= 1.5 * e_eager + floor, f"{name}[{i}]: error {e_ff:.3e} vs eager's {e_eager:.3e}"


@pytest.mark.parametrize(
    "shape,dim", [((300, 2000), 1), ((64, 96, 40, 40), 1), ((2000, 300), 0)], ids=["rows", "channels", "columns"]
)
def test_argmax_ties_and_nan_as_eager(shape, dim):
    """Integer-valued data (many ties: eager picks the first index), and NaNs in
    some rows (they win, the first NaN's index)."""
    torch.manual_seed(0)
    x = torch.randint(-3, 4, shape, device="cuda").float()
    nans = torch.rand(x.select(dim, 0).shape, device="cuda") < 0.5  # rows (along dim) that get NaNs
    for at in (shape[dim] // 2, shape[dim] - 1):  # two in each: the first one's index wins
        col = x.select(dim, at)
        col.copy_(torch.where(nans, torch.full_like(col, float("nan")), col))
    model = Fn(lambda m, x: (*torch.max(x, dim), torch.argmin(x, dim), torch.amax(x, dim)))
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    assert _reduction_kernels(fast)
    for g, w in zip(got, want):
        assert torch.equal(g.isnan(), w.isnan()) if g.is_floating_point() else torch.equal(g, w)
        if g.is_floating_point():
            assert torch.equal(torch.nan_to_num(g), torch.nan_to_num(w))


def test_nan_and_inf_propagate_as_eager():
    """Rows holding NaN, +inf, -inf, or only -inf: sums, softmax, log_softmax,
    logsumexp, var and layer norm give eager's NaN/inf pattern."""
    x = torch.randn(8, 1024, device="cuda")
    x[1, 7] = float("nan")
    x[2, 100] = float("inf")
    x[3, 5] = float("-inf")
    x[4] = float("-inf")
    x[5, 3] = float("inf")
    x[5, 9] = float("-inf")
    model = Fn(
        lambda m, x: (
            x.sum(1),
            torch.softmax(x, 1),
            torch.log_softmax(x, 1),
            torch.logsumexp(x, 1),
            x.var(1),
            x.amax(1),
            m.ln(x),
        ),
        ln=nn.LayerNorm(1024),
    ).cuda()
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    assert _reduction_kernels(fast)
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g.isnan(), w.isnan()), f"output {i}: NaNs differ"
        assert torch.equal(torch.isinf(g), torch.isinf(w)), f"output {i}: infinities differ"
        finite = torch.isfinite(w)
        torch.testing.assert_close(g[finite], w[finite], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_train_batch_norm_running_stats_after_three_steps(layout):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(6, 48, 3), nn.BatchNorm2d(48, momentum=0.05)).cuda().train()
    eager = copy.deepcopy(model)
    fast = fuseforge.optimize(model)
    for _ in range(3):
        x = torch.randn(32, 6, 66, 66, device="cuda")
        if layout == "channels_last":
            x = x.to(memory_format=torch.channels_last)
        torch.testing.assert_close(fast(x), eager(x), rtol=1e-4, atol=1e-4)
    # Either layout: statistics of 48 channels of 131072 elements, split into
    # partials per image and channel (split_long_reduction).
    assert len(_reduction_kernels(fast)) == 2
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(model[1], name), getattr(eager[1], name), rtol=1e-5, atol=1e-6)
    assert int(model[1].num_batches_tracked) == int(eager[1].num_batches_tracked) == 3


def test_reductions_off_runs_library_calls(monkeypatch):
    """FUSEFORGE_REDUCTIONS=0: the same results through library calls (what the bench compares against)."""
    monkeypatch.setenv("FUSEFORGE_REDUCTIONS", "0")
    model, xs = build_case("rmsnorm_manual")
    fast = fuseforge.optimize(model)
    torch.testing.assert_close(fast(*xs), model(*xs), rtol=1e-4, atol=1e-4)
    assert not _reduction_kernels(fast)
