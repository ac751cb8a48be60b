"""Correctness and timing of a problem's model for `fuseforge run`: fuseforge
against eager and an fp64 reference over several seeds (check_correctness),
first-call compile times (compile_times), and eager, inductor and fuseforge
timed side by side (time_all)."""
from __future__ import annotations

import copy
import os
import tempfile
import time
from types import ModuleType
from typing import Any, Sequence

import torch


def flatten_tensors(x: Any) -> list[torch.Tensor]:
    """The tensors among `x`'s pytree leaves, in order."""
    from torch.utils import _pytree as pytree
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def build_model(problem_path: str, mode: str | None, device: str) -> tuple[ModuleType, torch.nn.Module]:
    """A problem file's module and its Model, built after seeding 0, in `mode`
    if given, on `device`."""
    from fuseforge.harness.problem import load_problem
    mod = load_problem(problem_path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    if mode is not None:
        model.train(mode == "train")
    return mod, model.to(device)


def problem_inputs(mod: Any, seed: int, device: str, dtype: torch.dtype | None = None) -> list[Any]:
    """The problem's get_inputs() drawn after seeding `seed`, tensors on
    `device` (floating ones cast to `dtype` if given)."""
    torch.manual_seed(seed)
    out = []
    for x in mod.get_inputs():
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        out.append(x)
    return out


def _max_err(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    err = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        d = (x.double() - y.double()).abs()
        d = torch.where(torch.isnan(x.double()) & torch.isnan(y.double()), torch.zeros_like(d), d)
        err = max(err, float(d.max()) if d.numel() else 0.0)
    return err


def _close(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.allclose(x.double(), y.double(), rtol=tol, atol=tol, equal_nan=True)
        for x, y in zip(a, b))


def _buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    return [b.detach().clone() for _, b in sorted(model.named_buffers())]


def judge(out: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], ref64: Sequence[torch.Tensor],
           out_buf: Sequence[torch.Tensor], ref_buf: Sequence[torch.Tensor]) -> tuple[bool, float, float, float]:
    """(correct, error vs eager, error vs fp64, eager's error vs fp64). Correct:
    outputs and updated buffers within 1e-4 of eager; where eager itself is far
    from fp64 (fp16 models, TF32 convs, long fp32 sums) the output bar is being
    no worse than twice eager's error against fp64."""
    err, err64, eager64 = _max_err(out, ref), _max_err(out, ref64), _max_err(ref, ref64)
    buffers_ok = _close(out_buf, ref_buf)
    ok = buffers_ok and (_close(out, ref) or (all(o.dtype == r.dtype for o, r in zip(out, ref))
                                              and err64 <= 2 * eager64 + 1e-6))
    return ok, err, err64, eager64


def fp64_reference(mod: Any, model: torch.nn.Module, state: dict, seed: int, device: str) -> list[torch.Tensor]:
    """Outputs of a float64 copy of `model` with `state` loaded, on the seed's inputs."""
    m64 = copy.deepcopy(model)
    m64.load_state_dict(state)
    m64 = m64.double()
    with torch.no_grad():
        return flatten_tensors(m64(*problem_inputs(mod, seed, device, torch.float64)))


def check_correctness(mod: Any, model: torch.nn.Module, seeds: int, device: str, precision: str = "fp32") -> dict:
    """Compares fuseforge with eager (outputs and updated buffers) and both with
    an fp64 reference, over `seeds` fresh random inputs, each from the same state.
    Eager runs under the same precision policy (TF32 matmuls under "tf32"), so
    the bar for a faster policy is eager's own error at that policy."""
    import fuseforge
    from fuseforge.runtime.precision import precision_context
    snapshot = copy.deepcopy(model.state_dict())
    fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
    result = {"correct": True, "max_err_vs_eager": 0.0, "max_err_vs_fp64": 0.0, "eager_err_vs_fp64": 0.0}
    for seed in range(seeds):
        inputs = problem_inputs(mod, seed, device)
        model.load_state_dict(snapshot)
        fast.load_state_dict(snapshot)
        with torch.no_grad(), precision_context(precision):
            ref = flatten_tensors(model(*inputs))
            out = flatten_tensors(fast(*inputs))
        ref_buf, out_buf = _buffers(model), _buffers(fast)
        ref64 = fp64_reference(mod, model, snapshot, seed, device)
        ok, err, err64, eager64 = judge(out, ref, ref64, out_buf, ref_buf)
        result["correct"] &= ok
        result["max_err_vs_eager"] = max(result["max_err_vs_eager"], err)
        result["max_err_vs_fp64"] = max(result["max_err_vs_fp64"], err64)
        result["eager_err_vs_fp64"] = max(result["eager_err_vs_fp64"], eager64)
    return result


def compile_times(mod: Any, model: torch.nn.Module, precision: str = "fp32", keep: bool = False) -> dict:
    """Seconds of the first optimized call (capture, passes, NVRTC, module
    load), once with an empty kernel cache (compile_s_cold) and once more in a
    new OptimizedModule with the disk cache that the first filled and this
    process's in-memory kernels forgotten (compile_s_warm). Eager runs once
    before, so CUDA and library initialization are not counted. `keep` copies
    the kernels compiled into the real disk cache, so later runs find them."""
    import shutil

    import fuseforge
    from fuseforge._native import core
    inputs = problem_inputs(mod, 1234, "cuda")
    out: dict[str, Any] = {}
    saved = os.environ.get("FUSEFORGE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="fuseforge-cold-") as cache, torch.no_grad():
        os.environ["FUSEFORGE_CACHE_DIR"] = cache
        try:
            model(*inputs)
            for key in ("compile_s_cold", "compile_s_warm"):
                core.clear_memory_cache()
                fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fast(*inputs)
                torch.cuda.synchronize()
                out[key] = time.perf_counter() - t0
        finally:
            if saved is None:
                os.environ.pop("FUSEFORGE_CACHE_DIR", None)
            else:
                os.environ["FUSEFORGE_CACHE_DIR"] = saved
        if keep and core.cache_dir():
            shutil.copytree(cache, core.cache_dir(), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("autotune.json"))
    return out


def time_all(mod: Any, model: torch.nn.Module, against: list[str], precision: str = "fp32") -> dict:
    """Median cold-L2 milliseconds of eager, torch.compile (inductor) and
    fuseforge, timed interleaved (fuseforge.harness.timing), and fuseforge's roofline
    estimate (fuseforge.harness.roofline); all three under the same precision policy."""
    import fuseforge
    from fuseforge.runtime.precision import precision_context
    from fuseforge.harness.roofline import roofline
    from fuseforge.harness.timing import time_cuda
    inputs = problem_inputs(mod, 1234, "cuda")
    out: dict[str, Any] = {}
    with torch.no_grad(), precision_context(precision):
        fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
        t0 = time.perf_counter()
        fast(*inputs)
        torch.cuda.synchronize()
        out["compile_s"] = time.perf_counter() - t0
        fns = {"fuseforge": lambda: fast(*inputs)}
        if "eager" in against:
            fns["eager"] = lambda: model(*inputs)
        if "inductor" in against:
            compiled = torch.compile(copy.deepcopy(model))
            compiled(*inputs)  # compiles outside the timed rounds
            fns["inductor"] = lambda: compiled(*inputs)
        out.update({f"{name}_ms": ms for name, ms in time_cuda(fns).items()})
        specs = fast.specializations()
        if specs:  # none when the model could not be captured and ran eagerly
            out.update(roofline(specs[0].plan, torch.cuda.get_device_name(), out["fuseforge_ms"], precision))
    for ref in ("eager", "inductor"):
        if f"{ref}_ms" in out:
            out[f"speedup_vs_{ref}"] = out[f"{ref}_ms"] / out["fuseforge_ms"]
    return out
