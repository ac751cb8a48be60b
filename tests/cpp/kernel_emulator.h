#pragma once
// Runs a generated CUDA kernel on the CPU, for tests on machines without a
// GPU: the kernel's source is compiled with the host C++ compiler against a
// small emulation of the CUDA built-ins it uses (each thread of a block is a
// fiber; __syncthreads and warp shuffles are barriers across the fibers, so
// the merges run exactly as written), then launched over the kernel's grid.
// The prelude's PTX f16/bf16 conversions are swapped for the host's.
#include <string>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "kernel/group.h"
#include "interp/interpreter.h"

namespace ff::testing {

// Whether a host compiler is available (`c++` on the PATH); otherwise the
// emulated runs are skipped.
bool host_compiler_available();

// The group's outputs as the kernel computes them from `inputs` (one per
// group input, in order, row-major logical values; each is laid out in
// memory with its IR strides, as the kernel expects). Throws
// std::runtime_error naming what failed (compile errors included).
// `over`: per output, the input (index into k.inputs) whose memory the
// kernel writes it into, as the plan launches it (plan::Kernel::over), or -1.
std::vector<interp::HostTensor> emulate_kernel(const codegen::KernelSource& k, const fusion::Group& g,
                                               const std::vector<interp::HostTensor>& inputs,
                                               const std::vector<int>& over = {});

}  // namespace ff::testing
