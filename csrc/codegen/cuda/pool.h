#pragma once
// Generated pooling kernels: one max_pool/avg_pool, or several of one input
// and the same windows, with the pointwise work that produces their input
// (prologue) and that reads their results (epilogue);
// the prologue may hold a softmax or log_softmax over a dim the windows keep.
#include "codegen/cuda/kernel_source.h"
#include "kernel/group.h"

namespace ff::codegen {

// The kernel of a Pool group: a thread per output element, in the memory
// order of the group's first output (so a warp's loads of each window tap are
// adjacent in either layout); per element, the window's taps (unrolled,
// bounds-checked only where a window can overhang the input) each load the
// prologue's inputs at the tap and compute the prologue there, folding into
// each pool's accumulator: a max (NaN wins, as ATen) or an f32 (f64) sum
// divided by ATen's divisor; then the epilogue runs on the results with its
// inputs read at the output element.
// Parameters: a pointer per output, a pointer per tensor input, a double per
// scalar input. `id` makes the kernel name unique.
// A prologue with a softmax (log_softmax) over a kept dim of C elements
// has a thread per output element of every channel at once (the C outputs
// along that dim): per tap it computes the C values before the softmax, their
// max and sum of exp (as the reduction kernels do), then each channel's
// softmax and the rest of the prologue, folding them into C accumulators.
KernelSource generate_pool(const fusion::Group& group, int id);

// The most pools of one input and the same windows one kernel computes side
// by side: each holds its accumulators in registers and, transposing, a
// 32x33 tile in shared memory (4 of f64: 33 KB of a block's static 48 KB).
constexpr size_t kPoolMostSiblings = 4;

// The most elements a pool's prologue softmax may normalize over: the kernel
// holds a tap's values and the accumulators of that many channels in registers.
constexpr int64_t kPoolNormalizedExtent = 32;
// The most windows (kernel over stride, all dims) that may cover an element of
// such a pool's input: each computes the element's softmax again.
constexpr double kPoolNormalizedOverlap = 2.25;

// Whether `norm` (a softmax or log_softmax whose result `pool`'s prologue
// reads) can run inside the pooling kernel: over a dim the windows keep, of
// at most kPoolNormalizedExtent elements, of a floating value of the pool's
// input shape, under windows that overlap at most kPoolNormalizedOverlap.
bool pool_normalizes(const Node& norm, const Node& pool);

}  // namespace ff::codegen
