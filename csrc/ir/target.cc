#include "ir/target.h"

#include <tuple>

namespace ff {

namespace {

std::string kib(int64_t bytes) {
  return bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB" : std::to_string(bytes) + " bytes";
}

std::string mib(int64_t bytes) {
  return bytes % (1024 * 1024) == 0 ? std::to_string(bytes / (1024 * 1024)) + " MiB" : kib(bytes);
}

}  // namespace

std::string Target::name() const { return "sm" + std::to_string(arch) + "-" + std::to_string(sm_count) + "sm"; }

std::string Target::text() const {
  return name() + " (" + std::to_string(sm_count) + " SMs, shared " + kib(shared_per_block_optin) + " a block, " +
         kib(shared_per_sm) + " an SM, L2 " + mib(l2_bytes) + ")";
}

bool Target::operator==(const Target& o) const {
  return std::tie(arch, sm_count, shared_per_block_optin, shared_per_sm, l2_bytes, rates) ==
         std::tie(o.arch, o.sm_count, o.shared_per_block_optin, o.shared_per_sm, o.l2_bytes, o.rates);
}

// Where EngineRates' defaults come from (H100 SXM and H200 runs):
// - cudnn_tf32, cudnn_simt_f32: cuDNN's NHWC TF32 conv of the seed
//   (128x64x128x128, 3x3, 128 out) took about 1.3 ms (230 TFLOP/s) inside
//   torch.compile's plan, its NCHW fp32 conv 5.0 ms (59, SIMT).
// - kernel_3xtf32: H200, the Hopper kernel + relu: 96-98 TFLOP/s on the
//   seed's conv, 68 on a 48 -> 96 channel one (91 a full tile); CUTLASS 2.x
//   3xTF32 GEMMs reach 70-73 (gemm_roofline). Not re-fit: the figure weighs it
//   against cuDNN's IEEE convs.
// - kernel_tf32: the wgmma kernel rounding its tiles in place, H100, with a
//   fused relu: 128-133 TFLOP/s on 3x3 convs of 64 input and 128 output
//   channels (CUTLASS's sm80 form 100; cuDNN's conv alone about 340).
// - ss_gather, ss_store (the same on rounded operands, sm90_ss_mainloop.h,
//   bound by what its producer gathers through L2: every tile reads its BM
//   rows and BN columns of the implicit GEMM whole, each input pixel once per
//   window tap): H200, conv_probe section C, 8 convs: with its stores switched
//   off the seed's conv moved 7.0 GB in 1.15 ms and its producer alone in
//   0.96; the stores of its NCHW result, which the consumers make between
//   tiles, took 0.47 ms more for 1.04 GB. These model the 8 convs' kernels
//   within -15 % and +25 %, more often high than low.
// - ss_staged_store (Sm90SsTile::staged: the stores overlap the next tile's
//   mainloop in part): H200, the seed's conv + relu took 0.15 ms past its
//   gather for 1.04 GB, with the seed's own epilogue (a bias read per
//   element) 0.32 ms, a 64 -> 128 channel conv + relu 0.07 ms for 0.40 GB.
// - ss_pingpong_gather, ss_pingpong_ends_ms (Sm90SsTile::pingpong(), A's
//   loads through L1 and readied by the copies themselves: each warpgroup's
//   stores hide behind the other's wgmmas but for the first tile's loads and
//   the last one's stores): H200, 8 convs + relu written NCHW: 0.4 to 9.4 GB
//   gathered in 0.075 to 1.19 ms, modelled as 7.5 TB/s + 0.02 ms within -12 %
//   (the 3-D conv ran slower than modelled) and +7 %; the seed's conv with its
//   own epilogue ran 6 % over its relu. Wide tiles (Sm90SsTile::wide) gather
//   at that rate too but store between tiles, at ss_staged_store: the seed's
//   conv + relu 0.934 ms with its stores switched off (modelled 0.936), 1.198
//   with them (1.19); a 64 -> 128 channel one, 112x112, 0.458 (0.456).
// - ss_packed_store (a transposed conv's packed phases, ConvSpec::
//   phases_packed, whose epilogue between tiles computes each value in the
//   threads that store it along the output's rows): H100, a 128 -> 64 channel
//   stride-2 4x4 one with a residual and hardswish (0.134 GB out) took 0.258
//   ms, 0.111 modelled for its gather (0.311 without the channel runs of
//   sm90_ss_wide.cc's store_tile).
// - direct_f32, direct_f32_shared_staging (the direct kernel's FMAs wait on
//   shared-memory loads of the window and weights): H200, the kernel + relu:
//   27-34 TFLOP/s where a block stages every input channel once for several
//   blocks of output channels (6, 8, 12 -> 48, 32, 48 channels, 3x3), but 21
//   for 3 -> 16 (27 FMAs an output); 22-24 where the channels come in several
//   stages (3-D, 3x3x3: 8 -> 24, 16 -> 32).
// - kernel_model_error: tools/conv_probe.py section D over the suite's 99
//   conv signatures (H200): the median of max(modelled/timed, timed/modelled)
//   for the implicit-GEMM kernel.
bool EngineRates::operator==(const EngineRates& o) const {
  return std::tie(dram_bytes_per_s, cudnn_simt_f32, cudnn_tf32, cudnn_half, kernel_3xtf32, kernel_tf32, kernel_half,
                  ss_gather_bytes_per_s, ss_store_bytes_per_s, ss_staged_store_bytes_per_s, ss_tf32,
                  ss_pingpong_gather_bytes_per_s, ss_packed_store_bytes_per_s, ss_pingpong_ends_ms, direct_f32,
                  direct_f32_shared_staging, kernel_model_error) ==
         std::tie(o.dram_bytes_per_s, o.cudnn_simt_f32, o.cudnn_tf32, o.cudnn_half, o.kernel_3xtf32, o.kernel_tf32,
                  o.kernel_half, o.ss_gather_bytes_per_s, o.ss_store_bytes_per_s, o.ss_staged_store_bytes_per_s,
                  o.ss_tf32, o.ss_pingpong_gather_bytes_per_s, o.ss_packed_store_bytes_per_s, o.ss_pingpong_ends_ms,
                  o.direct_f32, o.direct_f32_shared_staging, o.kernel_model_error);
}

Target default_target() { return Target{}; }

Target target_for_arch(int arch) {
  Target t;
  t.arch = arch;
  switch (arch) {
    case 80:  // A100 SXM
      t.sm_count = 108;
      t.shared_per_block_optin = 163 * 1024;
      t.shared_per_sm = 164 * 1024;
      t.l2_bytes = int64_t{40} * 1024 * 1024;
      break;
    case 86:  // A10
      t.sm_count = 84;
      t.shared_per_block_optin = 99 * 1024;
      t.shared_per_sm = 100 * 1024;
      t.l2_bytes = int64_t{6} * 1024 * 1024;
      break;
    case 89:  // L40
      t.sm_count = 128;
      t.shared_per_block_optin = 99 * 1024;
      t.shared_per_sm = 100 * 1024;
      t.l2_bytes = int64_t{96} * 1024 * 1024;
      break;
    default:
      break;
  }
  return t;
}

}  // namespace ff
