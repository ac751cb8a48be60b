"""The training step of a problem, for `fuseforge run --train` and
`fuseforge bench --train`.

A training step is the model's forward plus the backward of a scalar loss:
the sum of its floating-point outputs (training_loss); no optimizer. Eager,
torch.compile (inductor, default options) and fuseforge each step their own
copy of the model, built with the same state_dict, on the same inputs.

- Gradients: fuseforge's gradient of every parameter after one step is
  judged against eager's by harness/compare.py's one rule (within 1e-4 of
  eager, or error vs fp64 at most twice eager's); the fp64 reference is a
  float64 copy of the model stepped on float64 inputs (check.in_float64),
  computed only when the eager rule alone does not decide.
- Buffers (BatchNorm's running statistics) after three steps, by the same rule.
- Time: median cold-L2 milliseconds of forward + loss + backward, timed like
  the forward (runtime/timing.py: L2 flushed, CUDA events, warm-up, median,
  interleaved), every .grad set to None before each trial, outside the
  timed region, so that each step allocates and writes its gradients anew.
- Peak memory: the bytes one step allocates at its peak beyond what the
  model and inputs hold, fuseforge's over eager's.

A fuseforge step that raises, or that fuseforge runs eagerly instead (it
warns), is incorrect with the error's one line: the rest of the run goes on.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, cast

import torch
from rich.table import Table
from torch import nn

from fuseforge.diagnostics import one_line
from fuseforge.harness.check import float64_inputs, in_float64
from fuseforge.harness.compare import Verdict, assess, flatten_tensors, max_err, mismatch
from fuseforge.harness.report import geomean
from fuseforge.runtime.precision import precision_context
from fuseforge.runtime.timing import time_cuda

#: Steps before the buffers are compared: more than one, so that a running
#: statistic updated from an already updated one is covered.
BUFFER_STEPS = 3

#: The train object's figures (None where not measured, as after a failure).
FIELDS = (
    "grads_correct",
    "grads_verdict",
    "buffers_correct",
    "eager_ms",
    "inductor_ms",
    "fuseforge_ms",
    "speedup_vs_eager",
    "speedup_vs_inductor",
    "peak_mem_ratio",
)


def skip_reason(model: nn.Module) -> str | None:
    """Why `model` has no training step (eval mode, no parameters that
    require grad), or None when it has one."""
    if not model.training:
        return "no training step: the model is in eval mode"
    if not any(p.requires_grad for p in model.parameters()):
        return "no training step: the model has no parameters"
    return None


def training_loss(outputs: Any) -> torch.Tensor:
    """The scalar a training step backpropagates: the sum of out.sum() over
    the floating-point tensors among `outputs`' leaves, each summed in its
    own dtype, then in float32 (integer outputs take no part)."""
    leaves = [t for t in flatten_tensors(outputs) if t.is_floating_point()]
    if not leaves:
        raise ValueError("the model has no floating-point output to take a loss of")
    loss = leaves[0].sum().float()
    for t in leaves[1:]:
        loss = loss + t.sum().float()
    return loss


def train_step(model: nn.Module, inputs: Sequence[Any]) -> torch.Tensor:
    """One training step: forward, loss, backward (gradients accumulate in .grad)."""
    with torch.enable_grad():
        loss = training_loss(model(*inputs))
        loss.backward()
    return loss.detach()


def clear_grads(model: nn.Module) -> None:
    """Every .grad None: the next step allocates and writes them anew."""
    for p in model.parameters():
        p.grad = None


def _trained(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return sorted((name, p) for name, p in model.named_parameters() if p.requires_grad)


def parameter_grads(model: nn.Module) -> list[torch.Tensor]:
    """Copies of the gradients of the parameters that require grad, by name;
    zeros for one that got none (no path from it to the loss)."""
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in _trained(model)]


def step_grads(model: nn.Module, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """parameter_grads after one step from no gradients; .grad is None again after."""
    clear_grads(model)
    train_step(model, inputs)
    grads = parameter_grads(model)
    clear_grads(model)
    return grads


def model_buffers(model: nn.Module) -> list[torch.Tensor]:
    """Copies of the model's buffers, by name."""
    return [b.detach().clone() for _, b in sorted(model.named_buffers())]


def more_steps(model: nn.Module, inputs: Sequence[Any], steps: int) -> list[torch.Tensor]:
    """The buffers after `steps` further training steps."""
    for _ in range(steps):
        train_step(model, inputs)
        clear_grads(model)
    return model_buffers(model)


def fp64_reference(model: nn.Module, inputs: Sequence[Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The gradients of one step and the buffers after BUFFER_STEPS steps of
    `model` (a fresh copy, as the others started) in float64 on float64
    inputs; floating buffers come back in float64."""
    inputs64 = float64_inputs(inputs)
    with in_float64(model):
        grads = step_grads(model, inputs64)
        buffers = more_steps(model, inputs64, BUFFER_STEPS - 1)
    return grads, buffers


def judge(
    ours: Sequence[torch.Tensor],
    eager: Sequence[torch.Tensor],
    fp64: Callable[[], Sequence[torch.Tensor]],
    buffers: bool = False,
) -> Verdict:
    """compare.assess's Verdict on a candidate's gradients (`buffers`: its
    buffers after the same steps) against eager's, calling `fp64` for the
    float64 reference's only when the eager rule alone does not decide (a
    count, shape or dtype unlike eager's does)."""
    reason = mismatch(ours, eager, "buffer" if buffers else "gradient")
    if reason is not None:
        return Verdict(False, None, float("inf"), reason=reason)
    verdict = assess([], [], None, ours, eager) if buffers else assess(ours, eager, None, [], [])
    if verdict.correct:
        return verdict
    exact = fp64()
    return assess([], [], [], ours, eager, exact) if buffers else assess(ours, eager, exact, [], [])


def describe_grads(
    verdict: Verdict, model: nn.Module, ours: Sequence[torch.Tensor], eager: Sequence[torch.Tensor]
) -> str:
    """The verdict on gradients (parameter_grads of `model`'s parameters) in
    one line; where their values were judged wrong, it names the parameter
    whose gradient is furthest from eager's: where to look first."""
    text = verdict.describe()
    if not verdict.correct and verdict.reason is None:
        names = [name for name, _ in _trained(model)]
        errs = [max_err([a], [b]) for a, b in zip(ours, eager)]
        text += f" (furthest: {names[max(range(len(errs)), key=errs.__getitem__)]}.grad)"
    return text


def first_fuseforge_step(fast: nn.Module, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """step_grads of the optimized module's first step, which compiles;
    raises RuntimeError when fuseforge ran it eagerly (it warns once, saying
    why), so that eager is never judged or timed as fuseforge."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        grads = step_grads(fast, inputs)
    for w in seen:
        text = str(w.message)
        if text.startswith("fuseforge:") and "eagerly" in text:
            raise RuntimeError(text.removeprefix("fuseforge: "))
    return grads


def check_training(
    eager: nn.Module,
    eager_grads: Sequence[torch.Tensor],
    fast: nn.Module,
    make: Callable[[], nn.Module],
    inputs: Sequence[Any],
    precision: str,
) -> dict[str, Any]:
    """grads_correct, grads_verdict and buffers_correct of `fast`'s training
    steps against `eager`'s (fresh copies; eager has taken one step, which
    gave `eager_grads`): gradients after one step, buffers after
    BUFFER_STEPS; `make` builds another fresh copy for the fp64 reference."""
    fp64 = functools.cache(lambda: fp64_reference(make(), inputs))  # computed at its first use, if any
    with precision_context(precision):
        grads = first_fuseforge_step(fast, inputs)
        eager_buffers = more_steps(eager, inputs, BUFFER_STEPS - 1)
        buffers = more_steps(fast, inputs, BUFFER_STEPS - 1)
    verdict = judge(grads, eager_grads, lambda: fp64()[0])
    text = describe_grads(verdict, eager, grads, eager_grads)
    out: dict[str, Any] = {"grads_correct": verdict.correct, "grads_verdict": text, "buffers_correct": None}
    if eager_buffers:
        out["buffers_correct"] = judge(buffers, eager_buffers, lambda: fp64()[1], buffers=True).correct
    return out


def peak_step_bytes(model: nn.Module, inputs: Sequence[Any]) -> int:
    """Bytes one training step allocates at its peak beyond what is
    allocated before it (the model, its inputs, no gradients)."""
    clear_grads(model)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    train_step(model, inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    clear_grads(model)
    return peak


def _inductor(make: Callable[[], nn.Module], inputs: Sequence[Any]) -> tuple[nn.Module | None, str | None]:
    """torch.compile of a fresh copy after its first step (which compiles),
    or None and why it failed."""
    # torch.compile's stubs say Callable; for a module it returns a module.
    compiled = cast(nn.Module, torch.compile(make()))
    try:
        train_step(compiled, inputs)
    except Exception as e:
        return None, one_line(e)
    clear_grads(compiled)
    return compiled, None


def precompile_training(
    mod: ModuleType, model: nn.Module, against: Sequence[str], precision: str
) -> dict[str, Any] | None:
    """A first training step of fuseforge's module and, with inductor among
    `against`, of torch.compile's, on fresh copies, for bench's compile jobs:
    the training graphs' kernels go into the disk cache (kernels_kept) and
    inductor's graphs into its caches, so that the step timed later, alone on
    the GPU, traces again but compiles little. Inductor's Triton tuning is
    not kept (see measure.compile_inductor). {"train_precompile_s": seconds}
    (and where a step failed, "train_precompile_error": why: the timed run
    says so in its row), or None for a model without a training step."""
    import torch._inductor.config

    import fuseforge
    from fuseforge.harness.measure import kernels_kept
    from fuseforge.harness.problem import problem_inputs

    if skip_reason(model) is not None:
        return None
    make = problem_copier(mod, model, "cuda")
    inputs = problem_inputs(mod, 0, "cuda")
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        with kernels_kept(True), precision_context(precision):
            train_step(fuseforge.optimize(make(), precision=precision), inputs)
        if "inductor" in against:
            with precision_context(precision), torch._inductor.config.patch(autotune_local_cache=False):
                error = _inductor(make, inputs)[1]
            if error is not None:
                out["train_precompile_error"] = f"torch.compile: {error}"
    except Exception as e:  # noqa: BLE001 - the timed run reports the step's failure in its row
        out["train_precompile_error"] = one_line(e)
    out["train_precompile_s"] = time.perf_counter() - t0
    return out


def time_training(models: Mapping[str, nn.Module], inputs: Sequence[Any], precision: str) -> dict[str, Any]:
    """`{name}_ms` of each model's step, speedups of fuseforge's and its peak
    memory over eager's."""
    steps = {name: (lambda m=m: train_step(m, inputs)) for name, m in models.items()}
    resets = {name: (lambda m=m: clear_grads(m)) for name, m in models.items()}
    with precision_context(precision):
        ms = time_cuda(steps, resets=resets)
        peak = {name: peak_step_bytes(models[name], inputs) for name in ("eager", "fuseforge")}
    out: dict[str, Any] = {f"{name}_ms": value for name, value in ms.items()}
    for ref in ("eager", "inductor"):
        if ref in ms:
            out[f"speedup_vs_{ref}"] = ms[ref] / ms["fuseforge"]
    out["peak_mem_ratio"] = peak["fuseforge"] / peak["eager"] if peak["eager"] > 0 else None
    return out


def measure_training(
    model: nn.Module, make: Callable[[], nn.Module], inputs: Sequence[Any], against: Sequence[str], precision: str
) -> dict[str, Any]:
    """The `train` object of a problem's row (see the module's doc), or
    {"skipped": why} for a model without a training step. `model` is the
    problem's model, `make` builds a fresh copy of it (same state) each call.
    A failure of fuseforge's step is an incorrect row, not an exception."""
    import fuseforge

    reason = skip_reason(model)
    if reason is not None:
        return {"skipped": reason}
    eager = make()
    try:
        with precision_context(precision):
            eager_grads = step_grads(eager, inputs)
    except Exception as e:  # eager's own step sets the task: without one there is nothing to judge
        return {"skipped": f"no training step: eager's fails ({one_line(e)})"}
    out: dict[str, Any] = {}
    if "inductor" in against:
        out["inductor_ms"] = out["speedup_vs_inductor"] = None
    fast = fuseforge.optimize(make(), precision=precision)
    try:
        out.update(check_training(eager, eager_grads, fast, make, inputs, precision))
        models = {"eager": eager, "fuseforge": fast}
        if "inductor" in against:
            with precision_context(precision):
                compiled, error = _inductor(make, inputs)
            if compiled is not None:
                models["inductor"] = compiled
            else:
                out["inductor_error"] = error
        out.update(time_training(models, inputs, precision))
    except Exception as e:
        out.update(grads_correct=False, grads_verdict=f"failed: {one_line(e)}")
    for key in FIELDS:  # speedup_vs_inductor: present (above) only when inductor is among `against`
        if "inductor" not in key:
            out.setdefault(key, None)
    return {**{key: out[key] for key in FIELDS if key in out}, **out}  # FIELDS' order first


def problem_copier(mod: ModuleType, model: nn.Module, device: str) -> Callable[[], nn.Module]:
    """A function building a fresh copy of the problem's `model`: the
    problem's Model from its constructor arguments (seeded like
    problem.build_model, so tensor attributes match too) with `model`'s
    state_dict as it is then loaded and its mode, on `device`; `model`
    itself is never stepped."""

    def make() -> nn.Module:
        torch.manual_seed(0)
        with torch.device(device):
            copy = mod.Model(*mod.get_init_inputs())
        copy.load_state_dict(model.state_dict())
        copy.train(model.training)
        return copy.to(device)

    return make


def train_ok(train: Mapping[str, Any] | None) -> bool:
    """Whether a row's train object (None: none measured) is not incorrect."""
    if train is None or "skipped" in train:
        return True
    return bool(train.get("grads_correct")) and train.get("buffers_correct") is not False


# ---- reports


def _fmt(value: Any, fmt: str) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "NO", None: "—"}[value]
    return format(value, fmt) if isinstance(value, (int, float)) else str(value)


#: The train table's columns after the problem's: (header, train object key, format).
_CELLS = (
    ("grads", "grads_correct", ""),
    ("buffers", "buffers_correct", ""),
    ("eager ms", "eager_ms", ".3f"),
    ("inductor ms", "inductor_ms", ".3f"),
    ("fuseforge ms", "fuseforge_ms", ".3f"),
    ("× eager", "speedup_vs_eager", ".2f"),
    ("× inductor", "speedup_vs_inductor", ".2f"),
    ("peak mem ×", "peak_mem_ratio", ".2f"),
)
TRAIN_COLUMNS = ("problem", *(header for header, _, _ in _CELLS))


def train_cells(train: Mapping[str, Any]) -> list[str]:
    """A train object's cells, in TRAIN_COLUMNS' order after the problem's."""
    return [_fmt(None if "skipped" in train else train.get(key), fmt) for _, key, fmt in _CELLS]


def train_table(name: str, train: Mapping[str, Any]) -> Table:
    """`run --train`'s table: one row of the step's figures."""
    table = Table(title="training step (forward + backward of the sum of the outputs)")
    for col in TRAIN_COLUMNS:
        table.add_column(col, justify="left" if col in ("problem", "grads", "buffers") else "right")
    table.add_row(name, *train_cells(train))
    return table


def train_summary(problems: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The summary's train figures: problems with a step, how many have
    correct gradients, and geomean speedups over those."""
    trains = [r["train"] for r in problems.values() if isinstance(r.get("train"), dict)]
    stepped = [t for t in trains if "skipped" not in t]
    good = [t for t in stepped if t.get("grads_correct")]
    out: dict[str, Any] = {"train_steps": len(stepped), "train_grads_correct": len(good)}
    for ref in ("eager", "inductor"):
        speedups = [t[f"speedup_vs_{ref}"] for t in good if t.get(f"speedup_vs_{ref}")]
        if speedups:
            out[f"geomean_train_speedup_vs_{ref}"] = geomean(speedups)
    return out


def train_summary_line(summary: Mapping[str, Any]) -> str:
    """train_summary in words, as the report's summary line says the forward's."""
    parts = [f"training: {summary['train_grads_correct']}/{summary['train_steps']} with correct gradients"]
    for ref in ("eager", "inductor"):
        g = summary.get(f"geomean_train_speedup_vs_{ref}")
        if g:
            parts.append(f"vs {ref}: geomean {g:.2f}× (correct ones)")
    return " · ".join(parts)


def train_markdown(report: Mapping[str, Any]) -> list[str]:
    """The report's training section (no lines when no problem has a train object)."""
    rows = {n: r["train"] for n, r in report["problems"].items() if isinstance(r.get("train"), dict)}
    if not rows:
        return []
    lines = [
        "",
        "## Training step",
        "",
        f"- {train_summary_line(train_summary(report['problems']))}",
        "",
        "| " + " | ".join(TRAIN_COLUMNS) + " |",
        "|" + "---|" * 3 + "---:|" * (len(TRAIN_COLUMNS) - 3),
    ]
    for name, train in rows.items():
        lines.append("| " + " | ".join([name, *train_cells(train)]) + " |")
    notes = [f"- {n}: {t['skipped']}" for n, t in rows.items() if "skipped" in t]
    notes += [f"- {n}: {t['grads_verdict']}" for n, t in rows.items() if t.get("grads_correct") is False]
    return [*lines, *([""] + notes if notes else [])]
