#pragma once
// CUDA C++ source -> cubin (or PTX) with NVRTC.
#include <cstdint>
#include <string>
#include <vector>

namespace ff::runtime {

struct CompiledKernel {
  std::string name;   // the __global__ function to launch (declare it extern "C")
  std::string image;  // cubin bytes, or NUL-free PTX text
  bool is_cubin = true;
  std::string log;  // NVRTC's log (warnings); empty when loaded from the disk cache
};

// What compile_kernel will hand NVRTC for `arch`: the full option list (target
// flag first) and whether the result is a cubin. A cubin for sm_<arch> when
// this NVRTC supports it; otherwise PTX for the newest compute_XX <= arch it
// supports, which the driver JIT-compiles for the newer GPU. Throws CudaError
// when NVRTC supports no architecture <= arch. `sm90a`: the kernel uses
// Hopper's arch-specific instructions (wgmma): a cubin for sm_90a, and a
// CudaError for any arch but 90.
struct CompilePlan {
  std::vector<std::string> options;
  bool is_cubin = true;
};
CompilePlan plan_compile(int arch, const std::vector<std::string>& extra_options = {}, bool sm90a = false);

// Compiles `source` for compute capability `arch` (e.g. 90 for sm_90) with
// -std=c++17 -default-device -lineinfo (no --use_fast_math: accuracy) plus
// `extra_options`. A compile error throws CudaError with the kernel name and
// NVRTC's full log; with $FUSEFORGE_DUMP_DIR set, the source is also written
// to <dir>/<kernel_name>.cu and the message names that path.
CompiledKernel compile_kernel(const std::string& source, const std::string& kernel_name, int arch,
                              const std::vector<std::string>& extra_options = {}, bool sm90a = false);

// Include directories of kernels built on CUTLASS headers (CUTLASS's include/
// and the CUDA toolkit's, which holds cuda/std), registered by the front end.
void add_cutlass_include_dir(const std::string& dir);
bool cutlass_available();                    // some directory was registered
std::vector<std::string> cutlass_options();  // the NVRTC options such kernels need

// NVRTC's version as major*1000 + minor*10 (12.4 -> 12040).
int nvrtc_version();

// How many kernels NVRTC has compiled for this process, in it or in its
// worker processes (lets tests and diagnostics tell cache hits from compiles).
std::uint64_t nvrtc_compile_count();
// Counts a compile a worker process ran (compile_workers.cc).
void count_worker_compile();

}  // namespace ff::runtime
