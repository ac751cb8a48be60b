#include "runtime/compile_workers.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <stdexcept>

extern char** environ;

namespace ff::runtime {
namespace fs = std::filesystem;
namespace {

std::mutex g_worker_mutex;
std::string g_worker;   // guarded by g_worker_mutex
bool g_warned = false;  // guarded by g_worker_mutex

void put_field(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += '\n';
  out += field;
}

// The decimal number `text` is, whole; nullopt if it is anything else.
std::optional<size_t> whole_number(std::string_view text) {
  size_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string_view take_field(std::string_view& in) {
  const size_t newline = in.find('\n');
  const std::optional<size_t> size =
      newline == std::string_view::npos ? std::nullopt : whole_number(in.substr(0, newline));
  if (!size) throw std::invalid_argument("fuseforge-nvrtc: malformed job file");
  in.remove_prefix(newline + 1);
  if (*size > in.size()) throw std::invalid_argument("fuseforge-nvrtc: truncated job file");
  const std::string_view field = in.substr(0, *size);
  in.remove_prefix(*size);
  return field;
}

int to_int(std::string_view field) {
  const std::optional<size_t> v = whole_number(field);
  if (!v || *v > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("fuseforge-nvrtc: malformed job file");
  return static_cast<int>(*v);
}

void warn_once(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g_worker_mutex);
    if (g_warned) return;
    g_warned = true;
  }
  std::fprintf(stderr, "fuseforge: warning: %s; kernels compile in this process instead, one at a time\n", why.c_str());
}

// Removes the job's files however compile_in_worker returns.
struct TempFiles {
  std::string job, out, log;
  ~TempFiles() {
    std::error_code ec;
    for (const std::string* path : {&job, &out, &log})
      if (!path->empty()) fs::remove(*path, ec);
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return static_cast<bool>(out.flush());
}

}  // namespace

void set_compile_worker(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_worker_mutex);
  g_worker = path;
}

std::string compile_worker() {
  std::lock_guard<std::mutex> lock(g_worker_mutex);
  return g_worker;
}

std::string encode_job(const CompileJob& job) {
  std::string out;
  put_field(out, job.nvrtc_library);
  put_field(out, job.name);
  put_field(out, std::to_string(job.arch));
  put_field(out, job.sm90a ? "1" : "0");
  put_field(out, std::to_string(job.options.size()));
  for (const std::string& o : job.options) put_field(out, o);
  put_field(out, job.source);
  return out;
}

CompileJob decode_job(std::string_view text) {
  CompileJob job;
  job.nvrtc_library = take_field(text);
  job.name = take_field(text);
  job.arch = to_int(take_field(text));
  job.sm90a = take_field(text) == "1";
  const int options = to_int(take_field(text));
  for (int i = 0; i < options; ++i) job.options.emplace_back(take_field(text));
  job.source = take_field(text);
  if (!text.empty()) throw std::invalid_argument("fuseforge-nvrtc: trailing bytes in job file");
  return job;
}

WorkerResult compile_in_worker(const CompileJob& job) {
  const std::string worker = compile_worker();
  if (worker.empty()) return {};
  TempFiles files;
  {
    std::error_code ec;
    std::string pattern = (fs::temp_directory_path(ec) / "fuseforge-nvrtc-XXXXXX").string();
    const int fd = mkstemp(pattern.data());
    if (fd < 0) {
      warn_once("cannot create a compile job file (" + std::string(std::strerror(errno)) + ")");
      return {};
    }
    close(fd);
    files.job = pattern;
    files.out = pattern + ".image";
    files.log = pattern + ".log";
    if (!write_all(files.job, encode_job(job))) {
      warn_once("cannot write compile job file " + files.job);
      return {};
    }
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, files.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv = {const_cast<char*>(worker.c_str()), files.job.data(), files.out.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    warn_once("cannot start the compile worker " + worker + " (" + std::strerror(rc) + ")");
    return {};
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return {std::nullopt, std::string("waitpid: ") + std::strerror(errno)};
  }
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return {std::nullopt, "killed by signal " + std::to_string(signal), signal == SIGINT || signal == SIGTERM};
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string message = read_all(files.log);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return {std::nullopt, message.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : message};
  }
  std::string image = read_all(files.out);
  if (image.empty()) return {std::nullopt, "it wrote no image"};
  count_worker_compile();
  return {CompiledKernel{job.name, std::move(image), plan_compile(job.arch, job.options, job.sm90a).is_cubin, ""}, ""};
}

int run_compile_job(const std::string& job_path, const std::string& image_path) {
  try {
    if (!fs::exists(job_path)) throw std::runtime_error("cannot read " + job_path);
    const CompileJob job = decode_job(read_all(job_path));
    // The caller's NVRTC, so that both compile alike (and hash alike in the cache).
    if (!job.nvrtc_library.empty()) setenv("FUSEFORGE_NVRTC", job.nvrtc_library.c_str(), 1);
    const CompiledKernel k = compile_kernel(job.source, job.name, job.arch, job.options, job.sm90a);
    if (!write_all(image_path, k.image)) throw std::runtime_error("cannot write " + image_path);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuseforge-nvrtc: %s\n", e.what());
    return 1;
  }
}

}  // namespace ff::runtime
