#pragma once
#include <cstdint>
#include <string_view>

namespace ff::codegen {
// The Hopper (sm_90a) TF32 GEMM mainloop that the wgmma kernels (gemm_sm90.cc,
// conv_sm90.cc) include: ff_sm90::gemm_tf32<SPLIT>(a, b, M, N, K, ldb,
// epilogue) computes a 128 x 128 tile of A @ B^T (3xTF32 or 1xTF32), A's rows
// given by `a` (a matrix, or a convolution's implicit-GEMM view), and hands
// the accumulators to epilogue.tile(acc, fragment).
std::string_view cuda_sm90_mainloop();

// The close of a wgmma kernel's body, which opens with
// `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)`: a trap on other targets.
std::string_view sm90_kernel_end();

// Its launch: the tile (ff_sm90::BM and BN), threads (a producer and two
// consumer warpgroups) and dynamic shared memory (ff_sm90::smem_bytes<split>(),
// 3xTF32 keeping residual tiles). Each kernel static_asserts them.
constexpr int kSm90Tile = 128;
constexpr int kSm90Threads = 384;
// Tiles of an M x N result (the mainloop walks them m-tiles first).
constexpr int64_t sm90_tiles(int64_t m, int64_t n) {
  return ((m + kSm90Tile - 1) / kSm90Tile) * ((n + kSm90Tile - 1) / kSm90Tile);
}
constexpr int sm90_shared_bytes(bool split) {
  const int stages = split ? 4 : 6;
  return 1024 + stages * ((split ? 2 : 1) * 16384 + 18432) + 2 * stages * 8;
}
}  // namespace ff::codegen
