#pragma once
#include <string_view>

namespace ff::codegen {
// The Hopper (sm_90a) 3xTF32 GEMM mainloop that gemm_sm90.cc's kernels
// include: ff_sm90::gemm_3xtf32(a, b, M, N, K, lda, ldb, epilogue)
// computes a 128 x 128 tile of A @ B^T with wgmma and hands the result to
// epilogue(row, col, v0, v1) two adjacent columns at a time.
std::string_view cuda_sm90_mainloop();
}  // namespace ff::codegen
