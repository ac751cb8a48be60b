#pragma once
#include <cstdint>
#include <string>

#include "kernel/sm90_ss_tile.h"

namespace ff::codegen {

// A 1xTF32 Hopper (sm_90a) mainloop whose wgmmas read both operands from
// shared memory, for operands already rounded to tf32 in global memory (the
// rounding is a pointwise op fused into whatever wrote them: the layout copy
// of a conv's input, the prepared weight). Nothing touches a tile between its
// cp.async and the tensor cores, so shared-memory traffic is the loads and
// the wgmmas' reads alone: the register-fragment mainloop (sm90_mainloop.h)
// also reads A into registers and rounds B in place, and ran a 3x3 conv at
// about 130 TFLOP/s where cuDNN reached 340 (H100).
//
// ff_sm90::ss::gemm<A>(a, b, M, N, K, ldb, epilogue): acc = A @ B^T, both
// K-contiguous, handed to epilogue(row, col, v0, v1) per pair of adjacent
// columns; staged or wide, epilogue.value(row, col, acc) (staged, with the
// tile's table: conv_epilogue.h) gives each element's value and
// epilogue.column(n, col) where column col of sample n (Epilogue::SAMPLE
// rows, a multiple of 4) begins. Needs cuda_sm90_mainloop() before it (its
// helpers).
std::string cuda_sm90_ss_mainloop(const Sm90SsTile& tile);

}  // namespace ff::codegen
