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
// largest of 128, 64, 32 and 16 that divides the dim: GEMM tiles are 128 wide
// and tall, so no block straddles two of them.
#include <functional>

#include "fusion/gemm.h"
#include "ir/graph.h"

namespace ff::fusion {

// Splits each such reduction whose matmul `reduces_in_epilogue` accepts
// (match_gemm's spec of it); returns whether anything changed.
bool split_gemm_reductions(Graph& g, const std::function<bool(const GemmSpec&)>& reduces_in_epilogue);

}  // namespace ff::fusion
