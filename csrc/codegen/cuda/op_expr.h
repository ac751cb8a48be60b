#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ff::codegen {

// The CUDA expression of pointwise node `n` over its operands' expressions
// `a` (already converted to `c`), computed in the compute dtype `c`. Throws
// IRError for an op that is not pointwise.
std::string op_expr(const Node& n, const std::vector<std::string>& a, DType c);

// A literal converted to the compute type of `t` exactly as ATen casts a
// wrapped Python scalar: the double is rounded to float first for f32 math.
std::string cuda_literal(const Scalar& s, DType t);

}  // namespace ff::codegen
