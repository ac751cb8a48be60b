#include "runtime/cuda_libs.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "runtime/check.h"
#include "runtime/env.h"

namespace ff::runtime {
namespace {

// Two levels so the argument (possibly a cuda.h macro) is expanded first.
#define FF_STRINGIZE_IMPL(x) #x
#define FF_STRINGIZE(x) FF_STRINGIZE_IMPL(x)

const char* const kNvrtcSonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

template <class Fn>
void resolve(void* handle, const char* symbol, Fn& slot, std::string& missing) {
  slot = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

void resolve_all(void* handle, DriverApi& api, std::string& missing) {
#define FF_RESOLVE(name) resolve(handle, FF_STRINGIZE(name), api.name, missing);
  FF_DRIVER_FUNCTIONS(FF_RESOLVE)
#undef FF_RESOLVE
}

void resolve_all(void* handle, NvrtcApi& api, std::string& missing) {
#define FF_RESOLVE(name) resolve(handle, FF_STRINGIZE(name), api.name, missing);
  FF_NVRTC_FUNCTIONS(FF_RESOLVE)
#undef FF_RESOLVE
}

// Opens the first candidate that has every symbol of Api and returns its path.
// On failure returns "" and appends one "  path: reason" line per candidate to
// `tried`.
template <class Api>
std::string load_first(const std::vector<std::string>& candidates, Api& api, std::string& tried) {
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "  " + path + ": " + (why ? why : "dlopen failed") + "\n";
      continue;
    }
    std::string missing;
    resolve_all(handle, api, missing);
    if (missing.empty()) return path;  // handle stays open for the process lifetime
    tried += "  " + path + ": missing symbols " + missing + "\n";
    dlclose(handle);
  }
  return "";
}

// NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by bare soname when it
// compiles, and the pip wheel's libnvrtc has no RUNPATH pointing at its own
// directory. Loading the sibling first makes that lookup resolve to it (the
// dynamic loader matches already-loaded sonames). Best effort: if it is not
// there, NVRTC's own search applies.
void preload_builtins_next_to(const std::string& nvrtc_path, const NvrtcApi& api) {
  const size_t slash = nvrtc_path.rfind('/');
  int major = 0, minor = 0;
  if (slash == std::string::npos || api.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return;
  const std::string builtins =
      nvrtc_path.substr(0, slash) + "/libnvrtc-builtins.so." + std::to_string(major) + "." + std::to_string(minor);
  if (dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) dlerror();  // clear the error
}

std::mutex& nvrtc_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::string>& search_dirs() {  // guarded by nvrtc_mutex()
  static std::vector<std::string> dirs;
  return dirs;
}

std::string& loaded_nvrtc_path() {  // guarded by nvrtc_mutex()
  static std::string path;
  return path;
}

std::vector<std::string> nvrtc_candidates_locked() {
  std::vector<std::string> out;
  if (std::string library = env::nvrtc_library(); !library.empty()) out.push_back(std::move(library));
  for (const std::string& dir : search_dirs()) {
    for (const char* soname : kNvrtcSonames) out.push_back(dir + "/" + soname);
  }
  for (const char* soname : kNvrtcSonames) out.emplace_back(soname);
  return out;
}

}  // namespace

const DriverApi& driver() {
  static std::once_flag once;
  static DriverApi api;
  static std::string error;
  std::call_once(once, [] {
    std::string tried;
    if (load_first({"libcuda.so.1"}, api, tried).empty()) {
      error = "fuseforge: cannot load the CUDA driver (is an NVIDIA driver installed?):\n" + tried;
    }
  });
  if (!error.empty()) throw CudaError(error);
  return api;
}

const NvrtcApi& nvrtc() {
  static NvrtcApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(nvrtc_mutex());
  if (loaded) return api;
  std::string tried;
  NvrtcApi attempt;
  const std::string path = load_first(nvrtc_candidates_locked(), attempt, tried);
  if (path.empty()) {
    throw CudaError("fuseforge: cannot load NVRTC; tried:\n" + tried +
                    "Set FUSEFORGE_NVRTC to the full path of libnvrtc.so, or install the CUDA "
                    "toolkit / the nvidia-cuda-nvrtc wheel.");
  }
  preload_builtins_next_to(path, attempt);
  api = attempt;
  loaded_nvrtc_path() = path;
  loaded = true;
  return api;
}

std::string nvrtc_path() {
  nvrtc();
  std::lock_guard<std::mutex> lock(nvrtc_mutex());
  return loaded_nvrtc_path();
}

void add_library_search_dir(const std::string& dir) {
  if (dir.empty()) return;
  std::lock_guard<std::mutex> lock(nvrtc_mutex());
  std::vector<std::string>& dirs = search_dirs();
  if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
}

std::vector<std::string> nvrtc_candidates() {
  std::lock_guard<std::mutex> lock(nvrtc_mutex());
  return nvrtc_candidates_locked();
}

}  // namespace ff::runtime
