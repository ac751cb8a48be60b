#pragma once
// Error type of the runtime and the checks that turn CUDA driver / NVRTC
// status codes into it. Messages name the call and, where there is one, the
// kernel: "cuLaunchKernel(ff_pointwise_add_0): CUDA_ERROR_INVALID_VALUE: invalid argument".
#include <cuda.h>
#include <nvrtc.h>

#include <stdexcept>
#include <string>

namespace ff::runtime {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "CUDA_ERROR_INVALID_VALUE: invalid argument" (or "CUDA error 1" when the
// driver cannot name the code).
std::string cu_error_text(CUresult r);

[[noreturn]] void throw_cu_error(CUresult r, const char* call, const std::string& kernel);
[[noreturn]] void throw_nvrtc_error(nvrtcResult r, const char* call, const std::string& kernel);

// Inline so the success path of a hot call (cuLaunchKernel) costs one compare.
inline void check_cu(CUresult r, const char* call, const std::string& kernel = {}) {
  if (r != CUDA_SUCCESS) throw_cu_error(r, call, kernel);
}
inline void check_nvrtc(nvrtcResult r, const char* call, const std::string& kernel = {}) {
  if (r != NVRTC_SUCCESS) throw_nvrtc_error(r, call, kernel);
}

}  // namespace ff::runtime
