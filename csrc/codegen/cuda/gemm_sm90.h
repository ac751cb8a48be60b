#pragma once
// Hopper GEMM kernels: 3xTF32 on wgmma (sm_90a) with the fused epilogue, for
// f32 matmuls whose operands are both K-contiguous (x @ W.T, q @ k.T). They
// run about 1.6x the sm80 CUTLASS kernels' rate (gemm.h) on long sums.
#include "codegen/cuda/kernel_source.h"
#include "kernel/gemm.h"
#include "kernel/group.h"

namespace ff::codegen {

// Whether generate_gemm_sm90 covers `spec`: f32 at the default 3xTF32
// precision, A row-major and B column-major (both K-contiguous), rows of A
// and B in 16-byte vectors (K, leading dimensions and batch strides multiples
// of 4; any M and N), K >= 1024 (on shorter sums eager's own error is small
// and the sm80 kernel, whose split rounds both parts, stays well within 2x
// of it: measured at K = 1028, this kernel's max error is 0.8-1.3x eager's;
// and short sums are store-bound, where this kernel's direct stores lose:
// attention's q @ k.T, 256 x 1024 x 1024 x 64, took 1.16 ms here, 0.95 ms on
// the sm80 kernel, even with each CTA chaining 8 tiles so that loading the
// next overlapped storing the last).
bool sm90_gemm_applies(const fusion::GemmSpec& spec);

// The kernel for the matmul group: 128 x 128 tiles of 384 threads, the
// matmul's value alpha * acc (+ beta * bias for addmm) through the group's
// pointwise nodes, stored once, or with a block reduction (GemmSpec::reduce)
// folded into its partials. Parameters as gemm.h's generate_gemm.
KernelSource generate_gemm_sm90(const fusion::Group& group, const fusion::GemmSpec& spec, int id);

}  // namespace ff::codegen
