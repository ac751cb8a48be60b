#pragma once
// CUDA for reduction groups (kernel/reduction_domain.h): the reductions, the
// pointwise work that produces what they read and what reads their results,
// including the results applied back to every element of the rows (softmax,
// norms), in one kernel. Accumulation is in f32 for f16/bf16 (f64 for f64);
// every partial result is combined in a fixed order, so a kernel gives the
// same bits on every run, and all threads of a row see the same row values.
#include <string>

#include "codegen/cuda/kernel_source.h"
#include "codegen/cuda/reduction_layout.h"

namespace ff::codegen {

// How a reduction kernel lays its threads over the domain; the reduction
// scheduler's cost model picks one per group.
struct ReductionStrategy {
  // Rows: the reduced elements of a row are contiguous (or nearly): `threads`
  // threads share a row, reading along it (1-32: several rows per warp,
  // combined with warp shuffles; 64-1024: a block per row).
  // Columns: the main input is unit-stride along a kept dim: each thread
  // walks `vector` adjacent rows ("columns") down the reduced extent, and
  // `threads` threads along threadIdx.y split that extent (combined through
  // shared memory), so every load is coalesced across the columns.
  enum class Form { Rows, Columns } form = Form::Rows;
  int threads = 32;
  int block = 256;  // threads per block (Columns: blockDim.x * threads)
  int vector = 1;   // Rows: elements per load along the row; Columns: adjacent columns per thread
  int unroll = 4;   // loads in flight per thread when the inputs stream
  // The row's inputs stay in registers from the first pass to the last, so a
  // normalization (statistics, then the apply) reads them once; otherwise
  // each pass reads them again.
  bool persistent = false;
  // Rows form, a block per row, persistent: of each thread's items of the
  // inputs held across passes, the last `shared_items` wait in shared memory
  // (copied there with cp.async, which holds no registers in flight) rather
  // than in registers, so that two blocks, two rows, share an SM.
  int shared_items = 0;
  // Rows form, several rows per block: the transposed element outputs
  // (ReductionAccess::transposed) go to a shared-memory tile of the block's
  // rows, written out afterwards with consecutive threads on consecutive rows.
  // Columns form: the element outputs unit-stride along the rows
  // (ReductionAccess::along_rows) go to a tile of the block's columns, written
  // out with consecutive threads on consecutive elements of a row.
  bool staged = false;
  // One line saying the above, for the kernel's header and golden tests.
  std::string describe() const;
};

KernelSource generate_reduction(const fusion::Group& g, const fusion::ReductionDomain& d, const ReductionLayout& l,
                                const ReductionStrategy& s, int id);

}  // namespace ff::codegen
