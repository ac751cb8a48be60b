#pragma once
// Generated pooling kernels: one max_pool/avg_pool with the pointwise work
// that produces its input (prologue) and that reads its result (epilogue).
#include "codegen/cuda/kernel_source.h"
#include "fusion/group.h"

namespace ff::codegen {

// The kernel of a Pool group: a thread per output element, in the memory
// order of the group's first output (so a warp's loads of each window tap are
// adjacent in either layout); per element, the window's taps (unrolled,
// bounds-checked only where a window can overhang the input) each load the
// prologue's inputs at the tap and compute the prologue there, folding into a
// max (NaN wins, as ATen) or an f32 (f64) sum divided by ATen's divisor; then
// the epilogue runs on the result with its inputs read at the output element.
// Parameters: a pointer per output, a pointer per tensor input, a double per
// scalar input. `id` makes the kernel name unique.
KernelSource generate_pool(const fusion::Group& group, int id);

}  // namespace ff::codegen
