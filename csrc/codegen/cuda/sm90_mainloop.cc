#include "codegen/cuda/sm90_mainloop.h"

namespace ff::codegen {

std::string_view cuda_sm90_mainloop() {
  return R"CUDA(
// ---- fuseforge sm90 TF32 GEMM mainloop (wgmma, sm_90a): 3xTF32 or 1xTF32 ----
// acc = A @ B^T for A (M x K) and B (N x K), both K-contiguous (tf32 wgmma
// reads only K-major operands). Each fp32 value x is split into a tf32 big
// part and the residual small = x - big; acc = a_small*b_big + a_big*b_small
// + a_big*b_big (3xTF32, fp32 accuracy). The tensor cores read fp32 bits as
// tf32 by truncation, so B's tiles serve as b_big as loaded and only B's
// residuals are written (rounded to nearest); A's fragments, in registers,
// take big = x rounded to nearest. Truncating both would drop a_small*b_small,
// which has the product's sign: a bias toward zero. The tensor cores' own
// accumulation truncates too (measured on an H100: accumulating all of K
// there gave 6-14x eager's error; 128 of K at a time, 10-28x eager's bias
// toward zero in sums of |y|), so each 32-deep k-block goes into a scratch
// accumulator that is added to the result in fp32 registers.
// A CTA of 384 threads computes a 128 x 128 tile, warp-specialized: warpgroup
// 0 (the producer) loads A's and B's tiles with cp.async into STAGES shared
// memory stages and writes B's residuals beside them; warpgroups 1 and 2 (the
// consumers, 64 rows each) take A's fragments into registers, run the wgmmas
// and promote. Stages pass between them on mbarriers, so neither consumer
// waits for the other and one's promotion overlaps the other's wgmmas
// (measured on an H100 at 1024 x 8192 x 8192: 1.17 ms, where the same
// arithmetic with all warps loading and computing, synchronized by
// __syncthreads, took 1.41 ms; making the consumers issue in turn gained
// nothing).
namespace ff_sm90 {

constexpr int BM = 128, BN = 128, BK = 32;
// Shared-memory stages, and LAG: the producer readies (splits or rounds)
// k-block kb - LAG before issuing kb's loads. 1xTF32 keeps no residual tiles,
// so 6 of its smaller stages fit (4, 5 and 6 measured the same on a 3x3 conv).
template <bool SPLIT> constexpr int stages() { return SPLIT ? 4 : 6; }
template <bool SPLIT> constexpr int lag() { return stages<SPLIT>() - 2; }
// A consumer releases kb's stage only once kb+1 is ready; the producer readies
// kb+1 first thing in step kb+1+LAG, after the step before waited for the
// release of kb+LAG-STAGES (which needs kb+LAG-STAGES+1 ready): that must
// come before kb+1.
static_assert(lag<true>() <= stages<true>() - 1 && lag<false>() <= stages<false>() - 1,
              "the producer must ready k-block kb+1 without waiting for kb's stage");
constexpr int THREADS = 384;
constexpr int A_LD = BK + 4;  // floats per A row in shared memory: +4 keeps fragment loads conflict-free
constexpr int B_TILE = BN * BK * 4, A_TILE = BM * A_LD * 4;  // bytes
template <bool SPLIT>
constexpr int smem_bytes() {
  return 1024 + stages<SPLIT>() * ((SPLIT ? 2 : 1) * B_TILE + A_TILE) + 2 * stages<SPLIT>() * 8;
}

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// p, opaque to the compiler: a producer's per-row pointers stay in registers
// instead of being refolded into base + offset and rebuilt from the constant
// bank at every k-block, which left the producer short of registers and slow
// (H200, the seed's conv: 1.77 -> 1.33 ms).
template <class T>
__device__ __forceinline__ T* opaque_pointer(T* p) {
  asm("" : "+l"(p));
  return p;
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads/writes across async wgmma.
__device__ __forceinline__ void reg_fence(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Rounding to tf32 (nearest, ties away) on the bits: two integer ops where
// cvt.rna.tf32.f32 is emulated in about five.
__device__ __forceinline__ unsigned tf32_round(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }
// B's residual: x minus its truncation (what the tensor cores read), rounded.
__device__ __forceinline__ unsigned tf32_residual(float x) {
  return tf32_round(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups
// 1024 bytes apart (the stride byte offset); bits 62-63 = 1 select SW128.
__device__ __forceinline__ unsigned long long b_desc(unsigned addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// d (the warpgroup's 64 x 128) += a (this thread's m64k8 fragment) * b (desc).
__device__ __forceinline__ void wgmma_tf32(float (&d)[64], const unsigned (&a)[4], unsigned long long desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
      "{%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ float4 lds128(unsigned addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts128(unsigned addr, unsigned x, unsigned y, unsigned z, unsigned w) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z), "r"(w));
}
__device__ __forceinline__ float lds32(unsigned addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}

// mbarriers (shared-memory barriers with a phase): a stage's `ready` completes
// when the producer's 128 threads arrived, its `empty` when the consumers' 256
// did; waiting on parity p returns once phase p completed.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// Shared memory, as 32-bit shared-window addresses (1024-aligned base).
struct Smem {
  unsigned b_raw;    // STAGES B tiles as loaded (the tensor cores read them as b_big)
  unsigned b_small;  // STAGES tiles of their rounded residuals (3xTF32 only)
  unsigned a_raw;    // STAGES A tiles, padded rows
  unsigned ready;    // STAGES mbarriers: the stage's tiles and residuals are in place (128 producer arrivals)
  unsigned empty;    // STAGES mbarriers: both consumer warpgroups are done with the stage (256 arrivals)
};

// A's rows as a strided matrix (the GEMM's A). rows(row, k) is a producer
// thread's view of rows row + 16 i (i < 8) from column k on: at(i, kk, src)
// points src at the 16-byte chunk kk columns further and says whether the row
// exists. A convolution's kernel passes an implicit-GEMM view instead.
struct MatrixA {
  const float* a;
  long long lda;
  int M;
  struct Rows {
    const float* p;
    long long ld16;
    int n;  // rows of the 8 that exist
    __device__ __forceinline__ bool at(int i, int kk, const float*& src) const {
      src = p + i * ld16 + kk;
      return i < n;
    }
  };
  __device__ __forceinline__ Rows rows(int row, int k) const {
    return Rows{a + row * lda + k, 16 * lda, (M - row + 15) / 16};
  }
};

// The producer's loads of k-block kb into its stage: thread t's 16-byte
// chunks are rows t / 8 + 16 i (i < 8), column chunk t % 8, of both tiles.
// Rows past M or N, columns past K and A's chunks that at() rejects read as
// zeros (cp.async's zero fill).
template <class ARows>
struct TileLoader {
  ARows a;
  const float* b;
  const float* any;  // a valid address for the zero-filled chunks
  long long ldb16;   // 16 rows
  int b_rows;        // rows of this thread's B chunks that exist: i < b_rows
  int k, K;
  unsigned a_dst, b_dst;   // this thread's first chunk in slot 0
  __device__ __forceinline__ void load(const Smem& s, int slot, int kb) const {
    const int kk = kb * BK;
    const bool k_ok = k + kk < K;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float* src;
      const bool a_ok = a.at(i, kk, src) && k_ok, b_ok = k_ok && i < b_rows;
      cp_async16(s.a_raw + slot * A_TILE + a_dst + i * 16 * A_LD * 4, a_ok ? src : any, a_ok);
      // Rows 16 apart keep the same swizzle phase (row % 8).
      cp_async16(s.b_raw + slot * B_TILE + b_dst + i * 16 * 128, b_ok ? b + i * ldb16 + kk : any, b_ok);
    }
  }
};

// A producer thread's share of the B tile's residuals: the 8 chunks its own
// copies loaded (rows 16 apart from b_dst), so that it waits for its copies
// alone, not for the other producer threads' (with a barrier there, H200:
// the seed's 3xTF32 conv + relu 3.15 -> 3.10 ms, a 48 -> 96 channel one 0.711 -> 0.691).
__device__ __forceinline__ void split_b(const Smem& s, int slot, unsigned b_dst) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const unsigned off = b_dst + i * 16 * 128;
    const float4 x = lds128(s.b_raw + slot * B_TILE + off);
    sts128(s.b_small + slot * B_TILE + off, tf32_residual(x.x), tf32_residual(x.y), tf32_residual(x.z),
           tf32_residual(x.w));
  }
}

// 1xTF32: the producer's share of the B tile rounded to tf32 in place, as A's
// fragments are. Truncation (what the tensor cores would do) biases products
// toward zero: 1.5-1.8x eager's error against fp64 on the suite's convs, 3.2x
// on a small convnet; rounded, the errors equal cuDNN's (and cost ~25 %).
__device__ __forceinline__ void round_b(const Smem& s, int slot, unsigned b_dst) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const unsigned off = s.b_raw + slot * B_TILE + b_dst + i * 16 * 128;
    const float4 x = lds128(off);
    sts128(off, tf32_round(x.x), tf32_round(x.y), tf32_round(x.z), tf32_round(x.w));
  }
}

// Consumer thread ct's m64k8 A fragments for the 4 k-steps of the tile in
// `slot`: rows r and r + 8 of its warp's 16, columns t and t + 4 of each
// 8-step (consumer warps 0-3: rows 0-63, warps 4-7: rows 64-127).
template <bool SPLIT>
__device__ __forceinline__ void load_a(const Smem& s, int slot, int ct, unsigned (&big)[4][4], unsigned (&small)[4][4]) {
  const int warp = ct >> 5, lane = ct & 31;
  const int r = warp * 16 + (lane >> 2), t = lane & 3;
  const unsigned base = s.a_raw + slot * A_TILE + (r * A_LD + t) * 4;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const float x[4] = {lds32(base + ks * 32), lds32(base + (8 * A_LD + ks * 8) * 4), lds32(base + ks * 32 + 16),
                        lds32(base + (8 * A_LD + ks * 8 + 4) * 4)};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      big[ks][j] = tf32_round(x[j]);
      // Exact in fp32; the tensor cores truncate it, unbiased: its sign is independent of x's.
      if (SPLIT) small[ks][j] = __float_as_uint(x[j] - __uint_as_float(big[ks][j]));
    }
  }
}

// One consumer k-block: the wgmmas (3xTF32: 12 into a scratch accumulator,
// promoted into acc after; 1xTF32: 4 straight into acc, as cuDNN's and
// cuBLAS's TF32 kernels accumulate), the next k-block's A fragments while they
// run, then the stage's release.
template <bool SPLIT>
__device__ __forceinline__ void consume(const Smem& s, int kb, bool more, int ct, const unsigned (&cur_big)[4][4],
                                       const unsigned (&cur_small)[4][4], unsigned (&next_big)[4][4],
                                       unsigned (&next_small)[4][4], float (&acc)[64], float (&part)[64]) {
  constexpr int STAGES = stages<SPLIT>();
  const int slot = kb % STAGES;
  float (&d)[64] = SPLIT ? part : acc;
  reg_fence(d);
  wgmma_fence();
  if (SPLIT) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      wgmma_tf32(d, cur_small[ks], b_desc(s.b_raw + slot * B_TILE + ks * 32), ks == 0 ? 0 : 1);
      wgmma_tf32(d, cur_big[ks], b_desc(s.b_small + slot * B_TILE + ks * 32), 1);
    }
  }
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_tf32(d, cur_big[ks], b_desc(s.b_raw + slot * B_TILE + ks * 32), 1);
  wgmma_commit();
  if (more) {  // the tile has a k-block after kb
    const int next = (kb + 1) % STAGES;
    mbar_wait(s.ready + next * 8, ((kb + 1) / STAGES) & 1);
    load_a<SPLIT>(s, next, ct, next_big, next_small);
  }
  wgmma_wait0();
  reg_fence(d);
  if (SPLIT) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] += part[i];
  }
  mbar_arrive(s.empty + slot * 8);
}

// Where a consumer thread's accumulators lie in the CTA's tile: element i is
// row row0 + 8 * ((i >> 1) & 1), column col0 + 8 * (i >> 2) + (i & 1), where
// row0 = m0 + 16 * warp + lane / 4 and col0 = n0 + 2 * (lane % 4).
struct Fragment {
  int row0, col0;  // this thread's first element
  int m0, n0;      // the tile's origin
  int ct;          // consumer thread, 0-255
  float* scratch;  // 4 KiB of shared memory, free once every consumer is past the mainloop
};

// The producer's walk over its CTA's tiles (c, c + gridDim.x, ...): step g
// readies the (g - LAG)-th k-block (ready(j), whose wait<LAG - 1> waits for
// its copies alone), waits for its stage to be free (`empty`, released by the
// consumers) and issues the loads of the CTA's g-th (load(loader, slot, kb),
// the loader made by tile_loader(tile) per tile); LAG 0 readies g itself
// after its loads. The last LAG are readied after the loop, each followed by
// an empty cp.async group so that the next one's wait still waits for its own.
template <int STAGES, int LAG, class TileLoaderOf, class Load, class Ready>
__device__ __forceinline__ void produce(int tiles, int nk, unsigned empty, const TileLoaderOf& tile_loader,
                                        const Load& load, const Ready& ready) {
  int g = 0;
#pragma unroll 1
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const auto ld = tile_loader(tile);
#pragma unroll 1
    for (int kb = 0; kb < nk; ++kb, ++g) {
      // k-block g - LAG is readied before the wait for g's stage: readied
      // after it, it waited for the consumers to release g - STAGES while
      // they might be waiting for it (H200, the seed's 3xTF32 conv + relu
      // 3.10 -> 3.05 ms; LAG one more or less: 3.25, 3.22).
      if (LAG > 0 && g >= LAG) ready(g - LAG);
      const int slot = g % STAGES;
      if (g >= STAGES) mbar_wait(empty + slot * 8, (g / STAGES - 1) & 1);
      load(ld, slot, kb);
      cp_async_commit();
      if (LAG == 0) ready(g);
    }
  }
#pragma unroll 1
  for (int j = g - LAG; j < g; ++j) {
    if (j >= 0) ready(j);
    cp_async_commit();
  }
}

// The consumer warpgroups' own barrier (the producer's is 1).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }

// Calls epilogue(row, col, v0, v1) for each of this thread's pairs of adjacent columns.
template <class Epilogue>
__device__ __forceinline__ void store_pairs(const Epilogue& epilogue, const float (&acc)[64], const Fragment& f) {
#pragma unroll
  for (int i = 0; i < 64; i += 2) epilogue(f.row0 + 8 * ((i >> 1) & 1), f.col0 + 8 * (i >> 2), acc[i], acc[i + 1]);
}

// partials[row * (N / B) + col / B] = scale * the fold with Epilogue::combine
// over the B columns of each block of epilogue.value(row, col, acc) (N a
// multiple of B). The order is fixed, so results are deterministic: each
// thread folds its 2 * B / 8 values of the row, then the row's quad (lanes
// 4k..4k+3) combines them.
template <int B, class Epilogue>
__device__ __forceinline__ void reduce_rows(const float (&acc)[64], const Fragment& f, int M, int N,
                                            const Epilogue& epilogue, float scale, float* partials) {
  static_assert(B >= 16 && 128 % B == 0, "blocks of 16 to 128 columns, within one tile");
  const int blocks = N / B;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = f.row0 + 8 * r;
#pragma unroll
    for (int h = 0; h < 128 / B; ++h) {
      float x = Epilogue::identity();
#pragma unroll
      for (int j = h * (B / 8); j < (h + 1) * (B / 8); ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = f.col0 + 8 * j + e;
          if (row < M && col < N) x = Epilogue::combine(x, epilogue.value(row, col, acc[4 * j + 2 * r + e]));
        }
      x = Epilogue::combine(x, __shfl_xor_sync(0xffffffffu, x, 1));
      x = Epilogue::combine(x, __shfl_xor_sync(0xffffffffu, x, 2));
      const int block = f.n0 / B + h;
      if ((f.ct & 3) == 0 && row < M && block < blocks) partials[static_cast<long long>(row) * blocks + block] = x * scale;
    }
  }
}

// partials[(row / B) * N + col] = scale * the fold over the B rows of each
// block (M a multiple of B), in a fixed order: each thread folds its two rows,
// the warp's 8 row groups combine by shuffles (16 rows), and after a consumer
// barrier thread c < 128 folds column c's B / 16 warp results from scratch.
template <int B, class Epilogue>
__device__ __forceinline__ void reduce_cols(const float (&acc)[64], const Fragment& f, int M, int N,
                                            const Epilogue& epilogue, float scale, float* partials) {
  static_assert(B >= 16 && 128 % B == 0, "blocks of 16 to 128 rows, within one tile");
  const int warp = f.ct >> 5, lane = f.ct & 31;
  consumer_sync();  // both consumers are done with the stages: scratch may overwrite them
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = f.col0 + 8 * j + e;
      float x = Epilogue::identity();
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (f.row0 + 8 * r < M && col < N) x = Epilogue::combine(x, epilogue.value(f.row0 + 8 * r, col, acc[4 * j + 2 * r + e]));
      x = Epilogue::combine(x, __shfl_xor_sync(0xffffffffu, x, 4));
      x = Epilogue::combine(x, __shfl_xor_sync(0xffffffffu, x, 8));
      x = Epilogue::combine(x, __shfl_xor_sync(0xffffffffu, x, 16));
      if (lane < 4) f.scratch[warp * 128 + 8 * j + 2 * lane + e] = x;
    }
  consumer_sync();
  if (f.ct >= 128) return;
  const int col = f.n0 + f.ct, blocks = M / B;
#pragma unroll
  for (int b = 0; b < 128 / B; ++b) {
    float x = f.scratch[b * (B / 16) * 128 + f.ct];
#pragma unroll
    for (int w = 1; w < B / 16; ++w) x = Epilogue::combine(x, f.scratch[(b * (B / 16) + w) * 128 + f.ct]);
    const int block = f.m0 / B + b;
    if (col < N && block < blocks) partials[static_cast<long long>(block) * N + col] = x * scale;
  }
}

// Computes 128 x 128 tiles of A @ B^T (SPLIT: 3xTF32, else 1xTF32) and hands
// each to epilogue.tile(acc, fragment), which stores it (store_pairs) or
// reduces it (reduce_rows, reduce_cols). CTA b takes tiles b, b + gridDim.x,
// ... (m-tiles first): with fewer CTAs than tiles, the producer loads the
// next tile while the consumers run the last one's epilogue, so the epilogue
// must then leave shared memory alone (store_pairs; the reductions' scratch
// overlaps the stages). `a` gives the producer its rows (MatrixA or an
// implicit GEMM's view). Needs K % 4 == 0, A's chunks and B 16-byte aligned,
// ldb a multiple of 4, smem_bytes<SPLIT>() of dynamic shared memory, THREADS
// threads.
template <bool SPLIT, class A, class Epilogue>
__device__ __forceinline__ void gemm_tf32(const A& a, const float* b, int M, int N, int K, long long ldb,
                                          const Epilogue& epilogue) {
  constexpr int STAGES = stages<SPLIT>(), LAG = lag<SPLIT>();
  extern __shared__ __align__(16) unsigned char ff_smem[];
  const unsigned raw = smem_u32(ff_smem), base = (raw + 1023u) & ~1023u;
  const unsigned b_tiles = (SPLIT ? 2 : 1) * STAGES * B_TILE, bars = base + b_tiles + STAGES * A_TILE;
  const Smem s{base, SPLIT ? base + STAGES * B_TILE : 0u, base + b_tiles, bars, bars + STAGES * 8};
  const int tiles_m = (M + BM - 1) / BM, tiles = tiles_m * ((N + BN - 1) / BN);
  const int nk = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(s.ready + i * 8, 128);
      mbar_init(s.empty + i * 8, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Registers: each thread starts with 168 (65536 / 384); the producer needs
  // few and hands them to the consumers (128 x 72 + 256 x 216 = 384 x 168).
  if (threadIdx.x < 128) {  // producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 72;\n");
    const int t = threadIdx.x, row0 = t >> 3, ch = t & 7;
    // (B's 128-byte swizzle: chunk ch of row r lies at ch ^ (r % 8).)
    const unsigned b_dst = static_cast<unsigned>(row0 * 128 + ((ch ^ (row0 & 7)) << 4));
    const auto ready = [&](int j) {
      cp_async_wait<LAG - 1>();  // this thread's chunks of k-block j landed (j + 1's may not have)
      if (SPLIT)
        split_b(s, j % STAGES, b_dst);
      else
        round_b(s, j % STAGES, b_dst);
      fence_proxy_async();  // the tensor cores (async proxy) read the tiles and residuals
      mbar_arrive(s.ready + (j % STAGES) * 8);
    };
    const auto tile_loader = [&](int tile) {
      const int m0 = tile % tiles_m * BM, n0 = tile / tiles_m * BN;
      return TileLoader<typename A::Rows>{a.rows(m0 + row0, ch * 4), b + (n0 + row0) * ldb + ch * 4, b, 16 * ldb,
                                          (N - n0 - row0 + 15) / 16, ch * 4, K,
                                          static_cast<unsigned>((row0 * A_LD + ch * 4) * 4), b_dst};
    };
    const auto load = [&](const TileLoader<typename A::Rows>& ld, int slot, int kb) { ld.load(s, slot, kb); };
    produce<STAGES, LAG>(tiles, nk, s.empty, tile_loader, load, ready);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n");
  const int ct = threadIdx.x - 128, warp = ct >> 5, lane = ct & 31;
  unsigned b0[4][4], s0[4][4], b1[4][4], s1[4][4];
  float acc[64], part[64];
  int g = 0;
#pragma unroll 1
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, g += nk) {
    const int m0 = tile % tiles_m * BM, n0 = tile / tiles_m * BN;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    mbar_wait(s.ready + (g % STAGES) * 8, (g / STAGES) & 1);
    load_a<SPLIT>(s, g % STAGES, ct, b0, s0);
    // Unrolled by 2 (the fragment buffers swap roles), no further.
#pragma unroll 1
    for (int kb = 0; kb < nk; kb += 2) {
      consume<SPLIT>(s, g + kb, kb + 1 < nk, ct, b0, s0, b1, s1, acc, part);
      if (kb + 1 < nk) consume<SPLIT>(s, g + kb + 1, kb + 2 < nk, ct, b1, s1, b0, s0, acc, part);
    }
    epilogue.tile(acc, Fragment{m0 + warp * 16 + (lane >> 2), n0 + 2 * (lane & 3), m0, n0, ct,
                                reinterpret_cast<float*>(ff_smem + (base - raw))});
  }
}

// The GEMM's form: A row-major (M x K, row stride lda), 3xTF32.
template <class Epilogue>
__device__ __forceinline__ void gemm_3xtf32(const float* a, const float* b, int M, int N, int K, long long lda,
                                               long long ldb, const Epilogue& epilogue) {
  gemm_tf32<true>(MatrixA{a, lda, M}, b, M, N, K, ldb, epilogue);
}

}  // namespace ff_sm90
)CUDA";
}

std::string_view sm90_kernel_end() {
  return "#else\n"
         "  __trap();  // built for a target without wgmma: these kernels need sm_90a\n"
         "#endif\n"
         "}\n";
}

}  // namespace ff::codegen
