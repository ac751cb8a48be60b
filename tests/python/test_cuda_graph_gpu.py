"""CUDA graph replay of a plan (runtime/cuda_graph.py) on the GPU: with
FUSEFORGE_CUDA_GRAPHS=always every plan that can be captured replays, and
a replayed call keeps a plain run's semantics: new inputs each call,
outputs never overwritten by a later call, train-mode buffer updates once
per call, weights changed in place or replaced, other input shapes, the
caller's stream, the torch.compile backend."""

import copy

import pytest
import torch
from torch import nn

import fuseforge
from fuseforge.runtime import cuda_graph

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _always(monkeypatch):
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "always")


class ConvBlock(nn.Module):
    """Conv, BatchNorm, ReLU, a residual add and a pooled head: several
    kernels and library calls, and running statistics in train mode."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))) + x
        return self.head(y.mean(dim=(2, 3)))


class ScaledLinear(nn.Module):
    """A weight-derived value (the scaled weight) the prepare section computes."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 32))

    def forward(self, x):
        return torch.tanh(x @ (self.weight * 0.5).t()) * 2.0


def _graphed(fast) -> list:
    return [s for s in fast.specializations() if s.executor.graph is not None]


def _pair(make, train=False):
    torch.manual_seed(0)
    model = make().cuda().train(train)
    return model, copy.deepcopy(model)


@pytest.mark.parametrize("train", [False, True])
def test_replayed_calls_match_eager_with_new_inputs(train):
    model, reference = _pair(ConvBlock, train)
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        for i in range(5):
            x = torch.randn(4, 8, 16, 16, device="cuda")
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
            if i == 0:
                assert len(_graphed(fast)) == 1
    # Train mode: the running statistics were updated once per call, as eager's.
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.bn.running_var, reference.bn.running_var, rtol=1e-5, atol=1e-6)
    assert model.bn.num_batches_tracked.item() == reference.bn.num_batches_tracked.item()
    (spec,) = fast.specializations()
    assert [s[0] for s in spec.executor.fast_steps()] == ["python"]  # the replay
    assert spec.fast and spec.fast.served >= 3


def test_an_output_is_not_overwritten_by_the_next_call():
    model, reference = _pair(ScaledLinear)
    fast = fuseforge.optimize(model)
    x1, x2 = torch.randn(8, 32, device="cuda"), torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        first = fast(x1)
        kept = first.clone()
        for _ in range(3):
            fast(x2)
    assert _graphed(fast)
    torch.testing.assert_close(first, kept, rtol=0, atol=0)


def test_weights_changed_in_place_or_replaced_are_seen():
    model, reference = _pair(ScaledLinear)
    fast = fuseforge.optimize(model)
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        for _ in range(2):
            fast(x)
        assert _graphed(fast)
        model.weight.mul_(2)  # the prepare section recomputes; the graph reads its new value
        reference.weight.mul_(2)
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
        model.weight = nn.Parameter(torch.randn(16, 32, device="cuda"))  # new storage: captured again
        reference.weight = nn.Parameter(model.weight.detach().clone())
        for _ in range(2):
            torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
        model.weight.data = torch.randn(16, 32, device="cuda")  # same Parameter, new storage
        reference.weight.data = model.weight.data.clone()
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)


def test_another_input_shape_gets_a_graph_of_its_own():
    model, reference = _pair(ConvBlock)
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        for shape in [(4, 8, 16, 16), (2, 8, 12, 12), (4, 8, 16, 16)]:
            for _ in range(2):
                x = torch.randn(*shape, device="cuda")
                torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
    assert len(_graphed(fast)) == 2


def test_replay_runs_on_the_callers_stream():
    model, reference = _pair(ConvBlock)
    fast = fuseforge.optimize(model)
    x = torch.randn(4, 8, 16, 16, device="cuda")
    with torch.no_grad():
        fast(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = torch.randn(4, 8, 16, 16, device="cuda")
            got = fast(y)
            want = reference(y)
        torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_the_backend_replays_inference_graphs():
    model, reference = _pair(ConvBlock, train=True)
    compiled = torch.compile(model, backend="fuseforge")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 8, 16, 16, device="cuda")
            torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.bn.running_var, reference.bn.running_var, rtol=1e-5, atol=1e-6)


def test_the_backend_decides_replay_at_a_graphs_second_call():
    """Not at the first, which dynamo makes straight after its compile, where
    the step-by-step run times slow (runtime/training.py)."""
    from fuseforge.runtime import training

    torch._dynamo.reset()
    model, reference = _pair(ConvBlock, train=False)
    before = set(training._LIVE)
    compiled = torch.compile(model, backend="fuseforge")
    x = torch.randn(4, 8, 16, 16, device="cuda")
    with torch.no_grad():
        compiled(x)
        (graph,) = [g for g in training._LIVE if g not in before]
        assert graph.graphed is None
        for _ in range(2):
            torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
        assert graph.graphed is True


def test_training_steps_replay_and_match_eager():
    model, reference = _pair(ConvBlock, train=True)
    fast = fuseforge.optimize(model)
    for _ in range(3):
        x = torch.randn(4, 8, 16, 16, device="cuda")
        fast(x).square().sum().backward()
        reference(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean, rtol=1e-5, atol=1e-6)
    (step,) = fast._ff_training.values()
    assert all(g.executor.graph is not None for g in step.graphs)


def _choosing(monkeypatch, time_cuda):
    """Under auto, with no choice known before and the two ways timed by
    `time_cuda`: an optimized ScaledLinear not called yet, its reference, an
    input, and the graph choices adopt keeps from now on, by key."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "auto")
    monkeypatch.setattr(cuda_graph.timing, "time_cuda", time_cuda)
    monkeypatch.setattr(cuda_graph.autotune, "load", lambda *_: {})
    stored: dict = {}

    def store(k, value, *_):
        if k.startswith("cuda-graph"):
            stored[k] = value

    monkeypatch.setattr(cuda_graph.autotune, "store", store)
    model, reference = _pair(ScaledLinear)
    return fuseforge.optimize(model), reference, torch.randn(8, 32, device="cuda"), stored


def test_the_choice_is_timed_and_kept(monkeypatch):
    """auto: both ways timed once per plan; the recorded choice stands."""
    calls = {}

    def timed(fns, **_):  # both ways called; step by step faster: the plan does not replay
        for name, fn in fns.items():
            fn()
            calls[name] = calls.get(name, 0) + 1
        return {"plain": 1.0, "graph": 2.0}

    fast, _, x, stored = _choosing(monkeypatch, timed)
    with torch.no_grad():
        fast(x)
    assert not _graphed(fast)
    assert calls == {"plain": 1, "graph": 1}
    assert list(stored.values()) == ["plain"]


def test_no_memory_to_time_the_choice_runs_step_by_step_and_keeps_no_choice(monkeypatch):
    """auto: where the timing's L2 flush does not fit, the plan runs step by
    step, its outputs right, and no choice is kept for a process with room."""

    def out_of_memory(fns, **_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    fast, reference, x, stored = _choosing(monkeypatch, out_of_memory)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-4)
    assert not _graphed(fast)
    assert stored == {}
