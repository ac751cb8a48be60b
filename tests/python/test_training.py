"""Training through compiled forward and backward graphs, on the CPU: the
plans run on the reference interpreter (kernels) and ATen (library calls),
so every gradient here comes from the compiled backward graph.

The IR of one forward/backward pair is golden (tests/golden/training/);
gradients, input gradients and running statistics are checked against
eager for a few layer kinds; the backward kernels of every problem compile
with NVRTC (test_backward_kernels_compile_for_sm90)."""

import copy
import logging
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import PROBLEMS
from fuseforge.harness.problem import load_problem, problem_name
from fuseforge.runtime.training import TrainingStep

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "training"


class LinearBatchNormRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x)))


class ConvBatchNormResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return torch.nn.functional.silu(self.bn(self.conv(x))) + x


class ConvGroupNormSilu(nn.Module):
    """Group norm traced for training in its input's own shape
    (decompositions._group_norm_for_training), groups of several channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        return torch.nn.functional.silu(self.norm(self.conv(x)))


class LinearGroupNorm(nn.Module):
    """Group norm of [N, C]: no spatial dims."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        return self.norm(self.fc(x))


class LayerNormAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) * 8**-0.5, dim=-1)
        return self.out(torch.nn.functional.gelu(att @ v)), att.mean()


class TorchAttention(nn.Module):
    """nn.MultiheadAttention: scaled_dot_product_attention, which a CPU
    training step traces as the CPU flash attention and its backward."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def _loss(out):
    leaves = out if isinstance(out, tuple) else (out,)
    return sum((o * torch.linspace(-1, 1, o.numel(), device=o.device).view_as(o)).sum() for o in leaves)


def _steps(model, x, n, compiled):
    """`n` training steps (forward, backward, grads accumulated); returns the last output."""
    step = TrainingStep(model, [x], "fp32") if compiled else None
    out = None
    for _ in range(n):
        out = step([x]) if step is not None else model(x)
        _loss(out).backward()
    return out, step


@pytest.mark.parametrize(
    "make, shape",
    [
        (LinearBatchNormRelu, (8, 6)),
        (ConvBatchNormResidual, (2, 3, 5, 5)),
        (ConvGroupNormSilu, (2, 3, 5, 5)),
        (LinearGroupNorm, (4, 6)),
        (LayerNormAttention, (2, 5, 8)),
        (TorchAttention, (2, 5, 8)),
    ],
    ids=[
        "linear_bn_relu",
        "conv_bn_residual",
        "conv_groupnorm_silu",
        "linear_groupnorm",
        "layernorm_attention",
        "torch_attention",
    ],
)
def test_gradients_and_running_statistics_match_eager(make, shape):
    torch.manual_seed(0)
    model = make()
    reference = copy.deepcopy(model)
    x = torch.randn(shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, step = _steps(model, x, 3, compiled=True)
    want, _ = _steps(reference, x_ref, 3, compiled=False)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-4, rtol=1e-4)
    for (name, b), c in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, atol=1e-6, rtol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
    assert [g.captured.text.split("(")[0] for g in step.graphs] == ["graph @forward", "graph @backward"]


def test_a_layer_norms_saved_statistics_are_reductions():
    """A training forward keeps a layer norm's mean and rstd for the
    backward: IR reductions beside the norm (one kernel with it), not an ATen call."""
    torch.manual_seed(0)
    _, step = _steps(LayerNormAttention(), torch.randn(2, 5, 8, requires_grad=True), 1, compiled=True)
    forward = step.graphs[0].captured.text
    assert "native_layer_norm" not in forward, forward
    assert "layer_norm(" in forward and "mean(" in forward and "var(" in forward and "rsqrt(" in forward


def test_forward_backward_pair_is_golden():
    """The IR of a Linear + train-mode BatchNorm + ReLU step: the forward
    returns the running statistics' new values and what the backward needs
    (the partitioner recomputes the normalization there rather than saving
    it); the backward returns each parameter's gradient and none for the
    running statistics."""
    torch.manual_seed(0)
    _, step = _steps(LinearBatchNormRelu(), torch.randn(8, 6), 1, compiled=True)
    for graph in step.graphs:
        name = graph.captured.text.split("@")[1].split("(")[0]
        want = (GOLDEN / f"linear_bn_relu.{name}.ir").read_text()
        assert graph.captured.text == want, f"{name} graph differs; actual:\n{graph.captured.text}"


def test_grads_accumulate_and_buffers_need_none():
    torch.manual_seed(0)
    model = LinearBatchNormRelu()
    x = torch.randn(8, 6)
    step = TrainingStep(model, [x], "fp32")
    _loss(step([x])).backward()
    first = model.fc.weight.grad.clone()
    _loss(step([x])).backward()
    # The second step runs on the running statistics the first updated, but
    # train-mode BatchNorm normalizes by batch statistics: the same gradient.
    torch.testing.assert_close(model.fc.weight.grad, 2 * first)
    assert int(model.bn.num_batches_tracked) == 2


def test_a_backward_frees_its_saved_values_after_their_last_read():
    """AOTAutograd hands the backward its saved values and lets go of them:
    the backward's plan frees every input it does not return once read for
    the last time (as eager's autograd drops a node's saved tensors), and
    the call empties the list it was handed; the forward's inputs (the
    caller's tensors) are never freed."""
    torch.manual_seed(0)
    model = ConvBatchNormResidual()
    _, step = _steps(model, torch.randn(2, 3, 5, 5), 1, compiled=True)
    forward, backward = (g.executor for g in step.graphs)
    assert forward.released_inputs == frozenset()
    assert backward.released_inputs == frozenset(backward.input_slots) - frozenset(backward.output_slots)
    frees = [line for line in backward.step_texts if line.startswith("free ")]
    assert any("%tangents_1" in line for line in frees), backward.step_texts
    types = [backward.types[s] for s in backward.input_slots]
    inputs = [torch.randn(t.shape, dtype=t.dtype).as_strided(t.shape, t.strides) for t in types]
    backward(inputs, handed_over=True)
    assert inputs == []


@pytest.mark.parametrize(
    "pool, shape, broadcast",
    [
        (nn.AvgPool2d(2), (2, 3, 7, 7), True),  # tiles 4x4 of the conv's 5x5; the last row and column get zeros
        (nn.AvgPool2d(3, stride=2), (2, 3, 9, 9), False),  # overlapping windows
        (nn.AvgPool3d(2, padding=(0,)), (2, 3, 6, 6, 6), True),
    ],
    ids=["tiling_2d", "overlapping_2d", "tiling_3d"],
)
def test_average_pooling_gradient_is_a_broadcast_where_windows_tile(pool, shape, broadcast):
    """Where the windows tile the input (stride = kernel, no padding) the
    pooling's gradient is its window's over the window's size, a broadcast
    the backward's kernels compute; elsewhere ATen's kernel. Both equal
    eager's, and the tiling one no longer needs the conv's result saved."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3) if len(shape) == 4 else nn.Conv3d(3, 4, 3)
    model = nn.Sequential(conv, pool, nn.Sigmoid())
    reference = copy.deepcopy(model)
    x = torch.randn(shape)
    _, step = _steps(model, x, 1, compiled=True)
    _loss(reference(x)).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    backward = step.graphs[1].captured.text
    assert ("avg_pool" not in backward) == broadcast, backward
    assert ("%convolution" in backward) != broadcast, backward


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
def test_a_convs_bias_gradient_is_a_sum_of_the_incoming_gradient(transposed):
    """A conv's bias gradient is summed in the backward's own kernels (where
    the activation's gradient before it is computed); ATen's conv backward
    computes the data and weight gradients only. All equal eager's."""
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(3, 4, 3, stride=2) if transposed else nn.Conv2d(3, 4, 3)
    model = nn.Sequential(conv, nn.Tanh())
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    _, step = _steps(model, x, 1, compiled=True)
    _loss(reference(x_ref)).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    backward = step.graphs[1].captured.text
    assert "[True, True, False]" in backward and "sum(" in backward and "dims=[0, 2, 3]" in backward, backward


@pytest.mark.parametrize(
    "pool, shape, tiles",
    [
        (nn.MaxPool2d(2), (2, 3, 7, 7), True),  # tiles 6x6 of 7x7; the last row and column get zeros
        (nn.MaxPool2d(3, stride=2), (2, 3, 9, 9), False),  # overlapping windows
        (nn.MaxPool1d(2), (2, 3, 9), True),
        (nn.MaxPool3d((1, 2, 2)), (2, 3, 4, 6, 6), False),
    ],
    ids=["tiling_2d", "overlapping_2d", "tiling_1d", "3d"],
)
def test_max_pooling_gradient_follows_the_forward_indices_where_windows_tile(pool, shape, tiles):
    """Where a 1-D or 2-D pool's windows tile the input, max pooling's
    gradient is a masked broadcast the backward's kernels compute (each
    element compared with the index its window's forward picked); elsewhere,
    and for 3-D pools, ATen's kernel. The input holds few distinct values, so
    most windows hold ties: the gradient must go to the element ATen's
    forward picked, not to every maximum."""
    torch.manual_seed(0)
    conv = {3: nn.Conv1d, 4: nn.Conv2d, 5: nn.Conv3d}[len(shape)](3, 4, 1)
    model = nn.Sequential(pool, conv, nn.Sigmoid())
    reference = copy.deepcopy(model)
    x = torch.randint(0, 3, shape).float().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    _, step = _steps(model, x, 1, compiled=True)
    _loss(reference(x_ref)).backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-6, rtol=1e-6)
    assert torch.equal(x.grad != 0, x_ref.grad != 0)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    backward = step.graphs[1].captured.text
    assert ("max_pool" not in backward) == tiles, backward


def test_group_norm_keeps_its_grouped_form_in_an_inference_graph():
    """The torch.compile backend's AOTAutograd traces inference graphs with
    the training table too: without grad, group norm keeps the grouped view
    [N, groups, C / groups, HW] that one kernel computes; a training step's
    forward computes it in the input's own shape."""
    from torch._dynamo.backends.common import aot_autograd

    from fuseforge.runtime.training import aot_compilers

    torch.manual_seed(0)
    model, x = ConvGroupNormSilu(), torch.randn(2, 3, 5, 5)
    compiled: list = []
    torch._dynamo.reset()
    fn = torch.compile(model, backend=lambda gm, ex: aot_autograd(**aot_compilers("fp32", compiled))(gm, ex))
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x), atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
    assert "[2,2,4,25]" in compiled[0].captured.text, compiled[0].captured.text
    _, step = _steps(ConvGroupNormSilu(), x, 1, compiled=True)
    assert "[2,2,4,25]" not in step.graphs[0].captured.text, step.graphs[0].captured.text


class LstmHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, 2, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1]).relu()


def _backend_inference_text(model: nn.Module, x: torch.Tensor) -> str:
    """`model(x)` without grad through the backend's AOTAutograd path (on the
    CPU too), checked against a copy run eagerly, outputs and buffers; the
    inference graph's IR text."""
    from fuseforge.runtime.training import aot_dynamo_graph

    reference = copy.deepcopy(model)
    compiled: list = []
    torch._dynamo.reset()
    fn = torch.compile(model, backend=lambda gm, ex: aot_dynamo_graph(gm, ex, "fp32", compiled))
    with torch.no_grad():
        torch.testing.assert_close(fn(x), reference(x), atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
    for b, c in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, atol=1e-6, rtol=1e-6)
    return compiled[0].captured.text


def test_an_inference_graph_takes_an_rnn_whole(monkeypatch):
    """With dynamo's allow_rnn, an LSTM reaches the backend: an inference
    graph keeps it one op (a cuDNN call on a GPU), as optimize's capture
    does, rather than the decomposition's op per time step."""
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    torch.manual_seed(0)
    text = _backend_inference_text(LstmHead(), torch.randn(3, 5, 8))
    assert 'target="aten.lstm.input"' in text, text


def test_an_inference_graph_takes_instance_norm_in_its_own_shape():
    """As optimize's capture does: statistics over [N, C, H, W] where they
    lie, not ATen's composite over a [1, N*C, H, W] view (AOTAutograd takes
    a composite op's own decomposition before any table); the running
    statistics a train-mode instance norm tracks are updated as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True, track_running_stats=True))
    text = _backend_inference_text(model, torch.randn(2, 3, 8, 8))
    assert "[1,8,6,6]" not in text and "var(%0) {correction=0, dims=[2, 3]" in text, text


def test_double_backward_is_one_clear_error():
    torch.manual_seed(0)
    model = LinearBatchNormRelu()
    x = torch.randn(8, 6, requires_grad=True)
    step = TrainingStep(model, [x], "fp32")
    (grad,) = torch.autograd.grad(_loss(step([x])), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


def test_a_replaced_parameter_is_noticed():
    model = LinearBatchNormRelu()
    x = torch.randn(8, 6)
    step = TrainingStep(model, [x], "fp32")
    assert step.applies(model)
    model.fc.weight = nn.Parameter(torch.randn(4, 6))
    assert not step.applies(model)


def _trains_without_rnn(path):
    """A training problem (train mode, parameters) without an nn.LSTM/GRU/RNN:
    on a GPU those run as cuDNN's fused ops, forward and backward, where on
    the meta device they unroll into one step per time step."""
    mod = load_problem(path)
    with torch.device("meta"):
        model = mod.Model(*mod.get_init_inputs())
    rnn = any(isinstance(m, nn.RNNBase) for m in model.modules())
    return model.training and any(p.requires_grad for p in model.parameters()) and not rnn


TRAINING_PROBLEMS = [p for p in PROBLEMS if _trains_without_rnn(p)]


@pytest.mark.parametrize("path", TRAINING_PROBLEMS, ids=problem_name)
def test_backward_kernels_compile_for_sm90(path, monkeypatch):
    """Each training problem's forward and backward graphs (on the meta
    device: traced, nothing computed) lower, and every kernel of their plans
    compiles with NVRTC for sm_90."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from fuseforge._native import core
    from fuseforge.harness.cpu_check import meta_model
    from fuseforge.runtime import training
    from fuseforge.runtime.options import compile_ir

    plans = {}

    def compile_only(kind, precision, compiled=None, state=0):
        def compile_graph(gm, example_inputs):
            with unset_fake_temporarily():
                captured = training.capture_fx(gm, kind)
                plans[kind] = compile_ir(captured.text, precision, 90).plan
            return gm

        return compile_graph

    monkeypatch.setattr(training, "graph_compiler", compile_only)
    model, inputs = meta_model(load_problem(path), None)
    step = TrainingStep(model, inputs, "fp32")
    out = step(inputs)
    sum(o.sum() for o in torch.utils._pytree.tree_leaves(out) if o.is_floating_point()).backward()
    assert set(plans) == {"forward", "backward"}
    for kind, plan in plans.items():
        for k, loaded in zip(plan.kernels, core.load_kernels(plan.kernels, 90)):
            assert not isinstance(loaded, str), (kind, k.name, loaded)


class DataDependent(nn.Module):
    """A branch on a tensor's value: AOTAutograd cannot trace it whole."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return torch.relu(y)
        return torch.sigmoid(y)


class NormalizedRowsAndColumnStatistics(nn.Module):
    """Row-normalized features, a column statistic and a row logsumexp: in
    the backward, kernels of each reduction read values made from the
    other's results (through a view), which two kernels cannot both do."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.lo, self.hi = nn.Parameter(-torch.ones(16)), nn.Parameter(torch.ones(16))

    def forward(self, x):
        z = self.proj(x)
        z = z / z.norm(p=2, dim=1, keepdim=True).clamp_min(1e-6)
        m = torch.addcmul(torch.lerp(z, torch.clamp(z, self.lo, self.hi), 0.3), z, z, value=0.5)
        return torch.addcdiv(m, z, torch.std(z, dim=0, correction=0) + 1.0, value=0.1).logsumexp(1)


def test_a_backward_whose_reductions_feed_each_other_is_compiled(caplog):
    torch.manual_seed(0)
    model = NormalizedRowsAndColumnStatistics()
    reference = copy.deepcopy(model)
    x = torch.randn(12, 16)
    with caplog.at_level(logging.WARNING, logger="fuseforge"):
        _steps(model, x, 1, compiled=True)
    _steps(reference, x, 1, compiled=False)
    assert "runs eagerly" not in caplog.text, caplog.text
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


class SelectiveScanLoop(nn.Module):
    """A state-space scan written as a Python loop: each step's tensors have
    one [batch, channels, state] domain and each step's reduction over the
    state reads what the next step reads, so in the backward one reduction
    kernel could take in every step."""

    def __init__(self, d=16, state=8):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.proj = nn.Linear(d, 2 * state + 1)
        self.A = nn.Parameter(-torch.rand(d, state))

    def forward(self, x):
        u = torch.nn.functional.silu(self.inp(x))
        dt, B, C = torch.split(self.proj(u), [1, self.A.shape[1], self.A.shape[1]], dim=-1)
        dt = torch.nn.functional.softplus(dt)
        h = torch.zeros(x.shape[0], x.shape[2], self.A.shape[1])
        ys = []
        for t in range(x.shape[1]):
            h = torch.exp(dt[:, t].unsqueeze(-1) * self.A) * h + (dt[:, t] * u[:, t]).unsqueeze(-1) * B[:, t].unsqueeze(
                1
            )
            ys.append((h * C[:, t].unsqueeze(1)).sum(-1))
        return torch.stack(ys, 1)


def test_a_differentiated_python_loop_plans_in_bounded_kernels(caplog):
    """Without a bound the reduction kernel grows through every step, its
    checks growing with the cube of its size (42 s for a wider loop like
    this one at 20 steps on the CPU machine); with it, kernels of at most
    128 nodes that read each other's results in one direction only."""
    torch.manual_seed(0)
    model = SelectiveScanLoop()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 20, 16)
    with caplog.at_level(logging.WARNING, logger="fuseforge"):
        _, step = _steps(model, x, 1, compiled=True)
    _steps(reference, x, 1, compiled=False)
    assert "runs eagerly" not in caplog.text, caplog.text
    backward = step.graphs[1].compiled.plan
    assert max(len(k.nodes) for k in backward.kernels if k.kind == "reduction") <= 128
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_a_step_that_does_not_trace_whole_is_split_and_says_why(caplog):
    from fuseforge.runtime.training import SplitStep, compile_step

    torch.manual_seed(0)
    model = DataDependent()
    reference = copy.deepcopy(model)
    x = torch.randn(8, 6)
    with caplog.at_level("WARNING", logger="fuseforge"):
        step = compile_step(model, [x], "fp32")
    assert isinstance(step, SplitStep)
    assert "does not trace whole" in caplog.text and "dynamo splits it" in caplog.text
    _loss(step([x])).backward()
    _loss(reference(x)).backward()
    torch.testing.assert_close(model.fc.weight.grad, reference.fc.weight.grad)


def test_parameters_of_an_inference_graph_are_prepared_once():
    """An inference graph's parameters (its static inputs) are IR params, so
    the plan computes what derives from them alone in its prepare section
    (here the column sums of a GEMM followed by a row sum)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fuseforge.capture.fx_graph import capture_fx
    from fuseforge.runtime.options import compile_ir

    def gemm_sum(x, w):
        return (((x @ w.t()) / 2).sum(1, keepdim=True) * 1.5,)

    gm = make_fx(gemm_sum)(torch.randn(64, 32), torch.randn(16, 32))
    as_weight = capture_fx(gm, "inference", weights={1})
    assert "%w_1: f32[16,32] param" in as_weight.text, as_weight.text
    assert [b.kind for b in as_weight.input_bindings] == ["user", "user"]
    assert len(compile_ir(as_weight.text, "fp32", 90).plan.prepare) > 0
    assert len(compile_ir(capture_fx(gm, "inference").text, "fp32", 90).plan.prepare) == 0


class LinearSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(24, 16))

    def forward(self, x):
        return (x @ self.weight.t() / 2).sum(dim=1, keepdim=True) * 1.5


def test_weight_gradient_of_a_summed_linear_is_one_row_expanded():
    """The sum's gradient reaches the weight's matmul expanded: every row of
    the weight gradient is the same, so the backward multiplies one row (no
    M x N x K GEMM) and writes it to every row; the gradient is eager's."""
    torch.manual_seed(0)
    model = LinearSum()
    reference = copy.deepcopy(model)
    x = torch.randn(32, 16)
    _, step = _steps(model, x, 1, compiled=True)
    _loss(reference(x)).backward()
    torch.testing.assert_close(model.weight.grad, reference.weight.grad, rtol=1e-5, atol=1e-5)
    matmuls = [line.split(" : ")[-1] for line in step.graphs[1].compiled.ir_after.splitlines() if "= mm(" in line]
    assert matmuls == ["f32[1,16]"], step.graphs[1].compiled.ir_after


def test_a_graph_with_symbolic_sizes_gets_a_plan_per_shape():
    """Dynamo's dynamic shapes hand over graphs with symbolic sizes: each new
    set of input shapes gets a plan of its own, traced with those sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from fuseforge.runtime.training import CompiledGraph, PerShape, graph_compiler

    def scaled_relu_matmul(x, w):
        return (torch.relu(x @ w) * x.shape[0],)

    gm = make_fx(scaled_relu_matmul, tracing_mode="symbolic")(torch.randn(4, 8), torch.randn(8, 3))
    fn = graph_compiler("inference", "fp32")(gm, [p.meta["val"] for p in gm.graph.find_nodes(op="placeholder")])
    assert isinstance(fn, PerShape)
    w = torch.randn(8, 3)
    for rows in (4, 6, 4):
        x = torch.randn(rows, 8)
        (got,) = fn([x, w])
        torch.testing.assert_close(got, scaled_relu_matmul(x, w)[0])
    assert len(fn.plans) == 2 and all(isinstance(p, CompiledGraph) for p in fn.plans.values())


class RecurrentState(nn.Module):
    """A state kept in a plain tensor attribute and reassigned by forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.h = torch.zeros(4, 8)

    def forward(self, x):
        self.h = torch.tanh(self.fc(x) + self.h.detach())
        return self.h * 2


def test_a_reassigned_tensor_attribute_is_state_the_next_step_reads():
    torch.manual_seed(0)
    model = RecurrentState()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8)
    out, _ = _steps(model, x, 3, compiled=True)
    want, _ = _steps(reference, x, 3, compiled=False)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(model.h, reference.h.detach())
    torch.testing.assert_close(model.fc.weight.grad, reference.fc.weight.grad)
    assert "h" not in dict(model.named_buffers())  # the model is as it was: h is no buffer
