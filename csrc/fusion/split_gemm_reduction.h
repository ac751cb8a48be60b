#pragma once
// Lets a GEMM kernel reduce its epilogue's values: a reduction over the last
// or second-last dim of a matmul's result (after pointwise ops of its shape)
// is split into a reduction over blocks of that dim and a reduction of the
// block partials,
//
//   %s = sum(%y) {dims=[1], keepdim=false} : [M]        (%y: [M, N], N = T * B)
// becomes
//   %v = view(%y) : [M, T, B]
//   %p = sum(%v) {dims=[2], keepdim=false} : [M, T]
//   %s = sum(%p) {dims=[1], keepdim=false} : [M]
//
// and the partitioner takes the view and the block reduction into the GEMM's
// group (partition.h), so the kernel writes M x T partials, not M x N values.
// sum, amax, amin and mean (a mean of equal-size block means) of f32. B is the
// largest of 64, 32 and 16 that divides the dim: every GEMM tile's sides are
// multiples of 64, so no block straddles two tiles.
#include <vector>

#include "fusion/gemm.h"
#include "ir/graph.h"

namespace ff::fusion {

// Splits each such reduction of an f32 matmul that becomes a GEMM kernel (f32
// in `gemm_dtypes`, match_gemm accepts it); returns whether anything changed.
bool split_gemm_reductions(Graph& g, const std::vector<DType>& gemm_dtypes);

}  // namespace ff::fusion
