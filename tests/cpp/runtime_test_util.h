#pragma once
// Shared by the runtime tests (test_runtime.cc, test_cache_faults.cc): a small
// kernel to compile, scoped environment variables, temporary directories and
// the fixture of the kernel cache tests.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cache.h"

namespace ff::testing {

inline const char* const kAddSource = R"(
extern "C" __global__ void ff_test_add(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
)";

// Sets (or with nullopt unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ff_runtime_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline bool is_elf(const std::string& image) { return image.compare(0, 4, "\x7f" "ELF") == 0; }

// Each cache test gets its own FUSEFORGE_CACHE_DIR and an empty in-memory map.
class RuntimeCache : public ::testing::Test {
 protected:
  void SetUp() override { runtime::clear_memory_cache(); }
  void TearDown() override { runtime::clear_memory_cache(); }

  TempDir dir_;
  ScopedEnv cache_dir_{"FUSEFORGE_CACHE_DIR", dir_.path()};
  ScopedEnv disable_{"FUSEFORGE_DISABLE_CACHE", std::nullopt};
};

}  // namespace ff::testing
