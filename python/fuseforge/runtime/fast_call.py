"""The native call path: an OptimizedModule's repeated call in C++.

After the Python path has run a specialization (guard key, gather, the
executor), `arm` describes that call to fuseforge._fast_call.FastCall
(csrc/python/fast_call.cc): the arguments' types, where each plan input comes
from, the prepare section's weights and kept values, and the executor's run
steps. The next call with the same kind of arguments then runs in C++: it
checks what the guard key and `Specialization.gather` check, and that the
prepare section's weights are unchanged, launches the compiled kernels,
makes views whose layout and offset the executor found (Executor.fast_steps)
and runs every other step through the executor's own closure. Anything it does
not find as armed sends the call back to the Python path.

Why: for a small model the Python path's host time is the GPU's idle time
(20-130 us per call in the timing loop, against a 22 us kernel for
gemm_divide_sum_scaling on an H200).

FUSEFORGE_FAST_CALL=0 turns it off (runtime/options.py). It needs the
_fast_call extension, which is built where torch is importable at build time
(it links libtorch); without it every call takes the Python path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from fuseforge._native import core
from fuseforge.runtime.options import fast_call_enabled
from fuseforge.runtime.precision import precision_context

try:
    import fuseforge._fast_call as _fast_call
except ImportError:  # built without torch at hand
    _fast_call = None

ENABLED = _fast_call is not None and fast_call_enabled()


def arm(module: Any, spec: Any, args: Sequence[Any], inputs: Sequence[Any]) -> Any:
    """A FastCall for more calls like this one (`args`, gathered into
    `inputs`, just ran on the Python path), or None where this call cannot be
    repeated natively: an argument that is not a tensor, a number or None, a
    nested one, a precision that changes library math around the call, or an
    executor whose prepare section has not run."""
    mutations = []
    for (mod, name), slot in zip(spec.mutation_targets, spec.executor.mutation_slots):
        if name not in mod._buffers:
            return None
        mutations.append((slot, mod._buffers, name))
    specialized = list(spec.captured.specialized_scalars.items())
    return _arm(module.training, spec.executor, spec.getters, args, inputs, module.precision, specialized, mutations)


class GraphCall:
    """A FastCall for a graph that is no module: a forward or backward graph
    of a training step (runtime/training.py), called with its positional
    inputs; it stands in for the module the FastCall guards the mode of."""

    training = False

    def __init__(self, fast: Any):
        self.fast = fast

    def __call__(self, args: list) -> list | None:
        """The outputs, or None for a call unlike the armed one. `args` is
        handed over: emptied once its tensors are in their slots (left as it
        was for a declined call)."""
        return self.fast.call_handed_over(self, args)

    @property
    def served(self) -> int:
        return int(self.fast.served)


def arm_graph(
    executor: Any, getters: Sequence[tuple[str, Any]], args: Sequence[Any], inputs: Sequence[Any], precision: str
) -> GraphCall | None:
    """A GraphCall running more calls like this one (`args`, the graph's
    positional inputs, gathered into `inputs`, just ran on `executor`'s
    Python path) natively: it returns the plan's outputs, or None for a call
    unlike this one or whose weights changed. None where the call cannot be
    repeated natively (see `arm`)."""
    fast = _arm(GraphCall.training, executor, getters, args, inputs, precision, [], [])
    return GraphCall(fast) if fast is not None else None


def _arm(
    training: bool,
    executor: Any,
    getters: Sequence[tuple[str, Any]],
    args: Sequence[Any],
    inputs: Sequence[Any],
    precision: str,
    specialized: list,
    mutations: list,
) -> Any:
    """The FastCall of `arm` and `arm_graph`: where each plan input comes
    from, the prepare section's weights and kept values, and the run steps."""
    if not ENABLED or not isinstance(precision_context(precision), contextlib.nullcontext):
        return None
    prepared = executor.prepared(inputs)
    if prepared is None:
        return None
    sources: list[tuple] = []
    for (kind, src), slot in zip(getters, executor.input_slots):
        if kind == "arg":
            index = getattr(getattr(src, "__self__", None), "source", None)
            if not isinstance(index, int):
                return None
            sources.append(("arg", slot, index))
        elif kind == "const":
            sources.append(("const", slot, src))
        else:
            owner = _owning_dict(*src)
            if owner is None:
                return None
            sources.append(("state", slot, owner, src[1]))
    weights, kept = prepared
    try:
        return _fast_call.FastCall(
            len(executor.types),
            training,
            tuple(args),
            specialized,
            sources,
            weights,
            kept,
            executor.fast_steps(),
            list(executor.output_slots),
            mutations,
            executor.device.index or 0,
            core.launch_entry,
        )
    except ValueError:  # an argument or state FastCall does not take
        return None


def _owning_dict(module: Any, name: str) -> dict | None:
    """The module dict a parameter or buffer lives in (looked up there on every call)."""
    for d in (module._parameters, module._buffers):
        if name in d:
            return d
    return None
