"""The native call path on the GPU: repeated calls of an OptimizedModule launch
its kernels from C++ (runtime/fast_call.py), with the outputs, strides,
streams, weight changes, gradients and specializations of the Python path."""

import pytest
import torch

import fuseforge
from fuseforge.runtime import fast_call

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(fast_call._fast_call is None, reason="_fast_call was not built")]


@pytest.fixture(autouse=True)
def _step_by_step(monkeypatch):
    """The native path's own steps: no plan replays as a CUDA graph here (test_cuda_graph_gpu.py)."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "off")


class GemvSum(torch.nn.Module):
    """gemm_divide_sum_scaling's pattern: a prepared column sum, one reduction kernel."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(128, 256))

    def forward(self, x):
        return (x @ self.weight.t() / 2).sum(dim=1, keepdim=True) * 1.5


class Pointwise(torch.nn.Module):
    def forward(self, x, scale):
        return torch.sigmoid(x) * scale + x.t()


def _served(fast) -> int:
    return sum(s.fast.served for s in fast.specializations() if s.fast)


@pytest.mark.parametrize("train", [False, True])
def test_repeated_calls_launch_natively_and_match_eager(train):
    torch.manual_seed(0)
    model = GemvSum().cuda().train(train)
    fast = fuseforge.optimize(model)
    x = torch.randn(512, 256, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    (spec,) = fast.specializations()
    assert spec.fast.served == 3  # every call after the first
    kinds = [s[0] for s in spec.executor.fast_steps()]
    assert "launch" in kinds and "python" not in kinds, kinds


def test_weight_changes_between_native_calls_are_seen():
    """After each kind of weight change the native path declines one call (the
    Python path recomputes the prepared sums and arms it again), then takes
    the next."""
    torch.manual_seed(0)
    model = GemvSum().cuda()
    fast = fuseforge.optimize(model)
    x = torch.randn(512, 256, device="cuda")

    def check(native):
        spec = fast.specializations()[0] if fast.specializations() else None
        armed = spec.fast if spec else None
        served = armed.served if armed else 0
        with torch.no_grad():
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
        assert (fast.specializations()[0].fast is armed and armed.served == served + 1) == native

    def in_place():
        with torch.no_grad():
            model.weight.mul_(-2.0)

    def optimizer_step():
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model(x).sum().backward()
        opt.step()

    def replaced():
        model.weight = torch.nn.Parameter(torch.randn(128, 256, device="cuda"))

    check(native=False)
    check(native=True)
    for change in (
        in_place,
        optimizer_step,
        lambda: model.load_state_dict({"weight": torch.randn(128, 256)}),
        replaced,
    ):
        change()
        check(native=False)
        check(native=True)


def test_outputs_strides_scalars_and_streams_follow_the_python_path():
    torch.manual_seed(0)
    model = Pointwise().cuda()
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 64, device="cuda")
    outs = []
    with torch.no_grad():
        for scale in (0.5, 2.0, -3.0):
            out = fast(x, scale)
            torch.testing.assert_close(out, model(x, scale))
            assert out.stride() == model(x, scale).stride()
            outs.append(out)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = fast(x, 4.0)
        side.synchronize()
        torch.testing.assert_close(out, model(x, 4.0))
    assert len({o.data_ptr() for o in outs}) == 3  # each call's output is its own memory
    assert _served(fast) == 3


def test_alternating_shapes_keep_both_native_paths():
    model = Pointwise().cuda()
    fast = fuseforge.optimize(model)
    a, b = torch.randn(32, 32, device="cuda"), torch.randn(16, 16, device="cuda")
    with torch.no_grad():
        for x in (a, a, a, b, b, b, a, a):
            torch.testing.assert_close(fast(x, 1.0), model(x, 1.0))
    specs = fast.specializations()
    assert len(specs) == 2
    # Each armed once: a call after a switch takes the Python path, the rest run natively.
    assert [s.fast.served for s in specs] == [3, 2]


def test_calls_that_need_gradients_leave_the_native_path_for_training():
    """After native inference calls, a call under grad mode whose weight
    requires grad is declined natively and runs the training step: its
    output has the compiled backward, whose gradients are eager's."""
    torch.manual_seed(0)
    model = GemvSum().cuda()
    fast = fuseforge.optimize(model)
    x = torch.randn(512, 256, device="cuda")
    with torch.no_grad():
        fast(x)
        fast(x)
    assert _served(fast) == 1
    out = fast(x)
    assert _served(fast) == 1 and out.requires_grad
    out.sum().backward()
    got = model.weight.grad.clone()
    model.weight.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(got, model.weight.grad, rtol=1e-4, atol=1e-4)


def test_batchnorm_running_statistics_follow_eager_through_native_calls():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU()).cuda()
    reference = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU()).cuda()
    reference.load_state_dict(model.state_dict())
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(128, 32, device="cuda")
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
    assert _served(fast) == 3
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(model[1], name), getattr(reference[1], name), rtol=1e-5, atol=1e-6)


class PoolHead(torch.nn.Module):
    """Views between kernels: a slice with an offset of the last kernel's output."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 12)

    def forward(self, x):
        pooled = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return torch.log_softmax(self.fc(pooled), dim=1)[:, 2:]


def test_views_between_kernels_are_made_natively():
    torch.manual_seed(0)
    model = PoolHead().cuda()
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 32, 3, 3, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            out, want = fast(x), model(x)
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
            assert (out.stride(), out.storage_offset()) == (want.stride(), want.storage_offset())
    (spec,) = fast.specializations()
    kinds = [s[0] for s in spec.executor.fast_steps()]
    assert "view" in kinds and "python" not in kinds, kinds
    assert spec.fast.served == 2


def test_training_graphs_make_their_views_natively():
    torch.manual_seed(0)
    model = PoolHead().cuda()
    reference = PoolHead().cuda()
    reference.load_state_dict(model.state_dict())
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 32, 3, 3, device="cuda")
    for _ in range(3):
        for m in (fast, reference):
            m.zero_grad(set_to_none=True)
            (m(x) ** 2).sum().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
    graphs = [g for step in fast._ff_training.values() for g in step.graphs]
    assert {g.kind for g in graphs} == {"forward", "backward"}
    assert all(g.fast and g.fast.served == 2 for g in graphs)
    assert any(s[0] == "view" for g in graphs for s in g.executor.fast_steps())
