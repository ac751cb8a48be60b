#pragma once
// Which matmul nodes run as a generated tensor-core GEMM kernel, and how their
// operands map onto one: a batched alpha * A @ B with A and B each row- or
// column-major (a transposed view costs nothing), plus a source operand (an
// addmm bias, or a tensor the fused epilogue reads) that is a row broadcast to
// every row (leading dimension 0) or a full matrix. Anything else stays a
// library call.
#include <optional>

#include "ir/graph.h"

namespace ff::fusion {

struct GemmOperand {
  bool row_major = true;  // the inner (last) dim is unit-stride
  int64_t ld = 0;         // leading dimension: the stride of the other dim
  int64_t batch_stride = 0;
};

struct GemmSpec {
  DType dtype = DType::f32;  // of A, B, the source and the result (accumulation is f32)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand a, b;
  // The GEMM's source operand: addmm's bias (beta != 0), which enters
  // v = alpha * acc + beta * bias, or one tensor the epilogue reads besides the
  // matmul's result (a residual, a per-column vector), read element by element.
  enum class Source { None, Bias, EpilogueInput } source = Source::None;
  int64_t ldc = 0;  // 0: one row broadcast to every row
  int64_t batch_stride_c = 0;
  double alpha = 1.0, beta = 0.0;
  // Elements per vector access, the same for every operand: the largest power
  // of two up to 16 bytes that divides every leading dimension, batch stride
  // and unit-stride extent. Pointers must be aligned to it (checked at launch).
  int alignment = 1;
  // f32 only: one TF32 MMA per product (the opt-in "tf32" precision) instead
  // of 3xTF32's three (fp32 accuracy, the default).
  bool tf32 = false;
  // A reduction of the epilogue's value in blocks of `reduce_block` rows or
  // columns (split_gemm_reduction.h): the kernel writes one partial per block,
  // [batch, M, N / block] over rows (`reduce_rows`) or [batch, M / block, N]
  // over columns, instead of the M x N result. Mean: the block's mean.
  enum class Reduce { None, Sum, Mean, Max, Min } reduce = Reduce::None;
  bool reduce_rows = true;
  int reduce_block = 0;
};

// Block sizes a GEMM kernel reduces in: powers of two from 16 to 64, so that
// no block straddles two tiles (every tile side is a multiple of 64).
constexpr int64_t kMinReduceBlock = 16, kMaxReduceBlock = 64;

// The GEMM a mm/addmm/bmm node computes, or nullopt when no GEMM kernel covers
// it (dtype other than f32/f16/bf16 or mixed, an operand with neither dim
// unit-stride, a per-row or strided bias, a non-contiguous result, 32-bit
// index overflow, more than 65535 batches, an empty problem, 16-bit operands
// with an odd leading dimension or extent: accesses below 4 bytes).
std::optional<GemmSpec> match_gemm(const Node& n);

// Makes `x` the source of a GEMM that has none, if it is laid out as one: the
// result's shape (batch dim 1 broadcasting allowed) or a per-column vector
// broadcast to it, unit-stride along N, of the result's dtype, keeping
// accesses of 4 bytes at least. False (spec unchanged) otherwise.
bool use_as_source(GemmSpec& spec, const Value& x);

}  // namespace ff::fusion
