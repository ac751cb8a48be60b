#pragma once
// The GPU a compile is for: the hardware facts kernel choices depend on (how
// many blocks fill the GPU, how much shared memory a block may take). The
// front end fills one from the device it compiles for; without a device, the
// facts of the architecture's usual part (target_for_arch), for sm_90 and
// unknown architectures those of an H100/H200 (default_target()).
#include <cstdint>
#include <string>

namespace ff {

struct Target {
  int arch = 90;                                 // compute capability; 0: unknown
  int sm_count = 132;                            // streaming multiprocessors
  int64_t shared_per_block_optin = 227 * 1024;   // bytes of shared memory a block may opt in to
  int64_t shared_per_sm = 228 * 1024;            // bytes of shared memory an SM has
  int64_t l2_bytes = int64_t{50} * 1024 * 1024;  // bytes of L2 cache

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
