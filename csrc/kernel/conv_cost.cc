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

// The modelled GPU is an H100 SXM, the suite's. Effective rates, not peaks:
// cuDNN's NHWC TF32 conv of the seed (128x64x128x128, 3x3, 128 out) took
// about 1.3 ms (230 TFLOP/s) inside torch.compile's plan, its NCHW fp32 conv
// 5.0 ms (59, SIMT); CUTLASS 2.x 3xTF32 GEMMs reach 70-73 (gemm_roofline).
constexpr double kSimtF32 = 55e12;  // IEEE f32: no tensor cores in cuDNN
constexpr double kTf32 = 230e12;    // cuDNN TF32 tensor cores, channels-last
constexpr double kHalf = 450e12;    // cuDNN f16/bf16 tensor cores, channels-last
// Our implicit GEMM, f32 as 3xTF32. H200, the Hopper kernel + relu:
// 96-98 TFLOP/s on the seed's conv, 68 on a 48 -> 96 channel one (91
// a full tile). Not re-fit: the figure weighs it against cuDNN's IEEE convs,
// whose choices the suite with eager's convs in IEEE should check first.
constexpr double kKernel3xTf32 = 65e12;
// Our implicit GEMM, 1xTF32, rounding its tiles in place, measured on an H100
// with a fused relu: the wgmma kernel 128-133 TFLOP/s on 3x3 convs of 64 input
// and 128 output channels (CUTLASS's sm80 form 100; cuDNN's conv alone about
// 340).
constexpr double kKernelTf32 = 130e12;
// The same on rounded operands (sm90_ss_mainloop.h) is bound by what its
// producer gathers through L2: every tile reads its BM rows and BN columns of
// the implicit GEMM whole, each input pixel once per window tap. Measured on
// an H200 (tools/conv_probe.py section C, 8 convs): with its stores switched
// off the seed's conv moved 7.0 GB in 1.15 ms and its producer alone in 0.96;
// the stores of its NCHW result, which the consumers make between tiles, took
// 0.47 ms more for 1.04 GB. These rates model the 8 convs' kernels within
// -15 % and +25 %, more often high than low.
constexpr double kSsGather = 5e12;  // bytes/s through L2 into shared memory
constexpr double kSsStore = 2e12;   // bytes/s of the result, not overlapped with the mainloop
// Staged through shared memory in bulk copies (Sm90SsTile::staged), the
// stores overlap the next tile's mainloop in part: on an H200 the seed's conv
// + relu took 0.15 ms past its gather for 1.04 GB, with the seed's own
// epilogue (a bias read per element) 0.32 ms, a 64 -> 128 channel conv + relu
// 0.07 ms for 0.40 GB.
constexpr double kSsStagedStore = 4e12;
constexpr double kSsTf32 = 400e12;  // its wgmmas, where the gather keeps up
// Ping-pong tiles (Sm90SsTile::pingpong()), with A's loads through L1 and
// readied by the copies themselves: each warpgroup's stores hide behind the
// other's wgmmas (staged), but for the first tile's loads and the last one's
// stores. H200, 8 convs + relu written NCHW (tools/conv_probe.py section
// C): 0.4 to 9.4 GB gathered in 0.075 to 1.19 ms, modelled as 7.5
// TB/s + 0.02 ms within -12 % (the 3-D conv ran slower than modelled) and +7
// %; the seed's conv with its own epilogue ran 6 % over its relu.
// Wide tiles (Sm90SsTile::wide) gather at that rate too, but store between
// tiles, at kSsStagedStore: H200, the seed's conv + relu 0.934
// ms with its stores switched off (modelled 0.936), 1.198 with them (1.19);
// a 64 -> 128 channel one, 112x112, 0.458 (0.456).
constexpr double kSsPingPongGather = 7.5e12;
// A transposed conv's packed phases (ConvSpec::phases_packed) gather at that
// rate too, but their epilogue, between tiles, computes each value in the
// threads that store it along the output's rows: H100, a 128 -> 64 channel
// stride-2 4x4 one with a residual and hardswish (0.134 GB out) took 0.258
// ms, 0.111 modelled for its gather (0.311 without the channel runs of
// sm90_ss_wide.cc's store_tile).
constexpr double kSsPackedStore = 0.91e12;
constexpr double kSsPingPongEndsMs = 0.02;
constexpr double kKernelHalf = 250e12;  // our implicit GEMM, f16/bf16 (mma.sync)
// Our direct kernel, IEEE f32 FMAs (its FMAs wait on shared-memory loads of
// the window and weights). H200, the kernel + relu: 27-34
// TFLOP/s where a block stages every input channel once for several blocks
// of output channels (6, 8, 12 -> 48, 32, 48 channels, 3x3), but 21 for 3
// -> 16 (27 FMAs an output); 22-24 where the channels come in several
// stages (3-D, 3x3x3: 8 -> 24, 16 -> 32).
constexpr double kDirectF32 = 21e12;
constexpr double kDirectF32SharedStaging = 27e12;
// cuDNN's kernels tile the reduction (input channels x window) in steps of
// dozens; short reductions leave their lanes idle. A conv of 6 input channels
// and a 3x3 window (54 multiply-adds per output) ran at 13 TFLOP/s in cuDNN's
// IEEE kernel, about 54/256 of its rate on long ones.
constexpr double kFullReduction = 256;
constexpr double kBandwidth = 2.5e12;  // bytes/s, HBM3 effective
// Against cuDNN as timed, our kernels' figures carry a margin: the models
// above ran up to 25 % fast (the 1xTF32 one on the suite's convs), and the
// epilogue's pass they save is modelled at an H100's bandwidth.
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

double ms(double flops, double rate, double bytes) { return 1e3 * std::max(flops / rate, bytes / kBandwidth); }

// The share of our register-fragment kernels' 128 output channels a tile that
// their columns use (the rates above are of convs of 128): a conv of 24
// output channels runs its wgmmas at 24/128 of the rate.
double tile_use(const ConvSpec& s) {
  const double n = static_cast<double>(s.out_channels);
  return n / (std::ceil(n / 128) * 128);
}

double ss_kernel_ms(const ConvSpec& s) {
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
  // run along the output's rows, kSsPackedStore.)
  const bool runs = pixels % 4 == 0 && !s.transposed;
  const codegen::Sm90SsTile tile = codegen::sm90_ss_tile(s.gemm_n(), s.gemm_k(), runs, runs, s.phases_packed());
  const int64_t bk = codegen::Sm90SsTile::bk;
  const double k_padded = static_cast<double>((s.gemm_k() + bk - 1) / bk * bk);
  const double gathered = static_cast<double>(tile.tiles(s.gemm_m(), s.gemm_n())) * (tile.bm + tile.bn) * k_padded * 4;
  const bool fast_gather = tile.pingpong() || tile.wide;
  const double mainloop = std::max(s.flops() / kSsTf32, gathered / (fast_gather ? kSsPingPongGather : kSsGather));
  if (tile.pingpong() && tile.staged) return 1e3 * mainloop + kSsPingPongEndsMs;
  const double store_rate = tile.phase_packed ? kSsPackedStore : tile.staged || tile.wide ? kSsStagedStore : kSsStore;
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

double copy_ms(double bytes) { return 1e3 * 2.0 * bytes / kBandwidth; }

double epilogue_pass_bytes(const Graph& g, const Node& conv) {
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
  double read = conv.result()->type.bytes();
  std::unordered_set<const Value*> operands;
  for (const Node* n : epilogue)
    for (const Operand& o : n->operands)
      if (o.is_value() && computed.count(o.value) == 0 && operands.insert(o.value).second)
        read += o.value->type.bytes();
  return read + conv.result()->type.bytes();
}

bool kernel_beats_cudnn(const ConvSpec& s, const CudnnTimes& cudnn, double epilogue_bytes, bool rounding_in_place) {
  const ConvTimes t = conv_times(s, true, false, &cudnn);
  const double kernel = rounding_in_place ? kernel_rounding_in_place_ms(s) : t.kernel;
  return kernel < t.cudnn_channels_last + 1e3 * epilogue_bytes / kBandwidth;
}

double kernel_rounding_in_place_ms(const ConvSpec& s) {
  return ms(s.flops(), kKernelTf32 * tile_use(s), s.bytes()) * kTimedMargin;
}

ConvTimes conv_times(const ConvSpec& s, bool kernel_applies, bool direct_applies, const CudnnTimes* measured,
                     std::optional<double> direct_measured) {
  const double inf = std::numeric_limits<double>::infinity();
  const double flops = s.flops(), bytes = s.bytes();
  const bool f32 = s.dtype == DType::f32;
  const double efficiency = reduction_efficiency(s);
  ConvTimes t;
  if (f32 && !s.tf32) {
    // IEEE f32: cuDNN runs SIMT kernels in either layout; nothing is known to
    // favour one, so channels-last is not modelled as faster.
    t.cudnn_nchw = t.cudnn_channels_last = ms(flops, kSimtF32 * efficiency, bytes);
  } else {
    // Tensor cores read channels-last tiles: cuDNN's contiguous-layout
    // calls pay for that twice, in transposes of the input and result around
    // a channels-last kernel and in a slower kernel (H200: a
    // 48 -> 96 channel 3x3 conv 0.293 ms inside the NCHW call, plus 0.187 of
    // transposes, against 0.228 for the NHWC call's kernel; the seed's and a
    // 3 -> 64 conv's NCHW-output kernels 1.8x their NHWC ones). Modelled as
    // torch.compile's average ratio for the kernel plus both transposes;
    // grouped convs lose channels-last.
    t.cudnn_channels_last = ms(flops, (f32 ? kTf32 : kHalf) * efficiency, bytes);
    const double ratio = channels_last_ratio(s);
    t.cudnn_nchw = t.cudnn_channels_last / ratio;
    if (ratio < 1) t.cudnn_nchw += copy_ms(s.input_bytes()) + copy_ms(s.output_bytes());
  }
  if (!kernel_applies)
    t.kernel = inf;
  else if (f32 && s.tf32)
    t.kernel = ss_kernel_ms(s);
  else
    t.kernel = ms(flops, (f32 ? kKernel3xTf32 : kKernelHalf) * tile_use(s), bytes);
  // The modelled GPU's tile: the model's rates are default_target()'s part's.
  if (direct_applies)
    t.direct =
        ms(flops, codegen::choose_direct_conv_tile(s, default_target()).cpb > 1 ? kDirectF32SharedStaging : kDirectF32,
           bytes);
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
