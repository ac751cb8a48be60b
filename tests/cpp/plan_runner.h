#pragma once
// Runs a compiled plan on the CPU, step by step: library calls on the
// reference interpreter, generated kernels on the kernel emulator. Its
// outputs against the interpreter's run of the whole graph check that the
// partition kept the graph's meaning and that each kernel computes its group.
#include <vector>

#include "interp/interpreter.h"
#include "pipeline/compile.h"

namespace ff::testing {

// The graph outputs (then the mutations' new values) of `cg` on `inputs`.
// `library_forms`: conv kernels with an epilogue run as their library form
// instead (the conv on the interpreter, then the epilogue's own kernel).
std::vector<interp::HostTensor> run_plan(const CompiledGraph& cg, const std::vector<interp::HostTensor>& inputs,
                                         bool library_forms = false);

// Compares every tensor of `got` with `want`: integer and bool dtypes exactly,
// floats within rtol/atol (f16/bf16 within one ulp at least; NaNs must
// match). Returns "" or what differs.
std::string compare(const std::vector<interp::HostTensor>& got, const std::vector<interp::HostTensor>& want,
                    double rtol, double atol);

}  // namespace ff::testing
