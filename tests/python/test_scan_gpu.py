"""Scan kernels on a GPU (skipped without one): cumsum and cumprod, forward and
reverse, as generated kernels (fusion/scan_scheduler.cc) against eager and an
fp64 reference.

    pytest -m gpu -s tests/python/test_scan_gpu.py

For each case: the plan runs the scan as a scan kernel (with its pointwise
prologue and epilogue), its output matches eager, its error against fp64 is no worse than
eager's (1.5x plus a floor of a few ulps; -s prints both), two runs give the
same bits; NaN and inf propagate as eager's.
"""

from __future__ import annotations

import pytest
import torch

import fuseforge
from fn_model import Fn

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("no_grad")]


def _r(*shape, dtype=torch.float32):
    return lambda dev: torch.randn(*shape, device=dev, dtype=dtype)


def _mask(*shape):
    return lambda dev: (torch.rand(*shape, device=dev) > 0.5).float()


def _transposed(*shape):
    return lambda dev: torch.randn(*reversed(shape), device=dev).t()


# name: (forward, input makers (of a device)); test_reduction.py checks on the
# CPU that each plan has its scan kernel and that it builds without spills.
CASES = {
    "masked_rows_cluster": (lambda m, x, k: torch.cumsum(x * k, 1), [_r(256, 32768), _mask(256, 32768)]),
    "rows_past_the_end": (lambda m, x: torch.cumsum(torch.exp(x * 0.1), -1), [_r(300, 20001)]),
    "long_rows_more_items": (lambda m, x: torch.cumsum(x, 1), [_r(8, 150000)]),
    "short_rows_half": (lambda m, x: torch.cumsum(x, 1), [_r(4096, 100, dtype=torch.float16)]),
    "bf16_rows": (lambda m, x: torch.cumsum(x, -1), [_r(512, 3000, dtype=torch.bfloat16)]),
    "columns": (lambda m, x: torch.cumsum(x, 0), [_r(2000, 300)]),
    "middle_dim": (lambda m, x: torch.cumsum(x, 1), [_r(16, 700, 24)]),
    "transposed_view": (lambda m, x: torch.cumsum(x, 1), [_transposed(4096, 512)]),
    "f64": (lambda m, x: torch.cumsum(x, 1), [_r(64, 50000, dtype=torch.float64)]),
    "exclusive_epilogue": (lambda m, x: torch.cumsum(x, 1) - x, [_r(4096, 6000)]),
    "cumprod_rows_cluster": (lambda m, x: torch.cumprod(1 + 1e-3 * x, 1), [_r(256, 20000)]),
    "reverse_cumprod_rows_cluster": (
        lambda m, x: torch.flip(torch.cumprod(torch.flip(1 + 1e-3 * x, [1]), 1), [1]),
        [_r(256, 20000)],
    ),
    "reverse_cumsum_columns": (lambda m, x: x.flip(0).cumsum(0).flip(0), [_r(2000, 300)]),
    "reverse_half_rows": (lambda m, x: -x.flip(1).cumsum(1).flip(1), [_r(2048, 3000, dtype=torch.float16)]),
    "reverse_exclusive_odd_rows": (lambda m, x: x.flip(-1).cumsum(-1).flip(-1) - x, [_r(1000, 4097)]),
    "exclusive_and_reverse_product": (
        lambda m, x: (torch.cumsum(x, 1) - x, torch.flip(torch.cumprod(torch.flip(1 + 1e-3 * x, [1]), 1), [1])),
        [_r(4096, 6000)],
    ),
    "cumprod_half_epilogue": (
        lambda m, x, s: torch.cumprod(1 + 0.01 * x, -1) * s,
        [_r(1024, 1000, dtype=torch.float16), _r(1024, 1, dtype=torch.float16)],
    ),
}


def build_case(name: str, device: str = "cuda"):
    fn, makers = CASES[name]
    torch.manual_seed(1)
    return Fn(fn), [mk(device) for mk in makers]


def _scan_kernels(fast) -> list:
    return [k for s in fast.specializations() for k in s.compiled.plan.kernels if k.kind == "scan"]


def _rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return (x - ref).norm().item() / max(ref.norm().item(), 1e-300)


def _outputs(x) -> list:
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("name", list(CASES))
def test_scan_kernel_matches_eager_and_fp64(name):
    model, xs = build_case(name)
    fast = fuseforge.optimize(model)
    outs = _outputs(fast(*xs))
    assert _scan_kernels(fast), f"{name}: no scan kernel in the plan"
    again, wants, refs = _outputs(fast(*xs)), _outputs(model(*xs)), _outputs(model(*[x.double() for x in xs]))
    for got, g2, want, ref in zip(outs, again, wants, refs, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, g2), f"{name}: two runs differ (the summation order must be fixed)"
        _check(name, got, want, ref)


def _check(name: str, got: torch.Tensor, want: torch.Tensor, ref: torch.Tensor) -> None:
    tol = 2e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-4
    # Values grow like the square root of the row's length; and eager sums
    # 16-bit types in 16 bits (its partial sums rounded), so the bar is its
    # own distance from fp64 plus ours.
    scale = want.double().abs().amax().item()
    eager_off = (want.double() - ref).abs().amax().item()
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * max(1.0, scale**0.5) + 2 * eager_off)
    e_ff, e_eager = _rel_error(got, ref), _rel_error(want, ref)
    floor = 4 * torch.finfo(got.dtype).eps
    print(f"{name}: error vs fp64 fuseforge {e_ff:.3e}, eager {e_eager:.3e}")
    assert e_ff <= 1.5 * e_eager + floor, f"{name}: error {e_ff:.3e} vs eager's {e_eager:.3e}"


def test_scan_nan_and_inf_propagate_as_eager():
    """A NaN, a +inf and a -inf in some rows, +inf and -inf in one: every
    element from there on is NaN or infinite, as eager's."""
    x = torch.randn(6, 40000, device="cuda")
    x[1, 7] = float("nan")
    x[2, 30000] = float("inf")
    x[3, 5] = float("-inf")
    x[4, 100] = float("inf")
    x[4, 20000] = float("-inf")
    model = Fn(lambda m, x: torch.cumsum(x * 2, 1))
    fast = fuseforge.optimize(model)
    got, want = fast(x), model(x)
    assert _scan_kernels(fast)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-4, atol=1e-3)
