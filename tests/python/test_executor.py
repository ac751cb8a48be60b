"""The executor on the CPU (kernels on the reference interpreter): it walks the
plan, keeps the prepare section's values between calls and computes them
again exactly when a weight they read changes, and makes library calls that
take numbers where torch needs tensors."""

import pytest
import torch
from torch import nn

from fuseforge.capture import capture
from fuseforge.runtime import library_calls
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir
from fuseforge.runtime.prepared import cached_prepare


class GemvSum(nn.Module):
    """sum(x @ W.T, 1) becomes x @ W.sum(0): the weight's sums are prepared."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 32))

    def forward(self, x):
        return (x @ self.weight.t()).sum(dim=1, keepdim=True) * 0.5


def _executor(model, x):
    """An executor for `model` and how to call it as OptimizedModule does: the
    parameters themselves (read live from the module), not copies."""
    cap = capture(model, [x], name="m")
    plan = compile_ir(cap.text).plan
    getters = cap.input_getters(model)

    def call(x):
        with torch.no_grad():
            ins = [src([x]) if kind == "arg" else src if kind == "const" else getattr(*src) for kind, src in getters]
            return executor(ins)[0][0]

    executor = Executor(plan, torch.device("cpu"))
    return plan, executor, call


@pytest.mark.parametrize("rows", [4, 256])
def test_prepare_runs_once_and_again_when_the_weights_change_in_any_way(rows):
    """The weight's row sums are prepared by one reduction kernel. With few
    rows the product against them is a library GEMV; with rows enough to fill
    a GPU it is one reduction kernel (gemv_as_reduction) reading x once:
    either way the prepared sums follow the weight."""
    torch.manual_seed(0)
    model, x = GemvSum(), torch.randn(rows, 32)
    plan, executor, call = _executor(model, x)
    prepared = [s for s in plan.prepare if s.kind in ("call", "launch")]
    assert [plan.kernels[s.kernel].kind for s in prepared if s.kind == "launch"] == ["reduction"], str(plan)
    assert len(prepared) == 1, str(plan)
    launches = [s for s in plan.run if s.kind == "launch"]
    if rows >= 256:
        assert [plan.kernels[s.kernel].kind for s in launches] == ["reduction"], str(plan)
        assert not [s for s in plan.run if s.kind == "call"], str(plan)
    prepares = []  # one entry per run of the prepare section (its first step counts)
    first = executor._prepare[0]
    executor._prepare[0] = lambda env: (prepares.append(1), first(env))

    def check(expected_prepares):
        torch.testing.assert_close(call(x), model(x).detach(), rtol=1e-5, atol=1e-5)
        assert len(prepares) == expected_prepares

    check(1)
    check(1)  # same weight, same version: kept
    with torch.no_grad():
        model.weight.mul_(2.0)  # in place
    check(2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()
    opt.step()  # an optimizer step
    check(3)
    model.load_state_dict({"weight": torch.randn(16, 32)})  # copy_ into the parameter
    check(4)
    model.weight = nn.Parameter(torch.randn(16, 32))  # another tensor, read live
    check(5)
    model.weight.data = torch.randn(16, 32)  # same Parameter, other storage, version unchanged
    check(6)
    check(6)


def test_cached_prepare_keys_on_identity_storage_and_version():
    w = torch.zeros(3)
    cache, computed = {}, []

    def compute():
        computed.append(1)
        return [w.sum()]

    for _ in range(2):
        cached_prepare(cache, [w], compute)
    assert len(computed) == 1
    w.add_(1.0)
    cached_prepare(cache, [w], compute)
    assert len(computed) == 2
    other = w.clone()  # equal contents, another tensor
    cached_prepare(cache, [other], compute)
    assert len(computed) == 3


def test_aliases_reach_op_by_op_calls_as_views_of_their_memory():
    """A view only kernels read is an alias: no step makes it; run op by op on
    the CPU, the kernel's nodes see it as a view of its memory."""

    class M(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x.reshape(1, 8, 4).permute(1, 0, 2)) * 2.0

    x = torch.randn(4, 8)
    cap = capture(M(), [x], name="m")
    plan = compile_ir(cap.text).plan
    aliases = [b for b in plan.buffers if b.role == "alias"]
    assert len(aliases) == 2 and all(plan.buffers[b.alias_of].name == "x" for b in aliases), str(plan)
    assert not [s for s in plan.run if s.kind == "view"]
    (out,), _ = Executor(plan, torch.device("cpu"))([x])
    torch.testing.assert_close(out, M()(x))


def test_library_calls_take_numbers_where_torch_needs_tensors():
    """maximum/minimum need tensors: a literal or a scalar input (a Python
    number at run time, a rank-0 value in the plan) is wrapped as a 0-d tensor."""
    plan = compile_ir("""graph @g(%x: f32[3], %s: f64[] scalar) {
  %0 = maximum(%x, 0.5) : f32[3]
  %1 = minimum(%s, %0) : f32[3]
  return %1
}""").plan
    (k,) = plan.kernels
    maximum, minimum = k.nodes
    x = torch.tensor([0.0, 1.0, -2.0])
    cpu = torch.device("cpu")
    torch.testing.assert_close(library_calls.make_call(maximum, cpu)([x, 0.5]), torch.tensor([0.5, 1.0, 0.5]))
    torch.testing.assert_close(
        library_calls.make_call(minimum, cpu)([0.75, torch.tensor([0.5, 1.0, 0.5])]), torch.tensor([0.5, 0.75, 0.5])
    )


def test_steps_of_one_expression_share_one_compiled_call():
    """An unrolled loop's steps compute the same expression over other
    operands (buffers and literals alike are operands): each distinct
    expression is compiled once per device."""
    plan = compile_ir("""graph @g(%x: f32[3], %y: f32[3]) {
  %0 = maximum(%x, 0.5) : f32[3]
  %1 = maximum(%y, 0.25) : f32[3]
  %2 = minimum(%x, 0.5) : f32[3]
  %3 = add(%0, %1) : f32[3]
  %4 = add(%3, %2) : f32[3]
  return %4
}""").plan
    (k,) = plan.kernels
    first, second, other = k.nodes[:3]
    cpu = torch.device("cpu")
    call = library_calls.make_call(first, cpu)
    assert library_calls.make_call(second, cpu) is call
    assert library_calls.make_call(other, cpu) is not call
    assert library_calls.make_call(first, torch.device("meta")) is not call
    torch.testing.assert_close(call([torch.tensor([0.0, 1.0]), 0.25]), torch.tensor([0.25, 1.0]))


def test_plan_elements_keep_the_compiled_plan_alive():
    """A step, kernel or buffer taken from a temporary compile's lists (indexed
    or iterated) stays valid after everything else is dropped: a call step
    reads its IR node, which the plan owns."""
    import gc

    text = """graph @g(%x: i64[4,8]) {
  %0 = cumsum(%x) {dim=1} : i64[4,8]
  %1 = neg(%0) : i64[4,8]
  return %1
}"""
    steps = [s for s in compile_ir(text).plan.run if s.kind == "call"]
    kernel = compile_ir(text).plan.kernels[0]
    gc.collect()
    assert [s.op for s in steps] == ["cumsum"]
    assert steps[0].torch_expr(["x"]).startswith("torch.cumsum(x, 1")
    assert kernel.kind == "pointwise" and [n.op for n in kernel.nodes] == ["neg"]


def test_a_kernel_whose_code_was_tuned_before_compiles_only_the_chosen_candidate(monkeypatch, tmp_path):
    """Autotuning keys its choice by the kernel's code and launch sizes:
    another kernel of that code and sizes (a later block of the network,
    another process) takes it without timing, compiling the chosen tile
    alone."""
    from types import SimpleNamespace

    from fuseforge.runtime import autotune, executor

    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    compiled = []
    monkeypatch.setattr(executor.core, "load_variant", lambda v, arch: compiled.append(v.name) or v.name)
    monkeypatch.setattr(executor, "_raw_stream", lambda device: 0)

    def kernel(number, sizes=(512, 512, 512)):
        tiles = ("128x64", "64x64")
        variants = [SimpleNamespace(name=f"ff_gemm_mm_3xtf32_{t}_{number}") for t in tiles]
        return SimpleNamespace(
            name=f"ff_gemm_mm_3xtf32_128x128_{number}",
            compile_key="code",
            constants=list(sizes),
            variants=variants,
            library_steps=[],
        )

    ex = Executor.__new__(Executor)
    ex.device, ex.arch = torch.device("cuda", 0), 90
    choice = autotune.kernel_key("code", [512, 512, 512], 90)
    autotune.store(choice, "ff_gemm_mm_3xtf32_64x64")  # as block 3's timing left it
    assert ex._tuned(kernel(17), "default", [], []) == "ff_gemm_mm_3xtf32_64x64_17"
    assert compiled == ["ff_gemm_mm_3xtf32_64x64_17"]
    autotune.store(choice, "ff_gemm_mm_3xtf32_128x128")
    assert ex._tuned(kernel(18), "default", [], []) == "default" and len(compiled) == 1
    # The same code launched with other sizes (a GEMM's are launch arguments): every tile timed.
    monkeypatch.setattr(autotune, "choose", lambda k, names, runs, timer=None: 0)
    assert ex._tuned(kernel(19, sizes=(512, 512, 64)), "default", [], []) == "default"
    assert compiled[1:] == ["ff_gemm_mm_3xtf32_128x64_19", "ff_gemm_mm_3xtf32_64x64_19"]


class PoolHead(nn.Module):
    """Views between kernels and a library GEMM: a flatten of the pooled
    tensor, the weight's transpose, and a slice with an offset."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 12)

    def forward(self, x):
        pooled = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return torch.log_softmax(self.fc(pooled), dim=1)[:, 2:]


def test_native_views_reproduce_their_closures():
    """Each view step FastCall makes natively (source layout, result layout,
    storage offset found on a meta tensor) gives the tensor the step's own
    closure gives on a source laid out as recorded."""
    model = PoolHead()
    x = torch.randn(6, 32, 3, 3)
    cap = capture(model, [x], name="m")
    executor = Executor(compile_ir(cap.text).plan, torch.device("cpu"))
    views = [s for s in executor.fast_steps() if s[0] == "view"]
    assert views, [s[0] for s in executor.fast_steps()]
    for _, source, result, dtype, shape, strides, view_shape, view_strides, offset, closure in views:
        base = torch.randn(sum((n - 1) * s for n, s in zip(shape, strides)) + 1 + 5, dtype=dtype)
        src = base.as_strided(shape, strides, 5)  # a source that starts past its storage's start
        env = [None] * len(executor.types)
        env[source] = src
        closure(env)
        native = src.as_strided(view_shape, view_strides, src.storage_offset() + offset)
        assert torch.equal(native, env[result])
        assert native.untyped_storage().data_ptr() == env[result].untyped_storage().data_ptr()
        assert native.storage_offset() == env[result].storage_offset()
