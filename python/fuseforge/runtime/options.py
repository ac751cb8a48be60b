"""Compile options: the precision policy, which matmuls become GEMM kernels,
autotuning and the target GPU. The environment variables that change them are
read here and nowhere else in Python (the C++ core's own in csrc/runtime/env.cc;
docs/ENVIRONMENT.md lists both sides'):

- FUSEFORGE_GEMM: auto (default: f32 matmuls at the fp32 precision), all (or
  1: f32, f16 and bf16) or off (or 0);
- FUSEFORGE_AUTOTUNE=1: each GEMM kernel's other tiles are compiled too and
  timed at its first run (the choice is cached on disk);
- FUSEFORGE_REDUCTIONS=0: reductions, norms, softmax, pooling and scans stay library calls
  (to compare with the generated reduction kernels);
- FUSEFORGE_CONV_KERNELS: auto (default, or 1: convs as generated direct or
  implicit-GEMM kernels where the cost model, with cuDNN's times measured on
  the GPU, prefers them to cuDNN), direct (only direct kernels: 2-D f32
  convs), always (every conv an implicit-GEMM kernel covers) or off (or 0);
- FUSEFORGE_CONV_PRECISION: probe (default), ieee or tf32: every f32 conv's
  math forced instead of probed (diagnostics; runtime/conv_probe.py);
- FUSEFORGE_FAST_CALL=0: every call takes the Python path, none the native
  one (runtime/fast_call.py; to compare, or to rule it out);
- FUSEFORGE_CUDA_GRAPHS: auto (default: a plan replays as a CUDA graph
  where that times faster than walking its steps), always (wherever it can
  be captured) or off (or 0: every call walks its steps; to compare, or to
  rule it out); runtime/cuda_graph.py;
- FUSEFORGE_WARM_START=0: every new process captures the model again instead
  of loading its captured graph from the cache directory (runtime/plan_cache.py);
- FUSEFORGE_DISABLE_CACHE=1, which the core reads for its kernels, turns the
  warm-start cache off too: no file of the cache directory is read or written.

With a CUDA device, `compile_ir` first probes what eager's convolutions do on
it (conv_probe.decide) and hands the answers to the compiler, with the
device's hardware facts (device_target: SM count, shared memory, L2) that
kernel choices depend on; without one the core uses the facts of the arch's
usual part (core.target_for_arch; an H100/H200 for sm_90: core.default_target).

Without CUTLASS's headers (_native.gemm_headers_missing) no matmul becomes a
GEMM kernel and no conv an implicit-GEMM one; the first compile whose graph
has matmuls that would have been GEMM kernels logs one warning on the
`fuseforge` logger saying why and what to install (gemm_fallbacks lists them).
"""

from __future__ import annotations

import logging
import os
import re

import torch

from fuseforge import _native, phases
from fuseforge._native import core
from fuseforge.runtime import conv_probe
from fuseforge.runtime.precision import check_precision

log = logging.getLogger("fuseforge")
_warned_gemm_headers = False

#: The GEMM kernel policies the core knows (compile.cc's parse_gemm_policy).
_GEMM_POLICIES = ("", "auto", "f32", "all", "1", "off", "0")
#: A matmul node of IR text and its result's dtype.
_MATMUL = re.compile(r"^\s*%\S+ = (?:mm|bmm|addmm)\(.* : (\w+)\[")


#: The variables' names, for code that names one (the harness sets ENV_CACHE_DIR for its child processes).
ENV_GEMM = "FUSEFORGE_GEMM"
ENV_AUTOTUNE = "FUSEFORGE_AUTOTUNE"
ENV_REDUCTIONS = "FUSEFORGE_REDUCTIONS"
ENV_CONV_KERNELS = "FUSEFORGE_CONV_KERNELS"
ENV_CONV_PRECISION = "FUSEFORGE_CONV_PRECISION"
ENV_FAST_CALL = "FUSEFORGE_FAST_CALL"
ENV_WARM_START = "FUSEFORGE_WARM_START"
#: Also read by the ModelNew of a file `fuseforge emit` writes (emit/dispatch.py), which never imports fuseforge.
ENV_CUDA_GRAPHS = "FUSEFORGE_CUDA_GRAPHS"
ENV_DISABLE_CACHE = "FUSEFORGE_DISABLE_CACHE"
#: The kernel cache's directory: read by the core (csrc/runtime/env.cc), never here.
ENV_CACHE_DIR = "FUSEFORGE_CACHE_DIR"
#: How many kernels compile at once: read by the core (env.cc), never here; bench sets it for its compile jobs.
ENV_COMPILE_JOBS = "FUSEFORGE_COMPILE_JOBS"


def fast_call_enabled() -> bool:
    return os.environ.get(ENV_FAST_CALL) != "0"


def cuda_graphs() -> str:
    """auto, always or off (FUSEFORGE_CUDA_GRAPHS)."""
    value = os.environ.get(ENV_CUDA_GRAPHS, "auto")
    if value in ("0", "off"):
        return "off"
    if value not in ("auto", "always"):
        raise ValueError(f"{ENV_CUDA_GRAPHS}={value!r}: expected auto, always or off")
    return "always" if value == "always" else "auto"


def warm_start_enabled() -> bool:
    """Whether captured graphs are kept in and loaded from the cache directory."""
    return os.environ.get(ENV_WARM_START) != "0" and os.environ.get(ENV_DISABLE_CACHE) != "1"


def autotune_enabled() -> bool:
    return os.environ.get(ENV_AUTOTUNE) == "1"


def reductions_enabled() -> bool:
    return os.environ.get(ENV_REDUCTIONS) != "0"


def gemm_policy(gemm: str | None = None) -> str:
    """`gemm` if given, else FUSEFORGE_GEMM (default auto)."""
    return gemm if gemm is not None else os.environ.get(ENV_GEMM, "auto")


def conv_policy() -> str:
    return os.environ.get(ENV_CONV_KERNELS, "auto")


def conv_precision_forced() -> str:
    """FUSEFORGE_CONV_PRECISION: probe (default), ieee or tf32; raises
    ValueError naming another value."""
    forced = os.environ.get(ENV_CONV_PRECISION, "probe")
    if forced not in ("probe", "ieee", "tf32"):
        raise ValueError(f"fuseforge: {ENV_CONV_PRECISION} is {forced!r}; expected probe, ieee or tf32")
    return forced


def device_target(device: torch.device | None) -> core.Target | None:
    """The hardware facts of a CUDA `device` as torch reads them; None for
    another device or none."""
    if device is None or device.type != "cuda":
        return None
    p = torch.cuda.get_device_properties(device.index or 0)
    return core.Target(
        arch=p.major * 10 + p.minor,
        sm_count=p.multi_processor_count,
        # torch's stub lacks this property, which torch.cuda's properties have
        shared_per_block_optin=p.shared_memory_per_block_optin,  # type: ignore[attr-defined]
        shared_per_sm=p.shared_memory_per_multiprocessor,
        l2_bytes=p.L2_cache_size,
    )


def compile_target(arch: int, device: torch.device | None = None) -> core.Target:
    """The hardware facts kernels for `arch` are chosen for: a CUDA `device`'s
    where it is of that arch, else the arch's usual part's (an H100/H200 for
    sm_90 and unknown archs)."""
    target = device_target(device)
    return target if target is not None and target.arch == arch else core.target_for_arch(arch)


def compile_options(
    precision: str = "fp32",
    arch: int = 0,
    *,
    gemm: str | None = None,
    trace: bool = False,
    passes: list[str] | None = None,
    convs: dict[str, dict] | None = None,
    target: core.Target | None = None,
    release_inputs: bool = False,
    donated: list[str] | None = None,
) -> core.CompileOptions:
    """A core.CompileOptions. `gemm` overrides FUSEFORGE_GEMM; `arch` is the
    target GPU's compute capability (0: unknown); `trace` records the IR after
    each pass; `convs` is conv_probe.decide's answer; `target` the GPU's
    facts (None: core.target_for_arch(arch)); `release_inputs`: the caller
    hands its input tensors over, and the plan frees each after its last
    read; `donated`: the inputs (by name) it may also write over then.
    Raises ValueError naming a bad
    precision or policy."""
    check_precision(precision)
    policy = gemm_policy(gemm)
    conv = conv_policy()
    # The core drops GEMM kernels itself when no headers were registered; saying
    # so here too keeps the two in step when the lookup is all that failed.
    missing = _native.gemm_headers_missing() is not None
    try:
        return core.CompileOptions(
            precision=precision,
            gemm="off" if missing and policy in _GEMM_POLICIES else policy,
            autotune=autotune_enabled(),
            arch=arch,
            passes=passes or [],
            trace=trace,
            reductions=reductions_enabled(),
            conv="direct" if missing and conv in ("auto", "1", "always") else conv,
            target=target,
            release_inputs=release_inputs,
            donated=donated or [],
            **(convs or {}),
        )
    except ValueError as e:
        where = "" if gemm is not None else f"FUSEFORGE_GEMM is {policy!r}, FUSEFORGE_CONV_KERNELS is {conv!r}: "
        raise ValueError(f"fuseforge: {where}{e}") from None


def gemm_dtypes(policy: str, precision: str) -> tuple[str, ...]:
    """The dtypes whose matmuls `policy` makes GEMM kernels at `precision`,
    headers permitting (compile.cc's gemm_dtypes)."""
    if policy in ("all", "1"):
        return ("f32", "f16", "bf16")
    if policy in ("off", "0"):
        return ()
    return ("f32",) if precision == "fp32" else ()


def gemm_fallbacks(ir_after: str, precision: str, gemm: str | None = None) -> list[str]:
    """The matmuls of `ir_after` (IR text) that run as library calls only
    because CUTLASS's headers are missing, as IR lines; [] where they are there."""
    if _native.gemm_headers_missing() is None:
        return []
    dtypes = gemm_dtypes(gemm_policy(gemm), precision)
    return [ln.strip() for ln in ir_after.splitlines() if (m := _MATMUL.match(ln)) and m.group(1) in dtypes]


def warn_gemm_fallbacks(ir_after: str, precision: str, gemm: str | None = None) -> None:
    """Once per process, at the first graph with matmuls that gemm_fallbacks
    lists: a warning naming the cause and what to install."""
    global _warned_gemm_headers
    if _warned_gemm_headers or not gemm_fallbacks(ir_after, precision, gemm):
        return
    _warned_gemm_headers = True
    cause, fix = _native.gemm_headers_missing() or ("", "")
    kinds = "/".join(gemm_dtypes(gemm_policy(gemm), precision))
    log.warning("fuseforge: %s: %s matmuls run as library calls; %s", cause, kinds, fix)


def probe_convs(text: str, precision: str, device: torch.device) -> dict[str, dict]:
    """What eager's convolutions in `text` do on `device` (conv_probe.decide)."""
    forced = conv_precision_forced()
    implicit = conv_policy() in ("auto", "1", "always")
    return conv_probe.decide(
        text,
        precision,
        device,
        forced=forced,
        tune_layout=autotune_enabled(),
        time_cudnn=implicit,
        time_direct=conv_policy() in ("auto", "1"),
    )


def compile_ir(
    text: str,
    precision: str = "fp32",
    arch: int = 0,
    *,
    gemm: str | None = None,
    trace: bool = False,
    passes: list[str] | None = None,
    device: torch.device | None = None,
    release_inputs: bool = False,
    donated: list[str] | None = None,
) -> core.Compiled:
    """Compiles IR text (passes, fusion, CUDA, the plan): a core.Compiled with
    ir_before, ir_after, pass_trace and plan. With a CUDA `device`, each f32
    conv's math and layout follow what eager's conv does there (probed), and
    where the kernels are for its arch, they are chosen for its SM count and
    shared memory (device_target). `release_inputs`, `donated`: see
    compile_options."""
    with phases.timed("GPU probes"):
        convs = probe_convs(text, precision, device) if device is not None and device.type == "cuda" else None
    target = compile_target(arch, device)
    options = compile_options(
        precision,
        arch,
        gemm=gemm,
        trace=trace,
        passes=passes,
        convs=convs,
        target=target,
        release_inputs=release_inputs,
        donated=donated,
    )
    compiled = core.compile(text, options)
    phases.add_all(compiled.phase_seconds)
    warn_gemm_fallbacks(compiled.ir_after, precision, gemm)
    return compiled
