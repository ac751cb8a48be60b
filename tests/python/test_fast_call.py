"""The native call path (runtime/fast_call.py, csrc/python/fast_call.cc) on the
CPU: armed from a call the Python path ran, it takes exactly the calls that
call's guard key and gather would (declining others with None), keeps the
prepare section's values only while the weights they read are unchanged,
updates mutated buffers, and computes what the executor computes. On the CPU
every kernel is an interpreter closure, so this checks the guard, gathering,
prepare check and step walk; test_fast_call_gpu.py checks the native launches."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fuseforge.capture import capture, resolve_attribute
from fuseforge.runtime import fast_call
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir

pytestmark = pytest.mark.skipif(fast_call._fast_call is None, reason="_fast_call was not built (no torch at build)")


class GemvSum(nn.Module):
    """sum(x @ W.T, 1) * alpha: the weight's sums are a prepared value; alpha a scalar input."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 32))

    def forward(self, x, alpha):
        return (x @ self.weight.t()).sum(dim=1, keepdim=True) * alpha


class Armed:
    """A model's plan on the CPU executor, run the way OptimizedModule runs it:
    the Python path (gather, executor) arms a FastCall; `fast` calls it."""

    def __init__(self, model, args):
        self.model = model
        self.captured = capture(model, list(args), name="m")
        self.executor = Executor(compile_ir(self.captured.text).plan, torch.device("cpu"))
        self.spec = SimpleNamespace(
            executor=self.executor,
            captured=self.captured,
            getters=self.captured.input_getters(model),
            mutation_targets=[resolve_attribute(model, n) for n, _ in self.captured.mutations],
        )
        self.module = SimpleNamespace(training=model.training, precision="fp32")
        self.fast = None
        self.python(*args)

    def python(self, *args):
        """The Python path; (re)arms the FastCall from this call."""
        inputs = [
            src(args) if kind == "arg" else src if kind == "const" else getattr(*src) for kind, src in self.spec.getters
        ]
        with torch.no_grad():
            outputs, new_buffers = self.executor(inputs)
            for (mod, name), value in zip(self.spec.mutation_targets, new_buffers):
                getattr(mod, name).copy_(value)
        self.fast = fast_call.arm(self.module, self.spec, args, inputs)
        return outputs

    def call(self, *args):
        """The native path's outputs, or None where it declines the call."""
        with torch.no_grad():
            return self.fast(self.module, tuple(args))


def test_it_takes_the_calls_the_guard_would_and_declines_the_others():
    torch.manual_seed(0)
    model, x = GemvSum(), torch.randn(8, 32)
    armed = Armed(model, (x, 0.5))
    assert armed.fast is not None
    for alpha in (0.5, 3.0):  # a scalar input: any value of the same type
        (out,) = armed.call(x, alpha)
        torch.testing.assert_close(out, model(x, alpha).detach(), rtol=1e-5, atol=1e-5)
    assert armed.fast.served == 2
    declined = [
        (torch.randn(4, 32), 0.5),  # another shape
        (x.double(), 0.5),  # another dtype
        (torch.randn(32, 8).t(), 0.5),  # other strides
        (x, 2),  # an int where a float was
        (x,),  # fewer arguments
    ]
    for args in declined:
        assert armed.call(*args) is None, args
    armed.module.training = not armed.module.training  # the mode is part of the guard key
    assert armed.call(x, 0.5) is None
    assert armed.fast.served == 2


def test_prepared_values_are_kept_only_while_their_weights_are_unchanged():
    torch.manual_seed(0)
    model, x = GemvSum(), torch.randn(8, 32)
    armed = Armed(model, (x, 1.0))
    assert [s.kind for s in armed.executor.plan.prepare if s.kind in ("call", "launch")] == ["launch"]  # the row sums

    def changed(change):
        change()
        assert armed.call(x, 1.0) is None  # declined: the Python path recomputes and arms again
        armed.python(x, 1.0)
        (out,) = armed.call(x, 1.0)
        torch.testing.assert_close(out, model(x, 1.0).detach(), rtol=1e-5, atol=1e-5)

    def in_place():
        with torch.no_grad():
            model.weight.mul_(2.0)

    def optimizer_step():
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(x, 1.0).sum().backward()
        opt.step()

    def replaced():
        model.weight = nn.Parameter(torch.randn(16, 32))

    def storage():
        model.weight.data = torch.randn(16, 32)

    for change in (
        in_place,
        optimizer_step,
        lambda: model.load_state_dict({"weight": torch.randn(16, 32)}),
        replaced,
        storage,
    ):
        changed(change)


def test_mutated_buffers_follow_eager_over_several_calls():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.BatchNorm1d(12), nn.ReLU()), torch.randn(16, 12)
    reference = nn.Sequential(nn.BatchNorm1d(12), nn.ReLU())
    reference.load_state_dict(model.state_dict())
    armed = Armed(model, (x,))
    with torch.no_grad():
        reference(x)  # the Python path's call
        for _ in range(3):
            xs = torch.randn(16, 12)
            (out,) = armed.call(xs)
            torch.testing.assert_close(out, reference(xs), rtol=1e-5, atol=1e-5)
    assert armed.fast.served == 3
    torch.testing.assert_close(model[0].running_mean, reference[0].running_mean)
    torch.testing.assert_close(model[0].running_var, reference[0].running_var)
    assert int(model[0].num_batches_tracked) == int(reference[0].num_batches_tracked) == 4


def test_arguments_it_cannot_guard_leave_the_python_path():
    class Listed(nn.Module):
        def forward(self, x, names):
            return torch.relu(x) * 2.0

    x = torch.randn(4, 4)
    model = Listed()
    cap = capture(model, [x, "a"], name="m")
    spec = SimpleNamespace(
        executor=Executor(compile_ir(cap.text).plan, torch.device("cpu")),
        captured=cap,
        getters=cap.input_getters(model),
        mutation_targets=[],
    )
    inputs = [src((x, "a")) if kind == "arg" else src for kind, src in spec.getters]
    spec.executor(inputs)
    assert fast_call.arm(SimpleNamespace(training=False, precision="fp32"), spec, (x, "a"), inputs) is None
