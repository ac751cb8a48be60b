#include "runtime/compiler.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>

#include "runtime/check.h"
#include "runtime/cuda_libs.h"
#include "runtime/env.h"

namespace ff::runtime {
namespace {

std::atomic<std::uint64_t> g_compile_count{0};

std::mutex g_include_mutex;
std::vector<std::string> g_cutlass_includes;  // guarded by g_include_mutex

const std::vector<int>& supported_archs() {
  static const std::vector<int> archs = [] {
    const NvrtcApi& rtc = nvrtc();
    int n = 0;
    check_nvrtc(rtc.nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
    std::vector<int> out(n);
    check_nvrtc(rtc.nvrtcGetSupportedArchs(out.data()), "nvrtcGetSupportedArchs");
    std::sort(out.begin(), out.end());
    return out;
  }();
  return archs;
}

// Destroys the program on every exit path, including throws.
class Program {
 public:
  Program(const std::string& source, const std::string& kernel_name) {
    check_nvrtc(nvrtc().nvrtcCreateProgram(&prog_, source.c_str(), (kernel_name + ".cu").c_str(), 0, nullptr, nullptr),
                "nvrtcCreateProgram", kernel_name);
  }
  ~Program() { nvrtc().nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string program_log(nvrtcProgram prog, const std::string& kernel_name) {
  const NvrtcApi& rtc = nvrtc();
  size_t size = 0;
  check_nvrtc(rtc.nvrtcGetProgramLogSize(prog, &size), "nvrtcGetProgramLogSize", kernel_name);
  std::string log(size, '\0');
  check_nvrtc(rtc.nvrtcGetProgramLog(prog, log.data()), "nvrtcGetProgramLog", kernel_name);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Writes the failing source to $FUSEFORGE_DUMP_DIR; returns the message suffix.
std::string dump_source(const std::string& source, const std::string& kernel_name) {
  const std::string dir = env::dump_dir();
  if (dir.empty()) return "";
  const std::string path = dir + "/" + kernel_name + ".cu";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << source;
  out.close();
  if (!out) return "\n(could not write the source to " + path + ")";
  return "\nsource written to " + path;
}

}  // namespace

void add_cutlass_include_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_include_mutex);
  if (!dir.empty() && std::find(g_cutlass_includes.begin(), g_cutlass_includes.end(), dir) == g_cutlass_includes.end())
    g_cutlass_includes.push_back(dir);
}

bool cutlass_available() {
  std::lock_guard<std::mutex> lock(g_include_mutex);
  return !g_cutlass_includes.empty();
}

std::vector<std::string> cutlass_options() {
  std::lock_guard<std::mutex> lock(g_include_mutex);
  std::vector<std::string> out;
  for (const std::string& dir : g_cutlass_includes) out.push_back("-I" + dir);
  return out;
}

int nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtc().nvrtcVersion(&major, &minor), "nvrtcVersion");
  return major * 1000 + minor * 10;
}

std::uint64_t nvrtc_compile_count() { return g_compile_count.load(); }

void count_worker_compile() { ++g_compile_count; }

CompilePlan plan_compile(int arch, const std::vector<std::string>& extra_options, bool sm90a) {
  const std::vector<int>& archs = supported_archs();
  CompilePlan plan;
  std::string target;
  if (sm90a) {
    if (arch != 90)
      throw CudaError("fuseforge: a Hopper kernel (wgmma, sm_90a) cannot run on sm_" + std::to_string(arch));
    target = "-arch=sm_90a";
  } else if (std::binary_search(archs.begin(), archs.end(), arch)) {
    target = "-arch=sm_" + std::to_string(arch);
  } else {
    auto newest_below = std::upper_bound(archs.begin(), archs.end(), arch);
    if (newest_below == archs.begin()) {
      std::string list;
      for (int a : archs) list += " " + std::to_string(a);
      throw CudaError("fuseforge: NVRTC " + std::to_string(nvrtc_version()) + " cannot target sm_" +
                      std::to_string(arch) + " or any older architecture (supported:" + list + ")");
    }
    target = "-arch=compute_" + std::to_string(*(newest_below - 1));
    plan.is_cubin = false;
  }
  plan.options = {target, "-std=c++17", "-default-device", "-lineinfo"};
  plan.options.insert(plan.options.end(), extra_options.begin(), extra_options.end());
  return plan;
}

CompiledKernel compile_kernel(const std::string& source, const std::string& kernel_name, int arch,
                              const std::vector<std::string>& extra_options, bool sm90a) {
  const NvrtcApi& rtc = nvrtc();
  const CompilePlan plan = plan_compile(arch, extra_options, sm90a);
  std::vector<const char*> argv;
  for (const std::string& opt : plan.options) argv.push_back(opt.c_str());

  Program prog(source, kernel_name);
  ++g_compile_count;
  const nvrtcResult rc = rtc.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  CompiledKernel k{kernel_name, "", plan.is_cubin, program_log(prog.get(), kernel_name)};
  if (rc != NVRTC_SUCCESS) {
    throw CudaError("nvrtcCompileProgram(" + kernel_name + "): " + rtc.nvrtcGetErrorString(rc) + "\n" + k.log +
                    dump_source(source, kernel_name));
  }

  size_t size = 0;
  if (plan.is_cubin) {
    check_nvrtc(rtc.nvrtcGetCUBINSize(prog.get(), &size), "nvrtcGetCUBINSize", kernel_name);
    k.image.resize(size);
    check_nvrtc(rtc.nvrtcGetCUBIN(prog.get(), k.image.data()), "nvrtcGetCUBIN", kernel_name);
  } else {
    check_nvrtc(rtc.nvrtcGetPTXSize(prog.get(), &size), "nvrtcGetPTXSize", kernel_name);
    k.image.resize(size);
    check_nvrtc(rtc.nvrtcGetPTX(prog.get(), k.image.data()), "nvrtcGetPTX", kernel_name);
    // The size counts the terminating NUL; std::string keeps its own.
    if (!k.image.empty() && k.image.back() == '\0') k.image.pop_back();
  }
  return k;
}

}  // namespace ff::runtime
