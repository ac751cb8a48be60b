"""A conv kernel's library form without a GPU: where cuDNN's conv times faster
than the generated kernel (or the kernel does not build), the conv runs as its
library call and the epilogue as one kernel of its own, which the plan holds
beside the conv kernel, compiles for sm_90 and, run in the conv kernel's stead
(on the CPU: the conv through ATen, the epilogue's kernel on the
interpreter), computes what eager computes. tests/python/test_conv_gpu.py
runs it on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_options


class ConvMish(torch.nn.Module):
    """A 3x3 conv, then x * tanh(softplus(x)) twice (the dev problem conv3x3_large_softplus_tanh, small)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3)

    def forward(self, x):
        x = self.conv(x)
        x = x * torch.tanh(F.softplus(x))
        return x * torch.tanh(F.softplus(x))


class ConvChannelMin(torch.nn.Module):
    """A first-layer conv whose channels a min reduces: a direct kernel that takes the reduction in."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 10, 3)

    def forward(self, x):
        return torch.tanh(torch.amin(self.conv(x), dim=1, keepdim=True)) * 2.0


# (model, input, FUSEFORGE_CONV_KERNELS, convs channels-last, the epilogue kernel's kind)
CASES = {
    "implicit_gemm_pointwise_epilogue": (ConvMish, (2, 8, 12, 12), "always", True, "pointwise"),
    "direct_channel_reduction": (ConvChannelMin, (2, 3, 20, 21), "direct", False, "reduction"),
}


def _compiled(case, monkeypatch):
    make, shape, policy, channels_last, _ = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(shape)
    captured = capture(model, [x], name=case)
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", policy)
    layout = {"conv_channels_last": {c["signature"]: channels_last for c in core.convolutions(captured.text)}}
    plan = core.compile(captured.text, compile_options(arch=90, convs=layout)).plan
    return model, x, captured, plan


def _conv_kernel(plan):
    (index,) = [i for i, k in enumerate(plan.kernels) if k.kind == "conv"]
    return index, plan.kernels[index]


@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_holds_the_conv_kernels_library_form(case, monkeypatch):
    """The conv kernel's library form: the conv's call into its result's
    buffer, the launch of the epilogue's kernel (an entry of the plan's
    kernels that no section launches, of the epilogue's own kind, reading
    that buffer) and its free; the plan's text shows it."""
    *_, kind = CASES[case]
    _, _, _, plan = _compiled(case, monkeypatch)
    index, k = _conv_kernel(plan)
    steps = list(k.library_steps)
    assert [s.kind for s in steps] == ["call", "launch", "free"], str(plan)
    call, launch, free = steps
    (conv,) = call.results
    assert call.op == "convolution" and plan.buffers[conv].role == "interior"
    assert list(free.results) == [conv]
    epilogue = plan.kernels[launch.kernel]
    assert epilogue.kind == kind and list(epilogue.outputs) == list(k.outputs)
    assert [i.relayout for i in epilogue.inputs if i.memory == conv] == [True]
    assert [n.op for n in epilogue.nodes] == [n.op for n in k.nodes][1:]
    assert launch.kernel not in {s.kernel for s in [*plan.prepare, *plan.run] if s.kind == "launch"}
    assert all(len(o.library_steps) == 0 for i, o in enumerate(plan.kernels) if i != index)
    text = str(plan)
    assert f"    library:\n      {plan.step_text(call)}\n      {plan.step_text(launch)}\n      free %" in text


@pytest.mark.parametrize("case", list(CASES))
def test_the_epilogue_kernel_compiles_for_sm90(case, monkeypatch):
    _, _, _, plan = _compiled(case, monkeypatch)
    _, k = _conv_kernel(plan)
    epilogue = plan.kernels[k.library_steps[1].kernel]
    is_cubin, _, log = core.nvrtc_compile(epilogue.translation_unit, epilogue.name, 90)
    assert is_cubin, log


@pytest.mark.parametrize("case", list(CASES))
def test_the_library_form_computes_what_eager_does(case, monkeypatch):
    """The conv kernel's fallback, run alone on the slots the plan's earlier
    steps fill, is its library form (never the nodes op by op): the
    interpreter runs the epilogue kernel's graph, and the result is eager's.
    The whole plan on the CPU runs the conv kernel the same way."""
    model, x, captured, plan = _compiled(case, monkeypatch)
    index, k = _conv_kernel(plan)
    epilogue = plan.kernels[k.library_steps[1].kernel]

    op_by_op = Executor._op_by_op

    def conv_never_op_by_op(self, i):
        assert i != index, f"the conv kernel {k.name} runs op by op"
        return op_by_op(self, i)

    monkeypatch.setattr(Executor, "_op_by_op", conv_never_op_by_op)
    interpreted = []
    interpret = core.interpret

    def spy(graph, inputs):
        interpreted.append(graph)
        return interpret(graph, inputs)

    monkeypatch.setattr(core, "interpret", spy)
    ex = Executor(plan, torch.device("cpu"))
    with torch.no_grad():
        want = model(x)
    env = ex.slots_for(captured.graph_inputs(model, [x]))
    launch = next(j for j, s in enumerate(plan.run) if s.kind == "launch" and s.kernel == index)
    for run in ex._run[:launch]:
        run(env)
    interpreted.clear()
    ex._fallback(index)(env)
    assert interpreted == [epilogue.graph]
    (out,) = k.outputs
    torch.testing.assert_close(env[out], want, rtol=1e-5, atol=1e-5)
    assert env[k.library_steps[0].results[0]] is None  # the conv's result freed
    got, _ = ex(captured.graph_inputs(model, [x]))
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)
