"""Fault inputs on a GPU: arguments on another device, of another dtype,
shape or strides re-specialize (same answer as eager) or raise eager's own
error; NaN and Inf propagate through the generated kernels as in eager.
Run: .venv/bin/python -m pytest -q -m gpu tests/python/test_faults_gpu.py"""

import warnings

import pytest
import torch

import fuseforge
from fault_models import Pointwise, RowSoftmax

pytestmark = pytest.mark.gpu


class LinearGelu(torch.nn.Module):
    def __init__(self, features=256, out=128):
        super().__init__()
        self.fc = torch.nn.Linear(features, out)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x)) * 0.5


def _same_as_eager(fast, model, x, **tol):
    with torch.no_grad():
        ours, eager = fast(x), model(x)
    assert ours.dtype == eager.dtype and ours.shape == eager.shape
    assert torch.equal(ours.isnan(), eager.isnan()) and torch.equal(ours.isinf(), eager.isinf())
    torch.testing.assert_close(ours, eager, equal_nan=True, **tol)
    return ours


def _faulty(shape, device="cuda"):
    torch.manual_seed(0)
    x = torch.randn(*shape, device=device)
    flat = x.view(-1)
    flat[3], flat[1000], flat[2047] = float("nan"), float("inf"), float("-inf")
    return x


# 3xTF32 GEMMs (CUTLASS's OpMultiplyAddFastF32 and our sm90 mainloop) split
# each operand into big + small parts: an inf gives inf - inf = NaN as its
# small part, and inf times a weight's zero small part is NaN too, so a row
# with an inf gives NaN where eager's fp32 GEMM gives +-inf. Known, not fixed.
_SPLIT_INF = pytest.mark.xfail(strict=True, reason="3xTF32's big/small split turns an inf operand into NaN")


@pytest.mark.parametrize(
    "model, rows",
    [
        (Pointwise(), 512),
        (RowSoftmax(), 512),
        pytest.param(LinearGelu(), 512, marks=_SPLIT_INF, id="LinearGelu-cutlass-sm80"),
        pytest.param(LinearGelu(1024, 1024), 4096, marks=_SPLIT_INF, id="LinearGelu-sm90-mainloop"),
    ],
    ids=lambda m: type(m).__name__ if isinstance(m, torch.nn.Module) else None,
)
def test_nan_and_inf_propagate_as_in_eager(model, rows):
    model = model.cuda()
    fast = fuseforge.optimize(model)
    features = next(model.parameters()).shape[-1] if isinstance(model, LinearGelu) else 256
    _same_as_eager(fast, model, torch.randn(rows, features, device="cuda"), rtol=1e-4, atol=1e-4)
    ours = _same_as_eager(fast, model, _faulty((rows, features)), rtol=1e-4, atol=1e-4)
    assert ours.isnan().any() and len(fast.specializations()) == 1  # same shapes: the same kernels ran


def test_other_shapes_dtypes_and_strides_respecialize_with_eagers_answer():
    model = Pointwise().cuda()
    fast = fuseforge.optimize(model)
    base = torch.randn(256, 512, device="cuda")
    _same_as_eager(fast, model, base)
    _same_as_eager(fast, model, torch.randn(64, 33, device="cuda"))  # another shape
    _same_as_eager(fast, model, base.t())  # transposed strides
    _same_as_eager(fast, model, base[:, ::3])  # a strided slice
    _same_as_eager(fast, model, base[:1].expand(256, 512))  # stride 0
    _same_as_eager(fast, model, base.half(), rtol=1e-3, atol=1e-3)  # f16
    _same_as_eager(fast, model, base.double(), rtol=1e-12, atol=1e-12)  # f64
    _same_as_eager(fast, model, _faulty((256, 512)).t())  # NaN/Inf, transposed
    assert len(fast.specializations()) >= 6


def test_inputs_the_model_rejects_raise_eagers_error():
    model = LinearGelu().cuda()
    fast = fuseforge.optimize(model)
    _same_as_eager(fast, model, torch.randn(8, 256, device="cuda"), rtol=1e-4, atol=1e-4)
    for bad in (torch.randn(8, 100, device="cuda"), torch.randn(8, 256, device="cuda", dtype=torch.float64)):
        with pytest.raises(RuntimeError) as eager_error:
            model(bad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError) as ours:
                fast(bad)
        assert str(ours.value) == str(eager_error.value)


def test_inputs_on_another_device_run_eagerly_or_raise_eagers_error():
    model = Pointwise().cuda()
    fast = fuseforge.optimize(model)
    cpu = torch.randn(16, 16)
    with pytest.warns(UserWarning, match="eagerly: inputs on cpu"):
        torch.testing.assert_close(fast(cpu), model(cpu))  # no CUDA tensor: eager, with one warning
    linear = LinearGelu().cuda()
    fast_linear = fuseforge.optimize(linear)
    with pytest.raises(RuntimeError, match="device"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast_linear(torch.randn(8, 256))  # weights on cuda, input on the CPU: eager's device error
