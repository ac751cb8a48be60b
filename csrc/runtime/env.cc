#include "runtime/env.h"

#include <cstdlib>

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

}  // namespace ff::runtime::env
