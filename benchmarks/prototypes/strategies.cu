// Standalone prototypes that chose the reduction and scan kernels' strategies
// (run on an H100; what they chose: csrc/fusion/reduction_strategy.cc).
// Not part of fuseforge: hand-written variants of a 4096x32768 softmax, a
// [128,512,1024] logsumexp over dim 1 then a mean, and a 1024x32768
// cumsum(x * mask), timed with a cold L2 (256 MiB memset) and CUDA events,
// median of 20. On a GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a strategies.cu -o strategies && ./strategies
#include <cstdio>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void copy4(float4* o, const float4* i, long n) {
  for (long k = blockIdx.x * (long)blockDim.x + threadIdx.x; k < n; k += (long)gridDim.x * blockDim.x) o[k] = i[k];
}

struct MS { float m, s; };
__device__ __forceinline__ MS merge(MS a, MS b) {
  float mm = fmaxf(a.m, b.m); float ms = mm == -INFINITY ? 0.f : mm;
  return {mm, a.s * expf(a.m - ms) + b.s * expf(b.m - ms)};
}
template <int T> __device__ MS block_merge(MS a, MS* sh) {
  for (int o = 16; o; o >>= 1) { MS b{__shfl_xor_sync(~0u, a.m, o), __shfl_xor_sync(~0u, a.s, o)}; a = merge(a, b); }
  if (T > 32) {
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = a;
    __syncthreads();
    a = sh[0];
    for (int w = 1; w < T / 32; ++w) a = merge(a, sh[w]);
  }
  return a;
}
// Row softmax: cluster of C CTAs per row, T threads each, E float4 per thread (row = C*T*E*4).
template <int C, int T, int E>
__global__ void __launch_bounds__(T) softmax_cluster(float* out, const float* in, int len) {
  cg::cluster_group cl = cg::this_cluster();
  const int rank = C > 1 ? cl.block_rank() : 0;
  const long row = blockIdx.x / C;
  const float4* x = reinterpret_cast<const float4*>(in + row * len) + rank * T * E;
  float4 v[E];
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = x[e * T + threadIdx.x];
  float m = -INFINITY;
#pragma unroll
  for (int e = 0; e < E; ++e) m = fmaxf(m, fmaxf(fmaxf(v[e].x, v[e].y), fmaxf(v[e].z, v[e].w)));
  float ms = m == -INFINITY ? 0.f : m, s = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) s += expf(v[e].x - ms) + expf(v[e].y - ms) + expf(v[e].z - ms) + expf(v[e].w - ms);
  __shared__ MS sh[T / 32];
  __shared__ MS blk;
  MS a = block_merge<T>({m, s}, sh);
  if (C > 1) {
    if (threadIdx.x == 0) blk = a;
    cl.sync();
    a = *cl.map_shared_rank(&blk, 0);
    for (int r = 1; r < C; ++r) a = merge(a, *cl.map_shared_rank(&blk, r));
    cl.sync();
  }
  const float mm = a.m == -INFINITY ? 0.f : a.m, inv = 1.f / a.s;
  float4* y = reinterpret_cast<float4*>(out + row * len) + rank * T * E;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float4 r = v[e];
    r.x = expf(r.x - mm) * inv; r.y = expf(r.y - mm) * inv; r.z = expf(r.z - mm) * inv; r.w = expf(r.w - mm) * inv;
    y[e * T + threadIdx.x] = r;
  }
}
// Two passes from memory (the second from L2), T threads per row.
template <int T>
__global__ void __launch_bounds__(T) softmax_2pass(float* out, const float* in, int len) {
  const long row = blockIdx.x;
  const float4* x = reinterpret_cast<const float4*>(in + row * len);
  const int n4 = len / 4;
  MS a{-INFINITY, 0};
  for (int i = threadIdx.x; i < n4; i += 4 * T) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * T < n4 ? x[i + u * T] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    float m = a.m;
#pragma unroll
    for (int u = 0; u < 4; ++u) m = fmaxf(m, fmaxf(fmaxf(v[u].x, v[u].y), fmaxf(v[u].z, v[u].w)));
    float ms = m == -INFINITY ? 0.f : m;
    float s = a.s * expf(a.m - ms);
#pragma unroll
    for (int u = 0; u < 4; ++u) s += expf(v[u].x - ms) + expf(v[u].y - ms) + expf(v[u].z - ms) + expf(v[u].w - ms);
    a = {m, s};
  }
  __shared__ MS sh[T / 32];
  a = block_merge<T>(a, sh);
  const float mm = a.m == -INFINITY ? 0.f : a.m, inv = 1.f / a.s;
  float4* y = reinterpret_cast<float4*>(out + row * len);
  for (int i = threadIdx.x; i < n4; i += T) {
    float4 r = x[i];
    r.x = expf(r.x - mm) * inv; r.y = expf(r.y - mm) * inv; r.z = expf(r.z - mm) * inv; r.w = expf(r.w - mm) * inv;
    y[i] = r;
  }
}
// logsumexp over dim 1 of [B, R, N] then mean over N: columns, chunked online update.
// block (32 x float4 columns, Y), grid (N/128, B); writes per-column lse, second kernel means.
template <int Y, int U>
__global__ void __launch_bounds__(32 * Y) lse_columns(float* out, const float* in, int R, int N) {
  const int b = blockIdx.y, c = (blockIdx.x * 32 + threadIdx.x) * 4;
  const float* x = in + (long)b * R * N + c;
  float m[4], s[4];
  for (int k = 0; k < 4; ++k) { m[k] = -INFINITY; s[k] = 0; }
  for (int r0 = threadIdx.y; r0 < R; r0 += Y * U) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = *reinterpret_cast<const float4*>(x + (long)(r0 + u * Y) * N);
    float vv[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) { vv[u][0] = v[u].x; vv[u][1] = v[u].y; vv[u][2] = v[u].z; vv[u][3] = v[u].w; }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float mm = m[k];
#pragma unroll
      for (int u = 0; u < U; ++u) mm = fmaxf(mm, vv[u][k]);
      float ms = mm == -INFINITY ? 0.f : mm;
      float ss = s[k] * expf(m[k] - ms);
#pragma unroll
      for (int u = 0; u < U; ++u) ss += expf(vv[u][k] - ms);
      m[k] = mm; s[k] = ss;
    }
  }
  __shared__ MS sh[Y][32 * 4];
  for (int k = 0; k < 4; ++k) sh[threadIdx.y][threadIdx.x * 4 + k] = {m[k], s[k]};
  __syncthreads();
  if (threadIdx.y == 0)
    for (int k = 0; k < 4; ++k) {
      MS a = sh[0][threadIdx.x * 4 + k];
      for (int y = 1; y < Y; ++y) a = merge(a, sh[y][threadIdx.x * 4 + k]);
      out[(long)b * N + c + k] = logf(a.s) + a.m;
    }
}
__global__ void mean_rows(float* out, const float* in, int N) {
  float s = 0;
  for (int i = threadIdx.x; i < N; i += 32) s += in[(long)blockIdx.x * N + i];
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  if (threadIdx.x == 0) out[blockIdx.x] = s / N;
}
// cumsum(x * mask) along rows: cluster of C CTAs per row, T threads, E float4 per thread (contiguous per thread).
template <int C, int T, int E>
__global__ void __launch_bounds__(T) cumsum_cluster(float* out, const float* in, const float* mask, int len) {
  cg::cluster_group cl = cg::this_cluster();
  const int rank = C > 1 ? cl.block_rank() : 0;
  const long row = blockIdx.x / C;
  const long off = row * len + (long)rank * T * E * 4;
  const float4* x = reinterpret_cast<const float4*>(in + off) + threadIdx.x * E;
  const float4* mk = reinterpret_cast<const float4*>(mask + off) + threadIdx.x * E;
  float v[E * 4];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float4 a = x[e], b = mk[e];
    v[4 * e] = a.x * b.x; v[4 * e + 1] = a.y * b.y; v[4 * e + 2] = a.z * b.z; v[4 * e + 3] = a.w * b.w;
  }
#pragma unroll
  for (int i = 1; i < E * 4; ++i) v[i] += v[i - 1];
  // exclusive scan of thread totals across the block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float t = v[E * 4 - 1];
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) { float n = __shfl_up_sync(~0u, t, o); if (lane >= o) t += n; }
  __shared__ float wsum[T / 32];
  __shared__ float btotal;
  if (lane == 31) wsum[warp] = t;
  __syncthreads();
  if (warp == 0) {
    float w = lane < T / 32 ? wsum[lane] : 0.f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) { float n = __shfl_up_sync(~0u, w, o); if (lane >= o) w += n; }
    if (lane < T / 32) wsum[lane] = w;
    if (lane == T / 32 - 1) btotal = w;
  }
  __syncthreads();
  float prefix = t - v[E * 4 - 1] + (warp ? wsum[warp - 1] : 0.f);
  if (C > 1) {
    cl.sync();
    for (int r = 0; r < rank; ++r) prefix += *cl.map_shared_rank(&btotal, r);
    cl.sync();
  }
  float4* y = reinterpret_cast<float4*>(out + off) + threadIdx.x * E;
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] = make_float4(v[4 * e] + prefix, v[4 * e + 1] + prefix, v[4 * e + 2] + prefix, v[4 * e + 3] + prefix);
}

template <class F> float timeit(F f, void* flush, size_t fb) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 25; ++i) {
    CK(cudaMemsetAsync(flush, i, fb));
    cudaEventRecord(a); f(); cudaEventRecord(b); CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b); if (i >= 5) t.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end()); return t[t.size() / 2];
}
template <class K> void launch_cluster(K k, int grid, int block, int C, float* o, const float* i, int len) {
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = grid; cfg.blockDim = block;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, o, i, len));
}
template <class K> void launch_cluster3(K k, int grid, int block, int C, float* o, const float* i, const float* m, int len) {
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = grid; cfg.blockDim = block;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, o, i, m, len));
}
int main() {
  size_t fb = 256 << 20; void* flush; CK(cudaMalloc(&flush, fb));
  const int R = 4096, L = 32768; const size_t n = (size_t)R * L;
  float *x, *y, *m; CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&y, n * 4)); CK(cudaMalloc(&m, n * 4));
  std::vector<float> h(n); srand(1); for (auto& v : h) v = (rand() / (float)RAND_MAX) * 8 - 4;
  CK(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice));
  for (auto& v : h) v = rand() & 1; CK(cudaMemcpy(m, h.data(), n * 4, cudaMemcpyHostToDevice));
  float t = timeit([&] { copy4<<<132 * 8, 512>>>((float4*)y, (const float4*)x, n / 4); }, flush, fb);
  printf("copy 512MB: %.4f ms  %.2f TB/s\n", t, 2.0 * n * 4 / t / 1e9);
  t = timeit([&] { copy4<<<132 * 16, 256>>>((float4*)y, (const float4*)x, n / 4); }, flush, fb);
  printf("copy 512MB (16x256): %.4f ms  %.2f TB/s\n", t, 2.0 * n * 4 / t / 1e9);
  auto rep = [&](const char* name, float t, double bytes) { printf("%-34s %.4f ms  %.2f TB/s\n", name, t, bytes / t / 1e9); };
  double sb = 2.0 * n * 4;
#define SC(C, T, E) rep("softmax cluster C=" #C " T=" #T " E=" #E, timeit([&] { launch_cluster(softmax_cluster<C, T, E>, R * C, T, C, y, x, L); }, flush, fb), sb);
  SC(1, 512, 16) SC(1, 1024, 8) SC(2, 512, 8) SC(2, 256, 16) SC(4, 256, 8) SC(4, 512, 4) SC(8, 256, 4) SC(8, 128, 8)
  rep("softmax 2pass T=1024", timeit([&] { softmax_2pass<1024><<<R, 1024>>>(y, x, L); }, flush, fb), sb);
  rep("softmax 2pass T=512", timeit([&] { softmax_2pass<512><<<R, 512>>>(y, x, L); }, flush, fb), sb);
  rep("softmax 2pass T=256", timeit([&] { softmax_2pass<256><<<R, 256>>>(y, x, L); }, flush, fb), sb);
  // check softmax row 7 sum
  launch_cluster(softmax_cluster<8, 256, 4>, R * 8, 256, 8, y, x, L); CK(cudaDeviceSynchronize());
  { std::vector<float> r(L); CK(cudaMemcpy(r.data(), y + 7L * L, L * 4, cudaMemcpyDeviceToHost)); double s = 0; for (float v : r) s += v; printf("softmax row sum %.6f\n", s); }
  // logsumexp [128,512,1024]
  const int B = 128, RR = 512, N = 1024; float* l; CK(cudaMalloc(&l, B * N * 4));
  double lb = (double)B * RR * N * 4;
#define LS(Y, U) rep("lse columns Y=" #Y " U=" #U, timeit([&] { lse_columns<Y, U><<<dim3(N / 128, B), dim3(32, Y)>>>(l, x, RR, N); mean_rows<<<B, 32>>>(y, l, N); }, flush, fb), lb);
  LS(4, 4) LS(8, 4) LS(8, 8) LS(16, 4) LS(16, 8) LS(32, 4)
  // cumsum [1024, 32768]
  const int CR = 1024; double cb = 3.0 * CR * L * 4;
#define CS(C, T, E) rep("cumsum cluster C=" #C " T=" #T " E=" #E, timeit([&] { launch_cluster3(cumsum_cluster<C, T, E>, CR * C, T, C, y, x, m, L); }, flush, fb), cb);
  CS(1, 1024, 8) CS(1, 512, 16) CS(2, 512, 8) CS(4, 256, 8) CS(4, 512, 4) CS(8, 256, 4) CS(8, 128, 8)
  // check cumsum row 3
  launch_cluster3(cumsum_cluster<8, 256, 4>, CR * 8, 256, 8, y, x, m, L); CK(cudaDeviceSynchronize());
  { std::vector<float> a(L), b(L), r(L); CK(cudaMemcpy(a.data(), x + 3L * L, L * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), m + 3L * L, L * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(r.data(), y + 3L * L, L * 4, cudaMemcpyDeviceToHost));
    double s = 0, err = 0; for (int i = 0; i < L; ++i) { s += (double)a[i] * b[i]; err = std::max(err, std::fabs(s - r[i])); } printf("cumsum max err %.3g (last %.3f)\n", err, s); }
  return 0;
}
