"""Correctness of a problem's optimized model for `fuseforge run`: fuseforge
against eager and an fp64 reference over several seeds (check_correctness),
judged by harness/compare.py's one rule (within 1e-4 of eager, or no further
from fp64 than twice eager's error), outputs and updated buffers alike. A
baseline (torch.compile) is judged by the same rule on the first seed
(baseline_accuracy), so that a report shows where its speed comes with an
error the rule would not accept from fuseforge.

Frugal with device memory, so that whatever eager can run can be checked:
the optimized module shares the model's parameters and buffers (no copies of
the model), only the buffers are snapshotted (forward may update them), the
fp64 reference converts the model's parameters and buffers to float64 in
place and back (f32 -> f64 -> f32 is exact) instead of holding a float64 copy
beside them (plain tensor attributes, which forward may reassign or update,
are swapped for float64 copies and the user's own put back), each seed's
inputs are dropped before the float64 ones are made, and outputs are compared
in chunks (harness/compare.py). The fp64 reference runs for the first seed
and for any seed where fuseforge and eager differ by more than 1e-4, the
only case where the verdict needs it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import torch

from fuseforge.capture.tensor_attributes import plain_tensors
from fuseforge.harness.compare import Verdict, assess, combine, flatten_tensors
from fuseforge.harness.problem import problem_inputs


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a forward may update, by dotted name: the buffers, and
    tensors modules hold as plain attributes (a hidden state reassigned in
    forward), which capture carries as buffers under the same names."""
    tensors = dict(model.named_buffers())
    for prefix, module in model.named_modules():
        for name, t in plain_tensors(module):
            tensors[f"{prefix}.{name}" if prefix else name] = t
    return tensors


def saved_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of state(model), for load_state to put back."""
    return {name: t.detach().clone() for name, t in state(model).items()}


def _buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t for _, t in sorted(saved_state(model).items())]


def load_state(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Puts `saved` (state's names) back: into the buffers, and as fresh
    copies into the attributes (a forward may have made them new tensors)."""
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, value in saved.items():
            if name in buffers:
                buffers[name].copy_(value)
            else:
                owner, _, attr = name.rpartition(".")
                vars(model.get_submodule(owner))[attr] = value.clone()


def _tensor_attributes(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
    """The floating tensors below float64 that modules of `model` hold as
    plain attributes (neither parameters nor buffers: `self.h0 = torch.zeros(...)`)."""
    return [
        (module, name, t)
        for module in model.modules()
        for name, t in plain_tensors(module)
        if t.is_floating_point() and t.dtype != torch.float64
    ]


@contextlib.contextmanager
def in_float64(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` with its floating parameters and buffers converted to float64
    in place (Parameter objects kept), each converted back to its dtype on
    exit; exact, since every dtype here widens to float64 without rounding.
    Floating tensors held as plain attributes are replaced by float64 copies
    meanwhile, and on exit the original tensor objects, untouched, put back."""
    tensors: list[tuple[torch.nn.Module, str, str, torch.dtype]] = []
    for module in model.modules():
        for kind in ("_parameters", "_buffers"):
            for name, t in getattr(module, kind).items():
                if t is not None and t.is_floating_point() and t.dtype != torch.float64:
                    tensors.append((module, kind, name, t.dtype))
    attributes = _tensor_attributes(model)

    def convert(back: bool) -> None:
        with torch.no_grad():
            for module, kind, name, dtype in tensors:
                t = getattr(module, kind)[name]
                to = dtype if back else torch.float64
                if kind == "_parameters":
                    t.data = t.data.to(to)
                else:
                    getattr(module, kind)[name] = t.to(to)
            for module, name, t in attributes:
                vars(module)[name] = t if back else t.detach().to(torch.float64, copy=True)

    convert(back=False)
    try:
        yield model
    finally:
        convert(back=True)


@contextlib.contextmanager
def _float64_by_default() -> Iterator[None]:
    """Floating tensors forward makes without a dtype (an RNN's zero state,
    torch.zeros(batch, hidden)) made in float64, as the rest of the reference."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(default)


def float64_inputs(inputs: Sequence[Any]) -> list[Any]:
    """`inputs` with their floating tensors in float64 (the rest as they are)."""
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def float64_run(model: torch.nn.Module, inputs: list[Any]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs of `model` computed in float64 (in_float64, and float64 the
    default dtype) on `inputs` with their floating tensors in float64, and
    its buffers as that run left them
    (floating ones in float64), by name. The model's buffers hold their own
    dtype again afterwards; the ones returned are not the model's (a buffer
    the conversion left alone is cloned), so restoring the model's keeps them."""
    inputs64 = float64_inputs(inputs)
    with torch.no_grad(), in_float64(model), _float64_by_default():
        outputs = flatten_tensors(model(*inputs64))
        buffers = state(model)
    own = state(model)
    return outputs, {name: b.clone() if own.get(name) is b else b for name, b in buffers.items()}


def float64_outputs(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    """Outputs of `model` computed in float64 (float64_run) on `inputs`."""
    return float64_run(model, inputs)[0]


def fp64_run(
    mod: ModuleType, model: torch.nn.Module, seed: int, device: str
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """float64_run of `model` on the seed's inputs, drawn in float64."""
    return float64_run(model, problem_inputs(mod, seed, device, torch.float64))


Runs = tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


def _runs(
    mod: ModuleType,
    model: torch.nn.Module,
    fast: Any,
    seed: int,
    device: str,
    precision: str,
    start: dict[str, torch.Tensor],
) -> Runs:
    """`fast`'s and eager's outputs, then their updated buffers, on the seed's
    inputs (dropped on return), each run from the module state `start`."""
    from fuseforge.runtime.precision import precision_context

    inputs = problem_inputs(mod, seed, device)
    with torch.no_grad(), precision_context(precision):
        load_state(model, start)
        ref = flatten_tensors(model(*inputs))
        ref_buf = _buffers(model)
        load_state(model, start)
        out = flatten_tensors(fast(*inputs))
    return out, ref, _buffers(model), ref_buf


def _against_fp64(
    mod: ModuleType, model: torch.nn.Module, seed: int, device: str, start: dict[str, torch.Tensor], runs: Runs
) -> Verdict:
    """The verdict on `runs` (_runs') with the fp64 reference of the seed's inputs, run from `start`."""
    load_state(model, start)
    ref64, buf64 = fp64_run(mod, model, seed, device)
    return assess(*runs[:2], ref64, *runs[2:], [buf64[n] for n in sorted(buf64)])


def check_correctness(
    mod: ModuleType,
    model: torch.nn.Module,
    seeds: int,
    device: str,
    precision: str = "fp32",
    fast: torch.nn.Module | None = None,
) -> dict:
    """Compares `fast` (default: a new fuseforge.optimize(model)) with eager
    (outputs and updated buffers) and both with an fp64 reference, over
    `seeds` fresh random inputs, each from the same module state. Eager runs
    under the same precision policy (TF32 matmuls under "tf32"), so the bar
    for a faster policy is eager's own error at that policy. The fp64 figures
    are over the seeds that computed the reference (see the module's doc);
    `accuracy_rule` is the rule that held ("eager", "fp64"; None when
    incorrect) and `verdict` says so in words (compare.combine over seeds)."""

    if seeds < 1:
        raise ValueError(f"--seeds is {seeds}: the check needs at least one seed")
    if fast is None:
        import fuseforge

        fast = fuseforge.optimize(model, precision=precision)
    start = saved_state(model)
    versions = {name: p._version for name, p in model.named_parameters()}
    result: dict[str, Any] = {
        "correct": True,
        "max_err_vs_eager": 0.0,
        "max_err_vs_fp64": None,
        "eager_err_vs_fp64": None,
        "fp64_seeds": 0,
    }
    verdicts: list[Verdict] = []
    try:
        for seed in range(seeds):
            runs = _runs(mod, model, fast, seed, device, precision, start)
            verdict = assess(*runs[:2], None, *runs[2:])
            if seed == 0 or not verdict.correct:
                verdict = _against_fp64(mod, model, seed, device, start, runs)
                result["fp64_seeds"] += 1
                result["max_err_vs_fp64"] = max(result["max_err_vs_fp64"] or 0.0, verdict.err64 or 0.0)
                result["eager_err_vs_fp64"] = max(result["eager_err_vs_fp64"] or 0.0, verdict.eager64 or 0.0)
            del runs
            verdicts.append(verdict)
            result["correct"] &= verdict.correct
            result["max_err_vs_eager"] = max(result["max_err_vs_eager"], verdict.err)
    finally:
        load_state(model, start)
    overall = combine(verdicts)
    result["accuracy_rule"] = overall.rule
    result["verdict"] = overall.describe()
    moved = [name for name, p in model.named_parameters() if p._version != versions[name]]
    if moved:
        raise RuntimeError(
            f"forward wrote parameters in place ({', '.join(moved)}): runs from one state cannot be compared"
        )
    return result


def baseline_accuracy(
    mod: ModuleType, model: torch.nn.Module, baseline: Any, device: str, precision: str = "fp32"
) -> dict:
    """The accuracy rule applied to `baseline` (a compiled form of `model`
    sharing its parameters, e.g. torch.compile's) on the first seed's inputs,
    each run from the same module state: its error against fp64
    (`err_vs_fp64`), whether the rule holds (`correct`) and the verdict in
    words (`verdict`)."""
    start = saved_state(model)
    try:
        verdict = _against_fp64(mod, model, 0, device, start, _runs(mod, model, baseline, 0, device, precision, start))
    finally:
        load_state(model, start)
    return {"err_vs_fp64": verdict.err64, "correct": verdict.correct, "verdict": verdict.describe()}
