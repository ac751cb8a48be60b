"""Training through `fuseforge.optimize` and the torch.compile backend on a
GPU: gradients, running statistics and eager's autograd semantics. Every
problem's training step is checked by `fuseforge bench --train`; these cover
what a training loop relies on."""

import copy

import pytest
import torch
from torch import nn

import fuseforge
from test_training import ConvBatchNormResidual, LayerNormAttention, LinearBatchNormRelu, _loss

pytestmark = pytest.mark.gpu

MODELS = [(LinearBatchNormRelu, (64, 6)), (ConvBatchNormResidual, (8, 3, 16, 16)), (LayerNormAttention, (4, 32, 8))]
IDS = ["linear_bn_relu", "conv_bn_residual", "layernorm_attention"]


def _pair(make):
    torch.manual_seed(0)
    model = make().cuda()
    return model, copy.deepcopy(model)


def _assert_same_training(model, reference):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    for (name, b), c in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


def _trained_conv_bn(monkeypatch, graphs: str, steps: int):
    """ConvBatchNormResidual optimized and eager, `steps` training steps each
    (FUSEFORGE_CUDA_GRAPHS=`graphs`): (model, reference, optimized, input)."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", graphs)
    model, reference = _pair(ConvBatchNormResidual)
    fast = fuseforge.optimize(model)
    x = torch.randn(8, 3, 16, 16, device="cuda")
    for _ in range(steps):
        _loss(fast(x)).backward()
        _loss(reference(x)).backward()
    return model, reference, fast, x


@pytest.mark.parametrize("make, shape", MODELS, ids=IDS)
@pytest.mark.parametrize("through", ["optimize", "backend"])
def test_three_steps_match_eager(make, shape, through):
    model, reference = _pair(make)
    fast = fuseforge.optimize(model) if through == "optimize" else torch.compile(model, backend="fuseforge")
    x = torch.randn(shape, device="cuda", requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    for _ in range(3):  # gradients accumulate over the steps, as eager's do
        _loss(fast(x)).backward()
        _loss(reference(x_ref)).backward()
    _assert_same_training(model, reference)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)


def test_the_backward_runs_compiled_kernels(monkeypatch):
    """Both graphs are plans with kernels; from the second step on they run
    on the native call path (step by step here: no CUDA graph)."""
    model, reference, fast, _ = _trained_conv_bn(monkeypatch, "off", 3)
    _assert_same_training(model, reference)
    (step,) = fast._ff_training.values()
    kinds = [g.captured.text.split("(")[0] for g in step.graphs]
    assert kinds == ["graph @forward", "graph @backward"]
    assert all(len(g.compiled.plan.kernels) > 0 for g in step.graphs)
    assert [g.fast.served for g in step.graphs] == [2, 2]


class SigmoidAndTanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(256, 256), nn.Linear(256, 256)

    def forward(self, x):
        return torch.sigmoid(self.a(x)), torch.tanh(self.b(x)).square().mean(-1)


@pytest.mark.parametrize("graphs", ["off", "auto"])
def test_running_statistics_are_written_in_place(monkeypatch, graphs):
    """The forward's kernels write a train-mode BatchNorm's new running
    statistics (and batch count) into the buffers themselves: the write-back
    after the call copies nothing (no device-to-device copy in a step), the
    buffers stay the same tensors, and they match eager's."""
    model, reference, fast, x = _trained_conv_bn(monkeypatch, graphs, 2)
    pointers = [b.data_ptr() for b in model.buffers()]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _loss(fast(x)).backward()
        torch.cuda.synchronize()
    _loss(reference(x)).backward()
    assert [e.name for e in prof.events() if "Memcpy" in e.name] == []
    assert [b.data_ptr() for b in model.buffers()] == pointers
    _assert_same_training(model, reference)


@pytest.mark.parametrize("graphs", ["off", "auto"])
def test_the_backward_writes_over_saved_values_it_is_given_and_no_others(monkeypatch, graphs):
    """tanh's saved output is donated to the backward, which writes a
    gradient over it; sigmoid's is an output of the step, which the caller
    keeps: it must come out of backward as it went in. Gradients as eager's,
    step after step (native call path, CUDA graph)."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", graphs)
    model, reference = _pair(SigmoidAndTanh)
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    for _ in range(3):
        s, m = fast(x)
        kept = s.detach().clone()
        (s.sum() + m.sum()).backward()
        assert torch.equal(s.detach(), kept)
        s_ref, m_ref = reference(x_ref)
        (s_ref.sum() + m_ref.sum()).backward()
    _assert_same_training(model, reference)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    (step,) = fast._ff_training.values()
    backward = step.graphs[1].compiled.plan
    donated = {b.name for b in backward.buffers if b.donated}
    over = {backward.buffers[k.inputs[j].memory].name for k in backward.kernels for j in k.over if j >= 0}
    assert over & donated


@pytest.mark.parametrize("graphs", ["off", "auto"])
def test_an_output_written_over_a_reshaped_result_keeps_its_own_shape(monkeypatch, graphs):
    """The attention's input projection adds its bias in a kernel written over
    the projection GEMM's 2-D result, read through a 3-D view: the output is
    that view's shape (the forward saves it for the backward, which would
    otherwise re-lay out a tensor of the wrong shape)."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", graphs)

    def make():
        return nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)

    model, reference = _pair(make)
    fast = fuseforge.optimize(model)
    x = torch.randn(4, 32, 64, device="cuda")
    for _ in range(3):
        out, want = fast(x), reference(x)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        _loss(out).backward()
        _loss(want).backward()
    _assert_same_training(model, reference)
    (step,) = fast._ff_training.values()
    forward = step.graphs[0].compiled.plan
    reshaped = [
        k.name
        for k in forward.kernels
        for o, j in zip(k.outputs, k.over)
        if j >= 0 and forward.buffers[k.inputs[j].memory].shape != forward.buffers[o].shape
    ]
    assert reshaped, "no forward kernel writes over a reshaped input: the case this test is for is gone"


def test_no_grad_calls_take_the_inference_plan():
    """Under no_grad and inference_mode the inference plan runs (no training
    step is compiled), and train-mode running statistics still update."""
    model, reference = _pair(LinearBatchNormRelu)
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 6, device="cuda")
    with torch.no_grad():
        out = fast(x)
        reference(x)
    with torch.inference_mode():
        fast(x)
        reference(x)
    assert not out.requires_grad and not fast._ff_training and len(fast.specializations()) == 1
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-5)


def test_sgd_steps_follow_eager():
    model, reference = _pair(ConvBatchNormResidual)
    fast = fuseforge.optimize(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.05)
    torch.manual_seed(1)
    for _ in range(10):
        x = torch.randn(8, 3, 16, 16, device="cuda")
        for m, o in ((fast, opt), (reference, opt_ref)):
            o.zero_grad()
            loss = _loss(m(x))
            loss.backward()
            o.step()
        torch.testing.assert_close(model.conv.weight, reference.conv.weight, rtol=1e-4, atol=1e-5)


def test_a_new_batch_size_gets_a_step_of_its_own():
    model, reference = _pair(LinearBatchNormRelu)
    fast = fuseforge.optimize(model)
    for rows in (64, 32):
        x = torch.randn(rows, 6, device="cuda")
        _loss(fast(x)).backward()
        _loss(reference(x)).backward()
    assert len(fast._ff_training) == 2
    _assert_same_training(model, reference)


def test_a_replaced_parameter_is_trained():
    model, reference = _pair(LinearBatchNormRelu)
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 6, device="cuda")
    _loss(fast(x)).backward()
    weight = torch.randn(4, 6, device="cuda")
    model.fc.weight = nn.Parameter(weight.clone())
    reference.fc.weight = nn.Parameter(weight.clone())
    _loss(fast(x)).backward()
    _loss(reference(x)).backward()
    torch.testing.assert_close(model.fc.weight.grad, reference.fc.weight.grad, rtol=1e-4, atol=1e-4)


def test_double_backward_raises():
    model, _ = _pair(LinearBatchNormRelu)
    fast = fuseforge.optimize(model)
    x = torch.randn(64, 6, device="cuda", requires_grad=True)
    (grad,) = torch.autograd.grad(_loss(fast(x)), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


@pytest.mark.parametrize("graphs", ["off", "always"])
def test_backend_inference_updates_running_statistics_and_prepares_once(monkeypatch, graphs):
    """Through the torch.compile backend, an inference call of a train-mode
    BatchNorm model runs a fuseforge plan (no eager fallback), writes the
    running statistics into the buffers themselves (step by step,
    AOTAutograd's write-back then copies nothing) as eager updates them,
    also replayed as a CUDA graph, and a weight-derived value is recomputed
    after an in-place weight update."""
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", graphs)
    torch._dynamo.reset()
    model, reference = _pair(LinearBatchNormRelu)
    compiled = torch.compile(model, backend="fuseforge")
    x = torch.randn(64, 6, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            compiled(x)
            torch.cuda.synchronize()
        reference(x)
        if graphs == "off":  # a replay copies x in, and the new statistics into the buffers within the graph
            assert [e.name for e in prof.events() if "Memcpy" in e.name] == []
        model.fc.weight.mul_(0.5)
        reference.fc.weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-5)
