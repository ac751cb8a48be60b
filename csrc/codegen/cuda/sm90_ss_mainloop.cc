#include "codegen/cuda/sm90_ss_mainloop.h"

#include <sstream>

#include "codegen/cuda/sm90_ss_wide.h"

namespace ff::codegen {

namespace {

// wgmma m64n{bn}k8 with both operands from shared memory: d has bn / 2
// accumulators a thread, listed one by one in the asm.
std::string wgmma_ss(int bn) {
  const int regs = bn / 2;
  std::ostringstream os;
  os << "__device__ __forceinline__ void wgmma(float (&d)[" << regs
     << "], unsigned long long a, unsigned long long b) {\n"
     << "  asm volatile(\n"
     << "      \"wgmma.mma_async.sync.aligned.m64n" << bn << "k8.f32.tf32.tf32 {\"\n      \"";
  for (int i = 0; i < regs; ++i) os << "%" << i << (i + 1 < regs ? "," : "") << ((i % 16 == 15) ? "\"\n      \"" : "");
  os << "}, %" << regs << ", %" << regs + 1 << ", 1, 1, 1;\\n\"\n      : ";
  for (int i = 0; i < regs; ++i)
    os << "\"+f\"(d[" << i << "])" << (i + 1 < regs ? ", " : "") << ((i % 8 == 7) ? "\n        " : "");
  os << ": \"l\"(a), \"l\"(b));\n}\n";
  return os.str();
}

// The bulk copies that staged results (ping-pong or wide tiles) leave by.
const char* bulk_store_helpers() {
  return R"CUDA(
// ---- bulk copies out of shared memory ----
__device__ __forceinline__ void bulk_store(float* dst, unsigned src, int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Output channel c's pixels [from, end), staged contiguously from `src` on:
// one bulk copy per sample they span (a channel's pixels of one sample are
// contiguous in the result, Epilogue::column), then the group's commit.
template <class Epilogue>
__device__ __forceinline__ void store_channel_run(const Epilogue& epilogue, int c, int from, int end, unsigned src) {
#pragma unroll 1
  for (int p = from; p < end;) {
    const int n = p / Epilogue::SAMPLE, stop = min(end, (n + 1) * Epilogue::SAMPLE);
    bulk_store(epilogue.column(n, c) + (p - n * Epilogue::SAMPLE), src + (p - from) * 4, (stop - p) * 4);
    p = stop;
  }
  bulk_commit();
}
// This thread's copies have read their source (so it may be written again), or are done.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
)CUDA";
}

}  // namespace

std::string cuda_sm90_ss_mainloop(const Sm90SsTile& tile) {
  std::ostringstream os;
  os << R"CUDA(
// ---- fuseforge sm90 1xTF32 mainloop, both operands from shared memory ----
// acc = A @ B^T for A (M x K) and B (N x K), both K-contiguous and already
// rounded to tf32 (the tensor cores truncate what they read, so rounding
// here would cost a pass over every tile). A CTA of 384 threads computes a
// BM x BN tile: warpgroup 0 (the producer) gathers A's and B's 32-deep
// k-blocks with cp.async into STAGES stages, each tile 128-byte rows in the
// 128-byte swizzle the wgmma descriptors name; warpgroups 1 and 2 (the
// consumers) each run the wgmmas of BM / 2 rows straight from the stage,
// keep one k-block's wgmmas in flight and release a stage once the next
// k-block's are issued. The accumulation stays in the tensor cores, as
// cuDNN's and cuBLAS's TF32 kernels accumulate. (Wide tiles swap the roles:
// A is the weights, B the gathered pixels, see gemm below.)
namespace ff_sm90 {
namespace ss {

)CUDA";
  os << "constexpr int BM = " << tile.bm << ", BN = " << tile.bn << ", BK = " << Sm90SsTile::bk
     << ", STAGES = " << tile.stages() << ";\n"
     << "// Whether the consumer warpgroups take alternate tiles (each all BM rows) or share each.\n"
     << "constexpr bool PINGPONG = " << (tile.pingpong() ? "true" : "false") << ";\n"
     << "// Whether K is a multiple of BK and N of " << (tile.wide ? "BM" : "BN")
     << ": the producer's bounds tests on them vanish.\n"
     << "constexpr bool K_WHOLE = " << (tile.k_whole ? "true" : "false")
     << ", N_WHOLE = " << (tile.n_whole ? "true" : "false") << ";\n"
     << "constexpr int ROWS = PINGPONG ? BM : BM / 2;  // a consumer warpgroup's rows of a tile\n"
     << "constexpr int MS = ROWS / 64;                // its m64 slices\n"
     << "constexpr int A_TILE = BM * 128, B_TILE = BN * 128, STAGE = A_TILE + B_TILE;  // bytes\n"
     << "constexpr int STAGING = " << tile.staging_bytes() / 2
     << ";  // bytes a consumer warpgroup stages its results in (staged stores)\n"
     << "constexpr int SMEM_BYTES = 1024 + STAGES * STAGE + 2 * STAGING + (2 * STAGES + 2) * 8;\n"
     << wgmma_ss(tile.bn);
  os << R"CUDA(
// A's chunks through L1 (.ca): a window's taps read overlapping pixels, so
// most of a k-block's A is in L1 from the tap before (B's, read once a tile,
// bypass it). H200, 3x3 convs + relu: the seed's 1.43 -> 1.38 ms, a 5x5 one
// of 12 input channels 1.34 -> 1.03.
__device__ __forceinline__ void cp_async16_l1(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// k-block j's stage is ready once this thread's copies so far have landed:
// the mbarrier counts the thread's arrival then, so the producer never waits
// for its own loads (waiting for them capped the loads in flight at LAG).
__device__ __forceinline__ void arrive_on_copies(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
template <int R>
__device__ __forceinline__ void reg_fence(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int S, int R>
__device__ __forceinline__ void reg_fence(float (&d)[S][R]) {
#pragma unroll
  for (int j = 0; j < S; ++j) reg_fence(d[j]);
}

// Each stage's mbarriers: ready (the producer's 128 threads' copies landed)
// and empty (its `consumers` consumer threads are done with it).
__device__ __forceinline__ void init_stage_barriers(unsigned ready, unsigned empty, int consumers) {
  for (int i = 0; i < STAGES; ++i) {
    mbar_init(ready + i * 8, 128);
    mbar_init(empty + i * 8, consumers);
  }
}
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// A consumer warpgroup's k-block g (the CTA's g-th) into acc: waits for its
// stage, issues its wgmmas (mma(stage)) and keeps them in flight; once
// k-block g - 1's are done, releases that one's stage where `release` (g is
// not the tile's first).
template <class Acc, class Mma>
__device__ __forceinline__ void consume_kblock(Acc& acc, unsigned base, unsigned ready, unsigned empty, int g,
                                               bool release, const Mma& mma) {
  const int slot = g % STAGES;
  const unsigned stage = base + slot * STAGE;
  mbar_wait(ready + slot * 8, (g / STAGES) & 1);
  fence_proxy_async();  // the producer's copies (the generic proxy) before the wgmmas' reads
  reg_fence(acc);
  wgmma_fence();
  mma(stage);
  wgmma_commit();
  wgmma_wait1();  // k-block g - 1's wgmmas are done: its stage is free
  reg_fence(acc);
  if (release) mbar_arrive(empty + ((g - 1) % STAGES) * 8);
}
// The tile's last k-block (g): its wgmmas done, its stage released.
template <class Acc>
__device__ __forceinline__ void finish_tile(Acc& acc, unsigned empty, int g) {
  wgmma_wait0();
  reg_fence(acc);
  mbar_arrive(empty + (g % STAGES) * 8);
}
)CUDA";
  if (tile.staged || tile.wide) os << bulk_store_helpers();  // (bulk_wait ends the wide tiles' kernels)
  if (tile.wide) {
    os << cuda_sm90_ss_wide(tile);
  } else {
    os << R"CUDA(
// The producer's loads of k-block kb: thread t's 16-byte chunks are column
// chunk t % 8 of rows t / 8 + 16 i, A's from a (the tile's 128 rows), B's
// from b; rows 16 apart share their swizzle phase (row % 8), so
// one destination offset serves every row. Chunks past M, N or K, and A's
// window taps outside the input, read as zeros (cp.async's zero fill).
template <class ARows>
struct Loader {
  static_assert(BM == 128, "a producer thread gathers 8 rows of A");
  ARows a;
  // This thread's first rows of B (16 apart, up to 8 of them), opaque
  // pointers: computed again at each k-block from B's pointer and stride,
  // they took the producer longer (H200, the seed's conv + relu: 1.262 ->
  // 1.228 ms). Rows past them (BN 256) lie `far` beyond one of them: 16
  // pointers spill.
  static constexpr int HELD = BN / 16 < 8 ? BN / 16 : 8;
  const float* b[HELD];
  long long far;  // HELD x 16 rows of B, in elements
  const float* any;  // a valid address for the zero-filled chunks
  int b_rows;        // rows of this thread's B chunks that exist: i < b_rows
  int k, K;
  unsigned dst;      // this thread's first chunk's offset in a tile
  __device__ __forceinline__ void load(unsigned stage, int kb) const {
    const int kk = kb * BK;
    const bool k_ok = K_WHOLE || k + kk < K;
#pragma unroll
    for (int i = 0; i < BM / 16; ++i) {
      const float* src;
      const bool ok = a.at(i, kk, src) && k_ok;
      cp_async16_l1(stage + dst + i * 2048, ok ? src : any, ok);
    }
    int b_col;  // this thread's column of B in the k-block, from its first (A's view: b_at)
    const bool b_ok = a.b_at(kk, b_col);
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
      const bool ok = k_ok && b_ok && (N_WHOLE || i < b_rows);
      cp_async16(stage + A_TILE + dst + i * 2048, ok ? b[i % HELD] + i / HELD * far + b_col : any, ok);
    }
  }
};

// Calls epilogue(row, col, v0, v1) for each pair of adjacent columns of a
// consumer thread's m64 slice: element i lies at row row0 + 8 * ((i >> 1) & 1),
// column col0 + 8 * (i >> 2) + (i & 1).
template <class Epilogue>
__device__ __forceinline__ void store_slice(const Epilogue& epilogue, const float (&acc)[BN / 2], int row0, int col0) {
#pragma unroll
  for (int i = 0; i < BN / 2; i += 2) epilogue(row0 + 8 * ((i >> 1) & 1), col0 + 8 * (i >> 2), acc[i], acc[i + 1]);
}
)CUDA";
    if (tile.staged)
      os << R"CUDA(
// ---- staged stores: the result leaves through shared memory in bulk copies ----
constexpr int SCOLS = )CUDA"
         << Sm90SsTile::staged_cols << R"CUDA(;                    // columns staged at a time
constexpr int SPITCH = ROWS + 4;             // floats a staged column: 16-byte aligned, and a fragment's writes hit 32 banks

// A consumer warpgroup's own barrier (0 is __syncthreads, 1 and 2 the other mainloop's).
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory"); }
__device__ __forceinline__ void sts32(unsigned addr, float v) { asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v)); }

// Consumer warpgroup wg's rows [m, m + ROWS) of the tile at column n0, SCOLS
// columns at a time: its threads write the values column by column into
// `staging`, then thread c < SCOLS copies column c's rows out, one bulk copy
// per sample they span (a column's rows of one sample are contiguous). The
// copies read the buffer while the next tile's wgmmas run; their issuers
// wait for that before it is written again.
template <class Epilogue>
__device__ __forceinline__ void store_staged(const Epilogue& epilogue, const float (&acc)[MS][BN / 2],
                                             unsigned staging, int wg, int wt, int m, int n0, int M, int N) {
  static_assert(STAGING == (SCOLS * SPITCH + Epilogue::CHANNEL_OPERANDS * BN) * 4, "the staging buffer and table");
  const int warp = wt >> 5, lane = wt & 31;
  // The tile's per-channel operands, loaded once into the table: loaded per
  // column in each round, each round's loads missed L1 (A's gather streams
  // through it) and waited on L2 (H200, a conv + batch norm + relu, the conv
  // a kernel: 0.81 -> 0.67 ms). The warpgroup's last tile's rounds are done
  // with the table: its wgmmas since were collective.
  const unsigned table_at = staging + SCOLS * SPITCH * 4;
  if (Epilogue::CHANNEL_OPERANDS > 0) {
#pragma unroll 1
    for (int i = wt; i < Epilogue::CHANNEL_OPERANDS * BN; i += 128)
      sts32(table_at + i * 4, epilogue.channel_operand(i / BN, min(n0 + i % BN, N - 1)));
    warpgroup_sync(wg);
  }
  const float* table = static_cast<const float*>(__cvta_shared_to_generic(table_at));
#pragma unroll
  for (int c0 = 0; c0 < BN; c0 += SCOLS) {
    // The values first, while the last columns' copies still read the
    // buffer, each at its row and column clamped into the result (and zeroed
    // past it).
    float v[MS][SCOLS / 2];
#pragma unroll
    for (int j = 0; j < MS; ++j)
#pragma unroll
      for (int i = c0 / 2; i < (c0 + SCOLS) / 2; ++i) {  // the elements of columns c0 .. c0 + SCOLS - 1
        const int row = m + j * 64 + warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
        const int col = n0 + 2 * (lane & 3) + 8 * (i >> 2) + (i & 1);
        const float x = epilogue.value(min(row, M - 1), min(col, N - 1), acc[j][i], table);
        v[j][i - c0 / 2] = row < M && col < N ? x : 0.0f;
      }
    if (wt < SCOLS) bulk_wait_read();
    warpgroup_sync(wg);
#pragma unroll
    for (int j = 0; j < MS; ++j)
#pragma unroll
      for (int i = c0 / 2; i < (c0 + SCOLS) / 2; ++i) {
        const int r = j * 64 + warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
        const int c = 2 * (lane & 3) + 8 * (i >> 2) + (i & 1) - c0;
        sts32(staging + (c * SPITCH + r) * 4, v[j][i - c0 / 2]);
      }
    fence_proxy_async();  // the copies (the async proxy) read what this thread wrote
    warpgroup_sync(wg);
    if (wt < SCOLS && n0 + c0 + wt < N)
      store_channel_run(epilogue, n0 + c0 + wt, m, min(m + ROWS, M), staging + wt * SPITCH * 4);
  }
}
)CUDA";
    os << R"CUDA(
// Computes the BM x BN tiles of A @ B^T, persistent: CTA c takes tiles c,
// c + gridDim.x, ... (m-tiles first), its producer loading the next tile
// while the consumers store the last. Ping-pong, consumer warpgroup w takes
// the CTA's tiles w, w + 2, ...: it starts a tile's wgmmas once the other
// has issued its last tile's (`turn`), so the two alternate on the tensor
// cores and each stores its result while the other computes. That order
// also keeps each stage's mbarriers at most a phase ahead of their waiters.
// `a` gives the producer A's rows (an implicit GEMM's view: rows(row, k)
// covers rows row + 16 i, i < 8) and where in B's rows column k + kk lies
// (rows.b_at(kk, col): col from column k; false where B has no such
// column, which then reads as zeros). Needs K
// % 4 == 0, 16-byte aligned chunks, ldb a multiple of 4, SMEM_BYTES of
// dynamic shared memory and 384 threads.
template <class A, class Epilogue>
__device__ __forceinline__ void gemm(const A& a, const float* b, int M, int N, int K, long long ldb,
                                     const Epilogue& epilogue) {
  extern __shared__ __align__(16) unsigned char ff_smem[];
  const unsigned base = (smem_u32(ff_smem) + 1023u) & ~1023u;
  const unsigned ready = base + STAGES * STAGE + 2 * STAGING, empty = ready + STAGES * 8, turn = empty + STAGES * 8;
  const int tiles_m = (M + BM - 1) / BM, tiles = tiles_m * ((N + BN - 1) / BN);
  const int nk = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    init_stage_barriers(ready, empty, PINGPONG ? 128 : 256);  // a stage's consumers
    mbar_init(turn, 128);  // warpgroup w's turn: the other's 128 threads issued their tile's wgmmas
    mbar_init(turn + 8, 128);
    fence_barrier_init();
  }
  __syncthreads();
  // Registers: 65536 / 384 = 170 a thread at launch; the producer hands most
  // of its share to the consumers (128 x 88 + 256 x 208 <= 65536).
  if (threadIdx.x < 128) {  // producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 88;\n");
    const int t = threadIdx.x, row0 = t >> 3, ch = t & 7;
    // k-block j's stage is complete once every producer thread's copies of it landed.
    const auto ready_up = [&](int j) { arrive_on_copies(ready + (j % STAGES) * 8); };
    const auto tile_loader = [&](int tile) {
      const int m0 = tile % tiles_m * BM, n0 = tile / tiles_m * BN;
      using L = Loader<typename A::Rows>;
      L ld{a.rows(m0 + row0, ch * 4), {}, L::HELD * 16 * ldb, b, (N - n0 - row0 + 15) / 16, ch * 4, K,
           static_cast<unsigned>(row0 * 128 + ((ch ^ (row0 & 7)) << 4))};
#pragma unroll
      for (int i = 0; i < L::HELD; ++i) ld.b[i] = opaque_pointer(b + (n0 + row0 + 16 * i) * ldb + ch * 4);
      return ld;
    };
    const auto load = [&](const Loader<typename A::Rows>& ld, int slot, int kb) { ld.load(base + slot * STAGE, kb); };
    produce<STAGES, 0>(tiles, nk, empty, tile_loader, load, ready_up);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n");
  const int ct = threadIdx.x - 128, wg = ct >> 7, warp = (ct >> 5) & 3, lane = ct & 31;
  const int step = PINGPONG ? 2 : 1, slice0 = PINGPONG ? 0 : wg * MS;  // slice0: this warpgroup's first m64 slice
  float acc[MS][BN / 2];
#pragma unroll 1
  for (int nth = PINGPONG ? wg : 0; blockIdx.x + nth * gridDim.x < tiles; nth += step) {  // the CTA's nth tile
    const int tile = blockIdx.x + nth * gridDim.x, m0 = tile % tiles_m * BM + slice0 * 64, n0 = tile / tiles_m * BN;
    int g = nth * nk;  // the CTA's k-blocks before this tile
    // The CTA's tile nth - 1 (the other warpgroup's) had all its wgmmas issued.
    if (PINGPONG && nth > 0) mbar_wait(turn + wg * 8, ((nth - 1) >> 1) & 1);
#pragma unroll
    for (int j = 0; j < MS; ++j)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[j][i] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < nk; ++kb, ++g)
      consume_kblock(acc, base, ready, empty, g, kb > 0, [&](unsigned stage) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int j = 0; j < MS; ++j)  // rows (slice0 + j) * 64 on: 8 KiB a slice
            wgmma(acc[j], b_desc(stage + (slice0 + j) * 8192 + ks * 32), b_desc(stage + A_TILE + ks * 32));
      });
    if (PINGPONG) mbar_arrive(turn + (wg ^ 1) * 8);
    finish_tile(acc, empty, g - 1);
)CUDA";
    if (tile.staged)
      os << R"CUDA(
    store_staged(epilogue, acc, base + STAGES * STAGE + wg * STAGING, wg, ct & 127, m0, n0, M, N);
  }
  if ((ct & 127) < SCOLS) bulk_wait();  // the last copies are done before the CTA (and its shared memory) ends
}
)CUDA";
    else
      os << R"CUDA(
#pragma unroll
    for (int j = 0; j < MS; ++j)
      store_slice(epilogue, acc[j], m0 + j * 64 + warp * 16 + (lane >> 2), n0 + 2 * (lane & 3));
  }
}
)CUDA";
  }
  os << R"CUDA(

}  // namespace ss
}  // namespace ff_sm90
)CUDA";
  return os.str();
}

}  // namespace ff::codegen
