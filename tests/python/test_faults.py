"""Fault inputs on the CPU: NaN and Inf go through an optimized plan as they
go through eager (same NaN positions, same infinities), and the checker
calls an output wrong when it has a NaN where eager has none. The GPU side
(wrong device, dtype, shape, strides; NaN/Inf through generated kernels) is
test_faults_gpu.py."""

import pytest
import torch

import fuseforge
from fault_models import Pointwise, RowSoftmax
from fuseforge._native import CPU_CHECK_ARCH
from fuseforge.capture import CaptureError, capture
from fuseforge.harness.compare import judge
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir


class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x)).sum(dim=1)


def faulty(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    flat = x.view(-1)
    flat[3], flat[10], flat[17] = float("nan"), float("inf"), float("-inf")
    return x


@pytest.mark.parametrize("make", [Pointwise, RowSoftmax, LinearGelu], ids=lambda m: m.__name__)
def test_nan_and_inf_propagate_through_the_plan_as_in_eager(make):
    # Weights from a fixed seed, not from whatever the RNG held at collection:
    # torch's vectorized CPU gelu gives NaN at +inf (its scalar path, and
    # ours, inf), so a draw whose fc outputs in the -inf row are all +inf
    # would make eager's row NaN and ours inf.
    torch.manual_seed(1)
    model = make()
    x = faulty((32, 16))
    captured = capture(model, [torch.randn(32, 16)], name=type(model).__name__)  # captured on finite inputs
    plan = compile_ir(captured.text, "fp32", CPU_CHECK_ARCH).plan
    with torch.no_grad():
        (ours,), _ = Executor(plan, torch.device("cpu"))(captured.graph_inputs(model, [x]))
        eager = model(x)
    assert torch.equal(ours.isnan(), eager.isnan()), (ours.isnan().sum(), eager.isnan().sum())
    assert torch.equal(ours.isinf(), eager.isinf()) and torch.equal(ours[ours.isinf()], eager[eager.isinf()])
    assert eager.isnan().any()  # the faults reached the output
    torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_a_nan_where_eager_has_none_is_wrong_even_against_fp64():
    ref = torch.randn(64)
    ref64 = ref.double()
    out = ref.clone()
    out[5] = float("nan")
    ok, err, err64, _ = judge([out], [ref], [ref64], [], [])
    assert not ok and err == float("inf") and err64 == float("inf")
    both = ref.clone()
    both[5] = out[5]
    ok, err, _, _ = judge([out], [both], [both.double()], [], [])
    assert ok and err == 0.0


def test_a_captured_graph_that_does_not_compile_goes_where_capture_failures_go():
    """f64 inputs into f32 weights trace, but the graph mixes dtypes: that is
    a CaptureError (eager runs and raises its own error), not a ValueError
    from the compiler's verifier."""
    fast = fuseforge.optimize(torch.nn.Linear(4, 3))
    with pytest.raises(CaptureError, match="does not compile: .*addmm: operand dtypes differ"):
        fast._specialize([torch.randn(2, 4, dtype=torch.float64)], torch.device("cpu"))
