#pragma once
#include <sstream>
#include <string>
#include <unordered_map>

#include "codegen/cuda/kernel_source.h"
#include "fusion/group.h"

namespace ff::codegen {

// CUDA source for one Group: a grid-stride loop over the group's
// iteration shape in the memory order of its first output, with dims that are
// contiguous for every operand collapsed, 4-element (up to 16-byte) vector
// loads/stores when every operand is unit-stride or broadcast along the
// innermost dim (and pointers are aligned, checked at run time), 32-bit index
// math unless offsets need 64 bits. `id` makes the kernel name unique.
KernelSource generate_pointwise(const fusion::Group& group, int id);

// C++ types of a dtype's storage (f16/bf16: ff_half/ff_bf16, from
// cuda_half_prelude) and of the math on it (f16/bf16 compute in float).
std::string storage_type(DType t);
std::string compute_type(DType t);

// The per-element body of `nodes` (pointwise, no scalar inputs): one `const`
// temporary each in its compute type, rounded where the result dtype is
// 16-bit (as eager stores it). `expr_of` maps the values they read to
// expressions and receives each node's result. Used by GEMM epilogues.
void emit_pointwise_body(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                         std::unordered_map<const Value*, std::string>& expr_of);

}  // namespace ff::codegen
