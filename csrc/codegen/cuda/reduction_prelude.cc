#include "codegen/cuda/reduction_prelude.h"

namespace ff::codegen {

std::string_view cuda_reduction_prelude() {
  return R"CUDA(
// ---- fuseforge reduction prelude ----
// Accumulators: identity(), push(x) (argmax/argmin: push(x, index); Welford:
// of_chunk and push_deviation, a chunk at a time), merge(o)
// where `o` holds later partials than *this (merges happen in a fixed order,
// so results are the same on every run), and shfl_xor(offset): the partial of
// the lane `offset` away.
__device__ __forceinline__ float ff_inf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double ff_inf(double) { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float ff_exp(float x) { return expf(x); }
__device__ __forceinline__ double ff_exp(double x) { return exp(x); }
__device__ __forceinline__ float ff_log(float x) { return logf(x); }
__device__ __forceinline__ double ff_log(double x) { return log(x); }
__device__ __forceinline__ float ff_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double ff_rsqrt(double x) { return rsqrt(x); }
// N bytes (4, 8 or 16) from global to shared memory with sm_80's cp.async,
// which holds no registers while the copy is in flight;
// ff_cp_async_wait_all() makes the thread's copies visible to it. Hosts
// without PTX (the kernel emulator) copy at once.
template <int N> __device__ __forceinline__ void ff_cp_async(void* shared, const void* global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  if (N == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(global) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(global), "n"(N) : "memory");
#else
  for (int i = 0; i < N; ++i) static_cast<char*>(shared)[i] = static_cast<const char*>(global)[i];
#endif
}
__device__ __forceinline__ void ff_cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
// ff_maximum and ff_minimum in one instruction (sm_80's max.NaN, min.NaN)
// where a kernel takes the max or min of every element (amax, amin, softmax,
// logsumexp): their two NaN tests cost more than the max itself. Hosts
// without PTX (the kernel emulator), and other types, take ff_maximum and
// ff_minimum.
template <class T> __device__ __forceinline__ T ff_max_nan(T a, T b) { return ff_maximum(a, b); }
template <class T> __device__ __forceinline__ T ff_min_nan(T a, T b) { return ff_minimum(a, b); }
__device__ __forceinline__ float ff_max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return ff_maximum(a, b);
#endif
}
__device__ __forceinline__ float ff_min_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return ff_minimum(a, b);
#endif
}
// e / s given r = 1 / s: the quotient through the reciprocal, then one
// Newton step on its residual (the division's own fast path, without its
// special-case checks): three instructions, rounded as the division is but
// in rare ties. For s in [1, n], as a softmax's sum of exp(x - max) is.
__device__ __forceinline__ float ff_div_rcp(float e, float s, float r) {
  const float q = e * r;
  return fmaf(fmaf(-q, s, e), r, q);
}
__device__ __forceinline__ double ff_div_rcp(double e, double s, double r) {
  const double q = e * r;
  return fma(fma(-q, s, e), r, q);
}
template <class T> __device__ __forceinline__ T ff_shfl_xor(T v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ bool ff_shfl_xor(bool v, int o) { return __shfl_xor_sync(0xffffffffu, static_cast<int>(v), o) != 0; }

template <class T> struct ff_sum {
  T s;
  static __device__ __forceinline__ ff_sum identity() { return {T(0)}; }
  __device__ __forceinline__ void push(T x) { s += x; }
  __device__ __forceinline__ void merge(const ff_sum& o) { s += o.s; }
  __device__ __forceinline__ ff_sum shfl_xor(int o) const { return {ff_shfl_xor(s, o)}; }
};

template <class T> struct ff_prod {
  T p;
  static __device__ __forceinline__ ff_prod identity() { return {T(1)}; }
  __device__ __forceinline__ void push(T x) { p *= x; }
  __device__ __forceinline__ void merge(const ff_prod& o) { p *= o.p; }
  __device__ __forceinline__ ff_prod shfl_xor(int o) const { return {ff_shfl_xor(p, o)}; }
};

// amax / amin: NaN propagates, as in eager.
template <class T> struct ff_max {
  T m;
  static __device__ __forceinline__ ff_max identity() { return {-ff_inf(T())}; }
  __device__ __forceinline__ void push(T x) { m = ff_max_nan(m, x); }
  __device__ __forceinline__ void merge(const ff_max& o) { m = ff_max_nan(m, o.m); }
  __device__ __forceinline__ ff_max shfl_xor(int o) const { return {ff_shfl_xor(m, o)}; }
};
template <class T> struct ff_min {
  T m;
  static __device__ __forceinline__ ff_min identity() { return {ff_inf(T())}; }
  __device__ __forceinline__ void push(T x) { m = ff_min_nan(m, x); }
  __device__ __forceinline__ void merge(const ff_min& o) { m = ff_min_nan(m, o.m); }
  __device__ __forceinline__ ff_min shfl_xor(int o) const { return {ff_shfl_xor(m, o)}; }
};

struct ff_any {
  bool a;
  static __device__ __forceinline__ ff_any identity() { return {false}; }
  __device__ __forceinline__ void push(bool x) { a = a || x; }
  __device__ __forceinline__ void merge(const ff_any& o) { a = a || o.a; }
  __device__ __forceinline__ ff_any shfl_xor(int o) const { return {ff_shfl_xor(a, o)}; }
};

// A count, mean and sum of squared deviations (ATen's WelfordOps), taken a
// chunk at a time (of_chunk, push_deviation) instead of an element at a time,
// and merged with Chan's formula; n counts in T (exact to 2^24 in f32).
template <class T> struct ff_welford {
  T n, mean, m2;
  static __device__ __forceinline__ ff_welford identity() { return {T(0), T(0), T(0)}; }
  // A chunk of n elements summing to `sum`; push_deviation(x) then adds each
  // element's squared deviation from its mean (the two-pass variance).
  static __device__ __forceinline__ ff_welford of_chunk(T n, T sum) { return {n, n > T(0) ? sum / n : T(0), T(0)}; }
  __device__ __forceinline__ void push_deviation(T x) { const T d = x - mean; m2 += d * d; }
  __device__ __forceinline__ void merge(const ff_welford& o) {
    if (o.n == T(0)) return;
    if (n == T(0)) { *this = o; return; }
    const T total = n + o.n, d = o.mean - mean, w = o.n / total;
    mean += d * w;
    m2 += o.m2 + d * d * n * w;
    n = total;
  }
  __device__ __forceinline__ ff_welford shfl_xor(int o) const {
    return {ff_shfl_xor(n, o), ff_shfl_xor(mean, o), ff_shfl_xor(m2, o)};
  }
};

// argmax / argmin with ATen's order: a NaN beats any number, and among equal
// values (or NaNs) the lower index wins, so any merge order gives eager's index.
// The index is the kernel's index type I (32 bits where offsets allow: fewer
// registers and compares a pushed element).
template <class T, bool kMax, class I> struct ff_arg {
  T v;
  I i;
  static __device__ __forceinline__ ff_arg identity() {
    return {kMax ? -ff_inf(T()) : ff_inf(T()), sizeof(I) == 8 ? I(0x7fffffffffffffffLL) : I(0x7fffffff)};
  }
  static __device__ __forceinline__ bool better(T a, I ia, T b, I ib) {
    if (ff_isnan(a)) return !ff_isnan(b) || ia < ib;
    if (a == b) return ia < ib;
    return kMax ? a > b : a < b;
  }
  __device__ __forceinline__ void push(T x, I j) {
    if (better(x, j, v, i)) v = x, i = j;
  }
  __device__ __forceinline__ void merge(const ff_arg& o) { push(o.v, o.i); }
  __device__ __forceinline__ ff_arg shfl_xor(int o) const { return {ff_shfl_xor(v, o), ff_shfl_xor(i, o)}; }
};
template <class T, class I> using ff_argmax = ff_arg<T, true, I>;
template <class T, class I> using ff_argmin = ff_arg<T, false, I>;

// The running max m (NaN-propagating) and the sum of exp(x - m): softmax,
// log_softmax and logsumexp in one pass over a row. Elements come in chunks
// (a thread's share of a row held in registers, or one round of loads): the
// kernel takes the chunk's max first, rebase() rescales the sum to it once,
// then push() adds exp(x - m). One exp per element and no branch, where
// raising the max element by element costs a divergent branch and a dependent
// exp each (a 4096x32768 softmax: 0.62 against 0.37 ms on the H100).
template <class T> struct ff_maxsumexp {
  T m, s;
  static __device__ __forceinline__ ff_maxsumexp identity() { return {-ff_inf(T()), T(0)}; }
  // The exponent's offset: m, or 0 while every element is -inf (exp(-inf - -inf) is NaN).
  static __device__ __forceinline__ T base(T m) { return m == -ff_inf(T()) ? T(0) : m; }
  // `next`: the max of m and the chunk (ff_max_nan: a NaN makes it NaN, and
  // the sum NaN; an infinite one makes exp(inf - inf) NaN, as eager's).
  __device__ __forceinline__ void rebase(T next) { s *= ff_exp(m - base(next)); m = next; }
  __device__ __forceinline__ void push(T x) { s += ff_exp(x - base(m)); }
  __device__ __forceinline__ void merge(const ff_maxsumexp& o) {
    if (ff_isnan(m)) return;
    if (ff_isnan(o.m)) { m = o.m; return; }
    const T mm = o.m > m ? o.m : m;
    s = (m == mm ? s : s * ff_exp(m - mm)) + (o.m == mm ? o.s : o.s * ff_exp(o.m - mm));
    m = mm;
  }
  __device__ __forceinline__ ff_maxsumexp shfl_xor(int o) const { return {ff_shfl_xor(m, o), ff_shfl_xor(s, o)}; }
  // Eager's sum of exp(x - max): NaN when the max is +inf (exp(inf - inf)).
  __device__ __forceinline__ T sum() const { return m == ff_inf(T()) ? m - m : s; }
  // ATen's logsumexp: an infinite or NaN max is the result.
  __device__ __forceinline__ T logsumexp() const { return (ff_isnan(m) || m == ff_inf(T()) || m == -ff_inf(T())) ? m : ff_log(s) + m; }
};

// Merges the partials of W adjacent lanes (W a power of two up to 32),
// pairwise in lane order; every lane returns the same result.
template <int W, class A> __device__ __forceinline__ A ff_warp_merge(A a) {
#pragma unroll
  for (int o = 1; o < W; o <<= 1) {
    A b = a.shfl_xor(o);
    if (threadIdx.x & o) { b.merge(a); a = b; } else { a.merge(b); }
  }
  return a;
}

// Merges the partials of a block's T threads (one row; T a multiple of 32):
// each warp's, then every warp merges all warps' results in warp order, so
// every thread returns the row's result without another broadcast.
template <int T, class A> __device__ __forceinline__ A ff_block_merge(A a, A* partials) {
  a = ff_warp_merge<32>(a);
  if ((threadIdx.x & 31) == 0) partials[threadIdx.x >> 5] = a;
  __syncthreads();
  a = partials[threadIdx.x & (T / 32 - 1)];
  a = ff_warp_merge<T / 32>(a);
  __syncthreads();  // the partials may be overwritten by the next merge
  return a;
}

// Merges column `c`'s partials held by the Y threads along threadIdx.y
// (partials: Y rows of `columns` entries), pairwise; every y returns the result.
template <int Y, class A> __device__ __forceinline__ A ff_column_merge(A a, A* partials, int c, int columns) {
  partials[threadIdx.y * columns + c] = a;
  __syncthreads();
#pragma unroll
  for (int s = Y / 2; s > 0; s >>= 1) {
    if (threadIdx.y < s) partials[threadIdx.y * columns + c].merge(partials[(threadIdx.y + s) * columns + c]);
    __syncthreads();
  }
  a = partials[c];
  __syncthreads();
  return a;
}
)CUDA";
}

}  // namespace ff::codegen
