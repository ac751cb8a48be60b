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
  return std::tie(arch, sm_count, shared_per_block_optin, shared_per_sm, l2_bytes) ==
         std::tie(o.arch, o.sm_count, o.shared_per_block_optin, o.shared_per_sm, o.l2_bytes);
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
