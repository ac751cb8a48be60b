#include "fusion/conv_cost.h"

#include <algorithm>
#include <limits>

namespace ff::fusion {

namespace {

// The modelled GPU is an H100 SXM, the suite's. Effective rates, not peaks:
// cuDNN's NHWC TF32 conv of the seed (128x64x128x128, 3x3, 128 out) took
// about 1.3 ms (230 TFLOP/s) inside torch.compile's plan, its NCHW fp32 conv
// 5.0 ms (59, SIMT); CUTLASS 2.x 3xTF32 GEMMs reach 70-73 (gemm_roofline).
constexpr double kSimtF32 = 55e12;      // IEEE f32: no tensor cores in cuDNN
constexpr double kTf32 = 230e12;        // cuDNN TF32 tensor cores, channels-last
constexpr double kHalf = 450e12;        // cuDNN f16/bf16 tensor cores, channels-last
constexpr double kKernel3xTf32 = 65e12; // our implicit GEMM, f32 as 3xTF32
// Our implicit GEMM, 1xTF32, measured on an H100 with a fused relu: the
// wgmma kernel 128-133 TFLOP/s on 3x3 convs of 64 input and 128 output
// channels (CUTLASS's sm80 form 100; cuDNN's conv alone about 340).
constexpr double kKernelTf32 = 130e12;
constexpr double kKernelHalf = 250e12;  // our implicit GEMM, f16/bf16 (mma.sync)
// Our direct kernel, IEEE f32 FMAs: 23 TFLOP/s measured on an H100 for 6
// input channels, 48 output channels and a 3x3 window, a third of the FMA
// peak (its FMAs wait on shared-memory loads of the window and weights).
constexpr double kDirectF32 = 22e12;
// cuDNN's kernels tile the reduction (input channels x window) in steps of
// dozens; short reductions leave their lanes idle. A conv of 6 input channels
// and a 3x3 window (54 multiply-adds per output) ran at 13 TFLOP/s in cuDNN's
// IEEE kernel, about 54/256 of its rate on long ones.
constexpr double kFullReduction = 256;
constexpr double kBandwidth = 2.5e12;   // bytes/s, HBM3 effective

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

ConvTimes conv_times(const ConvSpec& s, bool kernel_applies, bool direct_applies) {
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
    // a channels-last kernel and in a slower kernel (H200, session 18: a
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
  t.kernel = kernel_applies ? ms(flops, f32 ? (s.tf32 ? kKernelTf32 : kKernel3xTf32) : kKernelHalf, bytes) : inf;
  t.direct = direct_applies ? ms(flops, kDirectF32, bytes) : inf;
  return t;
}

}  // namespace ff::fusion
