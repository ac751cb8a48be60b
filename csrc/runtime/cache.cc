#include "runtime/cache.h"

#include <elf.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "runtime/compile_workers.h"
#include "runtime/cuda_libs.h"
#include "runtime/env.h"

namespace ff::runtime {
namespace fs = std::filesystem;
namespace {

// Entry layout: magic, payload size (u64 LE), FNV-1a 64 of payload (u64 LE), payload.
constexpr std::string_view kMagic = "FFK1";
constexpr size_t kHeaderSize = 4 + 8 + 8;

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
// Second, unrelated offset basis: the two passes together give a 128-bit name.
constexpr std::uint64_t kFnvOffset2 = 0x6c62272e07bb0142ull;

std::uint64_t fnv1a64(std::string_view data, std::uint64_t h = kFnvOffset) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex128(std::string_view data) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(fnv1a64(data, kFnvOffset)),
                static_cast<unsigned long long>(fnv1a64(data, kFnvOffset2)));
  return buf;
}

// Length-prefixed so that e.g. options {"ab"} and {"a", "b"} hash differently.
void append_field(std::string& key, std::string_view field) {
  key += std::to_string(field.size());
  key += ':';
  key += field;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get_u64(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

// Whether `image` can be what compile_kernel made for `kernel_name`: a cubin
// is a little-endian ELF64 whose section and program header tables lie inside
// it and which names the kernel; PTX is NUL-free text with the kernel's
// .entry. The checksum catches damage; this catches a well-formed entry with
// the wrong content (another kernel's image, another format), which the
// driver would otherwise be handed.
bool plausible_image(const std::string& image, bool is_cubin, const std::string& kernel_name) {
  if (!is_cubin) {
    return image.find('\0') == std::string::npos && image.find(".entry " + kernel_name) != std::string::npos;
  }
  Elf64_Ehdr h;
  if (image.size() < sizeof h) return false;
  std::memcpy(&h, image.data(), sizeof h);
  auto table_fits = [&](std::uint64_t offset, std::uint64_t count, std::uint64_t entry_size) {
    return offset <= image.size() && count * entry_size <= image.size() - offset;
  };
  return std::memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 && h.e_ident[EI_CLASS] == ELFCLASS64 &&
         h.e_ident[EI_DATA] == ELFDATA2LSB && table_fits(h.e_shoff, h.e_shnum, h.e_shentsize) &&
         table_fits(h.e_phoff, h.e_phnum, h.e_phentsize) && image.find(kernel_name) != std::string::npos;
}

// The payload of a well-formed entry; nullopt if the file is missing (absent)
// or fails the header checks (corrupt, reported through `corrupt`).
std::optional<std::string> read_entry(const std::string& path, bool& corrupt) {
  corrupt = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  const std::string_view view(data);
  if (data.size() < kHeaderSize || view.substr(0, 4) != kMagic ||
      get_u64(view.substr(4)) != data.size() - kHeaderSize ||
      get_u64(view.substr(12)) != fnv1a64(view.substr(kHeaderSize))) {
    corrupt = true;
    return std::nullopt;
  }
  return data.substr(kHeaderSize);
}

// Writes to a temporary file in the same directory and renames it into place,
// so concurrent readers (other processes) never see a partial entry.
bool write_entry(const std::string& dir, const std::string& file, const std::string& payload, std::string& why) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    why = ec.message();
    return false;
  }
  static std::atomic<unsigned> counter{0};
  const std::string tmp = dir + "/." + file + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  std::string header(kMagic);
  put_u64(header, payload.size());
  put_u64(header, fnv1a64(payload));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << header << payload;
    out.close();
    if (!out) {
      why = "cannot write " + tmp;
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, dir + "/" + file, ec);
  if (ec) {
    why = ec.message();
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

std::mutex g_mutex;  // guards the two containers below
std::unordered_map<std::string, CompiledKernel> g_memory;
std::set<std::string> g_warned_dirs;

void warn_unwritable_once(const std::string& dir, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_warned_dirs.insert(dir).second) return;
  }
  std::fprintf(stderr,
               "fuseforge: warning: kernel cache directory '%s' is not writable (%s); "
               "continuing without the disk cache\n",
               dir.c_str(), why.c_str());
}

}  // namespace

std::string cache_dir() {
  if (std::string d = env::cache_dir(); !d.empty()) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/fuseforge";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/fuseforge";
  }
  return "";
}

void clear_memory_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_memory.clear();
}

CompiledKernel compile_cached(const std::string& source, const std::string& kernel_name, int arch,
                              const std::vector<std::string>& extra_options, bool sm90a, bool in_worker) {
  const CompilePlan plan = plan_compile(arch, extra_options, sm90a);
  const int version = nvrtc_version();
  std::string key;
  append_field(key, source);
  for (const std::string& opt : plan.options) append_field(key, opt);
  append_field(key, std::to_string(arch));
  append_field(key, std::to_string(version));
  const std::string file = kernel_name + "-sm" + std::to_string(arch) + "-nvrtc" + std::to_string(version) + "-" +
                           hex128(key) + (plan.is_cubin ? ".cubin" : ".ptx");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_memory.find(file); it != g_memory.end()) return it->second;
  }

  const std::string dir = env::cache_disabled() ? "" : cache_dir();
  std::optional<CompiledKernel> result;
  if (!dir.empty()) {
    const std::string path = dir + "/" + file;
    bool corrupt = false;
    std::optional<std::string> image = read_entry(path, corrupt);
    if (image && !plausible_image(*image, plan.is_cubin, kernel_name)) {
      image.reset();
      corrupt = true;
    }
    if (image) {
      result = CompiledKernel{kernel_name, std::move(*image), plan.is_cubin, ""};
    } else if (corrupt) {
      std::error_code ec;
      fs::remove(path, ec);
      std::fprintf(stderr, "fuseforge: warning: removed corrupt kernel cache entry '%s'\n", path.c_str());
    }
  }
  if (!result) {
    WorkerResult worker;
    if (in_worker) worker = compile_in_worker({source, kernel_name, arch, extra_options, sm90a, nvrtc_path()});
    if (worker.interrupted) throw CompileInterrupted(kernel_name);
    result = std::move(worker.kernel);
    if (!result) {
      result = compile_kernel(source, kernel_name, arch, extra_options, sm90a);  // throws NVRTC's error
      if (!worker.failure.empty())
        std::fprintf(stderr, "fuseforge: warning: the compile worker failed on %s (%s); it compiled in this process\n",
                     kernel_name.c_str(), worker.failure.c_str());
    }
    std::string why;
    if (!dir.empty() && !write_entry(dir, file, result->image, why)) warn_unwritable_once(dir, why);
  }

  std::lock_guard<std::mutex> lock(g_mutex);
  return g_memory.emplace(file, std::move(*result)).first->second;
}

}  // namespace ff::runtime
