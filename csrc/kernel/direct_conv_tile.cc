#include "kernel/direct_conv_tile.h"

#include <algorithm>

namespace ff::codegen {

namespace {

// Static shared memory a block stages its input channels' windows and their
// weights in: 48 KiB at most, and four blocks an SM.
constexpr int kStagedBytes = 46 * 1024;
constexpr int kMaxRowRegisters = 32;  // input values an adjacent-columns thread keeps per window row
constexpr int64_t kBlocksPerSm = 8;   // blocks of a grid an SM of the target

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// The input extent one window covers along spatial dim d.
int span_of(const ConvSpec& c, size_t d) { return static_cast<int>((c.kernel[d] - 1) * c.dilation[d] + 1); }

int64_t taps_of(const ConvSpec& c) {
  int64_t taps = 1;
  for (int64_t k : c.kernel) taps *= k;
  return taps;
}

// A staged input channel's window and weights, bytes.
int64_t channel_bytes(const DirectConvTile& t, const ConvSpec& c) {
  return int64_t{t.ts} * t.ih * t.iw_padded * 4 + taps_of(c) * t.cob * 4;
}

// The tile for `cob` output channels a thread.
DirectConvTile tile_of(const ConvSpec& c, int cob, int64_t blocks_wanted) {
  DirectConvTile t;
  const size_t d0 = c.dims == 3 ? 1 : 0;  // H's index in the spatial vectors
  const int64_t P = c.output_size[d0], Q = c.output_size[d0 + 1];
  const int64_t out_per_group = c.out_per_group();
  t.cob = cob;
  // At most 48 accumulators a thread.
  const int max_px = std::min(Q >= 4 ? 4 : Q >= 2 ? 2 : 1, 48 / t.cob);
  // With few channels a thread's input loads outweigh its FMAs: adjacent
  // columns share their windows' inputs, read once into registers.
  t.adjacent = t.cob < 4 && (max_px - 1) * c.stride[d0 + 1] + span_of(c, d0 + 1) <= kMaxRowRegisters;
  // A row's columns: px a thread, tq threads (a warp's at most; 8 for
  // adjacent columns, whose reads stride by px). Scored as the share of
  // issued instructions that are useful FMAs: a tap's px input loads and two
  // of weights per 8 px FMAs, times the share of the columns computed that
  // the row has (46 columns: 3 x 16 rather than 4 x 16, which idles 18).
  // Ties go to more columns a thread, then more threads (wider stores).
  double best = -1;
  for (int px = max_px; px >= std::max(1, max_px - 2); --px)
    for (int tq = std::min(t.adjacent ? 8 : 32, pow2_at_least((Q + px - 1) / px)); tq >= 1; tq /= 2) {
      const int64_t covered = (Q + tq * px - 1) / (tq * px) * tq * px;
      const double score = 8.0 * px / (9.0 * px + 2) * static_cast<double>(Q) / static_cast<double>(covered);
      if (score > best * 1.005) best = score, t.px = px, t.tq = tq;
      if (tq <= 8) break;
    }
  t.tp = 256 / t.tq;
  // No more rows than the output has, but at least two warps a block.
  while (t.tp / 2 >= P && t.threads() > 64) t.tp /= 2;
  t.ts = c.dims == 3 ? span_of(c, 0) : 1;
  // The window's extent for the rows (tp) chosen so far; channel_bytes.
  auto channel = [&] {
    t.ih = static_cast<int>((t.tp - 1) * c.stride[d0]) + span_of(c, d0);
    t.iw = static_cast<int>((t.tq * t.px - 1) * c.stride[d0 + 1]) + span_of(c, d0 + 1);
    // A warp's rows on distinct banks: a pitch of tq mod 32 where its threads
    // read adjacent words; of 1 mod 4 where they read every 4th (adjacent
    // columns: 8 threads a row, 4 rows).
    const int to = t.adjacent ? (1 - t.iw) % 4 : (t.tq - t.iw) % 32;
    t.iw_padded = t.iw + (to + 32) % (t.adjacent ? 4 : 32);
    return channel_bytes(t, c);
  };
  while (channel() > kStagedBytes && t.tp > 1) t.tp /= 2;
  // Half the rows where that stages every input channel at once (for the
  // channel blocks below), keeping four warps a block.
  const int64_t cg = c.in_per_group();
  if (cg * channel() > kStagedBytes && t.tp > 1 && t.threads() >= 256) {
    t.tp /= 2;
    if (cg * channel() > kStagedBytes) t.tp *= 2;
    channel();
  }
  // As few stages as fit, equally full: a part-empty last stage would compute on zeros.
  const int64_t most = std::max<int64_t>(1, std::min(cg, kStagedBytes / channel()));
  const int64_t stages = (cg + most - 1) / most;
  t.cib = static_cast<int>((cg + stages - 1) / stages);
  // Where one stage holds every input channel, a block computes several
  // blocks of output channels from it: the window is staged once for them
  // all (H200, 6 -> 48 channels, 3x3: its loads and their index math had
  // been half the kernel's stalls). As many as keep 8 blocks an SM.
  const int64_t channel_blocks = (out_per_group + t.cob - 1) / t.cob;
  const int64_t tiles = ((P + t.tp - 1) / t.tp) * ((Q + t.tq * t.px - 1) / (t.tq * t.px)) * c.batch *
                        (c.dims == 3 ? c.output_size[0] : 1) * c.groups;
  t.cpb = stages == 1 ? static_cast<int>(channel_blocks) : 1;
  while (t.cpb > 1 && tiles * ((channel_blocks + t.cpb - 1) / t.cpb) < blocks_wanted) t.cpb = (t.cpb + 1) / 2;
  return t;
}

}  // namespace

DirectConvTile choose_direct_conv_tile(const ConvSpec& c, const Target& target, bool all_channels) {
  // 8 output channels a thread (fewer rounded up to a power of two). Where
  // the input channels come in several stages, each block of output channels
  // stages them all again: 12 a thread where they come in 12s, for fewer
  // blocks (H200, 3x3x3, 8 -> 24 channels: 0.718 -> 0.653 ms; with one
  // stage, 6 -> 48 channels: 0.454 -> 0.508).
  const int64_t out = c.out_per_group();
  const int64_t blocks_wanted = kBlocksPerSm * target.sm_count;
  DirectConvTile t = tile_of(c, out >= 8 ? 8 : pow2_at_least(out), blocks_wanted);
  if (t.cib < c.in_per_group() && out % 12 == 0) t = tile_of(c, 12, blocks_wanted);
  if (all_channels) t.cpb = static_cast<int>((out + t.cob - 1) / t.cob);
  return t;
}

// A stage's bytes do not depend on cpb, the one thing the target decides.
bool direct_conv_fits(const ConvSpec& c) {
  return channel_bytes(choose_direct_conv_tile(c, default_target()), c) <= kStagedBytes;
}

}  // namespace ff::codegen
