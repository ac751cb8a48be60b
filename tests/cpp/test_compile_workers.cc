// NVRTC compiles in worker processes (csrc/runtime/compile_workers.cc): the
// job file round-trips, a worker's image is the one the caller would have
// compiled, and every way a worker can fail leaves the compile to the caller.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cache.h"
#include "runtime/compile_workers.h"
#include "runtime/compiler.h"
#include "runtime/cuda_libs.h"
#include "runtime/env.h"
#include "runtime_test_util.h"

using namespace ff::runtime;
using namespace ff::testing;

namespace {

// Registers the built worker for one test, and none after it.
class CompileWorkers : public RuntimeCache {
 protected:
  void SetUp() override {
    RuntimeCache::SetUp();
    set_compile_worker(FF_NVRTC_WORKER);
  }
  void TearDown() override {
    set_compile_worker("");
    RuntimeCache::TearDown();
  }
  static CompileJob add_job() { return {kAddSource, "ff_test_add", 90, {"-DUNUSED=1"}, false, nvrtc_path()}; }
};

}  // namespace

TEST(CompileJobFile, RoundTripsEveryField) {
  const CompileJob job{"line one\n12\nline three", "k", 90, {"-I/a b", "", "-DX=\n"}, true, "/lib/libnvrtc.so.13"};
  const CompileJob back = decode_job(encode_job(job));
  EXPECT_EQ(back.source, job.source);
  EXPECT_EQ(back.name, job.name);
  EXPECT_EQ(back.arch, 90);
  EXPECT_EQ(back.options, job.options);
  EXPECT_TRUE(back.sm90a);
  EXPECT_EQ(back.nvrtc_library, job.nvrtc_library);
}

TEST(CompileJobFile, MalformedFilesAreRefused) {
  const std::string good = encode_job({"src", "k", 90, {"-x"}, false, ""});
  for (const std::string& bad : {std::string(), good.substr(0, good.size() - 1), good + "x", "abc\n" + good,
                                 std::string("99999999999999999999\n")})
    EXPECT_THROW(decode_job(bad), std::invalid_argument) << bad;
}

TEST_F(CompileWorkers, WorkerCompilesWhatTheCallerWould) {
  const CompileJob job = add_job();
  const CompiledKernel here = compile_kernel(job.source, job.name, job.arch, job.options);
  const std::uint64_t before = nvrtc_compile_count();
  const WorkerResult result = compile_in_worker(job);
  ASSERT_TRUE(result.kernel.has_value()) << result.failure;
  const CompiledKernel* there = &*result.kernel;
  EXPECT_EQ(nvrtc_compile_count(), before + 1);  // counted although another process ran it
  EXPECT_TRUE(is_elf(there->image));
  EXPECT_EQ(there->is_cubin, here.is_cubin);
  EXPECT_EQ(there->name, "ff_test_add");
  EXPECT_EQ(there->image.size(), here.image.size());
}

TEST_F(CompileWorkers, FailuresLeaveTheCompileToTheCaller) {
  CompileJob broken = add_job();
  broken.source += "this is not CUDA";
  const WorkerResult failed = compile_in_worker(broken);
  EXPECT_FALSE(failed.kernel.has_value());
  EXPECT_NE(failed.failure.find("ff_test_add"), std::string::npos) << failed.failure;  // NVRTC's error, named

  set_compile_worker(std::string(FF_NVRTC_WORKER) + "-missing");
  ::testing::internal::CaptureStderr();
  const WorkerResult unstarted = compile_in_worker(add_job());
  EXPECT_FALSE(unstarted.kernel.has_value());
  EXPECT_EQ(unstarted.failure, "");
  // compile_cached falls back to compiling in this process, and says once that it does.
  const std::uint64_t before = nvrtc_compile_count();
  const CompiledKernel k = compile_cached(kAddSource, "ff_test_add", 90, {}, false, /*in_worker=*/true);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(nvrtc_compile_count(), before + 1);
  EXPECT_TRUE(is_elf(k.image));
  EXPECT_NE(err.find("cannot start the compile worker"), std::string::npos) << err;
}

// A worker that dies, or exits with an error while the kernel compiles in
// this process, is reported: the kernel is compiled, not silently.
TEST_F(CompileWorkers, AWorkerThatFailsOnAGoodKernelIsReported) {
  const std::string killed = dir_.path() + "/killed-worker";
  std::ofstream(killed) << "#!/bin/sh\nkill -9 $$\n";
  std::filesystem::permissions(killed, std::filesystem::perms::owner_all);
  for (const auto& [worker, why] :
       {std::pair<std::string, std::string>{"/bin/false", "exit status 1"}, {killed, "killed by signal 9"}}) {
    set_compile_worker(worker);
    EXPECT_EQ(compile_in_worker(add_job()).failure, why);
    clear_memory_cache();
    std::filesystem::remove_all(dir_.path() + "/cache");
    ScopedEnv cache("FUSEFORGE_CACHE_DIR", dir_.path() + "/cache");
    ::testing::internal::CaptureStderr();
    const CompiledKernel k = compile_cached(kAddSource, "ff_test_add", 90, {}, false, /*in_worker=*/true);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(is_elf(k.image));
    EXPECT_NE(err.find("the compile worker failed on ff_test_add (" + why + ")"), std::string::npos) << err;
  }
}

TEST_F(CompileWorkers, CachedCompileInAWorkerFillsTheDiskCache) {
  const CompiledKernel first = compile_cached(kAddSource, "ff_test_add", 90, {}, false, /*in_worker=*/true);
  ASSERT_EQ(files_in(dir_.path()).size(), 1u);
  clear_memory_cache();
  const std::uint64_t before = nvrtc_compile_count();
  const CompiledKernel again = compile_cached(kAddSource, "ff_test_add", 90);
  EXPECT_EQ(nvrtc_compile_count(), before);  // a disk hit
  EXPECT_EQ(again.image, first.image);
}

TEST(CompileJobsSetting, TakesPositiveIntegersOnly) {
  {
    ScopedEnv unset("FUSEFORGE_COMPILE_JOBS", std::nullopt);
    EXPECT_EQ(env::compile_jobs(), 0);  // one per core
  }
  {
    ScopedEnv three("FUSEFORGE_COMPILE_JOBS", "3");
    EXPECT_EQ(env::compile_jobs(), 3);
  }
  for (const char* bad : {"0", "-1", "two", "2.5", " 4", "99999999999"}) {
    ScopedEnv set("FUSEFORGE_COMPILE_JOBS", bad);
    EXPECT_THROW(env::compile_jobs(), std::invalid_argument) << bad;
  }
}

// Ctrl-C (or a kill of the process group) reaches the workers too: the caller
// stops rather than compiling every remaining kernel in its own process.
TEST_F(CompileWorkers, AnInterruptedWorkerStopsTheCompile) {
  const std::string interrupted = dir_.path() + "/interrupted-worker";
  std::ofstream(interrupted) << "#!/bin/sh\nkill -TERM $$\nsleep 5\n";
  std::filesystem::permissions(interrupted, std::filesystem::perms::owner_all);
  set_compile_worker(interrupted);
  const WorkerResult result = compile_in_worker(add_job());
  EXPECT_TRUE(result.interrupted) << result.failure;
  const std::uint64_t before = nvrtc_compile_count();
  EXPECT_THROW(compile_cached(kAddSource, "ff_test_add", 90, {}, false, /*in_worker=*/true), CompileInterrupted);
  EXPECT_EQ(nvrtc_compile_count(), before);  // not compiled here instead
}
