"""The CUDA and C++ sources of an emitted file: every plan kernel in a C++
namespace of its own with its launcher (cudaLaunchKernel with the plan's grid,
block and shared memory), and a host wrapper per kernel that checks its
inputs, copies one into the recorded layout (or an aligned copy, for a GEMM
kernel's vector accesses) where needed, allocates the outputs, launches on
torch's current stream and checks the launch. The wrappers take the memory a
kernel reads: for an alias, the buffer it views (the kernel's index math has
the alias's strides). A run section's consecutive launches (a segment) also
have one C++ function that runs them all: one call from Python instead of
one per kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fuseforge.dtypes import ATEN

#: Dynamic shared memory a kernel may use without opting in.
_DEFAULT_SHARED_LIMIT = 48 * 1024

CPP_PRELUDE = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <vector>

namespace {
// A kernel input, checked; copied into the layout the kernel's index math is
// specialized to if its strides differ on a dim of size > 1, or when it is not
// aligned to `align` bytes (a GEMM kernel's vector accesses).
at::Tensor ff_input(const at::Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                    at::ScalarType dtype, const char* kernel, size_t i, size_t align) {
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


def _kernel_cuda(fn: str, k: Any, same_code: tuple[str, str] | None = None) -> str:
    """Kernel `k` in namespace `<fn>_cuda` with its launcher. The file defines
    FF_EXTERN_C empty, so kernels of equal names from two plans do not clash.
    `same_code`: the wrapper and kernel name of an earlier kernel with `k`'s
    code (Kernel.compile_key; the steps of an unrolled loop), whose function
    the launcher launches instead of compiling `k`'s again."""
    function = f"{same_code[0]}_cuda::{same_code[1]}" if same_code else k.name
    kernel = f"reinterpret_cast<const void*>(&{function})"
    shared = k.shared_bytes
    opt_in = (
        ""
        if shared <= _DEFAULT_SHARED_LIMIT
        else f"""
  // More than 48 KiB of dynamic shared memory needs an opt-in (per device, so at every launch).
  const cudaError_t attr = cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, {shared});
  if (attr != cudaSuccess) return attr;"""
    )
    (gx, gy, gz), (bx, by, bz) = k.grid, k.block
    return f"""
namespace {fn}_cuda {{
{"" if same_code else k.source}
cudaError_t launch(void** args, cudaStream_t stream) {{
  const dim3 grid({gx}, {gy}, {gz}), block({bx}, {by}, {bz});
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;  // empty tensors{opt_in}
  return cudaLaunchKernel({kernel}, grid, block, args, {shared}, stream);
}}
}}  // namespace {fn}_cuda
"""


def _ints(v: Sequence[int]) -> str:
    return "{" + ", ".join(str(int(x)) for x in v) + "}"


def _layout(tag: str, b: Any) -> str:
    """Buffer `b`'s recorded sizes and strides as C++ constants k<tag>Sizes / k<tag>Strides."""
    return f"  static const std::vector<int64_t> k{tag}Sizes{_ints(b.shape)}, k{tag}Strides{_ints(b.strides)};"


def _kernel_host(fn: str, k: Any, plan: Any) -> str:
    """The C++ wrapper Python calls: (the memory of each input, scalars) -> outputs."""
    n_in, n_s = len(k.inputs), len(k.scalars)
    lines = [
        f"namespace {fn}_cuda {{ cudaError_t launch(void** args, cudaStream_t stream); }}",
        f"std::vector<at::Tensor> {fn}(const std::vector<at::Tensor>& ins, const std::vector<double>& scalars) {{",
        f'  static const char* kName = "{k.name}";',
        f'  TORCH_CHECK(ins.size() == {n_in} && scalars.size() == {n_s}, kName, ": expected {n_in} tensors and '
        f'{n_s} scalars, got ", ins.size(), " and ", scalars.size());',
        "  const at::Device device = ins.empty() ? at::Device(at::kCUDA, c10::cuda::current_device()) "
        ": ins[0].device();",
        "  const c10::cuda::CUDAGuard guard(device);",
    ]
    pointers = []
    for i, o in enumerate(k.outputs):
        b = plan.buffers[o]
        lines.append(_layout(f"Out{i}", b))
        lines.append(
            f"  at::Tensor out{i} = at::empty_strided(kOut{i}Sizes, kOut{i}Strides, "
            f"at::TensorOptions().dtype({ATEN[b.dtype]}).device(device));"
        )
        pointers.append(f"out{i}.data_ptr()")
    for i, inp in enumerate(k.inputs):
        b = plan.buffers[inp.memory]
        lines.append(_layout(f"In{i}", b))
        lines.append(
            f"  const at::Tensor in{i} = ff_input(ins[{i}], kIn{i}Sizes, kIn{i}Strides, {ATEN[b.dtype]}, "
            f"kName, {i}, {max(k.align_bytes, 1)});"
        )
        pointers.append(f"in{i}.data_ptr()")
    args = [f"&p[{i}]" for i in range(len(pointers))]
    lines.append(f"  void* p[] = {{{', '.join(pointers)}}};")
    if n_s:
        lines.append(f"  double s[] = {{{', '.join(f'scalars[{i}]' for i in range(n_s))}}};")
        args += [f"&s[{i}]" for i in range(n_s)]
    if k.constants:  # after the scalars: the kernel's sizes and strides (Kernel.constants)
        lines.append(f"  long long c[] = {{{', '.join(f'{int(c)}LL' for c in k.constants)}}};")
        args += [f"&c[{i}]" for i in range(len(k.constants))]
    lines += [
        f"  void* args[] = {{{', '.join(args)}}};",
        f"  const cudaError_t err = {fn}_cuda::launch(args, at::cuda::getCurrentCUDAStream(device.index()).stream());",
        "  if (err != cudaSuccess) (void)cudaGetLastError();  // reported here, not again by a later launch's check",
        '  TORCH_CHECK(err == cudaSuccess, kName, ": launch failed: ", cudaGetErrorString(err));',
        f"  return {{{', '.join(f'out{i}' for i in range(len(k.outputs)))}}};",
        "}",
    ]
    return "\n".join(lines) + "\n"


def cuda_sources(kernels: Sequence[tuple[str, Any, Any]]) -> tuple[str, str]:
    """(CUDA source, C++ source) of (wrapper name, kernel, its plan) triples:
    the kernels' #include lines first, then each kernel and its launcher (a
    kernel whose code an earlier one has launches that one's function)."""
    includes = dict.fromkeys(["#include <cuda_runtime.h>"])
    cu, cpp = ["#define FF_EXTERN_C  // kernels in namespaces, C++ linkage\n"], [CPP_PRELUDE]
    first: dict[str, tuple[str, str]] = {}  # compile key -> the wrapper and kernel name that define it
    for fn, k, plan in kernels:
        includes.update(dict.fromkeys(k.includes))
        same_code = first.setdefault(k.compile_key, (fn, k.name))
        cu.append(_kernel_cuda(fn, k, same_code if same_code[0] != fn else None))
        cpp.append(_kernel_host(fn, k, plan))
    return "\n".join(includes) + "\n" + "".join(cu), "\n".join(cpp)


@dataclass
class Segment:
    """Consecutive launches of a run section, with the frees between them,
    that one C++ function (`name`) runs: it takes `inputs` (the memory its
    kernels read that it does not make) and `scalars`, frees what it makes
    where the plan frees it, and returns `outputs` (what it makes that
    outlives it). Python deletes `freed_inputs` after the call."""

    name: str
    steps: list[int]  # indices in plan.run: launches, and the frees among and after them
    inputs: list[int]
    scalars: list[int]
    outputs: list[int]
    freed_inputs: list[int]


def segments(plan: Any, prefix: str) -> list[Segment]:
    """The segments of `plan`'s run section (two launches or more), named <prefix>_<n>."""
    runs: list[list[int]] = [[]]
    for i, step in enumerate(plan.run):
        if step.kind == "launch" or (step.kind == "free" and runs[-1]):
            runs[-1].append(i)
        elif runs[-1]:
            runs.append([])
    found: list[Segment] = []
    for run in runs:
        if sum(plan.run[i].kind == "launch" for i in run) < 2:
            continue
        made: list[int] = []
        inputs: list[int] = []
        scalars: list[int] = []
        freed_made: set[int] = set()
        freed_inputs: list[int] = []
        for i in run:
            step = plan.run[i]
            if step.kind == "free":
                for b in step.results:
                    if b in made:
                        freed_made.add(b)
                    else:
                        freed_inputs.append(b)
                continue
            k = plan.kernels[step.kernel]
            inputs += [m for m in dict.fromkeys(inp.memory for inp in k.inputs) if m not in made and m not in inputs]
            scalars += [b for b in dict.fromkeys(k.scalars) if b not in scalars]
            made += list(k.outputs)
        outputs = [b for b in made if b not in freed_made]
        found.append(Segment(f"{prefix}_{len(found)}", run, inputs, scalars, outputs, freed_inputs))
    return found


def segment_host(seg: Segment, plan: Any, kernel_fns: dict[int, str]) -> str:
    """The C++ function running `seg`: each kernel's host wrapper in turn
    (they check and launch as when Python calls them), what it frees
    released at the plan's free steps."""
    where = {b: f"ins[{i}]" for i, b in enumerate(seg.inputs)}
    scalar = {b: f"scalars[{i}]" for i, b in enumerate(seg.scalars)}
    made: set[int] = set()
    n_in, n_s = len(seg.inputs), len(seg.scalars)
    lines = [
        f"std::vector<at::Tensor> {seg.name}(const std::vector<at::Tensor>& ins, const std::vector<double>& scalars) {{",
        f'  TORCH_CHECK(ins.size() == {n_in} && scalars.size() == {n_s}, "{seg.name}: expected {n_in} tensors and '
        f'{n_s} scalars, got ", ins.size(), " and ", scalars.size());',
    ]
    for n, i in enumerate(seg.steps):
        step = plan.run[i]
        lines.append("  // " + " ".join(plan.step_text(step).split()).rstrip("\\"))
        if step.kind == "free":
            lines += [f"  {where[b]} = at::Tensor();" for b in step.results if b in made]
            continue
        k = plan.kernels[step.kernel]
        ins = ", ".join(where[inp.memory] for inp in k.inputs)
        scalars = ", ".join(scalar[b] for b in k.scalars)
        lines.append(f"  std::vector<at::Tensor> r{n} = {kernel_fns[step.kernel]}({{{ins}}}, {{{scalars}}});")
        for j, b in enumerate(k.outputs):
            where[b] = f"r{n}[{j}]"
            made.add(b)
    lines += [f"  return {{{', '.join(where[b] for b in seg.outputs)}}};", "}"]
    return "\n".join(lines) + "\n"
