#pragma once
// Loading compiled kernels into CUDA contexts and launching them, plus the
// device queries the code generator needs. All through the dlopen'ed driver.
#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/compiler.h"

namespace ff::runtime {

namespace detail {
struct LoadedFunction;  // a kernel's CUfunction in one context (launcher.cc)
}

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// True when libcuda loads and cuInit succeeds; false (never throws) on a
// machine without a usable GPU driver.
bool driver_available();

int device_sm_count(int device);  // streaming multiprocessors
int device_arch(int device);      // compute capability, major*10 + minor (90 for H100)

// A kernel plus the CUfunction it resolves to in each context it was used in.
// Hold one per kernel on the launch path: after the first launch in a context
// it costs a few driver calls, while the free launch() below compares the
// whole image against a process-wide registry on every call.
class LoadedKernel {
 public:
  explicit LoadedKernel(CompiledKernel kernel);
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  const CompiledKernel& kernel() const { return kernel_; }

  // Launches in the thread's current context (torch has normally made the
  // device's primary context current); with none current, `device`'s primary
  // context is retained and made current. A current context of another device
  // is an error rather than silently switched, since torch tracks it.
  // `args` as cuLaunchKernel takes them (one pointer per kernel parameter);
  // `stream` is a CUstream handle (0 = legacy default stream), e.g. torch's
  // cuda_stream. shared_bytes above 48 KiB raises the kernel's opt-in limit.
  void launch(int device, Dim3 grid, Dim3 block, unsigned shared_bytes, void** args, std::uintptr_t stream);

 private:
  CompiledKernel kernel_;
  std::mutex mutex_;
  // Few entries (one per context used); the pointees live in a global registry.
  std::vector<std::pair<CUcontext, detail::LoadedFunction*>> per_context_;
};

// Convenience form of LoadedKernel::launch for one-off launches.
void launch(const CompiledKernel& k, int device, Dim3 grid, Dim3 block, unsigned shared_bytes, void** args,
            std::uintptr_t stream);

}  // namespace ff::runtime
