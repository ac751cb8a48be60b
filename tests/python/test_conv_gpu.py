"""GPU tests of the conv precision contract and of conv kernels: under the
fp32 policy every conv problem (train and eval) stays within twice eager's
error against fp64, and so does each conv as fuseforge runs it (its decided
math, its layout, cuDNN or a generated kernel). Skipped without a GPU;
tools/conv_probe.py prints the figures behind them."""

import copy
import warnings

import pytest
import torch

from conftest import PROBLEMS, kernel_convs
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.harness.check import check_correctness
from fuseforge.harness.problem import build_model, problem_name
from fuseforge.runtime import conv_probe
from fuseforge.runtime.options import compile_ir
from fuseforge.runtime.precision import conv_fp32_precision

pytestmark = pytest.mark.gpu

CONV_PROBLEMS = [p for p in PROBLEMS if "conv" in p.read_text().lower()]
DEV = torch.device("cuda")


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("path", CONV_PROBLEMS, ids=problem_name)
def test_conv_problem_keeps_the_precision_contract(path, mode):
    """fuseforge's outputs within twice eager's error against fp64 (or within
    1e-4 of eager), with eager under the same (default) flags."""
    mod, model = build_model(str(path), mode, "cuda")
    result = check_correctness(mod, model, seeds=1, device="cuda")
    assert result["correct"], result
    assert result["max_err_vs_fp64"] <= 2 * result["eager_err_vs_fp64"] + 1e-6 or result["max_err_vs_eager"] <= 1e-4, (
        result
    )
    torch.cuda.empty_cache()


def _convs_as_run(path):
    """(captured conv, the same conv after fuseforge's passes) pairs of a problem (eval)."""
    mod, model = build_model(str(path), "eval", "cpu")
    text = capture(model, mod.get_inputs(), name=problem_name(path)).text
    compiled = compile_ir(text, "fp32", device=DEV)
    return zip(core.convolutions(text), core.convolutions(compiled.ir_after))


def _call(c, x, w):
    return torch.ops.aten.convolution.default(
        x, w, None, c["stride"], c["padding"], c["dilation"], c["transposed"], c["output_padding"], c["groups"]
    )


@pytest.mark.parametrize("path", CONV_PROBLEMS, ids=problem_name)
def test_each_conv_as_run_is_within_twice_eagers_error(path):
    """Each conv in the math and layout fuseforge chose for it, on random
    operands, against eager's conv of the same signature: error against fp64
    (root mean square, first sample) at most 2x eager's; TF32 only where the
    probe found eager using it."""
    for captured, run in _convs_as_run(path):
        if captured["dtype"] != "f32":
            continue
        probe = conv_probe.measure_precision(captured, DEV)
        assert (run["fp32_precision"] == "tf32") == probe["tf32"], (captured["text"], run["text"], probe)
        with torch.no_grad():
            x, w = conv_probe.operands(captured, DEV)
            ref = _call(captured, x[:1].double(), w.double())
            if run["channels_last"]:
                fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
                x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
            with conv_fp32_precision(run["fp32_precision"]):
                y = _call(captured, x, w)[:1]
        ours = float((y.double() - ref).pow(2).mean().sqrt())
        assert ours <= 2 * probe["eager_error"], (captured["text"], run["text"], ours, probe)


def _every_conv_channels_last(monkeypatch):
    """conv_probe.decide as it is, but every conv channels-last."""
    decide = conv_probe.decide

    def all_channels_last(text, precision, device, **kw):
        out = decide(text, precision, device, **kw)
        out["conv_channels_last"] = {c["signature"]: True for c in core.convolutions(text)}
        return out

    monkeypatch.setattr(conv_probe, "decide", all_channels_last)


def test_conv_kernels_keep_the_contract_on_every_conv_problem(monkeypatch):
    """Every conv a kernel covers run as a generated kernel (all convs
    channels-last, FUSEFORGE_CONV_KERNELS=always: 3xTF32, or 1xTF32 where
    decided, with the epilogue fused): each conv problem stays correct."""
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    _every_conv_channels_last(monkeypatch)
    import fuseforge

    for path in CONV_PROBLEMS:
        mod, model = build_model(str(path), "eval", "cuda")
        result = check_correctness(mod, model, seeds=1, device="cuda")
        assert result["correct"], (path.stem, result)
        fast = fuseforge.optimize(copy.deepcopy(model))
        with torch.no_grad():
            fast(*[x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()])
        # Each conv is a conv kernel (an implicit GEMM, or a direct kernel, which
        # also takes grouped convs) or a library call, and only a conv no
        # kernel covers is a library call.
        (compiled,) = [s.compiled for s in fast.specializations()]
        convs = core.convolutions(compiled.ir_after)
        kernels = [k.name for k in compiled.plan.kernels if k.kind == "conv"]
        library = [compiled.plan.step_text(s) for s in compiled.plan.run if s.kind == "call" and s.op == "convolution"]
        assert len(kernels) + len(library) == len(convs), (path.stem, kernels, library)
        assert len(library) <= len(convs) - len(kernel_convs(convs)), (path.stem, library)
        torch.cuda.empty_cache()


def test_eager_flags_are_respected(monkeypatch):
    """With TF32 convs switched off by the user, no conv runs TF32 (the probe
    sees eager in IEEE fp32), and the user's setting is intact afterwards."""
    path = next(p for p in PROBLEMS if p.stem == "conv2d_min_add_multiply")
    mod, model = build_model(str(path), "eval", "cuda")
    saved = torch.backends.cudnn.conv.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    try:
        for _captured, run in _convs_as_run(path):
            assert run["fp32_precision"] == "ieee", run["text"]
        result = check_correctness(mod, model, seeds=1, device="cuda")
        assert result["correct"], result
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    finally:
        torch.backends.cudnn.conv.fp32_precision = saved


class _ConvThen(torch.nn.Module):
    def __init__(self, cin: int, tail: str):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, 32, 3)
        self.tail = tail

    def forward(self, x):
        y = self.conv(x)
        if self.tail == "relu":
            return torch.relu(y) * 2
        if self.tail == "pool":
            return torch.nn.functional.max_pool2d(torch.relu(y), 2)
        return y


@pytest.mark.parametrize("tail", ["none", "relu", "pool"])
@pytest.mark.parametrize("cin", [3, 64], ids=["direct", "cudnn"])
def test_channels_last_input_gives_eagers_output_strides(cin, tail):
    """A channels-last input: the output has eager's (channels-last) strides,
    through a direct kernel (3 input channels) or cuDNN (64), alone or with a
    pointwise or pooling tail (torch.export alone records them contiguous)."""
    import fuseforge

    torch.manual_seed(0)
    model = _ConvThen(cin, tail).to(DEV)
    x = torch.randn(8, cin, 34, 34, device=DEV).to(memory_format=torch.channels_last)
    with torch.no_grad():
        want, got = model(x), fuseforge.optimize(model)(x)
        ref = copy.deepcopy(model).double()(x.double())
    assert got.stride() == want.stride()
    # The precision contract (eager's conv may be TF32, and a conv kernel's
    # TF32 sums in another order): error against fp64 at most twice eager's.
    assert (got.double() - ref).abs().max() <= 2 * (want.double() - ref).abs().max() + 1e-6


class _Upsample(torch.nn.Module):
    """A transposed conv, a residual and a relu."""

    def __init__(self, cin, cout, kernel, **kw):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(cin, cout, kernel, **kw)

    def forward(self, x, skip):
        return torch.relu(self.up(x) + skip)


# name: (ConvTranspose2d arguments, input shape). Windows that the stride
# divides and that it does not (phases with fewer taps), output padding, one
# phase, rectangular windows and strides, channels past one tile, and a phase
# row's channels (stride x output channels) not a multiple of 8.
TRANSPOSED = {
    "k4_s2_p1": ((16, 24, 4), dict(stride=2, padding=1), (4, 16, 17, 19)),
    "k3_s2_p1_op1": ((8, 16, 3), dict(stride=2, padding=1, output_padding=1), (3, 8, 13, 10)),
    "k5_s3_p2": ((12, 20, 5), dict(stride=3, padding=2), (2, 12, 9, 13)),
    "k3_s1_p1": ((32, 40, 3), dict(stride=1, padding=1), (2, 32, 20, 21)),
    "k2_s2_c72": ((64, 72, 2), dict(stride=2), (4, 64, 15, 16)),
    "k4_s2_c5": ((8, 5, 4), dict(stride=2, padding=1), (2, 8, 9, 11)),
    "k3x4_s2x1": ((8, 12, (3, 4)), dict(stride=(2, 1), padding=(1, 0)), (3, 8, 10, 7)),
}


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("name", list(TRANSPOSED))
def test_transposed_conv_kernel_computes_every_phase(monkeypatch, name):
    """A 1xTF32 transposed conv as the Hopper kernel (one GEMM per phase of
    the stride) with its epilogue: each output within 1e-4 of fp64's conv of
    the operands rounded to tf32 (what its tensor cores multiply), and
    eager's output strides."""
    import fuseforge

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the transposed conv kernel is Hopper's")
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    monkeypatch.setenv("FUSEFORGE_CONV_PRECISION", "tf32")
    _every_conv_channels_last(monkeypatch)
    args, kw, shape = TRANSPOSED[name]
    torch.manual_seed(0)
    model = _Upsample(*args, **kw).to(DEV)
    x = torch.randn(*shape, device=DEV)
    with torch.no_grad():
        want = model(x, torch.zeros(1, device=DEV))
        skip = torch.randn_like(want)
        fast = fuseforge.optimize(model)
        got = fast(x, skip)
        up = model.up
        ref = torch.relu(
            torch.nn.functional.conv_transpose2d(
                _round_tf32(x).double(),
                _round_tf32(up.weight).double(),
                up.bias.double(),
                up.stride,
                up.padding,
                up.output_padding,
            )
            + skip.double()
        )
    kernels = [k.name for s in fast.specializations() for k in s.compiled.plan.kernels if k.kind == "conv"]
    assert len(kernels) == 1 and "_tf32_sm90_" in kernels[0], kernels
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)


def test_a_conv_kernel_is_timed_against_its_library_calls_once(monkeypatch, tmp_path):
    """Whatever the cost model chose, a conv kernel's first run times it
    against its library form (cuDNN, then the epilogue's own kernel), keeps
    the faster and records the choice per kernel source (a second module
    reads it)."""
    import fuseforge
    from fuseforge.runtime import autotune

    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "off")  # the conv's choice alone in the cache
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.GELU()).cuda().eval()
    x = torch.randn(8, 16, 32, 32, device="cuda")
    with torch.no_grad():
        for _ in range(2):
            fast = fuseforge.optimize(model)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    convs = [k for k in fast.specializations()[0].compiled.plan.kernels if k.kind == "conv"]
    choices = autotune.load()
    assert convs and len(choices) == len({k.compile_key for k in convs})  # kernels of the same code time once
    assert set(choices.values()) <= {autotune.label(k.name) for k in convs} | {"library"}


class _ConvMish(torch.nn.Module):
    """A 3x3 conv, then x * tanh(softplus(x)) twice (conv3x3_large_softplus_tanh, small)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3)

    def forward(self, x):
        x = self.conv(x)
        x = x * torch.tanh(torch.nn.functional.softplus(x))
        return x * torch.tanh(torch.nn.functional.softplus(x))


@pytest.mark.parametrize("why", ["cudnn_wins", "kernel_does_not_compile"])
def test_where_the_conv_kernel_does_not_run_its_epilogue_is_one_kernel(monkeypatch, tmp_path, why):
    """Where cuDNN's conv wins the first run's timing, or the conv kernel does
    not compile, the conv runs as cuDNN's call and its epilogue as the plan's
    one epilogue kernel (never op by op), on the first call and on the native
    call path after it, computing what eager computes; the conv kernel never
    launches."""
    import fuseforge
    from fuseforge.runtime import autotune, executor

    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "off")  # each kernel in the profile, not a graph's replay
    _every_conv_channels_last(monkeypatch)
    if why == "cudnn_wins":
        monkeypatch.setattr(autotune, "choose", lambda k, names, runs, timer=None: list(names).index("library"))
    else:
        load = core.load_kernels

        def no_conv_kernel(kernels, arch):
            return ["not built" if k.kind == "conv" else x for k, x in zip(kernels, load(kernels, arch))]

        monkeypatch.setattr(executor.core, "load_kernels", no_conv_kernel)
    op_by_op = executor.Executor._op_by_op

    def conv_never_op_by_op(self, i):
        assert self.plan.kernels[i].kind != "conv", f"{self.plan.kernels[i].name} runs op by op"
        return op_by_op(self, i)

    monkeypatch.setattr(executor.Executor, "_op_by_op", conv_never_op_by_op)
    torch.manual_seed(0)
    model = _ConvMish().cuda().eval()
    x = torch.randn(4, 16, 40, 40, device="cuda")
    fast = fuseforge.optimize(model)
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.no_grad(), torch.profiler.profile(activities=activities) as prof, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the conv kernel's "did not compile"
        outs = [fast(x) for _ in range(3)]
        torch.cuda.synchronize()
        want = model(x)
    for got in outs:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    plan = fast.specializations()[0].compiled.plan
    (k,) = [k for k in plan.kernels if k.kind == "conv"]
    epilogue = plan.kernels[k.library_steps[1].kernel]
    launched = {e.key for e in prof.key_averages()}
    assert epilogue.name in launched and k.name not in launched, sorted(launched)
