"""OptimizedModule: the drop-in replacement that `fuseforge.optimize` returns."""

from __future__ import annotations

import contextlib
import inspect
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fuseforge._native import core
from fuseforge.capture import CapturedGraph, CaptureError, capture, resolve_attribute
from fuseforge.diagnostics import one_line
from fuseforge.runtime import cuda_graph, fast_call, plan_cache
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir
from fuseforge.runtime.precision import check_precision, eager_conv_precision, precision_context
from fuseforge.runtime.training import SplitStep, TrainingStep, compile_step

log = logging.getLogger("fuseforge")

_NOTHING = contextlib.nullcontext()  # in place of no_grad() when grad is off already: a call's cost counts

#: Re-specializations per module before it falls back to eager for good.
MAX_SPECIALIZATIONS = 8


@dataclass
class Specialization:
    """One compiled version of the model, for one guard key."""

    captured: CapturedGraph
    compiled: Any  # core.Compiled: the IR before and after passes, and the plan
    executor: Executor
    getters: list  # CapturedGraph.input_getters: per IR input, how to get it at call time
    state_meta: list  # per "state" getter: (dtype, device, shape, strides) at capture
    mutation_targets: list  # per mutation: (module, buffer name)
    fast: Any = None  # fast_call.arm's FastCall for calls like the last one; False: it cannot take them
    graphed: bool | None = None  # whether its run section replays as a CUDA graph; None: not decided yet

    def gather(self, args: Sequence[Any]) -> list | None:
        """The plan's inputs for `args`, or None if this specialization does not
        apply: a Python value capture baked in differs, or a parameter or buffer
        changed dtype, device, shape or strides since capture."""
        for i, v in self.captured.specialized_scalars.items():
            if args[i] != v and not (args[i] != args[i] and v != v):  # NaN matches NaN
                return None
        inputs = []
        meta = iter(self.state_meta)
        for kind, src in self.getters:
            if kind == "arg":
                inputs.append(src(args))
            elif kind == "const":
                inputs.append(src)
            else:
                t = getattr(*src)
                if _tensor_meta(t) != next(meta):
                    return None
                inputs.append(t)
        return inputs


def _tensor_meta(t: torch.Tensor) -> tuple:
    return (t.dtype, t.device, t.shape, t.stride())


def _source_file(model: nn.Module) -> str | None:
    """The file that defines the model's class (where failures are located)."""
    try:
        return inspect.getsourcefile(type(model))
    except TypeError:
        return None


def _guard_key(module: nn.Module, args: Sequence[Any]) -> tuple:
    """What a specialization is looked up by: mode, the user's cuDNN conv
    precision flag (which convs may use TF32 depends on it), and each
    argument's shape, dtype, device and strides (Python numbers by type only:
    they are kernel arguments). Parameters and buffers are checked by
    `Specialization.gather`."""

    def describe(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", x.shape, x.dtype, x.device, x.stride())
        if isinstance(x, (bool, int, float)):
            return ("S", type(x))
        return ("O", repr(x))

    return (module.training, eager_conv_precision(), tuple(describe(a) for a in args))


class OptimizedModule(nn.Module):
    """Runs `model`'s forward through fuseforge-generated kernels.

    It shares the original's parameters, buffers and submodules (same
    `state_dict` keys; loading a state dict into either updates both), keeps
    its forward signature and output structure, and follows `train()`/`eval()`.
    A call under grad mode with a parameter or input that requires grad runs
    the compiled forward of a compiled forward/backward pair
    (runtime/training.py), so that `loss.backward()` runs the compiled
    backward; other calls run the inference plan.
    Each call is guarded on mode and on input shapes, dtypes, devices and
    strides: a new combination is captured and compiled again (up to
    MAX_SPECIALIZATIONS times, then eager with one warning). CPU inputs, and
    arguments it cannot capture, run eagerly, with one warning saying why.
    """

    # Set with object.__setattr__ in __init__ (kept out of nn.Module's
    # registries); declared so that they type as what they are, not as
    # nn.Module.__getattr__'s Tensor | Module.
    _ff_model: nn.Module
    _ff_specializations: dict[tuple, list[Specialization]]
    _ff_gave_up: bool
    _ff_split_keys: set[tuple]
    _ff_split: SplitStep | None
    _ff_warned: bool
    _ff_hot: tuple[tuple, Specialization] | None
    _ff_training: dict[tuple, TrainingStep | SplitStep]

    def __init__(self, model: nn.Module, precision: str = "fp32") -> None:
        super().__init__()
        check_precision(precision)
        # Share the model's state dicts so keys and tensors are the same objects.
        self._parameters = model._parameters
        self._buffers = model._buffers
        self._modules = model._modules
        self._non_persistent_buffers_set = model._non_persistent_buffers_set
        object.__setattr__(self, "_ff_model", model)
        object.__setattr__(self, "_ff_specializations", {})
        object.__setattr__(self, "_ff_gave_up", False)
        object.__setattr__(self, "_ff_split_keys", set())  # guard keys that could not be captured whole
        object.__setattr__(self, "_ff_split", None)  # the model split by dynamo, for those keys
        object.__setattr__(self, "_ff_warned", False)
        object.__setattr__(self, "_ff_hot", None)  # (guard key, Specialization) of the last fused call
        object.__setattr__(self, "_ff_training", {})  # training guard key -> its TrainingStep
        self.training = model.training
        self.precision = precision

    # ---- introspection

    @property
    def original(self) -> nn.Module:
        """The wrapped model (its forward is the eager reference)."""
        return self._ff_model

    def specializations(self) -> list[Specialization]:
        return [s for specs in self._ff_specializations.values() for s in specs]

    # ---- call

    def _eager(self, *args: Any, **kwargs: Any) -> Any:
        self._ff_model.training = self.training
        return self._ff_model(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = self._bind_kwargs(args, kwargs)
        if torch.is_grad_enabled() and self._wants_grad(args):
            return self._train_call(args)
        hot = self._ff_hot  # the last specialization run, and its guard key: most calls repeat it
        missed = None  # the specialization whose native call path declined this call
        if hot is not None and hot[1].fast:
            outputs = hot[1].fast(self, args)  # C++ (fast_call.py), or None if this call is not like the last
            if outputs is not None:
                return hot[1].captured.unflatten_outputs(outputs)
            missed = hot[1]
        key = _guard_key(self, args) if hot is not None else None
        if hot is not None and key == hot[0]:
            inputs = hot[1].gather(args)
            if inputs is not None:
                return self._run(hot[1], inputs, args, rearm=missed is hot[1])
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if self._ff_gave_up or not tensors:
            return self._eager(*args)
        if self._off_gpu(tensors):
            return self._eager(*args)
        if key is None:  # no hot specialization to compare with above
            key = _guard_key(self, args)
        if key in self._ff_split_keys:
            return self._split_call(args)
        candidates = self._ff_specializations.setdefault(key, [])
        for spec in candidates:
            inputs = spec.gather(args)
            if inputs is not None:
                object.__setattr__(self, "_ff_hot", (key, spec))
                return self._run(spec, inputs, args, rearm=missed is spec)
        if len(self.specializations()) >= MAX_SPECIALIZATIONS:
            object.__setattr__(self, "_ff_gave_up", True)
            object.__setattr__(self, "_ff_hot", None)
            warnings.warn(
                f"fuseforge: {MAX_SPECIALIZATIONS} specializations reached; running this module eagerly from now on",
                stacklevel=2,
            )
            return self._eager(*args)
        log.info("fuseforge: compiling a specialization for %s", [tuple(t.shape) for t in tensors])
        try:
            spec = self._specialize(args, tensors[0].device)
        except CaptureError as e:
            # Code torch.export cannot trace whole is split by dynamo, for these
            # arguments from now on (capture would fail the same way again).
            self._ff_split_keys.add(key)
            reason = one_line(e, _source_file(self._ff_model))
            split = (
                f"{type(self._ff_model).__name__}: cannot capture it whole ({reason}); "
                "dynamo splits it: its captured parts compiled, the rest eager"
            )
            log.warning("fuseforge: %s", split)
            self._warn_once(split)
            return self._split_call(args)
        candidates.append(spec)
        inputs = spec.gather(args)
        if inputs is None:
            raise RuntimeError("fuseforge internal error: a fresh specialization rejects the inputs it was captured on")
        object.__setattr__(self, "_ff_hot", (key, spec))
        return self._run(spec, inputs, args)

    def _off_gpu(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether a tensor argument is off the GPU (then the call runs eagerly, said once)."""
        if all(t.device.type == "cuda" for t in tensors):
            return False
        where = ", ".join(sorted({str(t.device) for t in tensors}))
        self._warn_once(
            f"running {type(self._ff_model).__name__} eagerly: inputs on {where}, and fuseforge compiles for CUDA devices only"
        )
        return True

    def _warn_once(self, text: str) -> None:
        """One warning per module, on its first fall back to eager (or to dynamo's split)."""
        if not self._ff_warned:
            object.__setattr__(self, "_ff_warned", True)
            warnings.warn(f"fuseforge: {text}", stacklevel=3)

    def _split_call(self, args: Sequence[Any]) -> Any:
        """A call through the model split by dynamo (SplitStep)."""
        self._ff_model.training = self.training
        if self._ff_split is None:
            object.__setattr__(self, "_ff_split", SplitStep(self._ff_model, self.precision))
        assert self._ff_split is not None
        return self._ff_split(args)

    def _bind_kwargs(self, args: tuple, kwargs: dict) -> tuple:
        sig = inspect.signature(self._ff_model.forward)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.args)

    def _specialize(self, args: Sequence[Any], device: torch.device) -> Specialization:
        self._ff_model.training = self.training
        arch = core.device_arch(device.index or 0) if device.type == "cuda" else 0
        warm = plan_cache.key(self._ff_model, args, self.precision)  # None: warm start off or not keyable
        captured, compiled = plan_cache.load(warm), None
        if captured is not None:
            try:
                compiled = compile_ir(captured.text, self.precision, arch, device=device)
            except ValueError as e:  # only a graph this core cannot read: ones it rejects are never stored
                plan_cache.discard(warm, f"it does not compile: {e}")
        if captured is None or compiled is None:
            captured = capture(self._ff_model, args, name=type(self._ff_model).__name__)
            try:
                compiled = compile_ir(captured.text, self.precision, arch, device=device)
            except ValueError as e:
                # The captured graph is not valid IR: inputs eager itself rejects
                # (f64 inputs into f32 weights trace fine but mix dtypes), so they
                # go where capture failures go: eager, which raises its own error.
                raise CaptureError(f"the captured graph does not compile: {e}") from e
            plan_cache.store(warm, captured)
        executor = Executor(compiled.plan, device)
        getters = captured.input_getters(self._ff_model, device)
        state_meta = [_tensor_meta(getattr(*src)) for kind, src in getters if kind == "state"]
        targets = [resolve_attribute(self._ff_model, name) for name, _ in captured.mutations]
        return Specialization(captured, compiled, executor, getters, state_meta, targets)

    def _run(self, spec: Specialization, inputs: list, args: Sequence[Any], rearm: bool = False) -> Any:
        """The Python path: runs `spec` on `inputs` (gathered from `args`),
        then arms its native call path for the calls after (fast_call.arm)
        if it has none, or if it declined a call this specialization takes
        (a weight the prepare section reads changed, say)."""
        grad = torch.is_grad_enabled()
        with torch.no_grad() if grad else _NOTHING, precision_context(self.precision):
            outputs, new_buffers = spec.executor(inputs)
            for (mod, name), value in zip(spec.mutation_targets, new_buffers):
                getattr(mod, name).copy_(value)
        # The graph first: adopting one arms the native path for its replay,
        # and arming the step-by-step path before would be wasted work.
        if spec.graphed is None:
            spec.graphed = self._adopt_graph(spec, args, inputs)
        if spec.fast is None or rearm:
            spec.fast = fast_call.arm(self, spec, args, inputs) or False
        return spec.captured.unflatten_outputs(outputs)

    def _adopt_graph(self, spec: Specialization, args: Sequence[Any], inputs: list) -> bool:
        """Whether `spec` replays as a CUDA graph from now on (cuda_graph.adopt,
        timed against the native call path); its FastCall re-armed if so."""
        varying = [kind == "arg" for kind, _ in spec.getters]
        buffers = [
            (slot, getattr(mod, name)) for (mod, name), slot in zip(spec.mutation_targets, spec.executor.mutation_slots)
        ]

        def armed_call() -> Callable[[], object]:
            fast = fast_call.arm(self, spec, args, inputs)
            return (lambda: fast(self, args)) if fast else (lambda: spec.executor(inputs))

        with torch.no_grad(), precision_context(self.precision):
            graphed = cuda_graph.adopt(spec.executor, inputs, varying, buffers, armed_call)
        if graphed:
            spec.fast = fast_call.arm(self, spec, args, inputs) or False
        return graphed

    # ---- training

    def _wants_grad(self, args: Sequence[Any]) -> bool:
        """Whether eager would record this call for backward: a tensor
        argument or a parameter requires grad."""
        if any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return True
        return any(p.requires_grad for p in self._ff_model.parameters())

    def _train_call(self, args: Sequence[Any]) -> Any:
        """Forward through the compiled forward/backward pair for this kind of call."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if self._ff_gave_up or self._off_gpu(tensors):
            return self._eager(*args)
        fixed = tuple(repr(a) for a in args if not isinstance(a, torch.Tensor))
        key = ("train", _guard_key(self, args), fixed)
        step = self._ff_training.get(key)
        if step is None or not step.applies(self._ff_model):
            if len(self._ff_training) >= MAX_SPECIALIZATIONS and step is None:
                object.__setattr__(self, "_ff_gave_up", True)
                warnings.warn(
                    f"fuseforge: {MAX_SPECIALIZATIONS} training specializations reached; "
                    "running this module eagerly from now on",
                    stacklevel=3,
                )
                return self._eager(*args)
            log.info("fuseforge: compiling forward and backward for %s", [tuple(t.shape) for t in tensors])
            self._ff_model.training = self.training
            step = compile_step(self._ff_model, args, self.precision, _source_file(self._ff_model))
            self._ff_training[key] = step
        return step(args)


def optimize(
    model: nn.Module, example_inputs: Sequence[Any] | None = None, *, precision: str = "fp32"
) -> OptimizedModule:
    """Returns a drop-in replacement of `model` whose forward runs fused kernels.

    `example_inputs`, if given, are used to compile right away (on CUDA
    inputs); otherwise compilation happens at the first call. `precision`
    "fp32" (the default) keeps fp32 accuracy; "tf32" is the faster opt-in
    policy (see fuseforge.runtime.precision.PRECISIONS).
    """
    opt = OptimizedModule(model, precision=precision)
    if example_inputs is not None:
        example = list(example_inputs)
        if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in example):
            device = next(a.device for a in example if isinstance(a, torch.Tensor))
            opt._ff_specializations.setdefault(_guard_key(opt, example), []).append(opt._specialize(example, device))
    return opt
