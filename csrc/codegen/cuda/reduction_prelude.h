#pragma once
#include <string_view>

namespace ff::codegen {
// Device code of reduction kernels (after cuda_prelude()): the accumulators
// of each reduction kind and the fixed-order merges across lanes, warps and
// threadIdx.y.
std::string_view cuda_reduction_prelude();
}  // namespace ff::codegen
