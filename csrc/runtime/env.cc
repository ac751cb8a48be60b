#include "runtime/env.h"

#include <cstdlib>
#include <stdexcept>

namespace ff::runtime::env {
namespace {

// The variable's value; empty when it is unset.
std::string read(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

std::string cache_dir() { return read("FUSEFORGE_CACHE_DIR"); }

bool cache_disabled() { return read("FUSEFORGE_DISABLE_CACHE") == "1"; }

std::string dump_dir() { return read("FUSEFORGE_DUMP_DIR"); }

std::string nvrtc_library() { return read("FUSEFORGE_NVRTC"); }

int compile_jobs() {
  const std::string v = read("FUSEFORGE_COMPILE_JOBS");
  if (v.empty()) return 0;
  int jobs = 0;
  for (char c : v) {
    if (c < '0' || c > '9' || jobs > 100000) {
      jobs = 0;
      break;
    }
    jobs = jobs * 10 + (c - '0');
  }
  if (jobs < 1)
    throw std::invalid_argument("FUSEFORGE_COMPILE_JOBS='" + v +
                                "': expected a positive number of kernels to compile at once");
  return jobs;
}

}  // namespace ff::runtime::env
