#pragma once
// What the kernel generators write alike: pointwise nodes as one temporary
// each, CUDA spellings of dtypes, parameter lists, names, shapes in comments.
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace ff::codegen {

// The per-element body of `nodes` (pointwise, no scalar inputs): one `const`
// temporary each in its compute type, rounded where the result dtype is
// 16-bit (as eager stores it). `expr_of` maps the values they read to
// expressions and receives each node's result. Used by GEMM and conv epilogues.
void emit_pointwise_body(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                         std::unordered_map<const Value*, std::string>& expr_of);

// The same for kernels that declare their own temporaries: names are
// `prefix` + a number from `next_temp` (advanced), and the values in `scalars`
// are double kernel parameters (their expressions in `expr_of`).
void emit_pointwise_nodes(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                          const std::unordered_set<const Value*>& scalars,
                          std::unordered_map<const Value*, std::string>& expr_of, int& next_temp,
                          const std::string& prefix);

// Strides of `t` broadcast to `shape` (right-aligned; 0 along broadcast dims).
Shape broadcast_strides(const TensorType& t, const Shape& shape);

// A kernel name that says what it fuses: `prefix`, the first four distinct
// ops of `nodes` ("_etc" after), then `id`.
std::string fused_kernel_name(const std::string& prefix, const std::vector<Node*>& nodes, int id);

// CUDA spellings shared by the generators: a dtype's storage type (ff_half
// for f16) and the type it computes in (float for f16); op_expr.h's
// cuda_literal converts a literal to that compute type.
std::string cuda_storage_type(DType t);
std::string cuda_compute_type(DType t);

// The largest element offset `strides` reach over `shape` (what decides a
// kernel's index type).
int64_t max_offset(const Shape& shape, const Shape& strides);
// What a kernel's index type and half-precision helpers depend on: the
// largest element offset `values` reach (at least `elements`), and whether
// any of them or of `nodes`' results is f16 or bf16.
struct KernelReach {
  int64_t offset = 0;
  bool half = false;
};
KernelReach kernel_reach(int64_t elements, const std::vector<const Value*>& values, const std::vector<Node*>& nodes);
// "2x3x4": a shape or a window's entries in a kernel's head comment.
std::string dims_text(const Shape& v);

// A kernel's parameter list in the order KernelSource documents: a pointer
// per output, a const pointer per tensor input (each `__restrict__`, named
// as given), then `double s0, s1, ...` for `scalars` scalar inputs.
struct KernelParam {
  DType dtype;
  std::string name;
};
std::string kernel_parameters(const std::vector<KernelParam>& outputs, const std::vector<KernelParam>& inputs,
                              size_t scalars);

}  // namespace ff::codegen
