"""Runs a compiled plan: generated kernels on the GPU, library calls through ATen.

Values live in a slot list; each step reads its operands' slots and fills its
results'. A slot is cleared after its last use so large intermediates are freed
as early as eager would free them.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from fuseforge._native import core
from fuseforge.runtime import autotune, library_calls


@dataclass(frozen=True)
class ValueType:
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _value_types(plan: dict) -> dict[str, ValueType]:
    return {name: ValueType(library_calls.DTYPES[d], tuple(shape), tuple(strides))
            for name, (d, shape, strides) in plan["values"].items()}


#: Kernel kinds whose group also runs as ATen calls (its nodes), where the
#: kernel cannot: no CPU stand-in, no compile, a misaligned operand.
_LIBRARY_BACKED = ("gemm", "conv")

#: CPU stand-ins interpret groups up to this many elements whole, larger ones on a sample.
INTERPRET_LIMIT = 1 << 22
INTERPRET_SAMPLE = 1 << 14

_TYPE = re.compile(r"(\w+)\[[\d,]*\](\{[\d,]*\})?(?! scalar)")


def _sampled_graph(text: str, n: int) -> str:
    """A pointwise group's graph over n sampled elements: every tensor type
    becomes rank-1 [n] (scalar inputs stay 0-d)."""
    return _TYPE.sub(lambda m: f"{m.group(1)}[{n}]", text)


#: Layout ops whose result has the source's address (no storage offset).
_ADDRESS_KEEPING_VIEWS = {"view", "permute", "expand", "unsqueeze", "squeeze"}


def _contiguous(t: ValueType) -> bool:
    expected = 1
    for n, st in zip(reversed(t.shape), reversed(t.strides)):
        if n != 1 and st != expected:
            return False
        expected *= n
    return True


def _kernel_only_views(plan: dict, types: dict[str, ValueType]) -> dict[str, str]:
    """View steps whose results only generated kernels read (directly or
    through other such views), mapped to the value they view: the executor
    skips them and the kernel reads the source's memory with the view's strides."""
    def is_view(step: dict) -> bool:
        return step["kind"] == "node" and step["op"] in _ADDRESS_KEEPING_VIEWS and len(step["results"]) == 1

    readers: dict[str, list[str | None]] = {}  # value -> readers: None for a kernel, else the step's result
    for step in plan["steps"]:
        if step["kind"] == "kernel":
            for n in plan["kernels"][step["kernel"]]["inputs"]:
                readers.setdefault(n, []).append(None)
        else:
            for kind, v in step["operands"]:
                if kind == "value":
                    readers.setdefault(v, []).append(step["results"][0] if is_view(step) else "")
    escaping = set(plan["outputs"]) | {v for _, v in plan["mutations"]}
    skipped: set[str] = set()
    for step in reversed(plan["steps"]):  # readers are decided before what they read
        if not is_view(step):
            continue
        (res,), src = step["results"], step["operands"][0][1]
        if step["op"] == "view" and not (_contiguous(types[src]) and _contiguous(types[res])):
            continue  # a reshape that may copy
        if res not in escaping and all(r is None or r in skipped for r in readers.get(res, [])):
            skipped.add(res)
    alias: dict[str, str] = {}
    for step in plan["steps"]:
        if is_view(step) and step["results"][0] in skipped:
            src = step["operands"][0][1]
            alias[step["results"][0]] = alias.get(src, src)
    return alias


def _raw_stream(device_index: int) -> int:
    """torch's current stream handle on a device (the cheap form inductor uses)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def _same_layout(x: torch.Tensor, t: ValueType) -> bool:
    """Strides agree on every dim of size > 1 (others never move the index)."""
    return all(n == 1 or a == b for n, a, b in zip(t.shape, x.stride(), t.strides))


def _run_nodes(calls: list[tuple[library_calls.Call, list, str]], local: dict[str, Any], outputs: list[str]) -> list:
    """Runs (call, operands, result) triples over the named values in `local`;
    returns the values named `outputs`."""
    for call, operands, result in calls:
        local[result] = call([local[v] if kind == "value" else v for kind, v in operands])
    return [local[n] for n in outputs]


class _Slots:
    """Numbers each value name, and computes after which step each slot dies."""

    def __init__(self, plan: dict):
        self.index: dict[str, int] = {}
        for name in plan["values"]:
            self.index[name] = len(self.index)

    def __call__(self, name: str) -> int:
        return self.index[name]


def _free_lists(slots: _Slots, step_reads: list[list[str]], keep: set[str]) -> list[list[int]]:
    last_use: dict[str, int] = {}
    for i, reads in enumerate(step_reads):
        for name in reads:
            last_use[name] = i
    frees: list[list[int]] = [[] for _ in step_reads]
    for name, i in last_use.items():
        if name not in keep:
            frees[i].append(slots(name))
    return frees


class Executor:
    """Executes a plan from `core.compile_graph` on one device.

    On a CUDA device every kernel is compiled with NVRTC for the device's
    architecture (disk-cached) and launched on torch's current stream. On the
    CPU, kernels run on the reference interpreter instead: that is how the CLI
    checks the optimized graph on machines without a GPU.
    """

    def __init__(self, plan: dict, device: torch.device):
        self.plan = plan
        self.device = device
        self.types = _value_types(plan)
        slots = _Slots(plan)
        self._slot_of = slots.index
        self.input_slots = [slots(n) for n in plan["inputs"]]
        self.output_slots = [slots(n) for n in plan["outputs"]]
        self.mutation_slots = [slots(v) for _, v in plan["mutations"]]
        self.num_slots = len(slots.index)
        self.kernels: list[Any] = []
        if device.type == "cuda":
            arch = core.device_arch(device.index or 0)
            self.kernels = [self._load(k, arch) for k in plan["kernels"]]
        self._kernel_results = {n for k in plan["kernels"] for n in k["outputs"]}
        self._alias = _kernel_only_views(plan, self.types) if device.type == "cuda" else {}
        steps: list[Callable[[list], None]] = []
        reads: list[list[str]] = []
        for step in plan["steps"]:
            if step["kind"] == "kernel":
                k = plan["kernels"][step["kernel"]]
                steps.append(self._kernel_step(step["kernel"], k, slots))
                reads.append([self._alias.get(n, n) for n in k["inputs"]] + k["scalars"])
            elif step["results"][0] not in self._alias:
                steps.append(self._library_step(step, slots))
                reads.append([v for kind, v in step["operands"] if kind == "value"])
        keep = set(plan["outputs"]) | {v for _, v in plan["mutations"]} | set(plan["inputs"])
        self.steps = list(zip(steps, _free_lists(slots, reads, keep)))

    @staticmethod
    def _load(k: dict, arch: int) -> Any:
        """The compiled kernel; None for a GEMM or conv kernel that does not
        compile here (e.g. headers that do not fit this NVRTC): it runs through ATen."""
        try:
            return core.PointwiseKernel(k["source"], k["name"], arch, k["items"], k["block"], k["unroll"],
                                        k["grid"], k["block_y"], k["shared_bytes"], k["cutlass"], k["sm90a"])
        except RuntimeError as e:
            if k["kind"] not in _LIBRARY_BACKED:
                raise
            warnings.warn(f"fuseforge: {k['kind']} kernel {k['name']} did not compile; running it through ATen:\n"
                          f"{str(e)[:2000]}")
            return None

    # ---- steps

    def _kernel_step(self, index: int, k: dict, slots: _Slots) -> Callable[[list], None]:
        out_slots = [slots(n) for n in k["outputs"]]
        out_types = [self.types[n] for n in k["outputs"]]
        scalar_slots = [slots(n) for n in k["scalars"]]
        device = self.device
        if device.type != "cuda":
            if k["kind"] in _LIBRARY_BACKED:  # no CPU stand-in for a GEMM or conv kernel: its ATen ops
                return self._library_kernel(k, out_slots)
            return self._interpreted_kernel(k, out_slots, out_types, [slots(n) for n in k["inputs"]] + scalar_slots)
        kernel = self.kernels[index]
        dev_index = device.index or 0
        outs_meta = [(t.shape, t.strides, t.dtype) for t in out_types]
        # An input that is a view only kernels read is passed as its source's
        # pointer (same address) with the view's strides, which the kernel has.
        roots = [self._alias.get(n, n) for n in k["inputs"]]
        in_slots = [slots(n) for n in roots]
        # Kernel outputs have exactly the captured layout; anything else (library
        # results, graph inputs) may not, and the kernel's index math is specialized.
        checked = [(j, self.types[n]) for j, n in enumerate(roots) if n not in self._kernel_results]
        empty_strided = torch.empty_strided
        # A GEMM or conv kernel vectorizes its operands' accesses: a view
        # starting off that alignment (or a kernel that did not compile) runs
        # through ATen.
        align = k["align_bytes"]
        fallback = self._gemm_fallback(k) if k["kind"] in _LIBRARY_BACKED else None
        tune = kernel is not None and bool(k.get("variants")) and autotune.enabled()

        def run(env: list) -> None:
            nonlocal kernel, tune
            outs = [empty_strided(shape, strides, dtype=dtype, device=device) for shape, strides, dtype in outs_meta]
            ins = [env[s] for s in in_slots]
            for j, t in checked:
                if not _same_layout(ins[j], t):
                    ins[j] = empty_strided(t.shape, t.strides, dtype=t.dtype, device=device).copy_(ins[j])
            pointers = [t.data_ptr() for t in outs] + [t.data_ptr() for t in ins]
            if fallback is not None and (kernel is None or any(p % align for p in pointers)):
                outs = fallback(ins)
            else:
                if tune:  # first run: time the candidate tiles (and a conv's cuDNN call) on these operands
                    library = (lambda: fallback(ins)) if k["kind"] == "conv" else None
                    kernel, tune = self._tuned(k, kernel, dev_index, pointers, library), False
                if kernel is None:  # cuDNN won
                    outs = fallback(ins)
                else:
                    kernel.launch(dev_index, pointers, [float(env[s]) for s in scalar_slots], _raw_stream(dev_index))
            for s, t in zip(out_slots, outs):
                env[s] = t
        return run

    def _interpreted_kernel(self, k: dict, out_slots: list[int], out_types: list[ValueType],
                            in_slots: list[int]) -> Callable[[list], None]:
        """CPU stand-in for a kernel: the group's graph on the reference interpreter.

        Groups larger than INTERPRET_LIMIT elements run op by op through ATen and
        the interpreter checks a random sample of INTERPRET_SAMPLE elements of
        them (a pointwise group computes each element independently).
        """
        text = k["graph"]
        shape = tuple(self.types[k["outputs"][0]].shape)
        numel = int(np.prod(shape)) if shape else 1
        eager = self._op_by_op(k) if numel > INTERPRET_LIMIT else None
        sampled_text = _sampled_graph(text, INTERPRET_SAMPLE) if eager else None

        def as_array(x: Any) -> np.ndarray:
            if not isinstance(x, torch.Tensor):
                return np.array([float(x)], dtype=np.float64)
            return x.detach().to(torch.float64).contiguous().numpy().reshape(-1)

        def run(env: list) -> None:
            if eager is None:
                results = core.interpret(text, [as_array(env[s]) for s in in_slots])
                for s, t, r in zip(out_slots, out_types, results):
                    out = torch.empty_strided(t.shape, t.strides, dtype=t.dtype)
                    env[s] = out.copy_(torch.from_numpy(np.asarray(r)).reshape(t.shape))
                return
            outs = eager(env)
            idx = torch.randint(0, numel, (INTERPRET_SAMPLE,), generator=torch.Generator().manual_seed(0))
            coords = torch.unravel_index(idx, shape)

            def sample(x: Any) -> np.ndarray:
                if not isinstance(x, torch.Tensor):
                    return as_array(x)
                return as_array(x.expand(shape)[coords])
            results = core.interpret(sampled_text, [sample(env[s]) for s in in_slots])
            for s, o, r in zip(out_slots, outs, results):
                got = o[coords].to(torch.float64)
                want = torch.from_numpy(np.asarray(r))
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
                    err = (got - want).abs().max().item()
                    raise AssertionError(f"kernel {k['name']}: interpreter disagrees on sampled elements "
                                         f"(max abs diff {err:.3g})")
                env[s] = o
        return run

    @staticmethod
    def _tuned(k: dict, default: Any, dev_index: int, pointers: list[int],
               library: Callable[[], Any] | None = None) -> Any:
        """The fastest of a GEMM or conv kernel's candidate tiles and, given
        `library` (a conv's ATen calls), of that: then None if it wins
        (autotune.choose)."""
        arch = core.device_arch(dev_index)
        candidates = [(k["name"], default)]
        for v in k["variants"]:
            try:
                candidates.append((v["name"], core.PointwiseKernel(v["source"], v["name"], arch, 0, v["block"], 1,
                                                                   v["grid"], 1, v["shared_bytes"], True)))
            except RuntimeError as e:
                warnings.warn(f"fuseforge: {k['kind']} candidate {v['name']} did not compile; not timed: {str(e)[:500]}")
        stream = _raw_stream(dev_index)
        runs: list[Callable[[], Any]] = [lambda c=c: c.launch(dev_index, pointers, [], stream) for _, c in candidates]
        if library is not None:
            candidates.append(("library", None))
            runs.append(library)
        best = autotune.choose(autotune.key(k["source"], arch), [n for n, _ in candidates], runs)
        return candidates[best][1]

    def _gemm_fallback(self, k: dict) -> Callable[[list], list]:
        """A GEMM kernel's nodes (matmul and epilogue) through ATen, on the
        tensors the kernel would read (a view only kernels read arrives as its
        source: re-viewed here with the captured strides)."""
        calls = self._node_calls(k)
        types = [self.types[n] for n in k["inputs"]]
        names = k["inputs"]

        def run(ins: list) -> list:
            local = {n: x.as_strided(t.shape, t.strides) for n, x, t in zip(names, ins, types)}
            return _run_nodes(calls, local, k["outputs"])
        return run

    def _library_kernel(self, k: dict, out_slots: list[int]) -> Callable[[list], None]:
        """A kernel's group run op by op through ATen."""
        eager = self._op_by_op(k)

        def run(env: list) -> None:
            for s, t in zip(out_slots, eager(env)):
                env[s] = t
        return run

    def _op_by_op(self, k: dict) -> Callable[[list], list]:
        """Runs a group's nodes one ATen call at a time; returns its outputs."""
        names = k["inputs"] + k["scalars"]
        in_slots = [self._slot_of[n] for n in names]
        calls = self._node_calls(k)

        def run(env: list) -> list:
            return _run_nodes(calls, {n: env[s] for n, s in zip(names, in_slots)}, k["outputs"])
        return run

    def _node_calls(self, k: dict) -> list[tuple[library_calls.Call, list, str]]:
        """A kernel's nodes as (ATen call, operands, result name)."""
        values = self.plan["values"]
        return [(library_calls.make_call(n, values, self.device), n["operands"], n["results"][0]) for n in k["nodes"]]

    def _library_step(self, step: dict, slots: _Slots) -> Callable[[list], None]:
        call = library_calls.make_call(step, self.plan["values"], self.device)
        operands: list[tuple[bool, Any]] = [(True, slots(v)) if kind == "value" else (False, v)
                                            for kind, v in step["operands"]]
        result_slots = [slots(n) for n in step["results"]]
        text = step["text"]

        def run(env: list) -> None:
            args = [env[v] if is_slot else v for is_slot, v in operands]
            try:
                out = call(args)
            except Exception as e:  # name the IR node that failed
                raise RuntimeError(f"fuseforge: library call failed for `{text}`: {e}") from e
            if len(result_slots) == 1:
                env[result_slots[0]] = out[0] if isinstance(out, (tuple, list)) else out
            else:
                for s, o in zip(result_slots, out):
                    env[s] = o
        return run

    # ---- call

    def __call__(self, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        """Runs the plan; returns (outputs, new buffer values) in plan order."""
        env: list[Any] = [None] * self.num_slots
        for s, x in zip(self.input_slots, inputs):
            env[s] = x
        for run, frees in self.steps:
            run(env)
            for s in frees:
                env[s] = None
        return [env[s] for s in self.output_slots], [env[s] for s in self.mutation_slots]
