"""The conv precision contract without a GPU: the probe's decision rule on
real (CPU) convolutions, its caching, how decisions reach the plan (the
conv's fp32_precision), the library call that applies them, emitted files,
guards and the roofline's ceilings. tests/python/test_conv_gpu.py checks the
contract itself on a GPU."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuseforge._native import core
from fuseforge.runtime import conv_probe, library_calls
from fuseforge.runtime.options import compile_options, probe_convs
from fuseforge.runtime.precision import conv_fp32_precision, eager_conv_precision

# Two f32 convs of different signatures.
TWO_CONVS = """graph @g(%x: f32[2,8,12,12], %w: f32[16,8,3,3] param, %v: f32[2,16,6,6], %u: f32[4,16,1,1] param) {
  %0 = convolution(%x, %w) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false} : f32[2,16,12,12]
  %1 = convolution(%v, %u) {dilation=[1, 1], groups=1, output_padding=[0, 0], padding=[0, 0], stride=[1, 1], transposed=false} : f32[2,4,6,6]
  %2 = relu(%0) : f32[2,16,12,12]
  return %2, %1
}
"""
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _convs_as_library_calls(monkeypatch):
    """These tests are about conv library calls and their math: no generated
    conv kernels (the direct kernel would take TWO_CONVS' first conv)."""
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "off")


class _SeesConvPrecision(TorchDispatchMode):
    """Records cuDNN's conv precision setting whenever aten.convolution runs."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            self.seen.append(torch.backends.cudnn.conv.fp32_precision)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def user_flags():
    """Restores the user's cuDNN conv precision after a test changes it."""
    saved = torch.backends.cudnn.conv.fp32_precision
    yield
    torch.backends.cudnn.conv.fp32_precision = saved


def test_the_library_call_applies_the_decision_for_that_call_only(user_flags):
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    with _SeesConvPrecision() as mode:
        y = library_calls._ff_convolution("ieee", *args)
    assert mode.seen == ["ieee"]
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w))
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    with pytest.raises(RuntimeError):  # a failing call gives the setting back too
        library_calls._ff_convolution("ieee", x, torch.randn(3, 4, 3, 3), *args[2:])
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"


def _compile(text=TWO_CONVS, precision="fp32", convs=None, passes=None):
    return core.compile(text, compile_options(precision, convs=convs, passes=passes))


def _conv_steps(compiled):
    return [s for s in compiled.plan.run if s.op == "convolution"]


def test_a_conv_step_with_a_decision_runs_through_the_helper():
    first = core.convolutions(TWO_CONVS)[0]
    steps = _conv_steps(_compile(convs={"conv_tf32": {first["signature"]: True}}))
    assert [s.torch_expr(["x", "w"])[:35] for s in steps] == [
        "_ff_convolution('tf32', x, w, None,",
        "_ff_convolution('ieee', x, w, None,",
    ]
    # Without conv_precision (as for f16 convs) the conv carries no decision: a plain ATen call.
    (step, _) = _conv_steps(_compile(passes=["cse"]))
    assert step.torch_expr(["x", "w"]).startswith("torch.ops.aten.convolution.default(x, w,")


def test_eager_conv_precision_follows_the_flags(user_flags):
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert eager_conv_precision() == "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert eager_conv_precision() == "ieee"
    with conv_fp32_precision("tf32"):
        assert eager_conv_precision() == "tf32"
    assert eager_conv_precision() == "ieee"


def _conv_of(text, i=0):
    return core.convolutions(text)[i]


def test_the_probe_finds_fp32_convs_fp32_and_tf32_convs_tf32(monkeypatch):
    """The decision rule on real convs (CPU ATen, which computes in fp32):
    eager in fp32 is far below TF32's error; an eager that rounds its
    operands to TF32 first (as cuDNN's TF32 kernels do) is at it."""
    conv = _conv_of(TWO_CONVS)
    fp32 = conv_probe.measure_precision(conv, CPU)
    assert not fp32["tf32"] and fp32["eager_error"] * 100 < fp32["tf32_error"], fp32

    plain = conv_probe._call

    def tf32_eager(c, x, w):
        if x.dtype == torch.float32:
            x, w = conv_probe.round_tf32(x), conv_probe.round_tf32(w)
        return plain(c, x, w)

    monkeypatch.setattr(conv_probe, "_call", tf32_eager)
    tf32 = conv_probe.measure_precision(conv, CPU)
    assert tf32["tf32"] and tf32["tf32_error"] <= conv_probe.TF32_MARGIN * tf32["eager_error"], tf32


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """decide() as on a GPU whose probe is `calls`-counted and answers TF32
    for convs with 8 input channels; a fresh cache dir and memory cache."""
    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSEFORGE_CONV_PRECISION", raising=False)
    monkeypatch.delenv("FUSEFORGE_AUTOTUNE", raising=False)
    monkeypatch.setattr(conv_probe, "_memory", {})
    monkeypatch.setattr(conv_probe, "_environment", lambda device: "fake GPU|flags")
    calls = []

    def measure(conv, device):
        calls.append(conv["signature"])
        tf32 = conv["input"][1][1] == 8
        return {"eager_error": 1e-4 if tf32 else 1e-7, "tf32_error": 1e-4, "tf32": tf32}

    monkeypatch.setattr(conv_probe, "measure_precision", measure)
    return calls


def _precisions(compiled):
    return [c["fp32_precision"] for c in core.convolutions(compiled.ir_after)]


def test_decisions_reach_the_plan_and_are_cached(fake_gpu):
    gpu = torch.device("cuda")
    decided = conv_probe.decide(TWO_CONVS, "fp32", gpu)
    assert sorted(decided["conv_tf32"].values()) == [False, True]
    assert _precisions(_compile(convs=decided)) == ["tf32", "ieee"]
    assert len(fake_gpu) == 2
    assert conv_probe.decide(TWO_CONVS, "fp32", gpu) == decided  # memory
    conv_probe._memory.clear()
    assert conv_probe.decide(TWO_CONVS, "fp32", gpu) == decided  # disk: <cache dir>/conv_probe.json
    assert len(fake_gpu) == 2
    assert [text for text, probe in conv_probe.evidence(TWO_CONVS, gpu) if probe and probe["tf32"]] == [
        core.convolutions(TWO_CONVS)[0]["text"]
    ]


def test_without_a_gpu_or_under_the_tf32_policy_nothing_is_probed(fake_gpu):
    assert conv_probe.decide(TWO_CONVS, "fp32", CPU) == {}
    assert _precisions(_compile()) == ["ieee", "ieee"]
    assert conv_probe.decide(TWO_CONVS, "tf32", torch.device("cuda")) == {
        "conv_tf32": {},
        "conv_channels_last": {},
        "conv_cudnn_ms": {},
        "conv_direct_ms": {},
    }
    assert _precisions(_compile(precision="tf32")) == ["tf32", "tf32"]
    assert fake_gpu == []


def test_a_probe_that_cannot_run_leaves_the_conv_ieee(fake_gpu, monkeypatch):
    def out_of_memory(conv, device):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(conv_probe, "measure_precision", out_of_memory)
    with pytest.warns(UserWarning, match="could not probe the precision"):
        decided = conv_probe.decide(TWO_CONVS, "fp32", torch.device("cuda"))
    assert _precisions(_compile(convs=decided)) == ["ieee", "ieee"]


def test_a_forced_precision_overrides_the_probe(fake_gpu, monkeypatch):
    monkeypatch.setenv("FUSEFORGE_CONV_PRECISION", "tf32")
    decided = probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))
    assert _precisions(_compile(convs=decided)) == ["tf32", "tf32"]
    monkeypatch.setenv("FUSEFORGE_CONV_PRECISION", "fast")
    with pytest.raises(ValueError, match="FUSEFORGE_CONV_PRECISION is 'fast'; expected probe, ieee or tf32"):
        probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))
    assert fake_gpu == []


def test_layout_timings_override_the_cost_model(fake_gpu, monkeypatch):
    """With FUSEFORGE_AUTOTUNE=1 both layouts are timed once per conv (here:
    channels-last faster for the first) and the layout pass follows."""
    monkeypatch.setenv("FUSEFORGE_AUTOTUNE", "1")
    monkeypatch.setattr(
        conv_probe,
        "measure_layout",
        lambda conv, device, math: {"contiguous_ms": 2.0, "channels_last_ms": 1.0 if conv["input"][1][1] == 8 else 3.0},
    )
    decided = probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))
    assert sorted(decided["conv_channels_last"].values()) == [False, True]
    after = core.convolutions(_compile(convs=decided).ir_after)
    assert [c["channels_last"] for c in after] == [True, False]


def test_where_conv_kernels_may_replace_cudnn_its_times_go_on_the_conv(fake_gpu, monkeypatch):
    """Under the default conv policy (auto) each conv's cuDNN times in both
    layouts are measured once and recorded on the conv for the cost model;
    without autotuning they do not decide the layout by themselves."""
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "auto")
    monkeypatch.setattr(
        conv_probe,
        "measure_layout",
        lambda conv, device, math: {"contiguous_ms": 2.0, "channels_last_ms": 1.0 if conv["input"][1][1] == 8 else 3.0},
    )
    decided = probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))
    assert decided["conv_channels_last"] == {}
    assert sorted(decided["conv_cudnn_ms"].values()) == [(2.0, 1.0), (2.0, 3.0)]
    after = _compile(convs=decided).ir_after
    assert after.count("cudnn_channels_last_ms=1.0, cudnn_contiguous_ms=2.0") == 1, after
    assert after.count("cudnn_channels_last_ms=3.0, cudnn_contiguous_ms=2.0") == 1, after
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "direct")
    assert probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))["conv_cudnn_ms"] == {}


def test_the_direct_kernel_is_timed_where_the_model_cannot_tell_it_from_cudnn(fake_gpu, monkeypatch, tmp_path):
    """Under the auto policy an IEEE conv's direct kernel is timed (once) where
    its modelled time is within DIRECT_BAND of cuDNN's as timed, and the time
    goes on the conv; a TF32 conv (the first: eager's is) is not timed."""
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "auto")
    first, second = core.convolutions(TWO_CONVS)
    assert first["model_ms"]["direct"] > 0 and second["model_ms"]["direct"] > 0
    cudnn_ms = {
        first["signature"]: first["model_ms"]["direct"],
        second["signature"]: second["model_ms"]["direct"] * 1.5,
    }
    monkeypatch.setattr(
        conv_probe,
        "measure_layout",
        lambda conv, device, math: {
            "contiguous_ms": cudnn_ms[conv["signature"]],
            "channels_last_ms": cudnn_ms[conv["signature"]],
        },
    )
    monkeypatch.setattr(conv_probe, "_arch", lambda device: 90)
    timed = []

    def measure(conv, device, kernel, out_shape):
        timed.append((conv["signature"], "_direct_" in kernel.name, out_shape))
        return {"direct_ms": 0.125}

    monkeypatch.setattr(conv_probe, "measure_direct", measure)
    decided = probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))
    assert timed == [(second["signature"], True, [2, 4, 6, 6])]
    assert decided["conv_direct_ms"] == {second["signature"]: 0.125}
    assert _compile(convs=decided).ir_after.count("direct_ms=0.125") == 1
    conv_probe._memory.clear()
    assert probe_convs(TWO_CONVS, "fp32", torch.device("cuda")) == decided  # from the disk cache
    assert len(timed) == 1
    # Modelled far from cuDNN's time (as timed afresh): the model's margin decides, nothing is timed.
    cudnn_ms[second["signature"]] = second["model_ms"]["direct"] * (conv_probe.DIRECT_BAND + 1)
    monkeypatch.setattr(conv_probe, "_memory", {})
    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path / "fresh"))
    assert probe_convs(TWO_CONVS, "fp32", torch.device("cuda"))["conv_direct_ms"] == {}
    assert len(timed) == 1


def test_the_direct_probes_kernel_is_the_conv_alone_and_compiles():
    """What measure_direct times (without a GPU, short of the launch): the
    direct kernel of the conv alone, on its operands as captured (the
    channels-last input read in place), which NVRTC compiles."""
    text = TWO_CONVS.replace("%x: f32[2,8,12,12]", "%x: f32[2,8,12,12]{1152,1,96,8}")
    conv = core.convolutions(text)[0]
    kernel, out = conv_probe.direct_kernel(conv, 90)
    assert out == [2, 16, 12, 12]
    assert "_direct_" in kernel.name
    assert "xg[ch * 1LL + h * 96LL + w_ * 8LL]" in kernel.source
    is_cubin, size, log = core.nvrtc_compile(kernel.translation_unit, kernel.name, 90)
    assert is_cubin and size > 0, log


def test_the_model_prices_each_engine_that_can_run_a_conv_in_its_math():
    """core.convolutions' model_ms, what conv_probe.py sets beside timed
    figures: every engine that can run the conv priced, none that cannot; a
    TF32 conv has no direct kernel (IEEE only), and its contiguous cuDNN call
    pays the transposes around a channels-last kernel."""
    conv = core.convolutions(TWO_CONVS)[0]
    ieee = core.convolutions(conv_probe.probe_graph(conv, "ieee")[0])[0]["model_ms"]
    tf32 = core.convolutions(conv_probe.probe_graph(conv, "tf32")[0])[0]["model_ms"]
    assert set(ieee) == {"cudnn_contiguous", "cudnn_channels_last", "kernel", "direct"}
    assert all(v > 0 for v in ieee.values())
    assert tf32["direct"] is None and tf32["kernel"] > 0
    assert tf32["cudnn_contiguous"] > tf32["cudnn_channels_last"]
    assert ieee["cudnn_contiguous"] == ieee["cudnn_channels_last"]


def test_specializations_are_guarded_on_the_users_conv_precision(user_flags):
    from fuseforge.runtime.module import _guard_key

    model, x = torch.nn.Conv2d(2, 3, 3), torch.randn(1, 2, 5, 5)
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    tf32 = _guard_key(model, [x])
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert _guard_key(model, [x]) != tf32


def test_the_cpu_plan_with_decisions_matches_eager():
    """A plan whose convs carry decisions (one TF32, one IEEE) runs on the CPU
    executor through the library helper and gives eager's result."""
    from fuseforge.runtime.executor import Executor

    first, second = core.convolutions(TWO_CONVS)
    plan = _compile(convs={"conv_tf32": {first["signature"]: True}}).plan
    torch.manual_seed(0)
    x, w, v, u = torch.randn(2, 8, 12, 12), torch.randn(16, 8, 3, 3), torch.randn(2, 16, 6, 6), torch.randn(4, 16, 1, 1)
    with _SeesConvPrecision() as mode:
        (a, b), _ = Executor(plan, CPU)([x, w, v, u])
    assert sorted(mode.seen) == ["ieee", "tf32"]
    torch.testing.assert_close(a, torch.relu(torch.nn.functional.conv2d(x, w, padding=1)))
    torch.testing.assert_close(b, torch.nn.functional.conv2d(v, u))


def test_roofline_ceilings_follow_each_convs_math():
    from fuseforge.harness.roofline import PEAKS, op_peak

    p = PEAKS["H100 80GB HBM3"]
    assert op_peak("convolution", "f32", p, "fp32", "tf32") == p.tf32
    assert op_peak("convolution", "f32", p, "fp32", "ieee") == p.fp32  # cuDNN's SIMT kernels
    assert op_peak("convolution", "f32", p, "fp32", "ieee", in_kernel=True) == p.tf32 / 3  # 3xTF32
    assert op_peak("convolution", "f16", p, "fp32") == p.fp16
