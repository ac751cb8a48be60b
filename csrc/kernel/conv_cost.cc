#include "kernel/conv_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <vector>

#include "kernel/direct_conv_tile.h"
#include "kernel/sm90_ss_tile.h"

namespace ff::fusion {

namespace {

// cuDNN's kernels tile the reduction (input channels x window) in steps of
// dozens; short reductions leave their lanes idle. A conv of 6 input channels
// and a 3x3 window (54 multiply-adds per output) ran at 13 TFLOP/s in cuDNN's
// IEEE kernel, about 54/256 of its rate on long ones.
constexpr double kFullReduction = 256;
// Against cuDNN as timed, our kernels' figures carry a margin: the models
// ran up to 25 % fast (the 1xTF32 one on the suite's convs), and the
// epilogue's pass they save is modelled at the target's bandwidth.
constexpr double kTimedMargin = 1.25;

// cuDNN's channels-last time over its NCHW time for tensor-core math, by conv
// class: torch.compile's averages over TorchBench's convs (inductor's
// decide_layout_opt). Grouped convs with several channels per group are the
// one class that loses.
double channels_last_ratio(const ConvSpec& s) {
  if (s.grouped()) return 1.358;
  if (s.out_per_group() <= 64 && s.in_per_group() <= 64) return 0.783;
  const int64_t window = s.kernel.empty() ? 1 : s.kernel[0];
  if (s.out_channels * 2 <= s.in_channels && window > 1) return 0.725;
  return 0.823;
}

double ms(double flops, double rate, double bytes, const EngineRates& r) {
  return 1e3 * std::max(flops / rate, bytes / r.dram_bytes_per_s);
}

// The share of our register-fragment kernels' 128 output channels a tile that
// their columns use (EngineRates' kernel rates are of convs of 128): a conv of 24
// output channels runs its wgmmas at 24/128 of the rate.
double tile_use(const ConvSpec& s) {
  const double n = static_cast<double>(s.out_channels);
  return n / (std::ceil(n / 128) * 128);
}

double ss_kernel_ms(const ConvSpec& s, const EngineRates& r) {
  // Stores modelled as staged where the output's pixel runs allow it (an NCHW
  // result: what the kernel writes in place of cuDNN's channels-last one and
  // the pass over it).
  int64_t pixels = 1;
  for (int64_t d : s.output_size) pixels *= d;
  // A transposed conv's tile rows are pixels a stride apart: never staged.
  // H200: a 32 -> 96 channel stride-2 4x4 one alone ran 0.214 ms
  // (modelled 0.213; cuDNN 0.144); a 128 -> 64 one with a residual and
  // hardswish 0.675 (modelled 0.30): its strided stores and residual loads
  // fill half of each sector. (The conv scheduler makes them kernels only on
  // request, but where their phases are packed: wide tiles whose stores
  // run along the output's rows, EngineRates::ss_packed_store_bytes_per_s.)
  const bool runs = pixels % 4 == 0 && !s.transposed;
  const codegen::Sm90SsTile tile = codegen::sm90_ss_tile(s.gemm_n(), s.gemm_k(), runs, runs, s.phases_packed());
  const int64_t bk = codegen::Sm90SsTile::bk;
  const double k_padded = static_cast<double>((s.gemm_k() + bk - 1) / bk * bk);
  const double gathered = static_cast<double>(tile.tiles(s.gemm_m(), s.gemm_n())) * (tile.bm + tile.bn) * k_padded * 4;
  const bool fast_gather = tile.pingpong() || tile.wide;
  const double mainloop = std::max(
      s.flops() / r.ss_tf32, gathered / (fast_gather ? r.ss_pingpong_gather_bytes_per_s : r.ss_gather_bytes_per_s));
  if (tile.pingpong() && tile.staged) return 1e3 * mainloop + r.ss_pingpong_ends_ms;
  const double store_rate = tile.phase_packed          ? r.ss_packed_store_bytes_per_s
                            : tile.staged || tile.wide ? r.ss_staged_store_bytes_per_s
                                                       : r.ss_store_bytes_per_s;
  return 1e3 * (mainloop + s.output_bytes() / store_rate);
}

// The share of cuDNN's rate a forward conv's reduction length allows
// (depthwise convs have kernels of their own; transposed ones are not
// measured, so not modelled).
double reduction_efficiency(const ConvSpec& s) {
  if (s.depthwise() || s.transposed) return 1.0;
  double taps = static_cast<double>(s.in_per_group());
  for (int64_t k : s.kernel) taps *= static_cast<double>(k);
  return std::min(1.0, taps / kFullReduction);
}

}  // namespace

double copy_ms(double bytes, const Target& target) { return 1e3 * 2.0 * bytes / target.rates.dram_bytes_per_s; }

std::vector<const Node*> epilogue_nodes(const Graph& g, const Node& conv) {
  const Shape& shape = conv.result()->type.shape;
  std::unordered_set<const Value*> computed{conv.result()};  // the conv's result and the epilogue's values
  std::vector<const Node*> epilogue;
  for (size_t i = 0; i <= epilogue.size(); ++i) {
    const Value* v = i == 0 ? conv.result() : epilogue[i - 1]->result();
    for (const Node* u : g.users(v))
      if (op_kind(u->op) == OpKind::Pointwise && u->results.size() == 1 && u->result()->type.shape == shape &&
          computed.insert(u->result()).second)
        epilogue.push_back(u);
  }
  return epilogue;
}

double epilogue_pass_bytes(const Node& conv, const std::vector<const Node*>& epilogue) {
  std::unordered_set<const Value*> computed{conv.result()};
  for (const Node* n : epilogue) computed.insert(n->result());
  double read = conv.result()->type.bytes();
  std::unordered_set<const Value*> operands;
  for (const Node* n : epilogue)
    for (const Operand& o : n->operands)
      if (o.is_value() && computed.count(o.value) == 0 && operands.insert(o.value).second)
        read += o.value->type.bytes();
  return read + conv.result()->type.bytes();
}

double kernel_rounding_in_place_ms(const ConvSpec& s, const Target& target) {
  return ms(s.flops(), target.rates.kernel_tf32 * tile_use(s), s.bytes(), target.rates) * kTimedMargin;
}

ConvTimes conv_times(const ConvSpec& s, const Target& target, bool kernel_applies, bool direct_applies,
                     const CudnnTimes* measured, std::optional<double> direct_measured) {
  const EngineRates& r = target.rates;
  const double inf = std::numeric_limits<double>::infinity();
  const double flops = s.flops(), bytes = s.bytes();
  const bool f32 = s.dtype == DType::f32;
  const double efficiency = reduction_efficiency(s);
  ConvTimes t;
  if (f32 && !s.tf32) {
    // IEEE f32: cuDNN runs SIMT kernels in either layout; nothing is known to
    // favour one, so channels-last is not modelled as faster.
    t.cudnn_nchw = t.cudnn_channels_last = ms(flops, r.cudnn_simt_f32 * efficiency, bytes, r);
  } else {
    // Tensor cores read channels-last tiles: cuDNN's contiguous-layout
    // calls pay for that twice, in transposes of the input and result around
    // a channels-last kernel and in a slower kernel (H200: a
    // 48 -> 96 channel 3x3 conv 0.293 ms inside the NCHW call, plus 0.187 of
    // transposes, against 0.228 for the NHWC call's kernel; the seed's and a
    // 3 -> 64 conv's NCHW-output kernels 1.8x their NHWC ones). Modelled as
    // torch.compile's average ratio for the kernel plus both transposes;
    // grouped convs lose channels-last.
    t.cudnn_channels_last = ms(flops, (f32 ? r.cudnn_tf32 : r.cudnn_half) * efficiency, bytes, r);
    const double ratio = channels_last_ratio(s);
    t.cudnn_nchw = t.cudnn_channels_last / ratio;
    if (ratio < 1) t.cudnn_nchw += copy_ms(s.input_bytes(), target) + copy_ms(s.output_bytes(), target);
  }
  if (!kernel_applies)
    t.kernel = inf;
  else if (f32 && s.tf32)
    t.kernel = ss_kernel_ms(s, r);
  else
    t.kernel = ms(flops, (f32 ? r.kernel_3xtf32 : r.kernel_half) * tile_use(s), bytes, r);
  if (direct_applies)
    t.direct =
        ms(flops, codegen::choose_direct_conv_tile(s, target).cpb > 1 ? r.direct_f32_shared_staging : r.direct_f32,
           bytes, r);
  else
    t.direct = inf;
  if (measured != nullptr) {
    t.cudnn_nchw = measured->contiguous_ms;
    t.cudnn_channels_last = measured->channels_last_ms;
    t.kernel *= kTimedMargin;
    t.direct *= kTimedMargin;
  }
  if (direct_applies && direct_measured) t.direct = *direct_measured;
  return t;
}

}  // namespace ff::fusion
