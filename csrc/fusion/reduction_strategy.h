#pragma once
// The reduction scheduler's cost model: how a reduction kernel lays threads
// over its domain (codegen::ReductionStrategy).
//
// Rows form when the main input is unit-stride along the reduced elements (or
// along no kept dim); Columns form when it is unit-stride along a kept dim.
// Threads per row aim at about 8 loads of 16 bytes per thread: a few threads
// (packed several rows to a warp) for short rows, a warp up to 256 loads, a
// block (up to 1024 threads) beyond. Columns: threads along the reduced extent
// until the grid fills the GPU about once. When a kernel reads its inputs in
// more than one pass (statistics then apply; a max then a sum of exp) they
// stay in registers if a thread's share fits (more threads per row if that
// makes it fit; an input every item of a thread reads alike, a per-channel
// weight beside channels-last data, costs one vector), else they stream from
// memory again in each pass, with fewer threads per row where a row's last
// round of loads would leave most of them idle. A block per row that leaves
// registers for one block per SM takes half the threads, with part of each
// thread's share in shared memory if registers cannot hold it, so two rows
// overlap on each SM. Columns of a chunked accumulator (max-sum-exp, Welford)
// take no more threads than keep 64 KiB of loads in flight per SM.
#include "codegen/cuda/reduction.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

// Whether a kernel laid out as `s` should also apply its results to every
// element (a pointwise pass after the reduction): yes when the inputs stay in
// registers, or when its blocks fill the GPU twice over; otherwise that pass
// would stream the inputs again on a few SMs, where a separate pointwise
// kernel uses all of them.
bool apply_pass_pays(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l,
                     const FusionOptions& options);

// Whether a kernel laid out as `s` writes its element outputs a run at a
// time: not where the Columns form stores outputs that run along the rows
// without a tile for them (too long a row for shared memory), a sector per
// element (a channels-last conv's gelu written NCHW from the statistics'
// kernel of a group norm: 331 us for 67 MB, where a transposing pointwise
// kernel takes 44).
bool writes_coalesced(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l);

// Whether a kernel laid out as `s` has blocks enough to be worth it: a
// reduction of few long rows (a global sum, a column sum of a tall thin
// matrix) on a handful of blocks would be far slower than ATen's, which
// splits rows across blocks. Small problems always pass.
bool parallel_enough(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l,
                     const FusionOptions& options);

codegen::ReductionStrategy choose_reduction_strategy(const Group& g, const ReductionDomain& d,
                                                     const codegen::ReductionLayout& l, const FusionOptions& options);

}  // namespace ff::fusion
