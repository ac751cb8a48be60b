#include "kernel_emulator.h"

#include "codegen/cuda/prelude.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <stdexcept>

namespace ff::testing {

namespace {

// The CUDA built-ins generated kernels use, for the host. A block's threads
// are fibers of one host thread; the blocks of a cluster run at once, one
// host thread each, so shared memory is a function-local thread_local;
// threadIdx and friends are the running fiber's.
const char* kEmulation = R"EMU(
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <ucontext.h>
#include <vector>
struct ff_emu_dim3 { unsigned x, y, z; };
struct ff_emu_thread { ff_emu_dim3 thread, block, block_dim, grid_dim; };
ff_emu_thread* ff_emu_current();
void ff_emu_syncthreads();
void ff_emu_syncwarp();
void ff_emu_shfl(void* value, int bytes, int lane_mask);
void ff_emu_shfl_up(void* value, int bytes, int delta);
void ff_emu_shfl_idx(void* value, int bytes, int src);
#define threadIdx (ff_emu_current()->thread)
#define blockIdx (ff_emu_current()->block)
#define blockDim (ff_emu_current()->block_dim)
#define gridDim (ff_emu_current()->grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __shared__ static thread_local
#define __align__(n) alignas(n)
#define __syncthreads() ff_emu_syncthreads()
#define __syncwarp(...) ff_emu_syncwarp()
template <class T> T __shfl_xor_sync(unsigned, T v, int o) { ff_emu_shfl(&v, sizeof(T), o); return v; }
template <class T> T __shfl_up_sync(unsigned, T v, int d) { ff_emu_shfl_up(&v, sizeof(T), d); return v; }
template <class T> T __shfl_sync(unsigned, T v, int src) { ff_emu_shfl_idx(&v, sizeof(T), src); return v; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
using std::exp; using std::log; using std::sqrt; using std::tanh; using std::erf; using std::pow;
// The f16/bf16 conversions (PTX cvt in the kernel's prelude), round to nearest even.
inline float ff_emu_half_to_float(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return h; }
inline unsigned short ff_emu_float_to_half(float x) { _Float16 h = static_cast<_Float16>(x); unsigned short b; std::memcpy(&b, &h, 2); return b; }
inline unsigned short ff_emu_float_to_bf16(float x) {
  unsigned u; std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
)EMU";

// The cluster primitives (codegen/cuda/prelude.h) for the host: the barrier
// waits for every block of the cluster, and a peer's shared variable sits at
// the same offset in its host thread's thread-local storage as ours does.
const char* kClusterEmulation = R"EMU(
unsigned ff_emu_cluster_size();
void ff_emu_cluster_sync();
const void* ff_emu_peer(const void* p, unsigned rank);
inline unsigned ff_cluster_rank() { return blockIdx.x % ff_emu_cluster_size(); }
inline void ff_cluster_sync() { ff_emu_cluster_sync(); }
template <class T> const T* ff_cluster_peer(const T* p, unsigned rank) { return static_cast<const T*>(ff_emu_peer(p, rank)); }
)EMU";

// The kernel's source with its PTX conversions, cluster primitives and dynamic
// shared memory replaced by the host's.
std::string host_source(std::string src) {
  const std::string cluster(codegen::cuda_cluster_primitives());
  if (const size_t at = src.find(cluster); at != std::string::npos) src.replace(at, cluster.size(), kClusterEmulation);
  // Dynamic shared memory: the most an SM has, per host thread (block).
  const std::string dynamic(codegen::cuda_dynamic_shared());
  if (const size_t at = src.find(dynamic); at != std::string::npos)
    src.replace(at, dynamic.size(), "alignas(16) static thread_local unsigned char ff_dynamic_shared[228 * 1024];");
  const std::pair<const char*, const char*> swaps[] = {
      {R"(asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));)", "f = ff_emu_half_to_float(h.bits);"},
      {R"(asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));)", "h.bits = ff_emu_float_to_half(x);"},
      {R"(asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));)", "h.bits = ff_emu_float_to_bf16(x);"},
  };
  for (auto [from, to] : swaps)
    for (size_t at; (at = src.find(from)) != std::string::npos;) src.replace(at, std::strlen(from), to);
  return src;
}

// The fiber scheduler and the launch entry, after the kernel.
const char* kRuntime = R"EMU(
unsigned ff_emu_cluster_size();
namespace {
// A host thread's block: its fibers and their barriers.
thread_local std::vector<ff_emu_thread> g_state;
thread_local std::vector<ucontext_t> g_ctx;
thread_local std::vector<std::vector<char>> g_stack;
thread_local std::vector<std::vector<unsigned char>> g_slot;
thread_local std::vector<int> g_warp_arrived, g_warp_gen;
thread_local ucontext_t g_main;
thread_local int g_cur = 0, g_arrived = 0, g_gen = 0;
thread_local bool g_yielded = false;
thread_local char g_anchor;  // where this host thread's thread-local storage is
int g_threads = 0;
void** g_ptrs;
double* g_scalars;
// The cluster: its blocks' storage and the barrier between their host threads.
std::vector<const char*> g_anchors;
std::mutex g_cluster_mutex;
std::condition_variable g_cluster_cv;
unsigned g_cluster_arrived = 0, g_cluster_gen = 0;
void yield() {
  g_yielded = true;
  swapcontext(&g_ctx[g_cur], &g_main);
}
void barrier(int& arrived, int& gen, int size) {
  const int my = gen;
  if (++arrived == size) { arrived = 0; ++gen; return; }
  while (gen == my) yield();
}
void trampoline() { ff_emu_entry(g_ptrs, g_scalars); }
}  // namespace
ff_emu_thread* ff_emu_current() { return &g_state[g_cur]; }
void ff_emu_syncthreads() { barrier(g_arrived, g_gen, g_threads); }
// The block's fibers meet, then its fiber 0 waits (holding its host thread)
// for the cluster's other blocks, then the block's fibers go on.
void ff_emu_cluster_sync() {
  ff_emu_syncthreads();
  if (g_cur == 0) {
    std::unique_lock<std::mutex> lock(g_cluster_mutex);
    const unsigned gen = g_cluster_gen;
    if (++g_cluster_arrived == ff_emu_cluster_size()) {
      g_cluster_arrived = 0;
      ++g_cluster_gen;
      g_cluster_cv.notify_all();
    } else {
      g_cluster_cv.wait(lock, [gen] { return g_cluster_gen != gen; });
    }
  }
  ff_emu_syncthreads();
}
const void* ff_emu_peer(const void* p, unsigned rank) {
  return g_anchors.at(rank) + (static_cast<const char*>(p) - &g_anchor);
}
// A warp shuffle: every lane of the running fiber's warp puts its value in
// its slot, then takes lane `from(lane)`'s.
template <class From> void ff_emu_shuffle(void* value, int bytes, From from) {
  const int w = g_cur / 32, lane = g_cur % 32, size = std::min(32, g_threads - w * 32);
  std::memcpy(g_slot[g_cur].data(), value, bytes);
  barrier(g_warp_arrived[w], g_warp_gen[w], size);
  std::memcpy(value, g_slot[w * 32 + from(lane)].data(), bytes);
  barrier(g_warp_arrived[w], g_warp_gen[w], size);
}
void ff_emu_syncwarp() {
  const int w = g_cur / 32;
  barrier(g_warp_arrived[w], g_warp_gen[w], std::min(32, g_threads - w * 32));
}
void ff_emu_shfl_up(void* value, int bytes, int delta) {
  ff_emu_shuffle(value, bytes, [delta](int lane) { return lane >= delta ? lane - delta : lane; });
}
void ff_emu_shfl_idx(void* value, int bytes, int src) {
  if (g_cur / 32 * 32 + src % 32 >= g_threads) std::abort();  // a lane the block does not have
  ff_emu_shuffle(value, bytes, [src](int) { return src % 32; });
}
void ff_emu_shfl(void* value, int bytes, int lane_mask) {
  ff_emu_shuffle(value, bytes, [lane_mask](int lane) { return lane ^ lane_mask; });
}
// Runs the blocks of cluster rank `rank` (all blocks when clusters are 1), in order.
void run_blocks(const unsigned* grid, const unsigned* block, unsigned rank) {
  const unsigned cluster = ff_emu_cluster_size();
  g_state.assign(g_threads, {});
  g_ctx.assign(g_threads, {});
  g_stack.assign(g_threads, std::vector<char>(256 * 1024));
  g_slot.assign(g_threads, std::vector<unsigned char>(16));
  g_warp_arrived.assign((g_threads + 31) / 32, 0);
  g_warp_gen.assign((g_threads + 31) / 32, 0);
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = rank; bx < grid[0]; bx += cluster) {
        std::vector<bool> done(g_threads, false);
        for (int t = 0; t < g_threads; ++t) {
          g_state[t] = {{t % block[0], t / block[0] % block[1], t / (block[0] * block[1])}, {bx, by, bz},
                        {block[0], block[1], block[2]}, {grid[0], grid[1], grid[2]}};
          getcontext(&g_ctx[t]);
          g_ctx[t].uc_stack.ss_sp = g_stack[t].data();
          g_ctx[t].uc_stack.ss_size = g_stack[t].size();
          g_ctx[t].uc_link = &g_main;
          makecontext(&g_ctx[t], trampoline, 0);
        }
        // Round robin until every thread has returned: a fiber that waits
        // at a barrier yields; one that returns comes back through uc_link.
        for (int left = g_threads; left > 0;)
          for (int t = 0; t < g_threads; ++t) {
            if (done[t]) continue;
            g_cur = t;
            g_yielded = false;
            swapcontext(&g_main, &g_ctx[t]);
            if (!g_yielded) done[t] = true, --left;
          }
      }
}
extern "C" void ff_emu_run(const unsigned* grid, const unsigned* block, void** ptrs, double* scalars) {
  g_ptrs = ptrs;
  g_scalars = scalars;
  g_threads = block[0] * block[1] * block[2];
  const unsigned cluster = ff_emu_cluster_size();
  g_anchors.assign(cluster, nullptr);
  // Each rank records its storage before its first block, so before any
  // cluster barrier lets a peer look; a host thread per rank in a cluster.
  auto rank = [=](unsigned r) {
    g_anchors[r] = &g_anchor;
    run_blocks(grid, block, r);
  };
  if (cluster == 1) return rank(0);
  std::vector<std::thread> ranks;
  for (unsigned r = 0; r < cluster; ++r) ranks.emplace_back(rank, r);
  for (auto& t : ranks) t.join();
}
)EMU";

// A call of the kernel from (pointers, scalars), from its signature.
std::string entry_for(const codegen::KernelSource& k) {
  const size_t at = k.source.find(") " + k.name + "(");
  const size_t open = k.source.find('(', at + 2 + k.name.size());
  const size_t close = k.source.find(')', open);
  std::string params = k.source.substr(open + 1, close - open - 1), call;
  std::regex param(R"(\s*(const )?([\w ]+?)\*\s*__restrict__\s+(\w+)|\s*double\s+(\w+))");
  int p = 0, s = 0;
  for (std::sregex_iterator it(params.begin(), params.end(), param), end; it != end; ++it) {
    if (!call.empty()) call += ", ";
    if ((*it)[4].matched) call += "g_scalars[" + std::to_string(s++) + "]";
    else call += "static_cast<" + std::string((*it)[1].matched ? "const " : "") + (*it)[2].str() + "*>(ptrs[" + std::to_string(p++) + "])";
  }
  return "static void ff_emu_entry(void** ptrs, double* g_scalars) { " + k.name + "(" + call + "); }\n";
}

struct Buffer {
  std::vector<unsigned char> bytes;
  DType dtype;
};

int64_t extent(const TensorType& t) {
  int64_t e = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] == 0) return 0;
    e += (t.shape[i] - 1) * t.strides[i];
  }
  return e;
}

// Calls f(logical index, memory offset) for every element of `t`.
void for_each_element(const TensorType& t, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t n = numel(t.shape);
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    f(i, off);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T>
void put(Buffer& b, int64_t off, double v) {
  T x = static_cast<T>(v);
  std::memcpy(b.bytes.data() + off * sizeof(T), &x, sizeof(T));
}
template <class T>
T get_raw(const Buffer& b, int64_t off) {
  T x;
  std::memcpy(&x, b.bytes.data() + off * sizeof(T), sizeof(T));
  return x;
}
template <class T>
double get(const Buffer& b, int64_t off) {
  T x;
  std::memcpy(&x, b.bytes.data() + off * sizeof(T), sizeof(T));
  return static_cast<double>(x);
}

void store(Buffer& b, int64_t off, double v) {
  switch (b.dtype) {
    case DType::f16: put<_Float16>(b, off, v); break;
    case DType::bf16: {  // the value is already a bf16 one (inputs are rounded to their dtype)
      const float f = static_cast<float>(v);
      unsigned u;
      std::memcpy(&u, &f, 4);
      const unsigned short bits = static_cast<unsigned short>(u >> 16);
      std::memcpy(b.bytes.data() + off * 2, &bits, 2);
      break;
    }
    case DType::f32: put<float>(b, off, v); break;
    case DType::f64: put<double>(b, off, v); break;
    case DType::i64: put<long long>(b, off, v); break;
    case DType::i32: put<int>(b, off, v); break;
    case DType::boolean: put<bool>(b, off, v != 0.0); break;
    default: throw std::runtime_error("kernel emulator: unsupported dtype");
  }
}
double load(const Buffer& b, int64_t off) {
  switch (b.dtype) {
    case DType::f16: return static_cast<double>(static_cast<float>(get_raw<_Float16>(b, off)));
    case DType::bf16: {
      unsigned short bits;
      std::memcpy(&bits, b.bytes.data() + off * 2, 2);
      const unsigned u = static_cast<unsigned>(bits) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::f32: return get<float>(b, off);
    case DType::f64: return get<double>(b, off);
    case DType::i64: return get<long long>(b, off);
    case DType::i32: return get<int>(b, off);
    case DType::boolean: return get<bool>(b, off);
    default: throw std::runtime_error("kernel emulator: unsupported dtype");
  }
}

Buffer allocate(const TensorType& t) {
  Buffer b{std::vector<unsigned char>(static_cast<size_t>(std::max<int64_t>(extent(t), 1)) * dtype_size(t.dtype) + 64),
           t.dtype};
  return b;
}

}  // namespace

bool host_compiler_available() { return std::system("c++ --version > /dev/null 2>&1") == 0; }

std::vector<interp::HostTensor> emulate_kernel(const codegen::KernelSource& k, const fusion::Group& g,
                                               const std::vector<interp::HostTensor>& inputs,
                                               const std::vector<int>& over) {
  char dir_template[] = "/tmp/ff_emu_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) throw std::runtime_error("kernel emulator: cannot create a temporary directory");
  const std::string src = std::string(dir) + "/kernel.cc", lib = std::string(dir) + "/kernel.so";
  {
    std::ofstream out(src);
    std::smatch cluster;
    const bool clustered = std::regex_search(k.source, cluster, std::regex(R"(__cluster_dims__\((\d+))"));
    out << kEmulation << host_source(k.source) << "\n" << entry_for(k) << kRuntime
        << "unsigned ff_emu_cluster_size() { return " << (clustered ? cluster[1].str() : "1") << "; }\n";
  }
  // -fno-gnu-unique and -Bsymbolic: each library's template statics (a
  // cluster helper's shared memory) are its own, where a unique symbol would
  // bind them to the first library loaded that had them (and keep it loaded).
  const std::string cmd = "c++ -std=c++17 -O1 -w -shared -fPIC -pthread -fno-gnu-unique -Wl,-Bsymbolic -o " + lib + " " + src + " > " + dir + "/log.txt 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(std::string(dir) + "/log.txt");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    throw std::runtime_error("kernel emulator: " + k.name + " does not compile on the host:\n" + text.substr(0, 4000));
  }
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("kernel emulator: dlopen: ") + dlerror());
  using Run = void (*)(const unsigned*, const unsigned*, void**, double*);
  auto run = reinterpret_cast<Run>(dlsym(handle, "ff_emu_run"));

  std::vector<Buffer> buffers;
  std::vector<void*> ptrs;
  std::vector<double> scalars;
  auto value_named = [&](const std::vector<Value*>& values, const std::string& name) -> size_t {
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i]->name == name) return i;
    throw std::runtime_error("kernel emulator: no group value %" + name);
  };
  buffers.reserve(k.outputs.size() + k.inputs.size());
  for (const auto& name : k.outputs) buffers.push_back(allocate(g.outputs[value_named(g.outputs, name)]->type));
  for (const auto& name : k.inputs) {
    const size_t i = value_named(g.inputs, name);
    const TensorType& t = g.inputs[i]->type;
    buffers.push_back(allocate(t));
    Buffer& b = buffers.back();
    for_each_element(t, [&](int64_t li, int64_t off) { store(b, off, inputs[i].data[li]); });
  }
  for (const auto& name : k.scalars) scalars.push_back(inputs[value_named(g.inputs, name)].data.at(0));
  for (auto& b : buffers) ptrs.push_back(b.bytes.data());
  auto memory_of = [&](size_t o) { return o < over.size() && over[o] >= 0 ? k.outputs.size() + over[o] : o; };
  for (size_t o = 0; o < k.outputs.size(); ++o) ptrs[o] = ptrs[memory_of(o)];
  unsigned grid[3], block[3] = {static_cast<unsigned>(k.block), static_cast<unsigned>(k.block_y), 1};
  if (k.grid[0] > 0) {
    for (int i = 0; i < 3; ++i) grid[i] = static_cast<unsigned>(k.grid[i]);
  } else {
    const int64_t per_block = int64_t{k.block} * k.unroll;
    grid[0] = static_cast<unsigned>((k.items + per_block - 1) / per_block);
    grid[1] = grid[2] = 1;
  }
  run(grid, block, ptrs.data(), scalars.data());
  std::vector<interp::HostTensor> out;
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const TensorType& t = g.outputs[value_named(g.outputs, k.outputs[o])]->type;
    interp::HostTensor h{t.dtype, t.shape, std::vector<double>(static_cast<size_t>(numel(t.shape)))};
    for_each_element(t, [&](int64_t li, int64_t off) { h.data[li] = load(buffers[memory_of(o)], off); });
    out.push_back(std::move(h));
  }
  dlclose(handle);
  std::system(("rm -rf " + std::string(dir)).c_str());
  return out;
}

}  // namespace ff::testing
