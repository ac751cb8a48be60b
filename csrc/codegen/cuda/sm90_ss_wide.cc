// The wide tiles of the shared-memory 1xTF32 mainloop (sm90_ss_wide.h).
#include "codegen/cuda/sm90_ss_wide.h"

namespace ff::codegen {

namespace {

// The wide tile's producer: A is the weights (BM output channels), B the
// gathered pixels (BN of them).
const char* wide_loader() {
  return R"CUDA(
// The producer's loads of k-block kb: thread t's 16-byte chunks are column
// chunk t % 8 of rows t / 8 + 16 i, the weights' (A: 8 rows) from w, the
// pixels' (B: 16 rows) from px[0] (the tile's first 128 pixels) and px[1];
// rows 16 apart share their swizzle phase (row % 8), so one destination
// offset serves every row. Chunks past M, N or K, and window taps outside
// the input, read as zeros (cp.async's zero fill).
template <class PixelRows>
struct WideLoader {
  static_assert(BM == 128 && BN == 256, "a producer thread loads 8 rows of weights and 16 of pixels");
  PixelRows px[2];
  const float* w[8];  // this thread's rows of weights, opaque pointers (Loader::b)
  const float* any;   // a valid address for the zero-filled chunks
  int w_rows;         // rows of this thread's weight chunks that exist: i < w_rows
  int k, K;
  unsigned dst;       // this thread's first chunk's offset in a tile
  __device__ __forceinline__ void load(unsigned stage, int kb) const {
    const int kk = kb * BK;
    const bool k_ok = K_WHOLE || k + kk < K;
    int w_col;  // this thread's column of the weights in the k-block (the pixels' view: b_at)
    const bool w_ok = px[0].b_at(kk, w_col);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool ok = k_ok && w_ok && (N_WHOLE || i < w_rows);
      cp_async16(stage + dst + i * 2048, ok ? w[i] + w_col : any, ok);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float* src;
        const bool ok = px[h].at(i, kk, src) && k_ok;
        cp_async16_l1(stage + A_TILE + h * 16384 + dst + i * 2048, ok ? src : any, ok);
      }
  }
};
)CUDA";
}

// The wide tile's staging: each consumer warp's 8 rows of BN values.
const char* wide_staging() {
  return R"CUDA(
constexpr int SPITCH = BN + 8;  // floats a staged channel: 16-byte aligned, and a warp's 8 rows of 32 bytes hit 32 banks
static_assert(STAGING == 32 * SPITCH * 4, "a consumer warpgroup's staging buffer: 32 channels of BN pixels");

__device__ __forceinline__ void sts64(unsigned addr, float v0, float v1) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(v0), "f"(v1));
}
// Where a lane's pixels 2 (lane % 4) + 4 j and the next lie in its row, lane
// / 4, of a warp's 8 staged rows (j even: its m64n256 elements 2 j + 2 h and
// 2 j + 2 h + 1 of round h).
__device__ __forceinline__ unsigned staged_pair(unsigned rows, int lane, int j) {
  return rows + ((lane >> 2) * SPITCH + 2 * (lane & 3) + 4 * j) * 4;
}
)CUDA";
}

// The wide tile's stores, through shared memory in bulk copies (a channel's pixels contiguous in the result).
const char* wide_bulk_stores() {
  return R"CUDA(
// ---- the results leave through shared memory in bulk copies ----
// Each warp stages 8 channels' BN pixels at a time and copies them out
// itself: one 1 KiB bulk copy a channel, issued by 8 of its lanes, with no
// barrier beyond the warp's. H200 against a warpgroup staging 64 channels of
// 128 pixels (its first 64 threads each copying a channel's 512 bytes after
// a warpgroup barrier): the seed's 1.46 -> 1.36 ms, conv2d_batchnorm_relu_eval
// 0.561 -> 0.535. A bulk copy takes its addresses in uniform registers, so
// the lanes of a warp issue theirs one after another: spread over the four
// warps, a warpgroup's copies issue four at a time.
// A consumer warpgroup's 64 channels from c0 of the tile's pixels from p0
// (wt: the thread's place in it), in two rounds: in round h, warp w's lanes
// hold channels 16 w + 8 h + lane / 4 of all BN pixels; they write them into
// the warp's 8 rows of `staging`, then lane j < 8 copies row j out, one bulk
// copy per sample its pixels span (a channel's pixels of one sample are
// contiguous). The copies read the rows while the lanes go on; before the
// rows are written again, their issuers wait for that. Element i of a
// thread's m64n256 slice lies at channel 16 warp + lane / 4 + 8 ((i >> 1) &
// 1), pixel 2 (lane % 4) + 8 (i >> 2) + (i & 1).
template <class Epilogue>
__device__ __forceinline__ void store_tile(const Epilogue& epilogue, const float (&acc)[BN / 2], unsigned staging,
                                           int wt, int c0, int p0, int M, int N) {
  const int warp = wt >> 5, lane = wt & 31;
  const unsigned rows = staging + warp * 8 * SPITCH * 4;  // the warp's 8 rows
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The values first, while the last round's copies still read the rows,
    // each at its pixel and channel clamped into the result.
    const int c = c0 + warp * 16 + 8 * h + (lane >> 2);
    float v[BN / 4];  // element 4 (j / 2) + 2 h + j % 2 of the slice
#pragma unroll
    for (int j = 0; j < BN / 4; ++j) {
      const int p = p0 + 2 * (lane & 3) + 8 * (j >> 1) + (j & 1);
      v[j] = epilogue.value(min(p, M - 1), min(c, N - 1), acc[4 * (j >> 1) + 2 * h + (j & 1)]);
    }
    if (lane < 8) bulk_wait_read();
    __syncwarp();
#pragma unroll
    for (int j = 0; j < BN / 4; j += 2)
      sts64(staged_pair(rows, lane, j), v[j], v[j + 1]);
    fence_proxy_async();  // the copies (the async proxy) read what this thread wrote
    __syncwarp();
    const int copied = c0 + warp * 16 + 8 * h + lane;  // lane < 8: the channel of row `lane`
    if (lane < 8 && copied < N) store_channel_run(epilogue, copied, p0, min(p0 + BN, M), rows + lane * SPITCH * 4);
  }
}
// Nothing to prefetch: the values' operands are read in the fragments' order.
template <class Epilogue>
__device__ __forceinline__ void prefetch_tile(const Epilogue&, int, int, int, int, int) {}
)CUDA";
}

// The packed phases' stores (Sm90SsTile::phase_packed).
const char* wide_phase_stores() {
  return R"CUDA(
// ---- the results leave through shared memory in plain stores along the output's rows ----
// A transposed conv's packed phases (Sm90SsTile::phase_packed): the tile's
// channels are (phase row, output channel, phase column) with the column
// phases innermost, so a warp's 8 staged rows hold all column phases of 8 /
// SW output channels, whose pixels along an output row interleave them.
// Each warp stages 8 of its channels' BN values at a time, as the bulk
// copies' stores do, then writes them itself: lane l takes column phase l % SW of pixel
// l / SW of each 32 / SW, so that the warp's 32 stores are adjacent along an
// output row (the pixels' bulk copies would be strided, the direct stores of
// the fragments half a sector each).

// Before a tile's mainloop, its operands' lines (operands that vary along
// the output's pixels) are prefetched into L2 (epilogue.prefetch): the stores
// below load them in batches, each batch's loads waited for at once.
// Consumer warpgroup wt / 128's 64 channels: their column phase 0's
// channels, at every PER-th pixel (a 128-byte line of an output row).
template <class Epilogue>
__device__ __forceinline__ void prefetch_tile(const Epilogue& epilogue, int wt, int c0, int p0, int M, int N) {
  constexpr int SW = Epilogue::SW, PER = 32 / SW, STEPS = BN / PER;
#pragma unroll 1
  for (int i = wt; i < 64 / SW * STEPS; i += 128) {
    const int col = c0 + i / STEPS * SW, p = p0 + i % STEPS * PER;
    if (col < N && p < M) epilogue.prefetch(epilogue.place(epilogue.pixel(p), col));
  }
}

// A consumer warpgroup's 64 channels from c0 of the tile's pixels from p0
// (wt: the thread's place in it), in two rounds of 8 channels a warp (as
// the bulk copies' stores): the accumulators staged, then each lane takes its column
// phase r0 = lane % SW of its G = 8 / SW channels at pixels lane / SW + PER
// i, U pixels at a time: their operands loaded (all in flight at once:
// value_with's math branches), then their values computed and stored where
// their output pixels lie inside the output. Where a lane's G channels are
// consecutive output channels of one phase row (Epilogue::CHANNEL_RUNS),
// their places differ in the channel alone: one place and one test a pixel
// (H100, a 128 -> 64 channel stride-2 4x4 transposed conv + residual +
// hardswish: 324 -> 268 us).
template <class Epilogue>
__device__ __forceinline__ void store_tile(const Epilogue& epilogue, const float (&acc)[BN / 2], unsigned staging,
                                           int wt, int c0, int p0, int M, int N) {
  constexpr int SW = Epilogue::SW, PER = 32 / SW, G = 8 / SW, U = Epilogue::CHANNEL_RUNS ? 8 : 4;
  static_assert(8 % SW == 0, "a warp's 8 staged channels hold whole column phases");
  const int warp = wt >> 5, lane = wt & 31, r0 = lane % SW;
  const unsigned rows = staging + warp * 8 * SPITCH * 4;  // the warp's 8 rows
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    __syncwarp();  // the last round's reads of the rows are done
#pragma unroll
    for (int j = 0; j < BN / 4; j += 2) sts64(staged_pair(rows, lane, j), acc[2 * j + 2 * h], acc[2 * j + 2 * h + 1]);
    __syncwarp();
    const int c = c0 + warp * 16 + 8 * h + r0;  // the lane's channel g at c + g SW (row g SW + r0)
#pragma unroll 1
    for (int q0 = lane / SW; q0 < BN; q0 += U * PER) {
      typename Epilogue::Place at[U][G];
      typename Epilogue::Operands ops[U][G];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const auto px = epilogue.pixel(min(p0 + q0 + u * PER, M - 1));
        if (Epilogue::CHANNEL_RUNS) {
          // N is a multiple of 8: the lane's channels all exist, or none does (then it reads channel r0's).
          const auto first = epilogue.place(px, c < N ? c : r0);
#pragma unroll
          for (int g = 0; g < G; ++g) ops[u][g] = epilogue.operands(at[u][g] = epilogue.next_channel(first, g));
        } else {
#pragma unroll
          for (int g = 0; g < G; ++g)
            ops[u][g] = epilogue.operands(at[u][g] = epilogue.place(px, min(c + g * SW, N - 1)));
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int g = 0; g < G; ++g) ops[u][g].pin();
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = q0 + u * PER;
        float v[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float x;
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(rows + ((g * SW + r0) * SPITCH + q) * 4));
          v[g] = epilogue.value_with(ops[u][g], x);
        }
        if (Epilogue::CHANNEL_RUNS) {
          if (p0 + q < M && c < N && at[u][0].inside)
#pragma unroll
            for (int g = 0; g < G; ++g) epilogue.put(at[u][g], v[g]);
        } else {
#pragma unroll
          for (int g = 0; g < G; ++g)
            if (p0 + q < M && c + g * SW < N && at[u][g].inside) epilogue.put(at[u][g], v[g]);
        }
      }
    }
  }
}
)CUDA";
}

// The wide tile's mainloop: its tiles leave by store_tile, which
// wide_bulk_stores or wide_phase_stores defines, with prefetch_tile.
const char* wide_gemm() {
  return R"CUDA(
// Computes the result's tiles of BM output channels by BN pixels, persistent:
// CTA c takes tiles c, c + gridDim.x, ... (channel tiles first, so that
// those of one run of pixels run at once and share its gathers in L2), its
// producer loading the next tile while the consumers store the last.
// Consumer warpgroup w computes channels 64 w on of each tile, an m64n256
// wgmma per 8 of K: A is the stage's 64 rows of weights, B its 256 pixels.
// `a` gives the producer the pixels (ConvA: rows(row, k) covers pixels row
// + 16 i, i < 8; b_at(kk, col) where column k + kk lies in a weight's row).
// Needs K % 4 == 0, 16-byte aligned chunks, ldw a multiple of 4, SMEM_BYTES
// of dynamic shared memory and 384 threads.
template <class A, class Epilogue>
__device__ __forceinline__ void gemm(const A& a, const float* w, int M, int N, int K, long long ldw,
                                     const Epilogue& epilogue) {
  extern __shared__ __align__(16) unsigned char ff_smem[];
  const unsigned base = (smem_u32(ff_smem) + 1023u) & ~1023u;
  const unsigned ready = base + STAGES * STAGE + 2 * STAGING, empty = ready + STAGES * 8;
  const int tiles_c = (N + BM - 1) / BM, tiles = tiles_c * ((M + BN - 1) / BN);
  const int nk = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    init_stage_barriers(ready, empty, 256);  // both consumer warpgroups read each stage
    fence_barrier_init();
  }
  __syncthreads();
  // Registers: the producer's two views of 8 pixel rows take more than the
  // ping-pong one's 88 (128 x 104 + 256 x 200 <= 65536).
  if (threadIdx.x < 128) {  // producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 104;\n");
    const int t = threadIdx.x, row0 = t >> 3, ch = t & 7;
    const auto ready_up = [&](int j) { arrive_on_copies(ready + (j % STAGES) * 8); };
    using L = WideLoader<typename A::Rows>;
    const auto tile_loader = [&](int tile) {
      const int c0 = tile % tiles_c * BM, p0 = tile / tiles_c * BN;
      L ld{{a.rows(p0 + row0, ch * 4), a.rows(p0 + 128 + row0, ch * 4)}, {}, w, (N - c0 - row0 + 15) / 16, ch * 4, K,
           static_cast<unsigned>(row0 * 128 + ((ch ^ (row0 & 7)) << 4))};
#pragma unroll
      for (int i = 0; i < 8; ++i) ld.w[i] = opaque_pointer(w + a.weight_row(c0 + row0 + 16 * i, ldw) + ch * 4);
      return ld;
    };
    const auto load = [&](const L& ld, int slot, int kb) { ld.load(base + slot * STAGE, kb); };
    produce<STAGES, 0>(tiles, nk, empty, tile_loader, load, ready_up);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n");
  const int ct = threadIdx.x - 128, wg = ct >> 7;
  float acc[BN / 2];
  int g = 0;  // the CTA's k-blocks so far
#pragma unroll 1
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int c0 = tile % tiles_c * BM + wg * 64, p0 = tile / tiles_c * BN;
    prefetch_tile(epilogue, ct & 127, c0, p0, M, N);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < nk; ++kb, ++g)
      consume_kblock(acc, base, ready, empty, g, kb > 0, [&](unsigned stage) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgmma(acc, b_desc(stage + wg * 8192 + ks * 32), b_desc(stage + A_TILE + ks * 32));
      });
    finish_tile(acc, empty, g - 1);
    store_tile(epilogue, acc, base + STAGES * STAGE + wg * STAGING, ct & 127, c0, p0, M, N);
  }
  bulk_wait();  // the last copies are done before the CTA (and its shared memory) ends
}
)CUDA";
}

}  // namespace

std::string cuda_sm90_ss_wide(const Sm90SsTile& tile) {
  return std::string(wide_loader()) + wide_staging() + (tile.phase_packed ? wide_phase_stores() : wide_bulk_stores()) +
         wide_gemm();
}

}  // namespace ff::codegen
