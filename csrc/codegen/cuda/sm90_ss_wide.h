#pragma once
// The wide tiles of the shared-memory 1xTF32 mainloop (Sm90SsTile::wide): a
// tile is BM output channels by BN = 256 gathered pixels, the weights the
// wgmma's A and the pixels its B. Their producer, staging, stores (bulk
// copies of each channel's run of pixels, or the packed phases' plain stores
// along the output's rows) and their gemm.
#include <string>

#include "codegen/cuda/sm90_ss_mainloop.h"

namespace ff::codegen {

// The wide tile's code, after the mainloop's common helpers
// (cuda_sm90_ss_mainloop emits it in its namespace).
std::string cuda_sm90_ss_wide(const Sm90SsTile& tile);

}  // namespace ff::codegen
