#pragma once
// The GPU a compile is for: the hardware facts kernel choices depend on (how
// many blocks fill the GPU, how much shared memory a block may take) and the
// rates the cost models weigh engines with. The front end fills the facts
// from the device it compiles for; without a device, the facts of the
// architecture's usual part (target_for_arch), for sm_90 and unknown
// architectures those of an H100/H200 (default_target()).
#include <cstdint>
#include <string>

namespace ff {

// Effective rates of the engines the conv cost model weighs
// (kernel/conv_cost.cc): what particular kernels reach on the target, not
// its peaks, found by timing them there (tools/conv_probe.py section C). The
// defaults are an H200's (target.cc says where each figure comes from);
// every architecture's target carries them until one is fitted for it.
struct EngineRates {
  double dram_bytes_per_s = 2.5e12;                // HBM, effective
  double cudnn_simt_f32 = 55e12;                   // cuDNN's IEEE f32 convs (SIMT)
  double cudnn_tf32 = 230e12;                      // cuDNN's TF32 convs, channels-last
  double cudnn_half = 450e12;                      // cuDNN's f16/bf16 convs, channels-last
  double kernel_3xtf32 = 65e12;                    // our implicit GEMM, f32 as 3xTF32
  double kernel_tf32 = 130e12;                     // our 1xTF32 implicit GEMM rounding its tiles in place
  double kernel_half = 250e12;                     // our implicit GEMM, f16/bf16 (mma.sync)
  double ss_gather_bytes_per_s = 5e12;             // the Hopper kernel's gathers through L2 into shared memory
  double ss_store_bytes_per_s = 2e12;              // its result's stores, not overlapped with the mainloop
  double ss_staged_store_bytes_per_s = 4e12;       // stores staged through shared memory in bulk copies
  double ss_tf32 = 400e12;                         // its wgmmas, where the gather keeps up
  double ss_pingpong_gather_bytes_per_s = 7.5e12;  // ping-pong and wide tiles' gathers
  double ss_packed_store_bytes_per_s = 0.91e12;    // packed transposed phases' stores between tiles
  double ss_pingpong_ends_ms = 0.02;               // a ping-pong kernel's first loads and last stores
  double direct_f32 = 21e12;                       // our direct kernel, IEEE FMAs
  double direct_f32_shared_staging = 27e12;        // the same staging every input channel once for several blocks
  double kernel_model_error = 1.26;                // the implicit-GEMM model's median error against its timed kernels

  bool operator==(const EngineRates& o) const;
};

struct Target {
  int arch = 90;                                 // compute capability; 0: unknown
  int sm_count = 132;                            // streaming multiprocessors
  int64_t shared_per_block_optin = 227 * 1024;   // bytes of shared memory a block may opt in to
  int64_t shared_per_sm = 228 * 1024;            // bytes of shared memory an SM has
  int64_t l2_bytes = int64_t{50} * 1024 * 1024;  // bytes of L2 cache
  EngineRates rates;                             // what the cost models weigh engines with

  // "sm90-132sm": the architecture and SM count, which name a target well
  // enough to tell two apart in a log.
  std::string name() const;
  // One line: the name, then every fact, e.g. "sm90-132sm (132 SMs, shared
  // 227 KiB a block, 228 KiB an SM, L2 50 MiB)".
  std::string text() const;
  bool operator==(const Target& o) const;
  bool operator!=(const Target& o) const { return !(*this == o); }
};

// sm90-132sm: an H100/H200, the GPU kernels are tuned on; used where no GPU is
// present.
Target default_target();
// The facts of the usual part of `arch` (A100 for 80, A10-class for 86, L4/
// L40-class for 89); default_target()'s for 90 and any other, with `arch`.
Target target_for_arch(int arch);

}  // namespace ff
