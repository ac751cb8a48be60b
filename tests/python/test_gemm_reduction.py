"""Reductions fused into GEMM kernels' epilogues: the kernel writes block
partials of a row or column reduction, a library call reduces those. On the
CPU: the plans (Hopper's wgmma kernel and the CUTLASS one of other GPUs) and
their meaning (the GEMM group op by op through ATen); on an H100: both
kernels against eager and fp64."""

import pytest
import torch

import fuseforge
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir


class LinearReduce(torch.nn.Module):
    """linear -> swish -> a reduction over one dim of the result."""

    def __init__(self, k: int, n: int, reduce: str, dim: int, keepdim: bool = False):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)
        self.reduce, self.dim, self.keepdim = reduce, dim, keepdim

    def features(self, x):
        y = self.fc(x)
        return y * torch.sigmoid(y)

    def forward(self, x):
        return getattr(torch, self.reduce)(self.features(x), dim=self.dim, keepdim=self.keepdim)


class BmmReduce(torch.nn.Module):
    """relu(q @ k.T), then a reduction over its rows or columns (a sum of
    the plain product would become a GEMV: matmul_sum_to_gemv)."""

    def __init__(self, reduce: str, dim: int):
        super().__init__()
        self.reduce, self.dim, self.keepdim = reduce, dim, False

    def features(self, q, k):
        return torch.relu(torch.bmm(q, k.transpose(1, 2)))

    def forward(self, q, k):
        return getattr(torch, self.reduce)(self.features(q, k), dim=self.dim, keepdim=self.keepdim)


class Features(torch.nn.Module):
    """A test model without its reduction (its GEMM kernel writes every value)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *xs):
        return self.model.features(*xs)


# (model, input shapes, block partials' shape); K >= 1024: Hopper's kernel, else CUTLASS's. The
# linears have 33 tiles of 128 x 128 or more, which split_gemm_k keeps whole (fewer would run split
# along K instead, as a bmm whose sum the reduction kernels take).
CASES = [
    (LinearReduce(1024, 320, "sum", 1), [(1400, 1024)], (1400, 5)),
    (LinearReduce(1024, 256, "mean", -1, keepdim=True), [(2180, 1024)], (2180, 4)),
    (LinearReduce(1024, 96, "amax", 0), [(4224, 1024)], (66, 96)),
    (LinearReduce(1024, 300, "amin", 0, keepdim=True), [(1408, 1024)], (22, 300)),
    (BmmReduce("sum", 2), [(3, 100, 1024), (3, 48, 1024)], (3, 100, 3)),
    (BmmReduce("amax", 1), [(2, 64, 1024), (2, 70, 1024)], (2, 1, 70)),
    (LinearReduce(512, 320, "sum", 1), [(1400, 512)], (1400, 5)),
    (LinearReduce(256, 192, "amax", 0), [(320, 256)], (5, 192)),
    (BmmReduce("mean", 2), [(3, 100, 64), (3, 96, 64)], (3, 100, 3)),
]
IDS = [
    "rows_sum",
    "rows_mean_keepdim",
    "cols_amax",
    "cols_amin_keepdim",
    "bmm_rows_sum",
    "bmm_cols_amax",
    "short_k_rows_sum",
    "short_k_cols_amax",
    "short_k_bmm_rows_mean",
]


def _inputs(shapes, device="cpu"):
    torch.manual_seed(0)
    return [torch.randn(*s, device=device) for s in shapes]


def _reduces(k) -> bool:
    """A GEMM kernel that writes block partials (Hopper's or CUTLASS's form)."""
    return "ff_sm90::reduce_" in k.source or "TileVisitor visitor" in k.source


@pytest.mark.parametrize("arch", [90, 80])
@pytest.mark.parametrize("model,shapes,partials", CASES, ids=IDS)
def test_plan_writes_block_partials_and_means_the_same(model, shapes, partials, arch):
    torch.manual_seed(0)
    model = model.eval()
    xs = _inputs(shapes)
    cap = capture(model, xs, name="r")
    plan = compile_ir(cap.text, gemm="all", arch=arch).plan
    (k,) = [k for k in plan.kernels if k.kind == "gemm"]
    assert _reduces(k) and k.sm90a == (arch == 90 and shapes[0][-1] >= 1024), k.name
    (out,) = k.outputs
    assert tuple(plan.buffers[out].shape) == partials
    # The partials are all the kernel writes; one reduction kernel reduces them.
    readers = [r for r in plan.kernels if out in [i.buffer for i in r.inputs]]
    assert len(readers) == 1 and readers[0].kind == "reduction", [r.name for r in readers]
    assert readers[0].nodes[0].op in ("sum", "mean", "amax", "amin"), readers[0].graph
    # The plan, run on the CPU (the GEMM group op by op through ATen), is the model.
    (got,) = Executor(plan, torch.device("cpu"))(cap.graph_inputs(model, xs))[0]
    torch.testing.assert_close(got, model(*xs).detach(), rtol=1e-5, atol=1e-5)


def test_reduction_stays_whole_where_matmuls_are_library_calls(monkeypatch):
    """With no f32 GEMM kernel (FUSEFORGE_GEMM=0, or tf32's default of cuBLAS
    calls) nothing is split: the sum reads the matmul's result."""
    model, shapes, _ = CASES[0]
    text = capture(model.eval(), _inputs(shapes), name="r").text
    monkeypatch.delenv("FUSEFORGE_GEMM", raising=False)
    for gemm, precision in (("off", "fp32"), (None, "tf32")):
        compiled = compile_ir(text, precision, 90, gemm=gemm)
        assert not any(k.kind == "gemm" for k in compiled.plan.kernels), (gemm, precision)
        assert compiled.ir_after.count("sum(") == 1 and "view" not in compiled.ir_after


hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="wgmma kernels need sm_90"
)


def _fp64(model, xs):
    import copy

    with torch.no_grad():
        return copy.deepcopy(model).double()(*[x.double() for x in xs])


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("model,shapes,partials", CASES, ids=IDS)
def test_reduction_epilogue_matches_eager_and_fp64(model, shapes, partials):
    """Eager's 1e-4; the same bits on every run (the block order is fixed);
    against fp64, at most twice eager's max error, or where the GEMM kernel
    itself is the cause, no worse than reducing that kernel's full output.
    Sums with K >= 1024 take Hopper's kernel, shorter ones CUTLASS's: its
    tensor cores truncate while accumulating, a bias toward zero that a sum
    over a row adds up (measured on an H100: 3x eager's error for a row sum
    at K = 512, fused or not)."""
    model = model.cuda().eval()
    xs = _inputs(shapes, "cuda")
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        out, ref = fast(*xs), model(*xs)
        again = fast(*xs)
        unfused = getattr(torch, model.reduce)(
            fuseforge.optimize(Features(model))(*xs), dim=model.dim, keepdim=model.keepdim
        )
    (k,) = [k for k in fast.specializations()[0].compiled.plan.kernels if k.kind == "gemm"]
    assert _reduces(k) and k.sm90a == (shapes[0][-1] >= 1024), k.name
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(out, again)
    ref64 = _fp64(model, xs)
    ours, eager, whole = (float((y.double() - ref64).abs().max()) for y in (out, ref, unfused))
    print(
        f"{k.name}: max abs error vs fp64 fuseforge {ours:.3g}, eager {eager:.3g}, "
        f"the same GEMM kernel unfused {whole:.3g}"
    )
    assert ours <= 2 * eager + 1e-6 or (not k.sm90a and ours <= 1.25 * whole), (ours, eager, whole)


@pytest.mark.gpu
@hopper
def test_reduction_epilogue_propagates_nan_like_eager():
    """A NaN in one input row reaches that row's sum and every column's amax."""
    model = LinearReduce(1024, 256, "amax", 0).cuda().eval()
    x = torch.randn(4224, 1024, device="cuda")  # 66 tiles: K stays whole
    x[7, 3] = float("nan")
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4, equal_nan=True)
        assert fast(x).isnan().all()
