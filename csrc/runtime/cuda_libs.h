#pragma once
// The CUDA driver (libcuda.so.1) and NVRTC, opened with dlopen on first use
// rather than linked, so the core loads on machines without a GPU or toolkit.
// Function pointer types come from the real prototypes in cuda.h / nvrtc.h.
#include <cuda.h>
#include <nvrtc.h>

#include <string>
#include <vector>

namespace ff::runtime {

// The functions we use. cuda.h #defines some API names to versioned symbols
// (cuCtxCreate -> cuCtxCreate_v4, ...); the X-macro argument is macro-expanded
// both in the member declaration and in the dlsym'd name (see cuda_libs.cc),
// so we always resolve exactly the symbol the header's prototype describes.
// clang-format off: it reflows these lists differently on every run (no fixed point).
#define FF_DRIVER_FUNCTIONS(X) \
  X(cuInit)                    \
  X(cuDeviceGet)               \
  X(cuDeviceGetAttribute)      \
  X(cuCtxGetCurrent)           \
  X(cuCtxSetCurrent)           \
  X(cuCtxGetDevice)            \
  X(cuDevicePrimaryCtxRetain)  \
  X(cuModuleLoadData)          \
  X(cuModuleGetFunction)       \
  X(cuLaunchKernel)            \
  X(cuFuncSetAttribute)        \
  X(cuGetErrorName)            \
  X(cuGetErrorString)

#define FF_NVRTC_FUNCTIONS(X)  \
  X(nvrtcVersion)              \
  X(nvrtcGetNumSupportedArchs) \
  X(nvrtcGetSupportedArchs)    \
  X(nvrtcCreateProgram)        \
  X(nvrtcCompileProgram)       \
  X(nvrtcGetProgramLogSize)    \
  X(nvrtcGetProgramLog)        \
  X(nvrtcGetCUBINSize)         \
  X(nvrtcGetCUBIN)             \
  X(nvrtcGetPTXSize)           \
  X(nvrtcGetPTX)               \
  X(nvrtcDestroyProgram)       \
  X(nvrtcGetErrorString)
// clang-format on

#define FF_DECLARE_FUNCTION_POINTER(name) decltype(&::name) name = nullptr;
struct DriverApi {
  FF_DRIVER_FUNCTIONS(FF_DECLARE_FUNCTION_POINTER)
};
struct NvrtcApi {
  FF_NVRTC_FUNCTIONS(FF_DECLARE_FUNCTION_POINTER)
};
#undef FF_DECLARE_FUNCTION_POINTER

// The driver API table, loading libcuda.so.1 on first call. Throws CudaError
// if it cannot be loaded (the failure is remembered: no retry). Does not call
// cuInit.
const DriverApi& driver();

// The NVRTC table, loading the library on first successful call. Throws
// CudaError listing every path tried; a failed load is retried on the next
// call, so directories registered in between are picked up.
const NvrtcApi& nvrtc();

// The path (or soname) nvrtc() loaded the library from, loading it first.
std::string nvrtc_path();

// Registers a directory to search for libnvrtc.so.{13,12,} (e.g. torch/lib or
// site-packages/nvidia/cu13/lib). Only affects loads that have not succeeded yet.
void add_library_search_dir(const std::string& dir);

// Where nvrtc() looks, in order: $FUSEFORGE_NVRTC, each registered directory
// (libnvrtc.so.13, .12, unversioned), then the bare sonames (ld.so's search).
std::vector<std::string> nvrtc_candidates();

}  // namespace ff::runtime
