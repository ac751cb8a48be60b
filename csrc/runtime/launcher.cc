#include "runtime/launcher.h"

#include <map>
#include <string>
#include <tuple>

#include "runtime/check.h"
#include "runtime/cuda_libs.h"

namespace ff::runtime {

constexpr unsigned kDefaultSharedLimit = 48 * 1024;

// A kernel's function in one context. Modules are never unloaded: they live
// as long as the context, and unloading at process exit races driver teardown.
struct detail::LoadedFunction {
  CUfunction function = nullptr;
  unsigned shared_limit = kDefaultSharedLimit;  // opt-in dynamic shared memory set so far
};

namespace {

using Loaded = detail::LoadedFunction;

// (context, kernel name, image) -> Loaded. std::less<> lets find() take a
// tuple of references, so lookups do not copy the image.
std::mutex g_registry_mutex;  // also guards Loaded::shared_limit
std::map<std::tuple<CUcontext, std::string, std::string>, Loaded, std::less<>> g_registry;

const DriverApi& initialized_driver() {
  static const CUresult init = driver().cuInit(0);  // driver() throws if libcuda is missing
  check_cu(init, "cuInit");
  return driver();
}

CUdevice get_device(int device) {
  CUdevice dev = 0;
  check_cu(initialized_driver().cuDeviceGet(&dev, device), "cuDeviceGet");
  return dev;
}

int attribute(int device, CUdevice_attribute attr) {
  int value = 0;
  check_cu(initialized_driver().cuDeviceGetAttribute(&value, attr, get_device(device)), "cuDeviceGetAttribute");
  return value;
}

CUcontext context_for(int device) {
  const DriverApi& cu = initialized_driver();
  CUcontext ctx = nullptr;
  check_cu(cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  const CUdevice want = get_device(device);
  if (ctx == nullptr) {
    // Deliberately never released: it is the context torch shares, and the
    // modules loaded into it must stay valid.
    check_cu(cu.cuDevicePrimaryCtxRetain(&ctx, want), "cuDevicePrimaryCtxRetain");
    check_cu(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    return ctx;
  }
  CUdevice current = 0;
  check_cu(cu.cuCtxGetDevice(&current), "cuCtxGetDevice");
  if (current != want) {
    throw CudaError("fuseforge: launch on device " + std::to_string(device) +
                    " but the current CUDA context belongs to device " + std::to_string(current) +
                    "; make that device current first " + "(e.g. with torch.cuda.device)");
  }
  return ctx;
}

Loaded* load(const CompiledKernel& k, CUcontext ctx) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto it = g_registry.find(std::tie(ctx, k.name, k.image));
  if (it != g_registry.end()) return &it->second;
  const DriverApi& cu = initialized_driver();
  CUmodule module = nullptr;
  check_cu(cu.cuModuleLoadData(&module, k.image.c_str()), "cuModuleLoadData", k.name);
  Loaded loaded;
  check_cu(cu.cuModuleGetFunction(&loaded.function, module, k.name.c_str()), "cuModuleGetFunction", k.name);
  return &g_registry.emplace(std::make_tuple(ctx, k.name, k.image), loaded).first->second;
}

void launch_loaded(Loaded& loaded, const std::string& name, Dim3 grid, Dim3 block, unsigned shared_bytes, void** args,
                   std::uintptr_t stream) {
  const DriverApi& cu = initialized_driver();
  if (shared_bytes > kDefaultSharedLimit) {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    if (shared_bytes > loaded.shared_limit) {
      check_cu(cu.cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(shared_bytes)),
               "cuFuncSetAttribute", name);
      loaded.shared_limit = shared_bytes;
    }
  }
  check_cu(cu.cuLaunchKernel(loaded.function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes,
                             reinterpret_cast<CUstream>(stream), args, nullptr),
           "cuLaunchKernel", name);
}

}  // namespace

bool driver_available() {
  try {
    initialized_driver();
    return true;
  } catch (const CudaError&) {
    return false;
  }
}

int device_sm_count(int device) { return attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT); }

int device_arch(int device) {
  return attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
         attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
}

LoadedKernel::LoadedKernel(CompiledKernel kernel) : kernel_(std::move(kernel)) {}

void LoadedKernel::launch(int device, Dim3 grid, Dim3 block, unsigned shared_bytes, void** args,
                          std::uintptr_t stream) {
  const CUcontext ctx = context_for(device);
  Loaded* loaded = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [c, l] : per_context_) {
      if (c == ctx) loaded = l;
    }
    if (loaded == nullptr) {
      loaded = load(kernel_, ctx);
      per_context_.emplace_back(ctx, loaded);
    }
  }
  launch_loaded(*loaded, kernel_.name, grid, block, shared_bytes, args, stream);
}

void launch(const CompiledKernel& k, int device, Dim3 grid, Dim3 block, unsigned shared_bytes, void** args,
            std::uintptr_t stream) {
  launch_loaded(*load(k, context_for(device)), k.name, grid, block, shared_bytes, args, stream);
}

}  // namespace ff::runtime
