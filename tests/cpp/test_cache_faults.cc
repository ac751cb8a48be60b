// Faults of the on-disk kernel cache (csrc/runtime/cache.cc): damaged entries,
// well-formed entries with the wrong image, and processes sharing one cache
// directory. NVRTC compiles without a GPU, so these run on any machine;
// nvrtc_compile_count() tells a compile from a cache hit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/cache.h"
#include "runtime/compiler.h"
#include "runtime_test_util.h"

namespace fs = std::filesystem;
using namespace ff::runtime;
using namespace ff::testing;

namespace {

// Compiles the test kernel and returns its entry's path (the only file in `dir`).
std::string compiled_entry(const std::string& dir, int arch) {
  compile_cached(kAddSource, "ff_test_add", arch);
  const std::vector<std::string> files = files_in(dir);
  EXPECT_EQ(files.size(), 1u);
  return dir + "/" + files.at(0);
}

// Recompiles after the entry at `path` became `bytes`; expects one NVRTC run,
// the original image, a "corrupt" warning and the entry rewritten whole.
void expect_recompiled(const std::string& path, const std::string& bytes, int arch, const std::string& image,
                       const std::string& what) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  clear_memory_cache();
  const std::uint64_t before = nvrtc_compile_count();
  ::testing::internal::CaptureStderr();
  const CompiledKernel k = compile_cached(kAddSource, "ff_test_add", arch);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(nvrtc_compile_count(), before + 1) << what;
  EXPECT_EQ(k.image, image) << what;
  EXPECT_NE(err.find("corrupt"), std::string::npos) << what << ": " << err;
  const std::string rewritten = read_file(path);
  EXPECT_EQ(rewritten.substr(rewritten.size() - image.size()), image) << what;
}

}  // namespace

class CacheFaults : public RuntimeCache {};

TEST_F(CacheFaults, TruncatedOrCorruptEntryIsRecompiled) {
  const CompiledKernel original = compile_cached(kAddSource, "ff_test_add", 90);
  const std::string path = compiled_entry(dir_.path(), 90);
  const std::string good = read_file(path);
  ASSERT_GT(good.size(), original.image.size());  // header + payload

  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"empty", ""},
      {"header cut short", good.substr(0, 10)},
      {"header only", good.substr(0, good.size() - original.image.size())},
      {"truncated payload", good.substr(0, good.size() / 2)},
      {"payload bit flip", good.substr(0, good.size() - 1) + char(good.back() ^ 0x5a)},
      {"wrong magic", "XXXX" + good.substr(4)},
      {"trailing bytes", good + "tail"},
  };
  for (const auto& [what, bytes] : damaged) {
    expect_recompiled(path, bytes, 90, original.image, what);
    EXPECT_EQ(read_file(path), good) << what;
  }
}

// A well-formed entry (magic, length and checksum all agree) holding another
// kernel's or another format's image is not handed to the driver either.
TEST_F(CacheFaults, WellFormedEntryWithTheWrongImageIsRecompiled) {
  const CompiledKernel cubin = compile_cached(kAddSource, "ff_test_add", 90);
  const std::string cubin_path = compiled_entry(dir_.path(), 90);
  const std::string cubin_entry = read_file(cubin_path);

  TempDir other;
  std::string ptx_entry, other_kernel_entry;
  {
    ScopedEnv env("FUSEFORGE_CACHE_DIR", other.path());
    compile_cached(kAddSource, "ff_test_add", 999);  // newer than NVRTC knows: PTX
    ptx_entry = read_file(other.path() + "/" + files_in(other.path()).at(0));
    fs::remove(other.path() + "/" + files_in(other.path()).at(0));
    std::string renamed = kAddSource;
    renamed.replace(renamed.find("ff_test_add"), 11, "ff_test_sum");
    compile_cached(renamed, "ff_test_sum", 90);
    other_kernel_entry = read_file(other.path() + "/" + files_in(other.path()).at(0));
  }
  expect_recompiled(cubin_path, ptx_entry, 90, cubin.image, "PTX in a cubin entry");
  expect_recompiled(cubin_path, other_kernel_entry, 90, cubin.image, "another kernel's cubin");
  EXPECT_EQ(read_file(cubin_path), cubin_entry);

  // And the other way round: a cubin where PTX for the kernel is expected.
  const CompiledKernel ptx = compile_cached(kAddSource, "ff_test_add", 999);
  std::string ptx_path;
  for (const std::string& f : files_in(dir_.path()))
    if (f.size() > 4 && f.substr(f.size() - 4) == ".ptx") ptx_path = dir_.path() + "/" + f;
  ASSERT_FALSE(ptx_path.empty());
  expect_recompiled(ptx_path, cubin_entry, 999, ptx.image, "a cubin in a PTX entry");
}

namespace {

constexpr int kProcesses = 8;
constexpr int kRounds = 4;

struct Job {
  std::vector<std::string> options;
  int arch;
};

// Four entries: two variants, each as a cubin (sm_90) and as PTX.
std::vector<Job> shared_jobs() {
  std::vector<Job> jobs;
  for (const char* variant : {"-DFF_VARIANT=1", "-DFF_VARIANT=2"})
    for (int arch : {90, 999}) jobs.push_back({{variant}, arch});
  return jobs;
}

bool valid_image(const CompiledKernel& k) {
  if (k.is_cubin) return is_elf(k.image) && k.image.find("ff_test_add") != std::string::npos;
  return k.image.find('\0') == std::string::npos && k.image.find(".entry ff_test_add") != std::string::npos;
}

// One process: waits for the start signal, then in every round forgets its
// in-memory kernels, deletes one entry (so that the entry is written again
// while others read it) and compiles every job. Writes one line per job with
// the image's size and hash; exits 0 when every image was valid and the same
// in every round.
[[noreturn]] void run_child(int id, int start_fd, const std::string& dir, const std::string& out_path) {
  int status = 0;
  try {
    char c;
    while (::read(start_fd, &c, 1) < 0) {
    }
    const std::vector<Job> jobs = shared_jobs();
    std::vector<std::string> first(jobs.size());
    for (int round = 0; round < kRounds; ++round) {
      clear_memory_cache();
      std::vector<std::string> entries;
      for (const std::string& f : files_in(dir))
        if (f[0] != '.') entries.push_back(f);
      if (!entries.empty()) fs::remove(dir + "/" + entries[(id + round) % entries.size()]);
      for (size_t j = 0; j < jobs.size(); ++j) {
        const CompiledKernel k = compile_cached(kAddSource, "ff_test_add", jobs[j].arch, jobs[j].options);
        if (!valid_image(k) || (round > 0 && k.image != first[j])) status = 1;
        if (round == 0) first[j] = k.image;
      }
    }
    std::ofstream out(out_path);
    for (const std::string& image : first) out << image.size() << " " << std::hash<std::string>{}(image) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", id, e.what());
    status = 2;
  }
  std::fflush(stderr);
  ::_exit(status);  // not exit(): the parent's destructors (TempDir) must not run here
}

}  // namespace

TEST_F(CacheFaults, ProcessesSharingTheDirectoryNeverReadPartialEntries) {
  nvrtc_version();  // load NVRTC once, before forking
  TempDir logs;
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> children;
  for (int id = 0; id < kProcesses; ++id) {
    const std::string log = logs.path() + "/" + std::to_string(id);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(start[1]);
      std::freopen((log + ".err").c_str(), "w", stderr);
      run_child(id, start[0], dir_.path(), log + ".out");
    }
    children.push_back(pid);
  }
  ::close(start[0]);
  ::close(start[1]);  // every child's read returns now: they start together

  for (int id = 0; id < kProcesses; ++id) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[id], &status, 0), children[id]);
    const std::string err = read_file(logs.path() + "/" + std::to_string(id) + ".err");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << id << " status " << status << ": " << err;
    // A partial entry would have been seen, and reported, as corrupt.
    EXPECT_EQ(err.find("corrupt"), std::string::npos) << "child " << id << ": " << err;
  }
  const std::string reference = read_file(logs.path() + "/0.out");
  EXPECT_EQ(std::count(reference.begin(), reference.end(), '\n'), 4) << reference;
  for (int id = 1; id < kProcesses; ++id)
    EXPECT_EQ(read_file(logs.path() + "/" + std::to_string(id) + ".out"), reference) << "child " << id;

  // The directory ends with complete entries only: no temporary files, and
  // every job is served from it without compiling.
  const std::vector<std::string> files = files_in(dir_.path());
  for (const std::string& f : files) EXPECT_NE(f[0], '.') << "leftover temporary file " << f;
  EXPECT_EQ(files.size(), shared_jobs().size());
  clear_memory_cache();
  const std::uint64_t before = nvrtc_compile_count();
  for (const Job& job : shared_jobs())
    EXPECT_TRUE(valid_image(compile_cached(kAddSource, "ff_test_add", job.arch, job.options)));
  EXPECT_EQ(nvrtc_compile_count(), before);
}
