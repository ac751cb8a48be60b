"""What eager's own convolutions do, found out on the GPU: whether eager's
conv of a signature computes in TF32 under the user's flags (the precision
contract's question), and with autotuning on, which layout runs it faster.

The fp32 policy promises each conv an error against fp64 at most twice
eager's for the same conv under the same flags. cuDNN decides TF32 per
algorithm, so the answer differs by shape and layout (an NCHW conv measured
1.9e-7 where the channels-last conv of the same shape gave 3.4e-4): it is
measured, once per (signature, device, torch/cuDNN version, flags), on random
data of the captured shapes and strides, and cached in memory and in
<cache dir>/conv_probe.json. The answer goes to the compiler
(CompileOptions's conv_tf32 and conv_channels_last, via runtime/options.py), whose
conv_precision pass writes it on the conv as fp32_precision="tf32"|"ieee"
(explain shows it; the executor and emitted files apply it with
precision.conv_fp32_precision; conv kernels compile 1xTF32 or 3xTF32).

The test: eager's conv error against fp64 (root mean square over the first
batch sample) against the error TF32 itself brings (the same conv on
TF32-rounded operands, accumulated in fp64). TF32 is allowed where that
error is within 1.6x eager's, i.e. where TF32 math keeps the contract with a
margin for its accumulation: eager's TF32 convs measure about 1x, its fp32
ones about 1/1000x. Without a GPU nothing is probed and every f32 conv stays
IEEE.

Where conv kernels may replace cuDNN, cuDNN's times are measured too, and so
is our direct kernel's (IEEE convs) where the cost model puts it within
DIRECT_BAND of cuDNN's: there the model's error decides more often than the
kernels do (a 3-D conv's direct kernel ran 0.65 ms where cuDNN took 0.76,
modelled at 0.74 and weighed with its 1.25x margin). The scheduler then
weighs the two as timed.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from typing import Any

import torch

from fuseforge._native import core
from fuseforge.dtypes import TORCH
from fuseforge.runtime import autotune
from fuseforge.runtime.precision import conv_fp32_precision, eager_conv_precision

#: TF32 is allowed where the TF32 rounding error is at most this times eager's.
TF32_MARGIN = 1.6
#: The direct kernel is timed where its modelled time is within this factor of cuDNN's, either way.
DIRECT_BAND = 2.0
#: The file of the measurements, in the cache directory beside autotune.CHOICES.
MEASUREMENTS = "conv_probe.json"
_memory: dict[str, dict] = {}


def _environment(device: torch.device) -> str:
    """What the answers depend on besides the conv: GPU, torch and cuDNN
    versions, and the flags eager's convs run under."""
    return (
        f"{torch.cuda.get_device_name(device)}|torch {torch.__version__}|cudnn "
        f"{torch.backends.cudnn.version()}|conv {eager_conv_precision()}|benchmark "
        f"{torch.backends.cudnn.benchmark}|deterministic {torch.backends.cudnn.deterministic}"
    )


def _cached(key: str, measure: Callable[[], dict]) -> dict:
    if key in _memory:
        return _memory[key]
    found = autotune.load(MEASUREMENTS).get(key)
    if not isinstance(found, dict):
        found = measure()
        autotune.store(key, found, MEASUREMENTS)
    _memory[key] = found
    return found


def _tensor(t: tuple, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    dtype, shape, strides = TORCH[t[0]], tuple(t[1]), tuple(t[2])
    x = torch.empty_strided(shape, strides, dtype=dtype, device=device)
    return x.copy_(torch.randn(shape, generator=generator, device=device, dtype=dtype))


def _call(conv: dict, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.convolution.default(
        x,
        w,
        None,
        conv["stride"],
        conv["padding"],
        conv["dilation"],
        conv["transposed"],
        conv["output_padding"],
        conv["groups"],
    )


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """x as f32 rounded to TF32 (10 mantissa bits, to nearest, ties away: the
    IR's round_tf32 without its NaN guard), strides kept."""
    bits = x.float().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b).pow(2).mean().sqrt())


def operands(conv: dict, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random input and weight of a conv's captured shapes, strides and dtype."""
    g = torch.Generator(device=device).manual_seed(seed)
    return _tensor(conv["input"], device, g), _tensor(conv["weight"], device, g)


def measure_precision(conv: dict, device: torch.device) -> dict:
    """Eager's conv of `conv`'s signature under the current flags: its error
    against fp64 and TF32's (first batch sample, root mean square), and
    whether TF32 stays within TF32_MARGIN of eager's."""
    with torch.no_grad():
        x, w = operands(conv, device)
        y = _call(conv, x, w)[:1]
        ref = _call(conv, x[:1].double(), w.double())
        tf32 = _call(conv, round_tf32(x[:1]).double(), round_tf32(w).double())
        eager, tf32_err = _rms(y, ref), _rms(tf32, ref)
    return {"eager_error": eager, "tf32_error": tf32_err, "tf32": tf32_err <= TF32_MARGIN * eager}


def measure_layout(conv: dict, device: torch.device, fp32_precision: str) -> dict:
    """Milliseconds of the conv on contiguous and on channels-last operands,
    under the math it will use."""
    from fuseforge.runtime.autotune import cuda_time

    with torch.no_grad(), conv_fp32_precision(fp32_precision):
        x, w = operands(conv, device)
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        xc, wc = x.contiguous(), w.contiguous()
        xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
        contiguous = cuda_time(lambda: _call(conv, xc, wc))
        channels_last = cuda_time(lambda: _call(conv, xl, wl))
    return {"contiguous_ms": contiguous, "channels_last_ms": channels_last}


def _ints(v: list[int]) -> str:
    return "[" + ", ".join(map(str, v)) + "]"


def output_shape(conv: dict) -> list[int]:
    """The output shape of a conv as core.convolutions() describes it."""
    meta = torch.ops.aten.convolution.default(
        torch.empty(conv["input"][1], device="meta"),
        torch.empty(conv["weight"][1], device="meta"),
        None,
        conv["stride"],
        conv["padding"],
        conv["dilation"],
        conv["transposed"],
        conv["output_padding"],
        conv["groups"],
    )
    return list(meta.shape)


def conv_attrs(conv: dict, fp32_precision: str, engine: str | None = None) -> str:
    """The IR attributes of a conv as core.convolutions() describes it, under
    `fp32_precision`; with `engine`, decided to run on that engine (conv_engine's names)."""
    decided = f'engine="{engine}", ' if engine else ""
    return (
        f'dilation={_ints(conv["dilation"])}, {decided}fp32_precision="{fp32_precision}", groups={conv["groups"]}, '
        f"output_padding={_ints(conv['output_padding'])}, padding={_ints(conv['padding'])}, "
        f"stride={_ints(conv['stride'])}, transposed={str(bool(conv['transposed'])).lower()}"
    )


def probe_graph(conv: dict, math: str = "ieee") -> tuple[str, list[int]]:
    """IR of `conv` alone, computing in `math` ("ieee" or "tf32"), on operands
    of its captured types (the direct kernel reads them where they are), and
    its output shape."""
    out = output_shape(conv)

    def typed(t: tuple) -> str:
        return f"{t[0]}[{','.join(map(str, t[1]))}]{{{','.join(map(str, t[2]))}}}"

    text = (
        f"graph @direct_probe(%x: {typed(conv['input'])}, %w: {typed(conv['weight'])} param) {{\n"
        f"  %0 = convolution(%x, %w) {{{conv_attrs(conv, math)}}} : {conv['dtype']}[{','.join(map(str, out))}]\n"
        "  return %0\n}\n"
    )
    return text, out


def direct_kernel(conv: dict, arch: int) -> tuple[Any, list[int]] | None:
    """The plan's kernel for `conv` alone as a direct kernel and the output
    shape; None where the plan is not that one kernel on the operands as they are."""
    text, out = probe_graph(conv)
    # cuDNN's times given as infinite: the scheduler takes the direct kernel wherever one covers the conv.
    inf = float("inf")
    options = core.CompileOptions(
        precision="fp32", gemm="off", arch=arch, conv="direct", conv_cudnn_ms={conv["signature"]: (inf, inf)}
    )
    plan = core.compile(text, options).plan
    if len(plan.kernels) != 1 or len(plan.prepare) > 0:
        return None
    kernel = plan.kernels[0]
    reads = [plan.buffers[i.buffer].name for i in kernel.inputs]
    if kernel.kind != "conv" or "_direct_" not in kernel.name or reads != ["x", "w"]:
        return None
    return kernel, out


def measure_direct(conv: dict, device: torch.device, kernel: Any, out_shape: list[int]) -> dict:
    """Milliseconds of the direct kernel `kernel` (direct_kernel's) on
    random operands of `conv`'s types; None where its result strays from
    cuDNN's IEEE conv (so that a wrong kernel never wins by being fast)."""
    from fuseforge.runtime.autotune import cuda_time

    loaded = core.load_kernels([kernel], _arch(device))[0]
    if isinstance(loaded, str):
        raise RuntimeError(f"the direct kernel did not compile: {loaded[:200]}")
    index = _index(device)
    with torch.no_grad():
        x, w = operands(conv, device)
        y = torch.empty(out_shape, dtype=x.dtype, device=device)
        stream = torch.cuda.current_stream(device).cuda_stream

        def run() -> None:
            loaded.launch(index, [y.data_ptr(), x.data_ptr(), w.data_ptr()], [], stream)

        run()
        with conv_fp32_precision("ieee"):
            ref = _call(conv, x, w)
        if not torch.allclose(y, ref, rtol=1e-3, atol=1e-3):
            return {"direct_ms": None, "max_error": float((y - ref).abs().max())}
        return {"direct_ms": cuda_time(run)}


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _arch(device: torch.device) -> int:
    return core.device_arch(_index(device))


def _direct_key(env: str, conv: dict, kernel: Any) -> str:
    digest = hashlib.sha256(kernel.source.encode()).hexdigest()[:16]
    return f"{env}|{conv['signature']}|direct {digest}"


def _timed_directs(env: str, convs: list[dict], device: torch.device) -> dict[str, float]:
    """measure_direct's answers (per signature, cached per kernel source)
    for the convs whose direct kernel is to be timed; none (with a warning
    where it cannot run) where no direct kernel was timed. The kernels not
    timed before compile together first: core.load_kernels spreads them over
    every core, where one at a time a network's many conv shapes took
    NVRTC's time for each in turn."""
    found: list[tuple[dict, Any, list[int]]] = []
    for conv in convs:
        try:
            direct = direct_kernel(conv, _arch(device))
        except RuntimeError as e:
            _cannot_time_direct(conv, e)
            continue
        if direct is not None:
            found.append((conv, *direct))
    known = autotune.load(MEASUREMENTS)
    new = [
        k for conv, k, _ in found if _direct_key(env, conv, k) not in _memory and _direct_key(env, conv, k) not in known
    ]
    if new:
        core.load_kernels(new, _arch(device))  # into the in-memory kernel cache measure_direct loads from
    out: dict[str, float] = {}
    for conv, kernel, shape in found:
        try:
            ms = _cached(_direct_key(env, conv, kernel), lambda: measure_direct(conv, device, kernel, shape))[
                "direct_ms"
            ]
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError included
            _cannot_time_direct(conv, e)
            continue
        if ms is not None:
            out[conv["signature"]] = ms
    return out


def _cannot_time_direct(conv: dict, e: Exception) -> None:
    warnings.warn(
        f"fuseforge: could not time `{conv['text']}` on the direct kernel ({str(e)[:200]}); the cost model weighs it",
        stacklevel=3,
    )


def _probed_tf32(key: str, conv: dict, device: torch.device) -> bool:
    """The probe's answer for one conv; IEEE (with a warning) where it cannot
    run, e.g. out of memory for a conv of that size."""
    try:
        return bool(_cached(key, lambda: measure_precision(conv, device))["tf32"])
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError included
        warnings.warn(
            f"fuseforge: could not probe the precision of `{conv['text']}` ({str(e)[:200]}); it runs in IEEE fp32",
            stacklevel=2,
        )
        return False


def decide(
    text: str,
    precision: str,
    device: torch.device,
    *,
    forced: str = "probe",
    tune_layout: bool = False,
    time_cudnn: bool = False,
    time_direct: bool = False,
) -> dict[str, dict]:
    """CompileOptions' conv arguments for an IR graph: `conv_tf32` (per f32
    conv signature: eager's conv uses TF32, as probed; unneeded under the tf32
    policy), `conv_channels_last` (per signature, timed, with `tune_layout`)
    and `conv_cudnn_ms` (per signature, cuDNN's (contiguous, channels-last)
    milliseconds, with `time_cudnn`: the conv scheduler weighs implicit-GEMM
    kernels against these) and `conv_direct_ms` (per IEEE signature whose
    direct kernel the model puts within DIRECT_BAND of cuDNN's timed time,
    the kernel's milliseconds, with `time_cudnn` and `time_direct`). Empty
    without a GPU.
    `forced` "ieee" or "tf32" sets every f32 conv's math instead of probing
    (diagnostics)."""
    if device.type != "cuda":
        return {}
    convs = core.convolutions(text)
    conv_tf32: dict[str, bool] = {}
    conv_channels_last: dict[str, bool] = {}
    conv_cudnn_ms: dict[str, tuple[float, float]] = {}
    conv_direct_ms: dict[str, float] = {}
    direct: list[dict] = []  # IEEE convs whose direct kernel the model cannot tell from cuDNN
    env = _environment(device) if convs else ""
    for conv in convs:
        sig = conv["signature"]
        math = "tf32"
        if conv["dtype"] == "f32":
            if forced in ("ieee", "tf32"):
                conv_tf32[sig] = forced == "tf32"
            elif precision != "tf32":
                conv_tf32[sig] = _probed_tf32(f"{env}|{sig}", conv, device)
            math = "tf32" if precision == "tf32" or conv_tf32.get(sig) else "ieee"
        if (tune_layout or time_cudnn) and len(conv["input"][1]) in (4, 5):
            t = _timed_layouts(f"{env}|{sig}|layout {math}", conv, device, math)
            if t is None:
                continue
            if tune_layout:
                conv_channels_last[sig] = t["channels_last_ms"] < t["contiguous_ms"]
            if time_cudnn:
                conv_cudnn_ms[sig] = (t["contiguous_ms"], t["channels_last_ms"])
            model = conv["model_ms"]["direct"]
            cudnn = min(t["contiguous_ms"], t["channels_last_ms"])
            if (
                time_cudnn
                and time_direct
                and math == "ieee"
                and model is not None
                and cudnn / DIRECT_BAND < model < cudnn * DIRECT_BAND
            ):
                direct.append(conv)
    if direct:
        conv_direct_ms = _timed_directs(env, direct, device)
    return {
        "conv_tf32": conv_tf32,
        "conv_channels_last": conv_channels_last,
        "conv_cudnn_ms": conv_cudnn_ms,
        "conv_direct_ms": conv_direct_ms,
    }


def _timed_layouts(key: str, conv: dict, device: torch.device, math: str) -> dict | None:
    """measure_layout's answer, cached; None (with a warning: the cost model
    decides) where it cannot run, e.g. out of memory."""
    try:
        return _cached(key, lambda: measure_layout(conv, device, math))
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError included
        warnings.warn(
            f"fuseforge: could not time `{conv['text']}` on cuDNN ({str(e)[:200]}); the cost model "
            "decides its layout and engine",
            stacklevel=2,
        )
        return None


def evidence(text: str, device: torch.device) -> list[tuple[str, dict | None]]:
    """For explain: each conv's node text and its cached precision probe, if any."""
    if device.type != "cuda":
        return [(c["text"], None) for c in core.convolutions(text)]
    env = _environment(device)
    return [(c["text"], _memory.get(f"{env}|{c['signature']}")) for c in core.convolutions(text)]
