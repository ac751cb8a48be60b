"""`fuseforge emit`: one standalone Python file with a `ModelNew` per problem.

The emitted file imports torch (and whatever standard-library modules the
problem file itself imports), never fuseforge. It holds, in this order:

- the problem file's source, verbatim (so `Model` is defined exactly as given);
- the generated CUDA kernels (pointwise ones, and GEMM kernels with their
  fused epilogues, which include CUTLASS's headers), each in its own C++
  namespace with a launcher (`cudaLaunchKernel` with the plan's grid, block and
  shared memory), and a C++ host wrapper per kernel that checks the inputs'
  device, dtype and shape, copies an input into the kernel's specialized layout
  if its strides (or, for a GEMM kernel, its alignment) differ, allocates the
  outputs, launches on `at::cuda::getCurrentCUDAStream()` and checks the
  launch; both built with `torch.utils.cpp_extension.load_inline` at the
  first fused call (torch caches the build by the sources' hash). A file with
  GEMM kernels finds CUTLASS's headers in the nvidia-cutlass wheel, as
  fuseforge does; without them its ModelNew runs Model.forward and warns;
- `class ModelNew(Model)`: the same constructor, parameters, buffers and
  state_dict keys as `Model`. Its forward runs the plan of the current mode
  (one plan per mode in `--modes`, captured here with the problem's inputs):
  library steps as torch calls, kernels through the extension, buffer updates
  (train-mode BatchNorm statistics) copied back. Everything is read from the
  module's parameters and buffers at each call, so weight-derived values
  follow `load_state_dict`. It runs plain `Model.forward` instead when the
  mode has no plan, when the inputs' or state's shapes, dtypes or devices
  differ from the emitted ones, or when autograd needs a graph (grad mode on
  and a parameter or input requires grad), warning once per reason.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.utils import _pytree as pytree

from fuseforge.emit.ops import EmitError, literal, step_expr
from fuseforge.harness.problem import load_problem, problem_name
from fuseforge.runtime import conv_probe, library_calls
from fuseforge.runtime.cutlass_headers import cutlass_include_dir
from fuseforge.runtime.library_calls import dtype_text

__all__ = ["EmitError", "emit_problem", "cuda_sources", "cmd_emit"]

_AT_DTYPES = {"f32": "at::kFloat", "f16": "at::kHalf", "bf16": "at::kBFloat16", "f64": "at::kDouble",
              "i64": "at::kLong", "i32": "at::kInt", "bool": "at::kBool"}

_CPP_PRELUDE = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <vector>

namespace {
// A kernel input, checked; copied into the layout the kernel's index math is
// specialized to if its strides differ on a dim of size > 1.
// A GEMM kernel also needs its pointers aligned to its vector accesses (`align`).
at::Tensor ff_input(const at::Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                    at::ScalarType dtype, const char* kernel, size_t i, size_t align = 1) {
  TORCH_CHECK(x.is_cuda(), kernel, ": input ", i, " must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == dtype, kernel, ": input ", i, " has dtype ", x.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(x.sizes() == at::IntArrayRef(sizes), kernel, ": input ", i, " has shape ", x.sizes(), ", expected ",
              at::IntArrayRef(sizes));
  bool copy = reinterpret_cast<uintptr_t>(x.data_ptr()) % align != 0;
  for (size_t d = 0; d < sizes.size(); ++d) copy = copy || (sizes[d] != 1 && x.stride(d) != strides[d]);
  return copy ? at::empty_strided(sizes, strides, x.options()).copy_(x) : x;
}
}  // namespace
"""


@dataclass
class _ModePlan:
    mode: str
    captured: Any       # fuseforge.capture.CapturedGraph
    plan: dict
    modes: list[str]    # the modes this plan serves (train and eval share one when identical)


def _check_imports(source: str, path: str) -> None:
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for n in names:
            top = n.split(".")[0]
            if top != "torch" and top not in sys.stdlib_module_names:
                raise EmitError(f"{path} imports {n!r}: the emitted file may import only torch and the standard library")


def _identifier(s: str) -> str:
    return re.sub(r"\W", "_", s)


def _access(dotted: str) -> str:
    """`self` followed by attribute accesses for a state_dict name ('0.weight' -> self._modules['0'].weight)."""
    *path, leaf = dotted.split(".")
    text = "self"
    for p in path:
        text += f".{p}" if p.isidentifier() else f"._modules[{p!r}]"
    return f"{text}.{leaf}" if leaf.isidentifier() else f"getattr({text}, {leaf!r})"


def _capture_modes(model: torch.nn.Module, inputs: list, modes: Sequence[str], name: str,
                   arch: int) -> list[_ModePlan]:
    from fuseforge._native import core
    from fuseforge.capture import CaptureError, capture
    plans: list[_ModePlan] = []
    for mode in modes:
        model.train(mode == "train")
        try:
            captured = capture(model, inputs, name=name)
        except CaptureError as e:
            print(f"fuseforge emit: {mode} mode cannot be captured ({e}); ModelNew runs Model.forward in it",
                  file=sys.stderr)
            continue
        # The in-process plan: GEMM kernels as the FUSEFORGE_GEMM policy says,
        # each conv's precision as probed on this machine's GPU (none: IEEE).
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        plan = core.compile_graph(captured.text, arch=arch, **conv_probe.decide(captured.text, "fp32", device))
        same = next((p for p in plans if p.plan["ir_after"] == plan["ir_after"]
                     and p.captured.input_bindings == captured.input_bindings
                     and p.captured.mutations == captured.mutations), None)
        if same is not None:
            same.modes.append(mode)
        else:
            plans.append(_ModePlan(mode, captured, plan, [mode]))
    return plans


# ---------------------------------------------------------------- CUDA and C++

#: Kernel kinds emit writes out, each a source launched with (grid, block,
#: shared bytes) from the plan: pointwise kernels (self-contained) and GEMM
#: kernels (which include CUTLASS's headers).
KERNEL_KINDS = ("pointwise", "gemm", "conv")

#: Dynamic shared memory a kernel may use without opting in.
_DEFAULT_SHARED_LIMIT = 48 * 1024


def _split_includes(source: str) -> tuple[list[str], str]:
    """(#include lines, the rest): includes go to the file's top, outside the kernel's namespace."""
    lines = source.splitlines()
    return [ln for ln in lines if ln.startswith("#include")], "\n".join(ln for ln in lines if not ln.startswith("#include"))


def _kernel_cuda(fn: str, k: dict, source: str) -> str:
    """A kernel (`source`: its code without the #include lines) in namespace
    `<fn>_cuda` with its launcher (C++ linkage, so equal kernel names of
    different plans do not clash)."""
    kind = k.get("kind", "pointwise")
    if kind not in KERNEL_KINDS:
        raise EmitError(f"fuseforge emit: kernel {k['name']} is a {kind!r} kernel; emit writes only "
                        f"{', '.join(KERNEL_KINDS)} kernels")
    source = source.replace('extern "C" __global__', "__global__")
    grid = list(k["grid"])
    if not grid or grid[0] <= 0:  # as the runtime: enough blocks for one pass of the grid-stride loop
        per_block = k["block"] * k["unroll"]
        grid = [min((k["items"] + per_block - 1) // per_block, 0x7FFFFFFF), 1, 1]
    shared = k.get("shared_bytes", 0)
    kernel = f"reinterpret_cast<const void*>(&{k['name']})"
    opt_in = "" if shared <= _DEFAULT_SHARED_LIMIT else f"""
  // More than 48 KiB of dynamic shared memory needs an opt-in (per device, so at every launch).
  const cudaError_t attr = cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, {shared});
  if (attr != cudaSuccess) return attr;"""
    return f"""
namespace {fn}_cuda {{
{source}
cudaError_t launch(void** args, cudaStream_t stream) {{
  const dim3 grid({grid[0]}, {grid[1]}, {grid[2]}), block({k["block"]}, {k["block_y"]}, 1);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;  // empty tensors{opt_in}
  return cudaLaunchKernel({kernel}, grid, block, args, {shared}, stream);
}}
}}  // namespace {fn}_cuda
"""


def _ints(v: Sequence[int]) -> str:
    return "{" + ", ".join(str(int(x)) for x in v) + "}"


def _layout_consts(tag: str, shape: Sequence[int], strides: Sequence[int]) -> str:
    """The captured sizes and strides of one kernel operand, as C++ constants k<tag>Sizes/k<tag>Strides."""
    return f"  static const std::vector<int64_t> k{tag}Sizes{_ints(shape)}, k{tag}Strides{_ints(strides)};"


def _kernel_host(fn: str, k: dict, values: dict) -> str:
    """The C++ wrapper Python calls: (inputs, scalars) -> outputs."""
    n_in, n_s = len(k["inputs"]), len(k["scalars"])
    lines = [f"namespace {fn}_cuda {{ cudaError_t launch(void** args, cudaStream_t stream); }}",
             f"std::vector<at::Tensor> {fn}(const std::vector<at::Tensor>& ins, const std::vector<double>& scalars) {{",
             f'  static const char* kName = "{k["name"]}";',
             f"  TORCH_CHECK(ins.size() == {n_in} && scalars.size() == {n_s}, kName, \": expected {n_in} tensors and "
             f"{n_s} scalars, got \", ins.size(), \" and \", scalars.size());",
             "  const at::Device device = ins.empty() ? at::Device(at::kCUDA, c10::cuda::current_device()) "
             ": ins[0].device();",
             "  const c10::cuda::CUDAGuard guard(device);"]
    pointers = []
    for i, name in enumerate(k["outputs"]):
        d, shape, strides = values[name]
        lines.append(_layout_consts(f"Out{i}", shape, strides))
        lines.append(f"  at::Tensor out{i} = at::empty_strided(kOut{i}Sizes, kOut{i}Strides, "
                     f"at::TensorOptions().dtype({_AT_DTYPES[d]}).device(device));")
        pointers.append(f"out{i}.data_ptr()")
    align = f", {k['align_bytes']}" if k.get("kind") in ("gemm", "conv") else ""
    for i, name in enumerate(k["inputs"]):
        d, shape, strides = values[name]
        lines.append(_layout_consts(f"In{i}", shape, strides))
        lines.append(f"  const at::Tensor in{i} = ff_input(ins[{i}], kIn{i}Sizes, kIn{i}Strides, {_AT_DTYPES[d]}, "
                     f"kName, {i}{align});")
        pointers.append(f"in{i}.data_ptr()")
    args = [f"&p[{i}]" for i in range(len(pointers))]
    lines.append(f"  void* p[] = {{{', '.join(pointers)}}};")
    if n_s:
        lines.append(f"  double s[] = {{{', '.join(f'scalars[{i}]' for i in range(n_s))}}};")
        args += [f"&s[{i}]" for i in range(n_s)]
    lines += [f"  void* args[] = {{{', '.join(args)}}};",
              f"  const cudaError_t err = {fn}_cuda::launch(args, at::cuda::getCurrentCUDAStream(device.index()).stream());",
              '  TORCH_CHECK(err == cudaSuccess, kName, ": launch failed: ", cudaGetErrorString(err));',
              f"  return {{{', '.join(f'out{i}' for i in range(len(k['outputs'])))}}};",
              "}"]
    return "\n".join(lines) + "\n"


def _kernel_names(plans: list[_ModePlan]) -> dict[tuple[int, int], str]:
    return {(i, j): f"k_{p.mode}_{j}" for i, p in enumerate(plans) for j in range(len(p.plan["kernels"]))}


def cuda_sources(plans: list[_ModePlan]) -> tuple[str, str, list[str]]:
    """(CUDA source: kernels + launchers, C++ source: host wrappers, wrapper names)."""
    names = _kernel_names(plans)
    includes = {"#include <cuda_runtime.h>": None}
    cu, cpp = [], [_CPP_PRELUDE]
    for (i, j), fn in names.items():
        k = plans[i].plan["kernels"][j]
        kernel_includes, body = _split_includes(k["source"])
        includes.update(dict.fromkeys(kernel_includes))
        cu.append(_kernel_cuda(fn, k, body))
        cpp.append(_kernel_host(fn, k, plans[i].plan["values"]))
    return "\n".join(includes) + "\n" + "".join(cu), "\n".join(cpp), list(names.values())


# ---------------------------------------------------------------- Python

def _guard_code(mp: _ModePlan) -> list[str]:
    """Conditions for the plan to apply: tensor shapes, dtypes and CUDA, scalars' types and baked values."""
    cap, values = mp.captured, mp.plan["values"]
    conds = []
    for b in cap.input_bindings:
        d, shape, _ = values[b.ir_name]
        if b.kind == "scalar":
            conds.append(f"isinstance(args{_arg(b)}, (int, float))")
            continue
        if b.kind == "const":
            continue
        x = f"args{_arg(b)}" if b.kind == "user" else _access(b.source)
        conds.append(f"isinstance({x}, torch.Tensor) and {x}.is_cuda and {x}.dtype is {dtype_text(d)} "
                     f"and {x}.shape == {tuple(shape)}")
    for i, v in cap.specialized_scalars.items():
        conds.append(f"args[{i}] == {literal(v)}")
    return conds or ["True"]


def _arg(b: Any) -> str:
    return f"[{b.source}]" if isinstance(b.source, int) else str(b.source)


def _const_code(name: str, t: torch.Tensor) -> str:
    if t.numel() > 4096:
        raise EmitError(f"constant {name} has {t.numel()} elements: too large to write into the emitted file")
    return f"torch.tensor({t.tolist()!r}, dtype={t.dtype}).reshape({list(t.shape)})"


def _forward_code(mp: _ModePlan, kernel_fns: dict[int, str]) -> str:
    """`_ff_forward_<mode>(self, args)`: the plan as straight-line torch code."""
    cap, plan = mp.captured, mp.plan
    values = plan["values"]
    var = {n: f"v{i}" for i, n in enumerate(values)}
    body: list[str] = []
    first_tensor = next((b for b in cap.input_bindings if b.kind == "user"), None)
    for b in cap.input_bindings:
        if b.kind in ("user", "scalar"):
            body.append(f"{var[b.ir_name]} = args{_arg(b)}")
        elif b.kind == "const":
            body.append(f"{var[b.ir_name]} = {_const_code(b.ir_name, cap.constants[b.source])}.to(dev)")
        else:
            body.append(f"{var[b.ir_name]} = {_access(b.source)}")
    dev_src = f"args{_arg(first_tensor)}" if first_tensor else _access(next(
        b.source for b in cap.input_bindings if b.kind in ("param", "buffer")))
    body.insert(0, f"dev = {dev_src}.device")
    # After which step each value is last read (intermediates are dropped then, as the executor does).
    keep = set(plan["inputs"]) | set(plan["outputs"]) | {v for _, v in plan["mutations"]}
    last: dict[str, int] = {}
    reads_of: list[list[str]] = []
    for i, step in enumerate(plan["steps"]):
        if step["kind"] == "kernel":
            k = plan["kernels"][step["kernel"]]
            reads = k["inputs"] + k["scalars"]
        elif step["kind"] == "node":
            reads = [v for kind, v in step["operands"] if kind == "value"]
        else:
            raise EmitError(f"fuseforge emit: unknown plan step kind {step['kind']!r} (it knows 'kernel' and 'node')")
        reads_of.append(reads)
        for n in reads:
            last[n] = i
    for i, step in enumerate(plan["steps"]):
        if step["kind"] == "kernel":
            k = plan["kernels"][step["kernel"]]
            outs = ", ".join(var[n] for n in k["outputs"])
            ins = ", ".join(var[n] for n in k["inputs"])
            scalars = ", ".join(f"float({var[n]})" for n in k["scalars"])
            body.append(f"({outs},) = ext.{kernel_fns[step['kernel']]}([{ins}], [{scalars}])  # {k['name']}")
        else:
            operands = [var[v] if kind == "value" else literal(v) for kind, v in step["operands"]]
            types = [values[v] if kind == "value" else None for kind, v in step["operands"]]
            expr = step_expr(step, operands, types)
            results = [var[n] for n in step["results"]]
            if step["op"] == "opaque" and len(results) == 1:
                body.append(f"{results[0]} = _ff_first({expr})")
            elif len(results) == 1:
                body.append(f"{results[0]} = {expr}")
            else:
                body.append(f"({', '.join(results)},) = tuple({expr})")
            body[-1] += f"  # {step['text'].splitlines()[0][:100]}"
        dead = [var[n] for n in dict.fromkeys(reads_of[i]) if last[n] == i and n not in keep]
        if dead:
            body.append(f"del {', '.join(dead)}")
    for name, v in cap.mutations:
        body.append(f"{_access(name)}.copy_({var[v]})")
    outs = iter(var[n] for n in plan["outputs"])
    leaves = [literal(cap.output_constants[i]) if i in cap.output_constants else next(outs)
              for i in range(cap.output_tree.num_leaves)]
    if cap.output_tree.is_leaf():
        body.append(f"return {leaves[0]}")
    else:
        spec = pytree.treespec_dumps(cap.output_tree)
        body.append(f"return _ff_pytree.tree_unflatten([{', '.join(leaves)}], _ff_pytree.treespec_loads({spec!r}))")
    head = [f"def _ff_forward_{mp.mode}(self, args):",
            f'    """The {"/".join(mp.modes)}-mode plan ({len(plan["kernels"])} kernels, '
            f'{sum(s["kind"] == "node" for s in plan["steps"])} library calls)."""',
            "    ext = _ff_extension()"]
    guard = [f"def _ff_guard_{mp.mode}(self, args):",
             f"    return len(args) == {_n_args(cap)} and (" + "\n            and ".join(_guard_code(mp)) + ")"]
    return "\n".join(head + ["    " + line for line in body]) + "\n\n\n" + "\n".join(guard) + "\n"


def _n_args(cap: Any) -> int:
    idx = [b.source if isinstance(b.source, int) else int(re.match(r"\[(\d+)\]", b.source).group(1))
           for b in cap.input_bindings if b.kind in ("user", "scalar")]
    return max([*idx, *cap.specialized_scalars.keys(), -1]) + 1


_MODEL_NEW = '''

class ModelNew(Model):
    """`Model` with its forward through fuseforge's plan ({modes}); see the file's docstring."""

    def forward(self, *args, **kwargs):
        if kwargs:
            bound = inspect.signature(super().forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.args)
        mode = "train" if self.training else "eval"
        plan = _FF_PLANS.get(mode)
        if plan is None:
            _ff_warn_once(mode, mode + " mode has no fused plan in this file: running Model.forward")
            return super().forward(*args)
        fused, guard = plan
        if _FF_NEEDS_CUTLASS and _FF_CUTLASS_INCLUDE is None:
            _ff_warn_once("cutlass", "its GEMM kernels need CUTLASS's headers (pip install --no-deps "
                                     "nvidia-cutlass==4.2.0.0): running Model.forward")
            return super().forward(*args)
        if torch.is_grad_enabled() and (any(p.requires_grad for p in self.parameters())
                                        or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
            _ff_warn_once("grad", "gradients are required: running Model.forward so that autograd works "
                                  "(call under torch.no_grad() for the fused kernels)")
            return super().forward(*args)
        if not guard(self, args):
            _ff_warn_once(mode, "inputs or state differ from those ModelNew was emitted for "
                                "(shapes, dtypes, CUDA): running Model.forward")
            return super().forward(*args)
        if _FF_NEEDS_SM90A and torch.cuda.get_device_capability() != (9, 0):
            _ff_warn_once("sm90a", "its GEMM kernels are built for Hopper GPUs (sm_90a): running Model.forward")
            return super().forward(*args)
        with torch.no_grad():
            return fused(self, args)
'''

_SUPPORT = '''

_FF_EXT = None
_FF_WARNED = set()


def _ff_extension():
    """Builds (first call; torch caches the build) and returns the kernels' extension."""
    global _FF_EXT
    if _FF_EXT is None:
        from torch.utils.cpp_extension import load_inline
        flags = ["-std=c++17"] + (["-I" + _FF_CUTLASS_INCLUDE] if _FF_CUTLASS_INCLUDE else [])
        # Hopper GEMM kernels use wgmma, which only the arch-specific sm_90a target has.
        saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if _FF_NEEDS_SM90A:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
        try:
            _FF_EXT = load_inline(name=_FF_EXT_NAME, cpp_sources=_FF_CPP_SOURCE, cuda_sources=_FF_CUDA_SOURCE,
                                  functions=_FF_FUNCTIONS, extra_cuda_cflags=flags)
        finally:
            if _FF_NEEDS_SM90A:
                if saved is None:
                    os.environ.pop("TORCH_CUDA_ARCH_LIST")
                else:
                    os.environ["TORCH_CUDA_ARCH_LIST"] = saved
    return _FF_EXT


def _ff_first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _ff_warn_once(key, message):
    if key not in _FF_WARNED:
        _FF_WARNED.add(key)
        warnings.warn("ModelNew: " + message, stacklevel=3)
'''


def _conv_code() -> list[str]:
    """The library call of convolutions with their decided fp32_precision (library_calls)."""
    return ["", inspect.getsource(library_calls._ff_conv_fp32).rstrip(), "", "",
            inspect.getsource(library_calls._ff_convolution).rstrip(), ""]


def _cutlass_code(needed: bool) -> list[str]:
    """Where the file's GEMM kernels find CUTLASS's headers (found when the file is imported)."""
    if not needed:
        return ["_FF_NEEDS_CUTLASS = False", "_FF_CUTLASS_INCLUDE = None"]
    return ["_FF_NEEDS_CUTLASS = True", "", "", inspect.getsource(cutlass_include_dir).rstrip(), "", "",
            "_FF_CUTLASS_INCLUDE = cutlass_include_dir()"]


def emit_problem(path: str | Path, modes: Sequence[str] = ("train", "eval"), arch: int | None = None) -> str:
    """The emitted file's text for a problem file (see the module docstring).
    `arch`: the compute capability the kernels target (default: target_arch(),
    this machine's GPU's, else 90). Raises EmitError if a plan holds something
    it cannot write out."""
    source = Path(path).read_text()
    _check_imports(source, str(path))
    mod = load_problem(path)
    name = problem_name(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    if arch is None:
        from fuseforge._native import target_arch
        arch = target_arch()
    plans = _capture_modes(model, list(mod.get_inputs()), modes, type(model).__name__, arch)
    if not plans:
        raise EmitError(f"{path}: no mode in {list(modes)} could be captured; nothing to emit")
    cu, cpp, functions = cuda_sources(plans)
    fns = _kernel_names(plans)
    forwards = [_forward_code(mp, {j: fns[(i, j)] for j in range(len(mp.plan["kernels"]))})
                for i, mp in enumerate(plans)]
    digest = hashlib.sha1((cu + cpp).encode()).hexdigest()[:12]
    table = ", ".join(f"{m!r}: (_ff_forward_{p.mode}, _ff_guard_{p.mode})" for p in plans for m in p.modes)
    fallback = [m for m in ("train", "eval") if not any(m in p.modes for p in plans)]
    out = [f'"""ModelNew for {name}, written by `fuseforge emit` (do not edit: re-emit).',
           "",
           "Standalone: needs torch (with a CUDA toolkit for load_inline), not fuseforge.",
           f"Fused plans for: {', '.join(m for p in plans for m in p.modes) or 'no mode'}"
           + (f"; Model.forward in {', '.join(fallback)} mode." if fallback else "."),
           'The problem file\'s source follows verbatim, then the generated code."""',
           "import contextlib", "import inspect", "import os", "import warnings", "",
           "import torch", "from torch.utils import _pytree as _ff_pytree", "",
           f"# ---- {Path(path).name}, verbatim", source.rstrip(), "",
           "# ---- generated by fuseforge",
           f"_FF_EXT_NAME = {('ff_' + _identifier(name) + '_' + digest)!r}",
           f"_FF_FUNCTIONS = {functions!r}",
           f"_FF_CUDA_SOURCE = r'''{cu}'''",
           f"_FF_CPP_SOURCE = r'''{cpp}'''",
           *_cutlass_code(any(k["cutlass"] for p in plans for k in p.plan["kernels"])),
           f"_FF_NEEDS_SM90A = {any(k['sm90a'] for p in plans for k in p.plan['kernels'])}",
           _SUPPORT, *_conv_code()]
    out += ["\n" + f for f in forwards]
    out.append(f"\n_FF_PLANS = {{{table}}}\n")
    out.append(_MODEL_NEW.format(modes=", ".join(m for p in plans for m in p.modes) or "no mode"))
    text = "\n".join(out)
    if "'''" in cu or "'''" in cpp:
        raise EmitError("generated source contains ''' and cannot be quoted")
    ast.parse(text)  # a bug here must not produce a file that fails at import
    return text


def cmd_emit(args: argparse.Namespace) -> int:
    """Writes `args.output` for `args.problem`."""
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("train", "eval") for m in modes):
        raise ValueError(f"--modes takes train and/or eval, not {args.modes!r}")
    text = emit_problem(args.problem, modes, arch=args.arch)
    Path(args.output).write_text(text)
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0
