#pragma once
// What split_long_reduction.cc does to a reduction, for the passes before it
// that weigh its cost (conv_bias_epilogue.cc, decompose_long_norm.cc).
#include "ir/graph.h"

namespace ff::passes {

// Whether split_long_reduction turns `n` (a reduction of few long rows) into
// a partial reduction with rows enough to fill the GPU and a small one.
bool splits_into_partials(const Node& n);
// Whether it would split a sum, mean or var of `x` over the dims `reduced`
// marks (decompose_long_norm.cc: a normalization's statistics).
bool splits_into_partials(const TensorType& x, const std::vector<bool>& reduced);

}  // namespace ff::passes
