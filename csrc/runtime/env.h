#pragma once
// The FUSEFORGE_* environment variables the C++ core reads, each read here
// and nowhere else (the Python front end reads its own in
// python/fuseforge/runtime/options.py). Every call reads the environment
// again, so a variable set after the first compile still takes effect.
#include <string>

namespace ff::runtime::env {

// FUSEFORGE_CACHE_DIR: the kernel cache's directory; empty when unset or
// empty (cache_dir() in cache.h then derives one from XDG_CACHE_HOME or HOME).
std::string cache_dir();

// FUSEFORGE_DISABLE_CACHE=1: compiles bypass the disk cache (the in-memory
// one stays). Any other value, or none, leaves the disk cache on.
bool cache_disabled();

// FUSEFORGE_DUMP_DIR: where the source of a kernel NVRTC rejects is written
// (<dir>/<kernel>.cu); empty when unset or empty: not written.
std::string dump_dir();

// FUSEFORGE_NVRTC: the NVRTC library (a path or soname) to try before the
// registered search directories and the loader's own search; empty when
// unset or empty.
std::string nvrtc_library();

// FUSEFORGE_COMPILE_JOBS: how many kernels compile at once when a plan's
// kernels compile together (1: one at a time, in the calling process); 0
// when unset or empty: as many as the machine has cores. Throws
// std::invalid_argument on anything but a positive integer.
int compile_jobs();

}  // namespace ff::runtime::env
