#include "runtime/env.h"

#include <charconv>
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
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), jobs);
  if (ec != std::errc() || end != v.data() + v.size() || jobs < 1)
    throw std::invalid_argument("FUSEFORGE_COMPILE_JOBS='" + v +
                                "': expected a positive number of kernels to compile at once");
  return jobs;
}

}  // namespace ff::runtime::env
