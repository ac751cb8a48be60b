"""Scans without a GPU: torch's cumsums and cumprods (forward, reverse as
flip -> scan -> flip, exclusive, masked, followed by pointwise work, several
of one tensor) plan as scan kernels only, with the pointwise work around them,
and the plan run on the CPU executor (kernels on the reference interpreter)
gives eager's values."""

import pytest
import torch

from fn_model import Fn
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir


def _flip_scan(scan, x, d, **kw):
    return scan(x.flip(d), d, **kw).flip(d)


# name: (forward, inputs, the ops of each scan kernel in plan order)
CASES = {
    "exclusive_and_reverse_product": (
        lambda m, x: (torch.cumsum(x, 1) - x, torch.flip(torch.cumprod(torch.flip(1 + 1e-3 * x, [1]), 1), [1])),
        [torch.randn(64, 600)],
        [["cumsum", "sub", "mul", "add", "cumprod"]],  # one kernel: x read once from memory
    ),
    "reverse_cumsum_middle_dim": (
        lambda m, x: _flip_scan(torch.cumsum, x, 1),
        [torch.randn(4, 50, 6)],
        [["cumsum"]],
    ),
    "reverse_exclusive_cumsum_columns": (
        lambda m, x: _flip_scan(torch.cumsum, x, 0) - x,
        [torch.randn(300, 7)],
        [["cumsum", "sub"]],
    ),
    "three_scans_of_one_tensor": (
        lambda m, x: (torch.cumsum(x, 0), _flip_scan(torch.cumsum, x, 0) * 2, torch.cumprod(x, 1)),
        [torch.randn(40, 30)],
        [["cumsum", "cumsum", "mul"], ["cumprod"]],  # the scans down the columns share a kernel
    ),
    "cumsum_returned_and_scaled": (
        lambda m, x: (torch.cumsum(x, 1), torch.cumsum(x, 1) * 2),
        [torch.randn(32, 500)],
        [["cumsum", "mul"]],  # the kernel writes both
    ),
    "masked_cumsum_then_pointwise": (
        lambda m, x, k, y: torch.cumsum(x * k, -1) * 0.5 + y,
        [torch.randn(16, 700), (torch.rand(16, 700) > 0.5).float(), torch.randn(16, 1)],
        [["mul", "cumsum", "mul", "add"]],
    ),
    "cumsum_masked_by_int64_positions": (
        lambda m, x, i: torch.cumsum(torch.where(i <= 350, x, 0.0), 1),
        [torch.randn(16, 700), torch.randint(0, 700, (16, 700))],
        [["le", "full", "where", "cumsum"]],  # int64 loads past a row's end pad with a long long zero
    ),
    "reverse_cumprod_half_to_double": (
        lambda m, x: _flip_scan(torch.cumprod, 1 + 0.01 * x, 0, dtype=torch.float64),
        [torch.randn(100, 5, dtype=torch.float16)],
        [["mul", "add", "cast", "cumprod"]],
    ),
}


def _plan(name):
    fn, inputs, _ = CASES[name]
    model = Fn(fn)
    return model, inputs, compile_ir(capture(model, inputs, name=name).text, arch=90).plan


@pytest.mark.parametrize("name", list(CASES))
def test_scans_plan_scan_kernels_only(name):
    _, _, plan = _plan(name)
    assert [s.kind for s in plan.run] == ["launch"] * len(plan.run), str(plan)
    kernels = [plan.kernels[s.kernel] for s in plan.run]
    assert [[n.op for n in k.nodes] for k in kernels] == CASES[name][2]
    assert {k.kind for k in kernels} == {"scan"}
    for k, loaded in zip(kernels, core.load_kernels(kernels, 90)):
        assert not isinstance(loaded, str), (k.name, loaded)


@pytest.mark.parametrize("name", list(CASES))
def test_scans_match_eager_on_the_cpu_executor(name):
    torch.manual_seed(0)
    model, inputs, plan = _plan(name)
    with torch.no_grad():
        got = Executor(plan, torch.device("cpu"))(list(inputs))[0]
        want = model(*inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
