#pragma once
// The reduction kernels' loads per thread and staged tiles, as the reduction
// cost model (fusion/reduction_strategy.cc) sizes them, and the longest rows
// whose transposed outputs fit such a tile: conv_bias_epilogue asks before
// it rewrites a softmax over a conv's channels, so that the reduction
// scheduler can still stage it.
#include <algorithm>
#include <cstdint>

#include "ir/dtype.h"

namespace ff::fusion {

constexpr int kVectorBytes = 16;    // the widest load
constexpr int kLoadsPerThread = 8;  // 16-byte loads a thread aims at per row pass
// A staged tile (ReductionStrategy::staged): rows a block takes at least, so
// that its stores fill sectors, and its bytes at most, beside the merge's
// partials in static shared memory.
constexpr int kStageMinRows = 8;
constexpr int64_t kStageBytes = 40 * 1024;

// The longest rows whose transposed outputs a kernel stages through shared
// memory (ReductionStrategy::staged), for `dtype` elements: a warp or less
// per row, and enough rows per block for the tile to fill sectors.
inline int64_t max_staged_row_length(DType dtype) {
  const int64_t size = dtype_size(dtype);
  return std::min<int64_t>(32 * kLoadsPerThread * (kVectorBytes / size), kStageBytes / ((kStageMinRows + 1) * size));
}

}  // namespace ff::fusion
