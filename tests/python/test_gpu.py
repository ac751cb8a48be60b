"""GPU tests: every problem's optimized outputs match eager within 1e-4 in the
model's mode, and buffers are updated identically. Skipped without a GPU."""
import copy

import pytest
import torch

import fuseforge
from fuseforge.cli import check_correctness, _build
from fuseforge.problem import problem_name

from conftest import PROBLEMS

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("path", PROBLEMS, ids=problem_name)
def test_problem_matches_eager(path):
    mod, model = _build(str(path), None, "cuda")
    result = check_correctness(mod, model, seeds=2, device="cuda")
    assert result["correct"], result
    torch.cuda.empty_cache()


@pytest.mark.parametrize("path", [p for p in PROBLEMS if "batchnorm" in p.stem], ids=problem_name)
def test_train_mode_updates_buffers_like_eager(path):
    mod, model = _build(str(path), "train", "cuda")
    result = check_correctness(mod, model, seeds=2, device="cuda")
    assert result["correct"], result


def test_state_dict_and_mode_are_shared():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32)).cuda()
    fast = fuseforge.optimize(model)
    assert list(fast.state_dict()) == list(model.state_dict())
    fast.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert float(model[0].weight.abs().sum()) == 0.0
    fast.eval()
    x = torch.randn(16, 64, device="cuda")
    torch.testing.assert_close(fast(x), model.eval()(x), rtol=1e-4, atol=1e-4)


def test_new_shape_respecializes_and_cpu_runs_eager():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()).cuda()
    fast = fuseforge.optimize(model)
    for n in (8, 24):
        x = torch.randn(n, 32, device="cuda")
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert len(fast.specializations()) == 2
    cpu = copy.deepcopy(model).cpu()
    fast_cpu = fuseforge.optimize(cpu)
    x = torch.randn(4, 32)
    torch.testing.assert_close(fast_cpu(x), cpu(x))


def test_replaced_parameter_respecializes():
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).cuda()
    fast = fuseforge.optimize(model)
    x = torch.randn(8, 32, device="cuda")
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    # Same shape, other strides: the plan's layout assumptions no longer hold.
    model[0].weight = torch.nn.Parameter(torch.randn(32, 16, device="cuda").t())
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert len(fast.specializations()) == 2


def test_wrong_input_raises_like_eager():
    model = torch.nn.Linear(32, 16).cuda()
    fast = fuseforge.optimize(model)
    with pytest.raises(RuntimeError):
        fast(torch.randn(4, 31, device="cuda"))


def test_backward_fails_loudly():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).cuda()
    out = fuseforge.optimize(model)(torch.randn(4, 8, device="cuda"))
    with pytest.raises(RuntimeError, match="backward"):
        out.sum().backward()


def test_odd_sizes_and_views():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.sigmoid(x.transpose(0, 1)) * y + 1.5
    for shape in [(1, 1), (3, 5), (7, 1029), (33, 4096)]:
        x = torch.randn(*shape, device="cuda")
        y = torch.randn(shape[1], shape[0], device="cuda")
        fast = fuseforge.optimize(M())
        torch.testing.assert_close(fast(x, y), M()(x, y), rtol=1e-5, atol=1e-6)
    base = torch.randn(1025, device="cuda")
    x = base[1:].view(32, 32)  # misaligned for vector loads: the scalar path must run
    torch.testing.assert_close(fuseforge.optimize(M())(x, x), M()(x, x), rtol=1e-5, atol=1e-6)


def test_transposing_kernels_match_eager():
    """Groups whose input is unit-stride along another dim than the output's
    go through shared-memory tiles; edge tiles and odd sizes must be exact."""
    class M(torch.nn.Module):
        def forward(self, x, b):
            return torch.minimum(x.transpose(1, 2).contiguous() + b, torch.tensor(0.25))
    for shape in [(1, 1, 1), (3, 33, 65), (2, 128, 100), (5, 7, 1030)]:
        x = torch.randn(*shape, device="cuda")
        b = torch.randn(shape[1], device="cuda")
        fast = fuseforge.optimize(M())
        torch.testing.assert_close(fast(x, b), M()(x, b), rtol=0, atol=0)
        plan = fast.specializations()[0].plan
        if shape[1] > 1 and shape[2] > 1:
            assert any(k["grid"][0] > 0 for k in plan["kernels"]), plan["kernels"]
