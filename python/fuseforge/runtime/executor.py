"""Runs a plan (`fuseforge._native.core.Plan`) on one device.

The executor walks the plan's steps and decides nothing of its own: the plan
says which kernels to launch with which geometry, which library (ATen) calls
and views to make, which buffers a kernel reads in place (aliases) or must
re-lay-out first, when each temporary dies (free steps), and which values
depend only on weights (the prepare section: run once, then again only when
a parameter or buffer it reads changes in place, is replaced or reloaded).

Values live in a slot list indexed by buffer. On a CUDA device kernels are
compiled with NVRTC for the device (in parallel, disk-cached) and launched on
torch's current stream. A conv kernel is timed at its first run against its
fallback, which then replaces it where faster: with an epilogue, the plan's
library form for it (cuDNN's conv, then the epilogue as one kernel of its
own, compiled with the rest), else the conv op by op. On the CPU, kernels run
on the reference interpreter instead (a conv kernel as that fallback, its
epilogue's kernel on the interpreter): that is how `fuseforge run` checks a
plan on machines without a GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from fuseforge import phases
from fuseforge._native import core
from fuseforge.dtypes import TORCH
from fuseforge.runtime import autotune, library_calls
from fuseforge.runtime.prepared import cached_prepare

#: CPU stand-ins interpret groups up to this many elements whole; larger
#: pointwise groups run op by op through ATen, checked on a sample of elements.
INTERPRET_LIMIT = 1 << 22
INTERPRET_SAMPLE = 1 << 14

#: Kernel kinds whose group also runs through the library where the kernel
#: cannot: it did not compile here, or (conv) cuDNN timed faster. A conv
#: kernel with an epilogue then runs its library form (cuDNN's conv, then the
#: epilogue's own kernel); any other, its nodes op by op.
_LIBRARY_BACKED = ("gemm", "conv")

Env = list  # a value per plan buffer (None where not live)
Run = Callable[[Env], None]


@dataclass(frozen=True)
class _Type:
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _type(b: Any) -> _Type:
    return _Type(TORCH[b.dtype], tuple(b.shape), tuple(b.strides))


def _sole_owner(x: torch.Tensor) -> bool:
    """Whether no other tensor shares `x`'s memory (a view of it, or a
    tensor the caller kept): the plan may then write over it. The count
    includes the storage object this call makes."""
    return torch._C._storage_Use_Count(x.untyped_storage()._cdata) == 2


def _raw_stream(device_index: int) -> int:
    """torch's current stream handle on a device (the cheap form inductor uses)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def _same_layout(x: torch.Tensor, t: _Type) -> bool:
    """Strides agree on every dim of size > 1 (others never move the index)."""
    strides = x.stride()
    return strides == t.strides or all(n == 1 or a == b for n, a, b in zip(t.shape, strides, t.strides))


class Executor:
    """Executes a plan on `device` (a CUDA device, or the CPU with kernels on
    the reference interpreter). Call it with the plan's inputs in order; it
    returns (outputs, new module-buffer values)."""

    def __init__(self, plan: Any, device: torch.device):
        self.plan = plan
        self.device = device
        self.types = [_type(b) for b in plan.buffers]
        self.kernels: list[Any] = [None] * len(plan.kernels)
        if device.type == "cuda":
            self.arch = core.device_arch(device.index or 0)
            self._load_kernels()
        self.input_slots = list(plan.inputs)
        self.output_slots = list(plan.outputs)
        self.mutation_slots = [v for _, v in plan.mutations]
        #: The inputs the run section frees (a plan for a caller that hands its inputs over).
        self.released_inputs = frozenset(
            s for step in plan.run if step.kind == "free" for s in step.results
        ) & frozenset(self.input_slots)
        self._tuning: set[int] = set()  # kernels whose candidates are timed at their first run
        self._prepare = [self._step(s) for s in plan.prepare]
        self._run = [self._step(s) for s in plan.run]
        # The values prepare leaves for run, and the weights it reads (whose
        # identity, storage and version decide whether they are still valid).
        self.kept_slots = list(plan.prepare_keeps)
        self._weights = list(plan.prepare_reads)
        self._prepared: dict = {}
        #: The run section as a CUDA graph, where it replays (runtime/cuda_graph.py adopts one).
        self.graph: Any = None
        #: Whether a CUDA graph is being captured from the run section: buffers'
        #: new values then go to memory of their own, which the graph copies
        #: into the buffers (its warm-up run, outside the capture, must leave
        #: them as they are).
        self.capturing = False
        #: The text of every step this executor runs, in order (prepare, then run).
        self.step_texts = [plan.step_text(s) for s in [*plan.prepare, *plan.run]]

    def _load_kernels(self) -> None:
        """Compiles every kernel; a GEMM or conv kernel that does not compile
        here (e.g. headers that do not fit this NVRTC) runs op by op instead."""
        with phases.timed("NVRTC"):
            loaded_kernels = core.load_kernels(self.plan.kernels, self.arch)
        for i, (k, loaded) in enumerate(zip(self.plan.kernels, loaded_kernels)):
            if not isinstance(loaded, str):
                self.kernels[i] = loaded
            elif k.kind in _LIBRARY_BACKED:
                warnings.warn(
                    f"fuseforge: {k.kind} kernel {k.name} did not compile; running it through ATen:\n{loaded[:2000]}",
                    stacklevel=2,
                )
            else:
                raise RuntimeError(loaded)

    # ---- steps

    def _step(self, step: Any) -> Run:
        if step.kind == "free":
            slots = list(step.results)

            def free(env: Env) -> None:
                for s in slots:
                    env[s] = None

            return free
        if step.kind == "launch":
            if self.device.type == "cuda":
                return self._launch(step.kernel)
            return self._interpreted(step.kernel)
        return self._call(step)

    def _call(self, step: Any) -> Run:
        """A library call or view: the step's torch expression."""
        call = library_calls.make_call(step, self.device)
        operands = [(True, o.buffer) if o.buffer >= 0 else (False, o.literal) for o in step.operands]
        results = list(step.results)
        text = self.plan.step_text(step)

        def run(env: Env) -> None:
            args = [env[v] if is_slot else v for is_slot, v in operands]
            try:
                out = call(args)
            except Exception as e:  # name the step that failed
                raise RuntimeError(f"fuseforge: library call failed for `{text}`: {e}") from e
            if len(results) == 1:
                env[results[0]] = out[0] if isinstance(out, (tuple, list)) else out
            else:
                for s, o in zip(results, out):
                    env[s] = o

        return run

    def _fallback(self, index: int) -> Run:
        """What runs where a kernel does not (it did not compile, cuDNN timed
        faster than a conv kernel, or no GPU): a conv kernel's library form
        where the plan gives one, else the kernel's nodes op by op."""
        if len(self.plan.kernels[index].library_steps) > 0:
            return self._library_form(index)
        return self._op_by_op(index)

    def _library_form(self, index: int) -> Run:
        """A conv kernel's library form: the conv's library call, then the
        epilogue's own kernel as any launch step runs (its inputs re-laid out
        or aligned as recorded; on the CPU, the interpreter), then the conv
        result's free. Aliases the call reads are made as views first."""
        k = self.plan.kernels[index]
        runs = [self._step(s) for s in k.library_steps]
        called = {o.buffer for s in k.library_steps if s.kind == "call" for o in s.operands if o.buffer >= 0}
        aliases = [(i.buffer, i.memory) for i in k.inputs if i.buffer != i.memory and i.buffer in called]

        def run(env: Env) -> None:
            for b, m in aliases:
                env[b] = self._view_of_memory(env[m], m, b)
            for r in runs:
                r(env)
            for b, _ in aliases:
                env[b] = None

        return run

    def _op_by_op(self, index: int) -> Run:
        """A kernel's nodes, one library call each (aliases it reads in place
        are made as views of their memory first); its interior values are
        dropped after."""
        k = self.plan.kernels[index]
        calls = [self._call(s) for s in k.nodes]
        aliases = [(i.buffer, i.memory, self.types[i.buffer]) for i in k.inputs if i.buffer != i.memory]
        interior = [r for s in k.nodes for r in s.results if self.plan.buffers[r].role == "interior"]

        def run(env: Env) -> None:
            for b, m, _ in aliases:
                env[b] = self._view_of_memory(env[m], m, b)
            for c in calls:
                c(env)
            for b in [*interior, *(b for b, _, _ in aliases)]:
                env[b] = None

        return run

    def _view_of_memory(self, x: torch.Tensor, memory: int, alias: int) -> torch.Tensor:
        """Alias buffer `alias` as a tensor: its recorded strides over the
        memory `x` of buffer `memory`, first copied into that buffer's recorded
        layout if it arrived in another."""
        m, t = self.types[memory], self.types[alias]
        if not _same_layout(x, m):
            x = torch.empty_strided(m.shape, m.strides, dtype=m.dtype, device=x.device).copy_(x)
        return x.as_strided(t.shape, t.strides)

    def _launch(self, index: int) -> Run:
        k = self.plan.kernels[index]
        kernel = self.kernels[index]
        device = self.device
        dev_index = device.index or 0
        outs = [(o, self.types[o]) for o in k.outputs]
        # Outputs the plan writes over a dying input (not while candidates are
        # timed on these operands: each run would read what the last wrote),
        # and buffers' new values written into the buffers, which other
        # tensors (the module) hold too (not while capturing; a buffer only
        # the module holds would otherwise pass for a dying input).
        over = list(k.over)
        memory = [i.memory for i in k.inputs]
        replaces = self._replaces(k)
        # An output written over an input's memory takes its own shape: the
        # kernel reads a reshape of that memory (a GEMM's 2-D result under a
        # 3-D view), whose shape the output has, not the memory's.
        same_shape = [j < 0 or self.types[memory[j]].shape == t.shape for j, (_, t) in zip(over, outs)]
        # Inputs to copy into their recorded layout where they arrive in
        # another; a GEMM kernel also needs every pointer aligned to its
        # vector accesses (a view may start anywhere): a fresh copy is.
        align = k.align_bytes
        checked = [(j, self.types[i.memory], i.relayout) for j, i in enumerate(k.inputs) if i.relayout or align]
        scalars = list(k.scalars)
        empty_strided = torch.empty_strided
        # Its library form or calls: for a kernel that did not compile, and for
        # a conv kernel that autotuning may find slower than cuDNN.
        by_ops = self._fallback(index) if kernel is None or k.kind == "conv" else None
        # Timed at the first run: a kernel's candidate tiles (listed only when
        # autotuning), and a conv kernel against its library form (cuDNN, then
        # the epilogue's kernel) always: the conv cost model can be far off
        # (a large-batch 7x7 stem's implicit GEMM ran 5x slower than cuDNN).
        if kernel is not None and (len(k.variants) > 0 or k.kind == "conv"):
            self._tuning.add(index)
        tuning = self._tuning

        def run(env: Env) -> None:
            nonlocal kernel
            if kernel is None:
                assert by_ops is not None  # made above for every kernel that can be None here
                by_ops(env)
                return
            ins = [env[m] for m in memory]
            for j, t, relayout in checked:
                x = ins[j]
                if (relayout and not _same_layout(x, t)) or (align and x.data_ptr() % align):
                    ins[j] = empty_strided(t.shape, t.strides, dtype=t.dtype, device=device).copy_(x)
            out_tensors = [
                (ins[j] if same else ins[j].as_strided(t.shape, t.strides))
                if j >= 0 and index not in tuning and (not self.capturing if replace else _sole_owner(ins[j]))
                else empty_strided(t.shape, t.strides, dtype=t.dtype, device=device)
                for j, replace, same, (_, t) in zip(over, replaces, same_shape, outs)
            ]
            pointers = [t.data_ptr() for t in out_tensors] + [t.data_ptr() for t in ins]
            values = [float(env[s]) for s in scalars]
            if index in tuning:  # first run: time the candidate tiles (and a conv's cuDNN call) on these operands
                library = (lambda: by_ops(env)) if by_ops is not None and k.kind == "conv" else None
                kernel = self.kernels[index] = self._tuned(k, kernel, pointers, values, library)
                tuning.discard(index)
                if kernel is None:  # cuDNN won
                    assert by_ops is not None  # a conv's, which only _tuned's library wins over
                    by_ops(env)
                    return
            kernel.launch(dev_index, pointers, values, _raw_stream(dev_index))
            for (o, _), t in zip(outs, out_tensors):
                env[o] = t

        return run

    def _replaces(self, k: Any) -> list[bool]:
        """Per output of kernel `k`: whether it is written into a buffer it is
        the new value of (a mutation the plan writes in place)."""
        pairs = {(b, v) for b, v in self.plan.mutations}
        return [j >= 0 and (k.inputs[j].memory, o) in pairs for o, j in zip(k.outputs, k.over)]

    def _tuned(
        self,
        k: Any,
        default: Any,
        pointers: list[int],
        scalars: list[float],
        library: Callable[[], Any] | None = None,
    ) -> Any:
        """The fastest of a GEMM or conv kernel's candidate tiles and, given
        `library` (a conv's library form or calls), of that: then None if it
        wins (autotune.choose). `scalars`: the kernel's scalar arguments, which
        candidate tiles (GEMMs) do not take."""
        dev_index = self.device.index or 0
        # Keyed by the code and the sizes it is launched with (a GEMM's are
        # launch arguments), not the kernel: a network's repeated blocks share
        # the timing; a choice against a library form by its epilogue kernel too.
        epilogues = "".join(self.plan.kernels[s.kernel].compile_key for s in k.library_steps if s.kind == "launch")
        key = autotune.kernel_key(k.compile_key + epilogues, k.constants, self.arch)
        # A choice made before (this kernel's code elsewhere in the network, an
        # earlier process) compiles the chosen candidate alone.
        chosen = autotune.load().get(key)
        if chosen == autotune.label(k.name):
            return default
        if chosen == "library" and library is not None:
            return None
        variants = [v for v in k.variants if autotune.label(v.name) == chosen] or k.variants
        candidates = [(k.name, default)]
        for v in variants:
            try:
                candidates.append((v.name, core.load_variant(v, self.arch)))
            except RuntimeError as e:
                warnings.warn(
                    f"fuseforge: {k.kind} candidate {v.name} did not compile; not timed: {str(e)[:500]}", stacklevel=2
                )
        stream = _raw_stream(dev_index)
        runs: list[Callable[..., object]] = [
            lambda c=c, first=(i == 0): c.launch(dev_index, pointers, scalars if first else [], stream)
            for i, (_, c) in enumerate(candidates)
        ]
        if library is not None:
            candidates.append(("library", None))
            runs.append(library)
        best = autotune.choose(key, [autotune.label(n) for n, _ in candidates], runs)
        return candidates[best][1]

    def _interpreted(self, index: int) -> Run:
        """CPU stand-in for a kernel: its graph on the reference interpreter.

        Pointwise groups larger than INTERPRET_LIMIT elements run op by op
        through ATen and the interpreter checks a random sample of
        INTERPRET_SAMPLE of their elements; other groups writing or reading
        more than INTERPRET_LIMIT elements run op by op.
        """
        k = self.plan.kernels[index]
        by_ops = self._fallback(index)
        shape = self.types[k.outputs[0]].shape
        numel = int(np.prod(shape)) if shape else 1
        largest = max(int(np.prod(self.types[b].shape)) for b in [*k.outputs, *(i.buffer for i in k.inputs)])
        # A GEMM or reduction costs about its output times its operands: only
        # small ones run on the (scalar) interpreter, the rest through ATen; the
        # sampled check assumes a pointwise group; convs run as they do where
        # cuDNN wins (_fallback: the epilogue's kernel here on the interpreter).
        if (largest > INTERPRET_LIMIT and k.kind != "pointwise") or k.kind == "conv":
            return by_ops
        slots = list(k.graph_inputs)
        memory = {i.buffer: i.memory for i in k.inputs}
        outs = [(o, self.types[o]) for o in k.outputs]
        sampled = k.sampled_graph(INTERPRET_SAMPLE) if largest > INTERPRET_LIMIT else None

        def value(env: Env, b: int) -> Any:
            m = memory.get(b, b)
            return env[m] if m == b else self._view_of_memory(env[m], m, b)

        def run(env: Env) -> None:
            if sampled is None:
                results = core.interpret(k.graph, [_as_array(value(env, b)) for b in slots])
                for (o, t), r in zip(outs, results):
                    out = torch.empty_strided(t.shape, t.strides, dtype=t.dtype)
                    env[o] = out.copy_(torch.from_numpy(np.asarray(r)).reshape(t.shape))
                return
            ins = [value(env, b) for b in slots]
            by_ops(env)
            idx = torch.randint(0, numel, (INTERPRET_SAMPLE,), generator=torch.Generator().manual_seed(0))
            coords = torch.unravel_index(idx, shape)

            def sample(x: Any) -> np.ndarray:
                return _as_array(x.expand(shape)[coords]) if isinstance(x, torch.Tensor) else _as_array(x)

            results = core.interpret(sampled, [sample(x) for x in ins])
            for (o, _), r in zip(outs, results):
                got = env[o][coords].to(torch.float64)
                want = torch.from_numpy(np.asarray(r))
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
                    err = (got - want).abs().max().item()
                    raise AssertionError(
                        f"kernel {k.name}: interpreter disagrees on sampled elements (max abs diff {err:.3g})"
                    )

        return run

    # ---- the native call path (runtime/fast_call.py)

    def fast_steps(self) -> list[tuple]:
        """The run section as fuseforge._fast_call.FastCall takes it: a
        compiled kernel's launch natively; a free; any other step (library
        calls, views, kernels still to be tuned or run op by op, CPU
        stand-ins) through this executor's own closure over the slot list.
        With a CUDA graph, the whole section is its replay."""
        if self.graph is not None:
            return [("python", self.graph.run)]
        out: list[tuple] = []
        for step, run in zip(self.plan.run, self._run):
            kernel = self.kernels[step.kernel] if step.kind == "launch" and self.device.type == "cuda" else None
            if step.kind == "free":
                out.append(("free", list(step.results)))
            elif kernel is not None and step.kernel not in self._tuning:
                k = self.plan.kernels[step.kernel]
                outs = [(o, *self._layout(o), j, r) for o, j, r in zip(k.outputs, k.over, self._replaces(k))]
                ins = [(i.memory, bool(i.relayout), *self._layout(i.memory)) for i in k.inputs]
                out.append(("launch", kernel, kernel.handle, outs, ins, int(k.align_bytes), list(k.scalars)))
            elif step.kind == "view" and (view := self._native_view(step)) is not None:
                out.append(("view", *view, run))
            else:
                out.append(("python", run))
        return out

    def _native_view(self, step: Any) -> tuple | None:
        """A view step as FastCall makes it natively, (source slot, result
        slot, source layout, result shape, strides and storage offset from
        the source's), where its torch expression, applied to a meta tensor
        laid out as recorded, gives a view laid out as recorded; else None
        (it then runs through its closure). A source that arrives in another
        layout at run time takes the closure too."""
        buffers = [o.buffer for o in step.operands if o.buffer >= 0]
        if len(buffers) != 1 or len(step.results) != 1:
            return None
        (source,), (result,) = buffers, step.results
        src, dst = self.types[source], self.types[result]
        meta = torch.empty_strided(src.shape, src.strides, dtype=src.dtype, device="meta")
        try:
            view = library_calls.make_call(step, meta.device)(
                [meta if o.buffer >= 0 else o.literal for o in step.operands]
            )
        except Exception:  # an expression that needs real data
            return None
        if not isinstance(view, torch.Tensor) or view._base is not meta or not _same_layout(view, dst):
            return None
        if tuple(view.shape) != dst.shape or view.dtype != dst.dtype:
            return None
        return source, result, *self._layout(source), dst.shape, dst.strides, view.storage_offset()

    def _layout(self, slot: int) -> tuple:
        t = self.types[slot]
        return t.dtype, t.shape, t.strides

    def prepared(self, inputs: Sequence[Any]) -> tuple[list, list] | None:
        """The prepare section as the last call left it: ([(slot, weight)],
        [(slot, kept value)]) for `inputs` (that call's), or None if it has
        not run."""
        if self._prepare and "values" not in self._prepared:
            return None
        by_slot = dict(zip(self.input_slots, inputs))
        return ([(b, by_slot[b]) for b in self._weights], list(zip(self.kept_slots, self._prepared.get("values", []))))

    # ---- call

    def _prepare_section(self, env: Env) -> None:
        """Puts the prepare section's values into `env`: kept from an earlier
        call unless a weight they read changed (cached_prepare)."""

        def compute() -> list:
            for run in self._prepare:
                run(env)
            return [env[b] for b in self.kept_slots]

        for b, v in zip(self.kept_slots, cached_prepare(self._prepared, [env[b] for b in self._weights], compute)):
            env[b] = v

    def pending_tuning(self) -> bool:
        """Whether a kernel is still to be timed at its first run."""
        return bool(self._tuning)

    def slots_for(self, inputs: Sequence[Any]) -> Env:
        """The slot list for a call with `inputs`: they and the prepare
        section's values in their slots, the rest empty."""
        env: Env = [None] * len(self.types)
        for s, x in zip(self.input_slots, inputs):
            env[s] = x
        if self._prepare:
            self._prepare_section(env)
        return env

    def run_steps(self, env: Env) -> None:
        """Runs the run section on `env` step by step (no CUDA graph)."""
        for run in self._run:
            run(env)

    def __call__(self, inputs: Sequence[Any], handed_over: bool = False) -> tuple[list[Any], list[Any]]:
        """Runs the plan; returns (outputs, new buffer values) in plan order.
        `handed_over`: `inputs` (a list) is emptied once they are in their
        slots, so that a plan that frees its inputs releases them."""
        env = self.slots_for(inputs)
        if handed_over:
            cast(list, inputs).clear()
        if self.graph is not None:
            self.graph.run(env)
        else:
            self.run_steps(env)
        return [env[s] for s in self.output_slots], [env[s] for s in self.mutation_slots]


def _as_array(x: Any) -> np.ndarray:
    if not isinstance(x, torch.Tensor):
        return np.array([float(x)], dtype=np.float64)
    return x.detach().to(torch.float64).contiguous().numpy().reshape(-1)
