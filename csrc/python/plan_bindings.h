#pragma once
// Python classes for the compile result, the plan and launchable kernels.
#include <nanobind/nanobind.h>

#include <string>
#include <vector>

namespace ff::python {

void bind_plan(nanobind::module_& m);

// NVRTC options of a kernel (CUTLASS's include dirs where `cutlass`); throws
// CudaError when a CUTLASS kernel's headers were not found.
std::vector<std::string> kernel_options(bool cutlass);

}  // namespace ff::python
