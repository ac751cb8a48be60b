#pragma once
// The tile of the Hopper 1xTF32 conv mainloop on rounded operands
// (codegen/cuda/sm90_ss_mainloop.h). Below the mainloop's writer because the
// conv cost model (kernel/conv_cost.cc) models a conv by its tile too.
#include <algorithm>
#include <cstdint>

#include "ir/target.h"

namespace ff::codegen {

// The tile is Sm90SsTile's BM x BN. Two consumer warpgroups either take
// whole tiles in turn (ping-pong: one's epilogue runs beside the other's
// wgmmas) or split each tile, BM / 2 rows each; the source is generated per
// tile because the wgmma's register list is as long as BN / 2.
struct Sm90SsTile {
  static constexpr int bk = 32;           // K of a stage: a 128-byte row of f32, the swizzle's width
  static constexpr int staged_cols = 32;  // result columns a consumer warpgroup stages at a time
  static constexpr int bm = 128;          // rows of a tile: a producer thread's 8 rows of A, 16 apart
  int bn = 128;
  // Whether the result leaves through shared memory in bulk copies, one per
  // output channel's run of pixels (an f32 result whose pixels are
  // contiguous per channel): the copies run while the next tile's wgmmas do.
  bool staged = false;
  // Staged, the epilogue's per-channel operands (ConvEpilogue::channel_operands),
  // held for a tile in a table beside each consumer warpgroup's buffer.
  int channel_operands = 0;
  // Whether the GEMM's K is a multiple of bk and its N of bn (every k-block
  // and row of B exists): the producer then tests neither.
  bool k_whole = false, n_whole = false;
  // Whether the pixels are the wgmma's N side: a tile is bm output channels
  // (64 a consumer warpgroup, both sharing it) by bn = 256 pixels, the
  // widest wgmma (m64n256k8), whose operand reads per multiply-add are the
  // fewest: on an H200 the gathers and the wgmmas' reads of the 128 x 128
  // ping-pong tiles contend for each SM's shared memory. The
  // result leaves through shared memory in bulk copies, one per channel's
  // run of pixels (the result's channels hold contiguous runs of pixels).
  bool wide = false;
  // Wide, for a transposed conv's packed phases (ConvSpec::phases_packed):
  // the tile's channels are (phase, output channel) pairs, which the
  // epilogue's place() maps to output pixels; each warp's staged values leave in plain
  // stores along the output's rows, a lane a pixel (so that a warp's stores
  // fill whole lines where the rows are contiguous).
  bool phase_packed = false;
  // Whether the consumer warpgroups take alternate tiles, each its whole BM
  // rows, in turn on the tensor cores (up to 128 columns: 128 accumulators a
  // thread); otherwise both share each tile. H200, 3x3 convs + relu written
  // NCHW, against both warpgroups on 256 x 128 tiles: the seed's 1.55 -> 1.43
  // ms, a 3-D conv's 1.06 -> 0.97, though B is gathered once per 128 rows
  // instead of 256.
  bool pingpong() const { return bn <= 128 && !wide; }
  int warpgroup_rows() const { return pingpong() ? bm : bm / 2; }
  // Each consumer warpgroup's staging buffer: staged_cols columns of its
  // rows, each padded by 4 floats (16-byte aligned, conflict-free), then the
  // table of its tile's channel operands; wide, 32 channels of its 256
  // pixels (8 a warp), each padded by 8 floats.
  int staging_bytes() const {
    if (wide) return 2 * 32 * (256 + 8) * 4;
    return staged ? 2 * (staged_cols * (warpgroup_rows() + 4) + channel_operands * bn) * 4 : 0;
  }
  // The shared memory a CTA may opt in to on the target (227 KiB on an H100).
  int shared_optin = static_cast<int>(default_target().shared_per_block_optin);
  // Up to 4 stages, as many as fit shared_optin: what shared memory leaves
  // of the 256 KiB is L1, where A's loads find the pixels of the taps before
  // (H200, 3x3 convs + relu at 128 x 128: the seed's 1.32 ms with 6 stages,
  // 1.30 with 4; a 3-D one's 0.89, 0.86).
  int stages() const { return std::min(4, (shared_optin - 2048 - staging_bytes()) / ((bm + bn) * 128)); }
  // The stages, the staging buffers, and the mbarriers: ready and empty per stage, a turn per warpgroup.
  int shared_bytes() const { return 1024 + stages() * (bm + bn) * 128 + staging_bytes() + (2 * stages() + 2) * 8; }
  // Tiles of an m (pixels) x n (channels) result.
  int64_t tiles(int64_t m, int64_t n) const {
    const int64_t pixels = wide ? bn : bm, channels = wide ? bm : bn;
    return ((m + pixels - 1) / pixels) * ((n + channels - 1) / channels);
  }
};

// The tile for an M x N result of a conv reducing over K: BN the smallest of 64, 128, 256
// covering N (256 past it). Up to 128 columns, ping-pong 128 x BN tiles (128
// accumulators a consumer thread at BN 128); at 256, both warpgroups share
// 128 x 256 tiles (64 rows each: more would not fit their registers).
// Staged stores where `staged` (the result allows them) and a warpgroup's
// rows are 128. Wide (pixels on the N side) where `wide` (the result's
// channels hold contiguous runs of pixels, and the GEMM's rows are pixels in
// order) and N is a multiple of 128 (H200, a 48 -> 96 channel 3x3 conv +
// relu, a quarter of each wide tile empty: 0.292 ms ping-pong, 0.341 wide).
// Packed: the GEMM of a transposed conv's packed phases, wide whatever N.
Sm90SsTile sm90_ss_tile(int64_t n, int64_t k, bool staged = false, bool wide = false, bool packed = false);

}  // namespace ff::codegen
