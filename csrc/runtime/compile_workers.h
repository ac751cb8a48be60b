#pragma once
// NVRTC compiles in worker processes.
//
// NVRTC serializes the compiles of one process: threads compiling different
// kernels take as long as compiling them one after another. Kernels compiled
// together (load_kernels) therefore each compile in a process of their own,
// the `fuseforge-nvrtc` executable (tools/nvrtc_worker.cc) installed beside
// the extension, which the caller's threads start and wait for.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/check.h"
#include "runtime/compiler.h"

namespace ff::runtime {

// What compile_kernel takes, as a worker receives it.
struct CompileJob {
  std::string source;
  std::string name;
  int arch = 0;
  std::vector<std::string> options;  // compile_kernel's extra_options
  bool sm90a = false;
  std::string nvrtc_library;  // the NVRTC the worker loads: the caller's, so both compile alike
};

// The worker executable; "" (the default) compiles in the calling process.
void set_compile_worker(const std::string& path);
std::string compile_worker();

// `job` compiled by a worker process, waited for. No kernel when no worker is
// registered, it cannot be started (reported once on stderr) or it fails:
// the caller then compiles in its own process, which reports NVRTC's error
// with its log, and `failure` says how the worker failed (its message, or
// the signal that ended it), for a caller whose own compile succeeds.
// `interrupted`: SIGINT or SIGTERM ended the worker (Ctrl-C reaches the
// whole foreground process group): the caller stops instead of compiling on.
struct WorkerResult {
  std::optional<CompiledKernel> kernel;
  std::string failure;  // empty unless the worker ran and failed
  bool interrupted = false;
};
WorkerResult compile_in_worker(const CompileJob& job);

// What compile_cached throws for a kernel whose worker was interrupted.
class CompileInterrupted : public CudaError {
 public:
  explicit CompileInterrupted(const std::string& kernel)
      : CudaError("fuseforge: compiling " + kernel + " was interrupted") {}
};

// The job file a worker reads: length-prefixed fields.
std::string encode_job(const CompileJob& job);
// Throws std::invalid_argument on a malformed file.
CompileJob decode_job(std::string_view text);

// The worker's side (tools/nvrtc_worker.cc): compiles the job in the file
// `job_path` and writes the cubin or PTX to `image_path`. Returns its exit
// status: 0, or 1 after printing why on stderr.
int run_compile_job(const std::string& job_path, const std::string& image_path);

}  // namespace ff::runtime
