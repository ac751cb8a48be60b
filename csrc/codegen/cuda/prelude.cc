#include "codegen/cuda/prelude.h"

namespace ff::codegen {

std::string_view cuda_prelude() {
  return R"CUDA(
// ---- fuseforge prelude: helpers matching ATen's CUDA math ----
#ifndef FF_EXTERN_C
// Kernels have C linkage, so NVRTC's cubin names them as written; a file
// that puts several kernels in C++ namespaces defines this empty.
#define FF_EXTERN_C extern "C"
#endif

template <class T, int N>
struct alignas(sizeof(T) * N) ff_vec { T v[N]; };

template <class T> __device__ __forceinline__ bool ff_isnan(T a) { return a != a; }
// torch.maximum / torch.minimum propagate NaN (fmaxf would drop it).
template <class T> __device__ __forceinline__ T ff_maximum(T a, T b) {
  return ff_isnan(a) ? a : (ff_isnan(b) ? b : (a > b ? a : b));
}
template <class T> __device__ __forceinline__ T ff_minimum(T a, T b) {
  return ff_isnan(a) ? a : (ff_isnan(b) ? b : (a < b ? a : b));
}
__device__ __forceinline__ float ff_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double ff_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ float ff_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ double ff_silu(double x) { return x / (1.0 + exp(-x)); }
template <class T> __device__ __forceinline__ T ff_relu(T x) { return ff_isnan(x) ? x : (x > T(0) ? x : T(0)); }
// f32 rounded to tf32 (nearest, ties away): what a 1xTF32 conv kernel's tensor cores read exactly.
__device__ __forceinline__ float ff_round_tf32(float x) {
  return ff_isnan(x) ? x : __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}
__device__ __forceinline__ float ff_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
__device__ __forceinline__ double ff_gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }
__device__ __forceinline__ float ff_gelu_tanh(float x) {
  const float k = 0.79788456080286535588f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ double ff_gelu_tanh(double x) {
  const double k = 0.79788456080286535588;
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
template <class T> __device__ __forceinline__ T ff_sign(T x) { return T((T(0) < x) - (x < T(0))); }
// x / d for a constant d (op_expr.cc: which ones), as x times 1/d in double
// rounded once: the correctly rounded quotient, without div.rn's slow-path
// branch (which keeps the elements' math from interleaving).
__device__ __forceinline__ float ff_div_by_constant(float x, double inverse) {
  return static_cast<float>(static_cast<double>(x) * inverse);
}
// Python-style remainder: the result takes the divisor's sign.
__device__ __forceinline__ float ff_remainder(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
__device__ __forceinline__ double ff_remainder(double a, double b) { double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
__device__ __forceinline__ long long ff_remainder(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
// Storage <-> compute conversions (f16/bf16 compute in f32, as ATen's opmath).
template <class T> __device__ __forceinline__ T ff_load(T x) { return x; }
template <class S, class C> __device__ __forceinline__ S ff_store(C x) { return static_cast<S>(x); }
)CUDA";
}

std::string_view cuda_half_prelude() {
  // Self-contained (no cuda_fp16.h, so NVRTC needs no include path): 16-bit
  // storage types converted with the PTX cvt instructions, round to nearest even.
  return R"CUDA(
// ---- f16 / bf16 storage ----
struct __align__(2) ff_half { unsigned short bits; };
struct __align__(2) ff_bf16 { unsigned short bits; };
__device__ __forceinline__ float ff_load(ff_half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits)); return f; }
__device__ __forceinline__ float ff_load(ff_bf16 h) { return __uint_as_float(static_cast<unsigned>(h.bits) << 16); }
template <> __device__ __forceinline__ ff_half ff_store<ff_half, float>(float x) { ff_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x)); return h; }
template <> __device__ __forceinline__ ff_bf16 ff_store<ff_bf16, float>(float x) { ff_bf16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x)); return h; }
// Rounds an f32 compute value to f16/bf16 precision and back: eager stores
// every intermediate in the tensor's dtype, so fused code rounds where it did.
__device__ __forceinline__ float ff_round_f16(float x) { return ff_load(ff_store<ff_half>(x)); }
__device__ __forceinline__ float ff_round_bf16(float x) { return ff_load(ff_store<ff_bf16>(x)); }
)CUDA";
}

// Cluster primitives in PTX (as CUTLASS's cluster_sm90.hpp). The barrier's
// arrive releases and its wait acquires: shared-memory writes before it are
// visible to every block of the cluster after it. ff_cluster_peer maps a
// shared-memory address of this block to the same variable of the block of
// `rank`, as a generic pointer that plain loads read.
std::string_view cuda_cluster_primitives() {
  return R"(
__device__ __forceinline__ unsigned ff_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void ff_cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
template <class T> __device__ __forceinline__ const T* ff_cluster_peer(const T* p, unsigned rank) {
  unsigned long long a;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(a) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
  return reinterpret_cast<const T*>(a);
}
)";
}

std::string_view cuda_dynamic_shared() { return "extern __shared__ __align__(16) unsigned char ff_dynamic_shared[];"; }

std::string cuda_cluster_prelude() {
  return std::string(cuda_cluster_primitives()) + R"(
// Every thread of every block calls it, with its block's value; the second
// barrier keeps each block's slot alive until its peers have read it.
template <class T, class F> __device__ __forceinline__ T ff_cluster_exclusive_scan(T value, T identity, F combine) {
  __shared__ T slot;
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) slot = value;
  ff_cluster_sync();
  T acc = identity;
  const unsigned rank = ff_cluster_rank();
  for (unsigned r = 0; r < rank; ++r) acc = combine(acc, *ff_cluster_peer(&slot, r));
  ff_cluster_sync();
  return acc;
}
)";
}

}  // namespace ff::codegen
