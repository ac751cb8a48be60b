"""Compile times and side-by-side timing of one problem for `fuseforge run`:
first-call seconds with an empty and with a filled kernel cache
(compile_times), and eager, inductor and fuseforge timed interleaved
(time_all). Both use the model itself: optimized modules and torch.compile
share its parameters, nothing is deep-copied."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch


def warm_imports() -> float:
    """Imports torch's tracer (torch.export's and dynamo's modules), which the
    first capture in a process would otherwise pay for (about 2 s); returns
    the seconds it took. Compile times are measured after it: it is a cost of
    the process, not of compiling a model."""
    t0 = time.perf_counter()
    import torch._dynamo  # noqa: F401
    import torch.export._trace  # noqa: F401

    return time.perf_counter() - t0


@contextlib.contextmanager
def _environ_set(name: str, value: str) -> Iterator[None]:
    """os.environ[name] is `value` within it (processes started meanwhile
    inherit it), and what it was after."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


@contextlib.contextmanager
def temporary_cache_dir(prefix: str) -> Iterator[str]:
    """The core's kernel cache directory (FUSEFORGE_CACHE_DIR, which the core
    reads) set to a new temporary directory, for this process and the ones it
    starts meanwhile; removed and the variable restored afterwards."""
    from fuseforge.runtime.options import ENV_CACHE_DIR

    with tempfile.TemporaryDirectory(prefix=prefix) as cache, _environ_set(ENV_CACHE_DIR, cache):
        yield cache


@contextlib.contextmanager
def kernels_kept(keep: bool) -> Iterator[str]:
    """A new empty kernel cache (temporary_cache_dir); where `keep`, the
    kernels compiled in it are copied into the cache in use before on exit.
    Kernels only: the timed choices (GEMM tiles, cuDNN's conv times) were
    made beside other jobs (bench --jobs) and are timed again where kept."""
    from fuseforge._native import core
    from fuseforge.runtime import autotune, conv_probe

    real_cache = core.cache_dir() if keep else ""
    with temporary_cache_dir("fuseforge-cold-") as cache:
        yield cache
        if real_cache:
            choices = shutil.ignore_patterns(autotune.CHOICES, conv_probe.MEASUREMENTS)
            shutil.copytree(cache, real_cache, dirs_exist_ok=True, ignore=choices)


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def compile_times(
    model: torch.nn.Module, inputs: Sequence[Any], precision: str = "fp32", keep: bool = False
) -> tuple[dict, Any]:
    """Seconds of the first optimized call (capture, passes, NVRTC, module
    load, one run), once with an empty kernel cache (compile_s_cold, its
    phases' seconds in compile_phases_s: fuseforge.phases) and once
    more in a new OptimizedModule with the disk cache that the first filled
    and this process's in-memory kernels forgotten (compile_s_warm). Run the
    model eagerly once before, so that CUDA and library initialization are not
    counted, and warm_imports(). `keep` copies the kernels compiled into the
    real disk cache. Returns the figures and the second optimized module."""
    import fuseforge
    from fuseforge import phases
    from fuseforge._native import core

    out: dict[str, Any] = {}
    fast = None
    with torch.no_grad(), kernels_kept(keep):
        for key in ("compile_s_cold", "compile_s_warm"):
            core.clear_memory_cache()
            _synchronize()
            t0 = time.perf_counter()
            with phases.recording() as seconds:
                # Compiling from example inputs raises CaptureError instead of
                # falling back to eager: a run must not time eager as fuseforge.
                fast = fuseforge.optimize(model, inputs, precision=precision)
                fast(*inputs)
                _synchronize()
            out[key] = time.perf_counter() - t0
            if key == "compile_s_cold":
                out["compile_phases_s"] = seconds
    return out, fast


def compile_inductor(
    model: torch.nn.Module, inputs: Sequence[Any], precision: str = "fp32", cache_tuning: bool = True
) -> tuple[Any, float]:
    """torch.compile(model) (sharing its parameters) and the seconds of its
    first call, which compiles (or loads from inductor's caches).
    `cache_tuning` False: what inductor's Triton kernels time at their first
    call to pick one of their configs is not kept (inductor bakes that into
    the compiled code, which its graph cache keeps), so a process that loads
    them tunes them again at its own first call. bench's compile jobs run
    eight at a time: tuned there, the choices were made on a shared GPU."""
    import torch._inductor.config

    from fuseforge.runtime.precision import precision_context

    compiled = torch.compile(model)
    with torch.no_grad(), precision_context(precision), torch._inductor.config.patch(autotune_local_cache=cache_tuning):
        t0 = time.perf_counter()
        compiled(*inputs)
        _synchronize()
    return compiled, time.perf_counter() - t0


def time_all(
    model: torch.nn.Module,
    fast: Any,
    inputs: Sequence[Any],
    against: Sequence[str],
    precision: str = "fp32",
    inductor: Any = None,
) -> dict:
    """Median cold-L2 milliseconds of eager, torch.compile (inductor) and
    fuseforge, timed interleaved (fuseforge.runtime.timing), and fuseforge's
    roofline estimate (fuseforge.harness.roofline); all three under the same
    precision policy. `fast`, and `inductor` (compile_inductor's module,
    timed where given), have been called on `inputs` before (compiled); eager
    is timed where `against` names it."""
    from fuseforge.harness.roofline import roofline
    from fuseforge.runtime.precision import precision_context
    from fuseforge.runtime.timing import time_cuda

    out: dict[str, Any] = {}
    fns = {"fuseforge": lambda: fast(*inputs)}
    if "eager" in against:
        fns["eager"] = lambda: model(*inputs)
    if inductor is not None:
        fns["inductor"] = lambda: inductor(*inputs)
    with torch.no_grad(), precision_context(precision):
        out.update({f"{name}_ms": ms for name, ms in time_cuda(fns).items()})
    specs = fast.specializations()
    if specs:  # none when the model could not be captured and ran eagerly
        out.update(roofline(specs[0].compiled.plan, torch.cuda.get_device_name(), out["fuseforge_ms"], precision))
    for ref in ("eager", "inductor"):
        if f"{ref}_ms" in out:
            out[f"speedup_vs_{ref}"] = out[f"{ref}_ms"] / out["fuseforge_ms"]
    return out
