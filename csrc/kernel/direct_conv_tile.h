#pragma once
// The direct conv kernel's tile (codegen/cuda/conv_direct.h): how it divides
// a conv's work and whether its staged window fits shared memory. Below the
// kernel's writer because the conv cost model and the conv kernels' coverage
// (kernel/conv.h) decide with it too.
#include "ir/conv.h"
#include "ir/target.h"

namespace ff::codegen {

// How a direct conv kernel divides the work. A block: one sample (and one
// output depth, 3-D), `cpb` blocks of `cob` output channels of one group in
// turn, an output tile of `tp` rows x `tq * px` columns; a thread: `px`
// output columns of one row, `tq` apart (so that a
// warp's stores of each column step fill whole rows) or, with fewer than 4
// channels (`adjacent`), side by side (their windows' inputs read once), for
// each of the block's channels (cob x px accumulators). Input channels are staged
// through shared memory `cib` at a time (the tile's window, zero-padded),
// with their weights; where they all fit one stage, once for the cpb channel
// blocks.
struct DirectConvTile {
  int px = 4, tq = 8, tp = 32, cob = 8, cib = 1, cpb = 1;
  bool adjacent = false;
  // The staged window of one input channel: depths (1 in 2-D), rows, columns, row pitch.
  int ts = 1, ih = 0, iw = 0, iw_padded = 0;
  int threads() const { return tp * tq; }
};

// `all_channels`: a block computes every output channel (cpb covers them),
// as a reduction over the channels in the kernel needs; else cpb keeps grids
// of 8 blocks an SM of `target`.
DirectConvTile choose_direct_conv_tile(const ConvSpec& spec, const Target& target, bool all_channels = false);
// Whether that tile's staged input channel and weights fit the kernel's
// shared memory (a very wide stride or window may not).
bool direct_conv_fits(const ConvSpec& spec);

}  // namespace ff::codegen
