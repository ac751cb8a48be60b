"""`fuseforge run` without a GPU, in bounded time and memory.

The problem's plan at its real shapes is captured from the model and inputs
built on the meta device (nothing allocated) and every kernel of it is
compiled with NVRTC (disk-cached). Its numerics are checked at a reduced
batch: get_inputs() is drawn with its leading dimension cut to `rows` (at
most CHECK_ELEMENTS input elements in all), the same model (real parameters)
is captured and compiled at that size, and that plan runs on the CPU (library
calls through ATen, kernels on the reference interpreter) against eager and
an fp64 reference. Only the batch differs: same graph, same passes, and the
report says whether the kernels came out the same as at full size.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from fuseforge.harness.problem import build_model, problem_inputs

#: Input elements (all inputs together) the CPU check runs on at most.
CHECK_ELEMENTS = 1 << 22

# Factories whose size may come as leading int arguments (randn(8, 16)).
_VARARG_SIZE = {torch.randn, torch.rand, torch.zeros, torch.ones, torch.empty}
_FACTORIES = _VARARG_SIZE | {torch.randint, torch.full, torch.normal, torch.rand_like, torch.randn_like}


def _is_size(x: Any) -> bool:
    return isinstance(x, (tuple, list, torch.Size)) and len(x) > 0 and all(isinstance(i, int) for i in x)


class _LeadingDimCut(TorchFunctionMode):
    """While active, tensor factories asked for a leading dimension of `full`
    make one of `rows` instead (how get_inputs() is drawn at a reduced batch
    without special-casing any problem)."""

    def __init__(self, full: int, rows: int):
        super().__init__()
        self.full, self.rows = full, rows

    def _cut(self, size: Sequence[int]) -> tuple[int, ...]:
        size = tuple(size)
        return (self.rows, *size[1:]) if size[0] == self.full else size

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func in _FACTORIES:
            if _is_size(kwargs.get("size")):
                kwargs["size"] = self._cut(kwargs["size"])
            else:
                listed = list(args)
                where = next((i for i, a in enumerate(listed) if _is_size(a)), None)
                if where is not None:
                    listed[where] = self._cut(listed[where])
                elif func in _VARARG_SIZE and listed and all(isinstance(a, int) for a in listed):
                    listed = list(self._cut(listed))
                args = tuple(listed)
        return func(*args, **kwargs)


@dataclass
class CheckSize:
    """The batch the CPU check runs at: `rows` of the inputs' leading `full`."""

    full: int
    rows: int

    def describe(self) -> str:
        return "full size" if self.rows == self.full else f"batch {self.rows} of {self.full}"


def check_size(
    meta_inputs: Sequence[Any], budget: int = CHECK_ELEMENTS, model: torch.nn.Module | None = None
) -> CheckSize | None:
    """The reduced batch for inputs whose tensors all share a leading
    dimension (None when they do not: then they are checked at full size).
    Given the `model` on the meta device, also None when a shared length is
    not a batch: the model runs on the full inputs but not on the cut ones
    (vectors of a square matrix's length that broadcast along its columns)."""
    tensors = [x for x in meta_inputs if isinstance(x, torch.Tensor) and x.dim() > 0]
    if not tensors or len({t.shape[0] for t in tensors}) != 1:
        return None
    full = tensors[0].shape[0]
    per_row = sum(t.numel() // full for t in tensors) if full else 1
    size = CheckSize(full, max(1, min(full, budget // max(per_row, 1))))
    if model is not None and size.rows != size.full and _runs(model, meta_inputs):
        cut = [
            torch.empty((size.rows, *x.shape[1:]), dtype=x.dtype, device="meta")
            if isinstance(x, torch.Tensor) and x.dim() > 0
            else x
            for x in meta_inputs
        ]
        if not _runs(model, cut):
            return None
    return size


def _runs(model: torch.nn.Module, inputs: Sequence[Any]) -> bool:
    """Whether `model` (on the meta device) accepts `inputs` (shapes only)."""
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception:
        return False
    return True


def reduced_inputs(mod: ModuleType, seed: int, size: CheckSize, meta_inputs: Sequence[Any]) -> list[Any] | None:
    """get_inputs() on the CPU with the leading dimension cut to `size.rows`;
    None if what came out is not the full inputs with only that cut."""
    torch.manual_seed(seed)
    with _LeadingDimCut(size.full, size.rows):
        inputs = mod.get_inputs()
    for got, want in zip(inputs, meta_inputs):
        if isinstance(want, torch.Tensor):
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != (size.rows, *want.shape[1:]):
                return None
    return list(inputs)


T = TypeVar("T")


def _on_meta(build: Callable[[], T], move: Callable[[T], T]) -> T:
    """build() on the meta device, or on the CPU and then `move`d there where
    it reads tensor values (tolist(), item(): none on meta; a real error
    recurs on the CPU)."""
    try:
        with torch.device("meta"):
            return build()
    except (NotImplementedError, RuntimeError):
        return move(build())


def meta_model(mod: ModuleType, mode: str | None) -> tuple[torch.nn.Module, list[Any]]:
    """The problem's model and inputs on the meta device: the real shapes, no
    memory. A model or input whose construction reads tensor values (sizes
    computed with torch and read back by tolist() or item()) cannot be built
    there: it is built on the CPU and moved."""
    torch.manual_seed(0)
    model = _on_meta(lambda: mod.Model(*mod.get_init_inputs()), lambda m: m.to("meta"))
    inputs = _on_meta(
        lambda: list(mod.get_inputs()), lambda xs: [x.to("meta") if isinstance(x, torch.Tensor) else x for x in xs]
    )
    if mode is not None:
        model.train(mode == "train")
    return model, inputs


def cut_inputs(mod: ModuleType, mode: str | None, budget: int = CHECK_ELEMENTS) -> tuple[CheckSize, list[Any]] | None:
    """The problem's inputs (seed 0, on the CPU) at a batch of at most `budget`
    input elements, with that batch; None where they cannot be cut (check_size,
    reduced_inputs)."""
    meta, meta_inputs = meta_model(mod, mode)
    size = check_size(meta_inputs, budget, model=meta)
    if size is None:
        return None
    inputs = reduced_inputs(mod, 0, size, meta_inputs)
    return (size, inputs) if inputs is not None else None


def check_inputs(problem: str, mode: str | None) -> tuple[ModuleType, torch.nn.Module, list[Any], CheckSize]:
    """The CPU model and the inputs the check runs on, with their size. Falls
    back to the full inputs when they cannot be cut (see cut_inputs)."""
    mod, model = build_model(problem, mode, "cpu")
    cut = cut_inputs(mod, mode)
    if cut is not None:
        size, inputs = cut
    else:
        inputs = problem_inputs(mod, 0, "cpu")
        lead = [x.shape[0] for x in inputs if isinstance(x, torch.Tensor) and x.dim() > 0]
        size = CheckSize(lead[0], lead[0]) if lead else CheckSize(1, 1)
    return mod, model, inputs, size


def full_plan(mod: ModuleType, mode: str | None, precision: str, arch: int) -> Any:
    """The plan of the problem at its real shapes (core.Compiled), captured on
    the meta device."""
    from fuseforge.capture import capture
    from fuseforge.runtime.options import compile_ir

    model, inputs = meta_model(mod, mode)
    return compile_ir(capture(model, inputs, name=type(model).__name__).text, precision, arch)


def compile_phases(mod: ModuleType, mode: str | None, precision: str, arch: int) -> dict[str, float]:
    """Seconds of each phase (fuseforge.phases) of a cold compile of the
    problem's full-size plan: capture on the meta device, the core's stages,
    and NVRTC of each distinct kernel with an empty kernel cache, compiled as
    a GPU run compiles them (core.load_kernels: in parallel)."""
    from fuseforge import phases
    from fuseforge._native import core
    from fuseforge.harness.measure import temporary_cache_dir

    with temporary_cache_dir("fuseforge-phases-"), phases.recording() as seconds:
        core.clear_memory_cache()
        plan = full_plan(mod, mode, precision, arch).plan
        with phases.timed("NVRTC"):
            failed = [k for k in core.load_kernels(plan.kernels, arch) if isinstance(k, str)]
        if failed:
            raise RuntimeError(failed[0])
    return seconds


def check_on_cpu(model: torch.nn.Module, inputs: list[Any], precision: str, arch: int) -> tuple[dict, Any]:
    """Captures and compiles `model` on `inputs` and runs that plan on the CPU
    against eager and an fp64 reference (harness.compare.assess: outputs and
    updated buffers, within 1e-4 of eager or no further from fp64 than twice
    eager); returns the figures, the rule that held and the verdict in words,
    and the plan. The model's buffers are as before afterwards."""
    from fuseforge.capture import capture
    from fuseforge.harness.check import float64_run, load_state, saved_state, state
    from fuseforge.harness.compare import assess, flatten_tensors
    from fuseforge.runtime.executor import Executor
    from fuseforge.runtime.options import compile_ir

    captured = capture(model, inputs, name=type(model).__name__)
    plan = compile_ir(captured.text, precision, arch).plan
    start = saved_state(model)

    def restore() -> None:
        load_state(model, start)

    with torch.no_grad():
        outs, new_buffers = Executor(plan, torch.device("cpu"))(captured.graph_inputs(model, inputs))
        ref = flatten_tensors(model(*inputs))
        ref_buffers = state(model)
        want_buffers = [ref_buffers[n].clone() for n, _ in captured.mutations]
        restore()
        ref64, buffers64 = float64_run(model, inputs)
        restore()
    verdict = assess(outs, ref, ref64, list(new_buffers), want_buffers, [buffers64[n] for n, _ in captured.mutations])
    figures = {
        "correct": verdict.correct,
        "max_err_vs_eager": verdict.err,
        "max_err_vs_fp64": verdict.err64,
        "eager_err_vs_fp64": verdict.eager64,
        "accuracy_rule": verdict.rule,
        "verdict": verdict.describe(),
    }
    return figures, plan
