#pragma once
// Disk + in-memory cache in front of compile_kernel.
//
// Directory: $FUSEFORGE_CACHE_DIR, else $XDG_CACHE_HOME/fuseforge, else
// ~/.cache/fuseforge. Entry: <kernel>-sm<arch>-nvrtc<ver>-<hash128>.cubin|.ptx,
// where the hash covers the source, every NVRTC option, arch and NVRTC version.
// $FUSEFORGE_DISABLE_CACHE=1 bypasses the disk (the in-memory map stays: it is
// keyed on the same inputs, so it cannot go stale). The cache never fails a
// compile: an unwritable directory is reported once on stderr and skipped.
// Faults: an entry is written to a temporary file and renamed into place, so
// processes sharing the directory never see part of one; on reading, its
// header (magic, length, checksum) and its image (an ELF cubin or PTX naming
// the kernel) are checked, and a damaged or wrong entry is removed, reported
// and recompiled (tests/cpp/test_cache_faults.cc).
#include <string>
#include <vector>

#include "runtime/compiler.h"

namespace ff::runtime {

// `in_worker`: a miss compiles in a worker process (compile_workers.h), for
// callers compiling several kernels at once on threads of their own.
CompiledKernel compile_cached(const std::string& source, const std::string& kernel_name, int arch,
                              const std::vector<std::string>& extra_options = {}, bool sm90a = false,
                              bool in_worker = false);

// The directory entries go to (it may not exist yet); empty when no location
// can be derived (no $HOME).
std::string cache_dir();

// Forgets the in-memory map, so the next compile_cached consults the disk.
void clear_memory_cache();

}  // namespace ff::runtime
