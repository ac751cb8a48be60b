"""A plan's run section replayed as one CUDA graph.

Once a plan has run (kernels compiled, autotuned and timed at its first
call), every later call with the same guard key launches the same kernels
with the same geometry: captured once as a CUDA graph, a call is one graph
launch instead of a host walk over its steps. Whole networks are chains of
mid-sized kernels whose launch gaps and host work between launches are a
large part of their time.

What a replay keeps of a plain run's semantics:

- Tensors the caller passes (`varying` inputs) are copied into tensors the
  graph owns: callers pass new tensors each call, so the graph never reads
  one at its own address. Those the plan frees (a backward's saved values)
  are dropped once copied.
- Parameters, buffers, constants and scalar arguments are read where, and
  as, they were at capture: checked before each replay (a data pointer, a
  value). A change (a replaced parameter, `.data` set anew, another scalar)
  captures again, at most MAX_CAPTURES times; then the plan runs step by
  step from then on, logged.
- Prepare-section values the graph owns are copied in when the prepare
  section computed them anew (a weight changed in place).
- Outputs are cloned out after the replay, so that a later call never
  overwrites a tensor already returned.
- Train-mode buffer updates are copied into the module's buffers inside the
  graph: once per call, as the plain run's caller does.

Whether a plan replays is decided once per plan and GPU, by timing a call
both ways as it runs in production (the native call path where armed),
interleaved with L2 flushed as results are judged (runtime/timing.py), and
kept with the autotune choices; a plan whose graph is not faster (large
tensors, where copying the inputs in and the outputs out costs more than
the launches it saves) runs step by step. FUSEFORGE_CUDA_GRAPHS=off turns
replay off, =always replays wherever a capture succeeds
(runtime/options.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from fuseforge.runtime import autotune, timing
from fuseforge.runtime.options import cuda_graphs

log = logging.getLogger("fuseforge")

#: Captures per plan before a plan whose fixed inputs keep moving runs step by step.
MAX_CAPTURES = 4

Env = list


class CaptureRefused(Exception):
    """The plan cannot replay as a graph (the reason is the message)."""


class PlanGraph:
    """An executor's run section as one CUDA graph. `varying`: the input
    slots the caller passes anew each call; `buffers`: (mutation slot,
    module buffer) pairs the graph writes the new value into."""

    def __init__(self, executor: Any, varying: Collection[int], buffers: Sequence[tuple[int, torch.Tensor]]):
        self.executor = executor
        self.varying = frozenset(varying)
        self.buffers = list(buffers)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captures = 0
        self.gave_up = False
        self.copy_in: list[tuple[int, torch.Tensor]] = []  # (slot, tensor the graph reads it from)
        self.fixed: list[tuple[int, bool, Any]] = []  # (slot, is a tensor, data pointer or value at capture)
        self.clone_out: list[tuple[int, torch.Tensor]] = []  # (slot, the graph's tensor of it)
        self.views: list[tuple[int, int, tuple, tuple, int]] = []  # (slot, input slot, size, stride, offset)
        self.released: list[int] = []  # input slots dropped once copied in (the plan frees them)

    # ---- capture

    def capture(self, env: Env) -> None:
        """Captures the run section for `env` (inputs and prepared values in
        their slots; left as it is). Raises CaptureRefused with the reason
        where the plan cannot replay."""
        ex = self.executor
        graph_env = list(env)
        copy_in: list[tuple[int, torch.Tensor]] = []
        fixed: list[tuple[int, bool, Any]] = []
        inputs = [env[s] for s in ex.input_slots if isinstance(env[s], torch.Tensor)]
        input_storage = {_storage(x) for x in inputs}
        kept = set(ex.kept_slots)
        for s in dict.fromkeys([*ex.input_slots, *ex.kept_slots]):
            x = env[s]
            if not isinstance(x, torch.Tensor):
                fixed.append((s, False, x))
            elif s in self.varying:
                if torch._debug_has_internal_overlap(x) != 0:
                    # An expanded input (stride 0): a tensor of its strides
                    # cannot be copied into, and the plan reads those strides.
                    raise CaptureRefused("an input's elements share memory (an expanded tensor)")
                t = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                graph_env[s] = t
                copy_in.append((s, t))
            elif s in kept and x._base is None and _storage(x) not in input_storage:
                copy_in.append((s, x))  # a prepared value of its own: the next one is copied into it
            else:
                fixed.append((s, True, x.data_ptr()))
        for s, t in copy_in:
            if t is not env[s]:
                t.copy_(env[s])
        graph = torch.cuda.CUDAGraph()
        device = ex.device
        current = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            ex.capturing = True  # buffers' new values to memory of their own (Executor.capturing)
            try:
                # One run outside the capture first, on the capturing stream:
                # libraries set up per stream state (handles, workspaces) lazily.
                ex.run_steps(list(graph_env))
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    ex.run_steps(graph_env)
                    for slot, buffer in self.buffers:
                        buffer.copy_(graph_env[slot])
                except Exception as e:
                    try:
                        graph.capture_end()
                    except RuntimeError:
                        pass  # the capture is invalid already; the step's own error says why
                    raise CaptureRefused(f"a step cannot be captured ({str(e).splitlines()[0][:300]})") from e
                graph.capture_end()
            finally:
                ex.capturing = False
        current.wait_stream(side)
        written = {s for s, _ in self.buffers}
        clone_out, views = [], []
        # An output that views an input (a transposed weight a forward saves
        # for its backward) views the caller's tensor, as a plain run's does.
        # (From the tensors themselves: a plan that releases its inputs has
        # freed their slots by now.)
        source: dict[int, Any] = {s: t for s, t in copy_in}
        source.update({s: env[s] for s, is_tensor, _ in fixed if is_tensor})
        viewed = {_storage(t): s for s, t in source.items()}
        passed = {*ex.input_slots, *viewed.values(), *written}  # outputs the caller's env already holds
        for s in dict.fromkeys([*ex.output_slots, *ex.mutation_slots]):
            if s in passed:
                continue
            t = graph_env[s]
            if not isinstance(t, torch.Tensor):
                raise CaptureRefused("an output is not a tensor")
            base = viewed.get(_storage(t))
            if base is None:
                clone_out.append((s, t))
            else:
                views.append((s, base, tuple(t.shape), t.stride(), t.storage_offset() - source[base].storage_offset()))
        self.graph, self.copy_in, self.fixed = graph, copy_in, fixed
        self.clone_out, self.views = clone_out, views
        bases = {base for _, base, *_ in views}
        self.released = [s for s, _ in copy_in if s in ex.released_inputs and s not in bases]
        self.captures += 1

    # ---- replay

    def _matches(self, env: Env) -> bool:
        for s, is_tensor, at in self.fixed:
            v = env[s]
            if is_tensor:
                if not isinstance(v, torch.Tensor) or v.data_ptr() != at:
                    return False
            elif v != at and not (v != v and at != at):  # NaN matches NaN
                return False
        return True

    def run(self, env: Env) -> None:
        """Runs the run section on `env` (the executor's slots): a replay, or
        the plan step by step where the graph cannot serve this call, or
        where the caller is capturing a graph of its own (which cannot
        replay another: the steps are captured into the caller's)."""
        if torch.cuda.is_current_stream_capturing():
            self.executor.run_steps(env)
            return
        if self.graph is None or not self._matches(env):
            if not self._recapture(env):
                self.executor.run_steps(env)
                return
        for s, t in self.copy_in:
            x = env[s]
            if x is not t:
                t.copy_(x)
        for s in self.released:
            env[s] = None
        assert self.graph is not None
        self.graph.replay()
        for s, t in self.clone_out:
            env[s] = t.clone()
        for s, base, size, stride, offset in self.views:
            x = env[base]
            env[s] = x.as_strided(size, stride, x.storage_offset() + offset)
        for s, buffer in self.buffers:
            env[s] = buffer

    def _recapture(self, env: Env) -> bool:
        if self.gave_up:
            return False
        if self.captures >= MAX_CAPTURES:
            self.gave_up = True
            log.info(
                "fuseforge: a plan's parameters or scalar arguments changed %d times; it runs step by step from now on",
                self.captures,
            )
            return False
        try:
            self.capture(env)
        except CaptureRefused as e:
            self.gave_up = True
            log.warning("fuseforge: the plan runs step by step, not as a CUDA graph: %s", e)
            return False
        return True


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _choice_key(executor: Any) -> str:
    text = str(executor.plan) + "".join(k.source for k in executor.plan.kernels)
    return f"cuda-graph-sm{executor.arch}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def adopt(
    executor: Any,
    inputs: Sequence[Any],
    varying: Sequence[bool],
    buffers: Sequence[tuple[int, torch.Tensor]],
    armed_call: Callable[[], Callable[[], object]],
    training: bool = False,
) -> bool:
    """Captures `executor`'s run section for calls like `inputs` (varying[i]:
    whether the caller passes input i anew each call; `buffers`: see
    PlanGraph) and keeps it as `executor.graph` where replay is faster.

    armed_call() returns a function making one call the way production
    makes it, for the executor as it stands (plain, or with its graph): both
    are timed when no earlier process decided for this plan and GPU. The
    timing runs restore the buffers they update.

    A `training` plan (a forward or backward graph of a training step)
    replays only with FUSEFORGE_CUDA_GRAPHS=always: its graph would keep a
    second copy of what the forward saves for the backward, and a training
    step's peak memory is to stay at eager's."""
    mode = cuda_graphs()
    if mode == "off" or (training and mode != "always"):
        return False
    if executor.device.type != "cuda" or executor.pending_tuning():
        return False
    if torch.cuda.is_current_stream_capturing():  # the caller's capture cannot hold ours, nor its timing
        log.info("fuseforge: a plan first ran within a CUDA graph capture: it runs step by step")
        return False
    key = _choice_key(executor)
    choice = "graph" if mode == "always" else autotune.load().get(key)
    if choice == "plain":
        return False
    graph = PlanGraph(executor, [s for s, v in zip(executor.input_slots, varying) if v], buffers)
    try:
        graph.capture(executor.slots_for(inputs))
    except CaptureRefused as e:
        log.warning("fuseforge: the plan runs step by step, not as a CUDA graph: %s", e)
        return False
    if choice != "graph":
        saved = [b.clone() for _, b in buffers]
        executor.graph = None
        plain = armed_call()
        executor.graph = graph
        replay = armed_call()

        def way(graphed: PlanGraph | None, call: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                executor.graph = graphed
                return call()

            return run

        # Timed as results are judged (L2 flushed before each call, the two
        # ways interleaved): a replay copies the inputs in, which a warm L2
        # hid, and one way timed after the other took the clocks' drift.
        try:
            ms = timing.time_cuda({"plain": way(None, plain), "graph": way(graph, replay)}, trials=15, max_seconds=2.0)
        except torch.cuda.OutOfMemoryError:
            # The L2 flush's buffer did not fit beside the model: no choice is
            # kept, so that a process with room times it.
            log.info("fuseforge: no memory left to time the plan as a CUDA graph: it runs step by step")
            ms = None
        finally:
            for (_, b), value in zip(buffers, saved):
                b.copy_(value)
        if ms is None:
            executor.graph = None
            return False
        choice = "graph" if ms["graph"] < ms["plain"] else "plain"
        log.info("fuseforge: a call takes %.4f ms step by step, %.4f ms as a CUDA graph", ms["plain"], ms["graph"])
        autotune.store(key, choice)
    executor.graph = graph if choice == "graph" else None
    return executor.graph is not None
