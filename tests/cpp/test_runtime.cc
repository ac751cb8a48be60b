// Tests of csrc/runtime: NVRTC compilation, the kernel cache, error messages
// and driver loading. Compilation runs on any machine with NVRTC; launches
// only where a GPU driver is present.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cache.h"
#include "runtime/check.h"
#include "runtime/compiler.h"
#include "runtime/cuda_libs.h"
#include "runtime/launcher.h"
#include "runtime_test_util.h"

namespace fs = std::filesystem;
using namespace ff::runtime;
using namespace ff::testing;

TEST(RuntimeCompiler, CompilesCubinForSm90) {
  const CompiledKernel k = compile_kernel(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(k.name, "ff_test_add");
  EXPECT_TRUE(k.is_cubin);
  ASSERT_GT(k.image.size(), 4u);
  EXPECT_TRUE(is_elf(k.image));
  EXPECT_GE(nvrtc_version(), 12000);
}

TEST(RuntimeCompiler, DefaultOptionsAreAccurateAndTargetTheSm) {
  const CompilePlan plan = plan_compile(90, {"-DFF_EXTRA=1"});
  const auto has = [&](const std::string& opt) {
    return std::find(plan.options.begin(), plan.options.end(), opt) != plan.options.end();
  };
  EXPECT_TRUE(plan.is_cubin);
  EXPECT_EQ(plan.options.front(), "-arch=sm_90");
  EXPECT_TRUE(has("-std=c++17"));
  EXPECT_TRUE(has("-default-device"));
  EXPECT_TRUE(has("-lineinfo"));
  EXPECT_TRUE(has("-DFF_EXTRA=1"));
  EXPECT_FALSE(has("--use_fast_math"));
  EXPECT_FALSE(has("-use_fast_math"));
}

TEST(RuntimeCompiler, SyntaxErrorNamesKernelAndNvrtcLog) {
  TempDir dump;
  ScopedEnv env("FUSEFORGE_DUMP_DIR", dump.path());
  const std::string bad = "extern \"C\" __global__ void ff_test_broken(float* x) { x[0] = ; }\n";
  try {
    compile_kernel(bad, "ff_test_broken", 90);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nvrtcCompileProgram(ff_test_broken)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected an expression"), std::string::npos) << msg;  // NVRTC's log
    const std::string dumped = dump.path() + "/ff_test_broken.cu";
    EXPECT_NE(msg.find(dumped), std::string::npos) << msg;
    EXPECT_EQ(read_file(dumped), bad);
  }
}

TEST(RuntimeCompiler, NewerArchThanNvrtcKnowsFallsBackToPtx) {
  const CompiledKernel k = compile_kernel(kAddSource, "ff_test_add", 999);
  EXPECT_FALSE(k.is_cubin);
  EXPECT_NE(k.image.find(".entry ff_test_add"), std::string::npos);
  EXPECT_NE(k.image.find(".target sm_"), std::string::npos);
  EXPECT_EQ(k.image.find('\0'), std::string::npos);  // cuModuleLoadData reads it as a C string
}

TEST(RuntimeCompiler, ArchOlderThanAnySupportedThrows) {
  EXPECT_THROW(compile_kernel(kAddSource, "ff_test_add", 10), CudaError);
}

TEST(RuntimeCheck, NvrtcErrorNamesCallAndKernel) {
  try {
    check_nvrtc(NVRTC_ERROR_INVALID_OPTION, "nvrtcCompileProgram", "ff_k");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_STREQ(e.what(), "nvrtcCompileProgram(ff_k): NVRTC_ERROR_INVALID_OPTION");
  }
  EXPECT_NO_THROW(check_nvrtc(NVRTC_SUCCESS, "nvrtcVersion"));
}

TEST(RuntimeCheck, CuErrorNamesCallAndKernel) {
  EXPECT_NO_THROW(check_cu(CUDA_SUCCESS, "cuInit"));
  try {
    check_cu(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel", "ff_pointwise_add_0");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string expected = driver_available()
        ? "cuLaunchKernel(ff_pointwise_add_0): CUDA_ERROR_INVALID_VALUE: invalid argument"
        : "cuLaunchKernel(ff_pointwise_add_0): CUDA error 1";  // no driver to name the code
    EXPECT_EQ(e.what(), expected);
  }
}

TEST(RuntimeLibs, NvrtcSearchOrder) {
  ScopedEnv env("FUSEFORGE_NVRTC", "/opt/custom/libnvrtc.so.13");
  add_library_search_dir("/opt/ff_test_wheel/lib");
  const std::vector<std::string> c = nvrtc_candidates();
  ASSERT_GE(c.size(), 7u);
  EXPECT_EQ(c[0], "/opt/custom/libnvrtc.so.13");
  const auto wheel = std::find(c.begin(), c.end(), "/opt/ff_test_wheel/lib/libnvrtc.so.13");
  ASSERT_NE(wheel, c.end());
  EXPECT_EQ(*(wheel + 1), "/opt/ff_test_wheel/lib/libnvrtc.so.12");
  EXPECT_EQ(*(wheel + 2), "/opt/ff_test_wheel/lib/libnvrtc.so");
  const std::vector<std::string> tail(c.end() - 3, c.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}));
}

TEST_F(RuntimeCache, SecondCompileIsServedFromDisk) {
  const std::uint64_t before = nvrtc_compile_count();
  const CompiledKernel first = compile_cached(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(nvrtc_compile_count(), before + 1);

  const std::vector<std::string> files = files_in(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  const std::string prefix = "ff_test_add-sm90-nvrtc" + std::to_string(nvrtc_version()) + "-";
  EXPECT_EQ(files[0].rfind(prefix, 0), 0u) << files[0];
  EXPECT_EQ(files[0].size(), prefix.size() + 32 + std::string(".cubin").size()) << files[0];
  EXPECT_EQ(files[0].substr(files[0].size() - 6), ".cubin");

  clear_memory_cache();  // force the disk path
  const CompiledKernel second = compile_cached(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(nvrtc_compile_count(), before + 1);
  EXPECT_EQ(second.image, first.image);
  EXPECT_TRUE(second.is_cubin);
  EXPECT_EQ(second.name, "ff_test_add");

  // The in-memory map answers without touching the disk at all.
  fs::remove(dir_.path() + "/" + files[0]);
  EXPECT_EQ(compile_cached(kAddSource, "ff_test_add", 90).image, first.image);
  EXPECT_EQ(nvrtc_compile_count(), before + 1);
}

TEST_F(RuntimeCache, DifferentInputsGiveDifferentEntries) {
  const std::uint64_t before = nvrtc_compile_count();
  compile_cached(kAddSource, "ff_test_add", 90);
  compile_cached(kAddSource, "ff_test_add", 80);
  compile_cached(kAddSource, "ff_test_add", 90, {"-DFF_VARIANT=1"});
  compile_cached(std::string(kAddSource) + "// changed\n", "ff_test_add", 90);
  EXPECT_EQ(nvrtc_compile_count(), before + 4);
  EXPECT_EQ(files_in(dir_.path()).size(), 4u);
}

TEST_F(RuntimeCache, CacheDirComesFromEnvironment) {
  EXPECT_EQ(cache_dir(), dir_.path());
  {
    ScopedEnv no_dir("FUSEFORGE_CACHE_DIR", std::nullopt);
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/ff_xdg");
    EXPECT_EQ(cache_dir(), "/tmp/ff_xdg/fuseforge");
    ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
    ScopedEnv home("HOME", "/tmp/ff_home");
    EXPECT_EQ(cache_dir(), "/tmp/ff_home/.cache/fuseforge");
  }
  // A nested directory that does not exist yet is created on first write.
  const std::string nested = dir_.path() + "/a/b";
  ScopedEnv env("FUSEFORGE_CACHE_DIR", nested);
  compile_cached(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(files_in(nested).size(), 1u);
}

TEST_F(RuntimeCache, DisableCacheSkipsTheDisk) {
  ScopedEnv disable("FUSEFORGE_DISABLE_CACHE", "1");
  const std::uint64_t before = nvrtc_compile_count();
  compile_cached(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(nvrtc_compile_count(), before + 1);
  EXPECT_TRUE(files_in(dir_.path()).empty());
}

TEST_F(RuntimeCache, UnwritableDirWarnsOnceAndStillCompiles) {
  // A path below a regular file can never be created, even by root.
  const std::string blocker = dir_.path() + "/not_a_dir";
  std::ofstream(blocker) << "x";
  ScopedEnv env("FUSEFORGE_CACHE_DIR", blocker + "/cache");

  testing::internal::CaptureStderr();
  const CompiledKernel k = compile_cached(kAddSource, "ff_test_add", 90);
  clear_memory_cache();
  compile_cached(kAddSource, "ff_test_add", 80);
  const std::string err = testing::internal::GetCapturedStderr();

  EXPECT_TRUE(is_elf(k.image));
  const size_t first = err.find("not writable");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("not writable", first + 1), std::string::npos) << err;  // once
}

TEST(RuntimeDriver, UnavailableWithoutGpu) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU device node exists";
  EXPECT_FALSE(driver_available());
  EXPECT_FALSE(driver_available());  // the failure is cached, still no throw
  EXPECT_THROW(device_arch(0), CudaError);
  const CompiledKernel k = compile_kernel(kAddSource, "ff_test_add", 90);
  EXPECT_THROW(launch(k, 0, {1, 1, 1}, {32, 1, 1}, 0, nullptr, 0), CudaError);
}

TEST(RuntimeDriver, LaunchesOnGpu) {
  if (!driver_available()) GTEST_SKIP() << "no CUDA driver";
  EXPECT_GT(device_sm_count(0), 0);
  const int arch = device_arch(0);
  EXPECT_GE(arch, 50);
  // Needs no buffers, so it can run without a memory API; the 64 KiB of
  // dynamic shared memory exercises the opt-in limit (allowed on sm_70+).
  const char* src = R"(
extern "C" __global__ void ff_test_smem(int n) {
  extern __shared__ float buf[];
  if (threadIdx.x < n) buf[threadIdx.x] = 1.0f;
})";
  LoadedKernel k(compile_cached(src, "ff_test_smem", arch));
  int n = 16;
  void* args[] = {&n};
  EXPECT_NO_THROW(k.launch(0, {2, 1, 1}, {32, 1, 1}, 0, args, 0));
  if (arch >= 70) EXPECT_NO_THROW(k.launch(0, {2, 1, 1}, {32, 1, 1}, 64 * 1024, args, 0));
  EXPECT_NO_THROW(launch(k.kernel(), 0, {1, 1, 1}, {32, 1, 1}, 0, args, 0));
  // Far beyond any GPU's shared memory: the error names the call and kernel.
  try {
    k.launch(0, {1, 1, 1}, {32, 1, 1}, 16u << 20, args, 0);
    ADD_FAILURE() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("(ff_test_smem): CUDA_ERROR_"), std::string::npos)
        << e.what();
  }
}
