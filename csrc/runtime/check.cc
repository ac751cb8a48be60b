#include "runtime/check.h"

#include "runtime/cuda_libs.h"

namespace ff::runtime {
namespace {

// "call(kernel): " or "call: " when there is no kernel.
std::string prefix(const char* call, const std::string& kernel) {
  std::string p = call;
  if (!kernel.empty()) p += "(" + kernel + ")";
  return p + ": ";
}

}  // namespace

std::string cu_error_text(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  // A CUresult normally comes from a loaded driver; the fallback covers a code
  // the driver does not know (or a driver that failed to load).
  try {
    const DriverApi& cu = driver();
    cu.cuGetErrorName(r, &name);
    cu.cuGetErrorString(r, &text);
  } catch (const CudaError&) {}
  if (name == nullptr) return "CUDA error " + std::to_string(static_cast<int>(r));
  return text ? std::string(name) + ": " + text : std::string(name);
}

void throw_cu_error(CUresult r, const char* call, const std::string& kernel) {
  throw CudaError(prefix(call, kernel) + cu_error_text(r));
}

void throw_nvrtc_error(nvrtcResult r, const char* call, const std::string& kernel) {
  std::string text;
  try {
    text = nvrtc().nvrtcGetErrorString(r);
  } catch (const CudaError&) {
    text = "NVRTC error " + std::to_string(static_cast<int>(r));
  }
  throw CudaError(prefix(call, kernel) + text);
}

}  // namespace ff::runtime
