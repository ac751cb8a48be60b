#pragma once
// What split_long_reduction.cc does to a reduction, for the passes before it
// that weigh its cost (conv_bias_epilogue.cc).
#include "ir/graph.h"

namespace ff::passes {

// Whether split_long_reduction turns `n` (a reduction of few long rows) into
// a partial reduction with rows enough to fill the GPU and a small one.
bool splits_into_partials(const Node& n);

}  // namespace ff::passes
