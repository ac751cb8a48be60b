#include "fusion/reduction_strategy.h"

#include <algorithm>
#include <optional>

#include "codegen/cuda/reduction_emit.h"
#include "kernel/reduction_domain.h"
#include "kernel/reduction_staging.h"

namespace ff::fusion {

namespace {

using codegen::ReductionAccess;
using codegen::ReductionStrategy;

constexpr int kMaxCacheWords = 64;             // registers a thread may spend holding its inputs' items
constexpr int kRegisterOverhead = 40;          // registers for everything else (indices, temporaries)
constexpr int kColumnRound = 4;                // elements of its columns a thread reads at least (columns form)
constexpr int64_t kInFlightBytes = 64 * 1024;  // loads in flight per SM that keep HBM busy
constexpr int64_t kStaticShared = 46 * 1024;   // a kernel's static shared memory (48 KiB), with room to spare
constexpr int64_t kMergeShared = 32 * 1024;    // of it, the columns form's merge along threadIdx.y at most

int pow2_ceil(int64_t x) {
  int p = 1;
  while (p < x && p < (1 << 20)) p *= 2;
  return p;
}

// The widest vector (up to 16 bytes) along a dim: every access that steps
// along it with unit stride keeps its other strides aligned to it, and the
// dim's extent is a multiple; accesses with another stride along it rule
// vectors out when `strict`. Staged outputs are not stored along it.
int vector_width(const codegen::ReductionLayout& l, int64_t extent, bool reduced_dim, size_t dim, bool strict,
                 bool staged = false) {
  int widest = 0;
  for (const ReductionAccess& a : l.access)
    if ((reduced_dim ? a.reduced : a.kept)[dim] == 1) widest = std::max(widest, dtype_size(a.dtype));
  if (widest == 0) return 1;
  for (int v = kVectorBytes / widest; v > 1; v /= 2) {
    bool ok = extent % v == 0;
    for (const ReductionAccess& a : l.access) {
      if ((reduced_dim && a.per_row) || (staged && a.transposed())) continue;
      const int64_t s = (reduced_dim ? a.reduced : a.kept)[dim];
      if (s != 1) {
        ok &= !strict || s == 0;
        continue;
      }
      for (size_t i = 0; i < a.kept.size(); ++i) ok &= (!reduced_dim && i == dim) || a.kept[i] % v == 0;
      for (size_t i = 0; i < a.reduced.size(); ++i) ok &= (reduced_dim && i == dim) || a.reduced[i] % v == 0;
    }
    if (ok) return v;
  }
  return 1;
}

// The inputs a later pass of the kernel reads again.
using Rereads = std::vector<const ReductionAccess*>;

// The registers a thread's share of the inputs read again takes:
// `per_thread` elements of each (`items`), but one vector's words for an
// input that repeats within `step` elements (Rows form: the elements between
// a thread's items; else 0).
struct CacheWords {
  int64_t items = 0, repeated = 0;
};
CacheWords cache_words(const codegen::ReductionLayout& l, const Rereads& again, int64_t per_thread, int vector,
                       int64_t step) {
  CacheWords w;
  for (const ReductionAccess* a : again) {
    if (l.repeats_within(*a, step))
      w.repeated += vector;
    else
      w.items += per_thread;
  }
  return w;
}

// Whether a thread can hold `per_thread` elements of each input read again in
// registers, beside `acc_words` of accumulators, at `block` threads: within
// kMaxCacheWords of per-item arrays, and within the registers a thread has.
bool cache_fits(const codegen::ReductionLayout& l, const Rereads& again, int64_t per_thread, int vector, int block,
                int acc_words, int64_t step = 0) {
  const CacheWords w = cache_words(l, again, per_thread, vector, step);
  const int64_t free = 65536 / block - kRegisterOverhead - acc_words;
  return w.items <= std::min<int64_t>(kMaxCacheWords, free) && w.items + w.repeated <= free;
}

// Loads in flight per thread when the inputs stream: each holds a vector of
// every input and a slot of every accumulator, within the registers a thread
// has at `block` threads (4, 2 or 1; 0: not even one fits).
int streaming_unroll(int block, int vector, int inputs, int acc_words) {
  const int budget = 65536 / block - kRegisterOverhead;
  for (int u : {4, 2, 1})
    if (u * vector * (acc_words + inputs) <= budget) return u;
  return 0;
}

// A persistent block per row whose registers leave room for one block per
// SM runs a row at a time: its loads, arithmetic and stores take turns, and
// the SM's memory traffic stops between them. Two rows per SM overlap them:
// half the threads, each holding twice the items, in registers where they
// fit, else as many in registers as before and the rest in shared memory
// (a 4096x32768 softmax on the H200: 0.334 -> 0.297 ms, from 77 to 88 % of
// the copy bandwidth). Only where rows outnumber the SMs twice over: fewer
// rows leave SMs idle either way.
void two_rows_per_sm(const codegen::ReductionLayout& l, const Rereads& again, int64_t loads, int acc_words,
                     const FusionOptions& options, ReductionStrategy& s) {
  // Registers per thread at `threads` threads per row, `items` of each input in registers.
  auto registers = [&](int threads, int64_t items) {
    const CacheWords w = cache_words(l, again, items * s.vector, s.vector, int64_t{threads} * s.vector);
    return kRegisterOverhead + int64_t{acc_words} * s.vector + w.items + w.repeated;
  };
  auto blocks_per_sm = [&](int threads, int64_t items) { return 65536 / (threads * registers(threads, items)); };
  const int64_t items = (loads + s.threads - 1) / s.threads;
  if (s.threads != s.block || s.threads < 128 || l.rows < 2 * options.target.sm_count ||
      blocks_per_sm(s.threads, items) >= 2)
    return;
  const int half = s.threads / 2;
  const int64_t half_items = (loads + half - 1) / half;
  if (cache_fits(l, again, half_items * s.vector, s.vector, half, acc_words * s.vector, int64_t{half} * s.vector) &&
      blocks_per_sm(half, half_items) >= 2) {
    s.threads = s.block = half;
    return;
  }
  // cp.async copies 4, 8 or 16 bytes, from unit-stride items. Only rows
  // whose every access runs along them: a group norm over a channels-last
  // conv output (NCHW stores a lane at a time) slowed from 0.114 to 0.161 ms.
  if (options.arch < 80) return;
  for (const ReductionAccess& a : l.access)
    if (!a.per_row && a.reduced.back() > 1) return;
  int64_t bytes = 0;
  for (const ReductionAccess* a : again) {
    if (l.repeats_within(*a, int64_t{half} * s.vector)) continue;
    const int64_t vector_bytes = int64_t{s.vector} * dtype_size(a->dtype);
    if (vector_bytes != 4 && vector_bytes != 8 && vector_bytes != 16) return;
    bytes += (half_items - items) * half * vector_bytes;
  }
  constexpr int64_t kPartials = 4096;  // the merges' static partials, with room to spare
  if (bytes == 0 || 2 * (bytes + kPartials) > options.target.shared_per_block_optin) return;
  s.threads = s.block = half;
  s.shared_items = static_cast<int>(half_items - items);
}

ReductionStrategy rows(const codegen::ReductionLayout& l, const Rereads& again, int inputs, int acc_words, bool staged,
                       const FusionOptions& options) {
  ReductionStrategy s;
  s.form = ReductionStrategy::Form::Rows;
  s.staged = staged;
  // Vectors along the row's innermost dim. Where the main input is unit-stride
  // there, accesses strided along it (a channels-last group norm's NCHW
  // output) take their kVec elements one by one: lanes still step along their
  // next dim, and the main input's loads stay 16 bytes wide.
  const bool main_unit = l.main >= 0 && l.access[static_cast<size_t>(l.main)].reduced.back() == 1;
  s.vector = l.inner() || l.reduced.back() > 1
                 ? vector_width(l, l.reduced.back(), true, l.reduced.size() - 1, !main_unit, staged)
                 : 1;
  const int64_t loads = (l.length + s.vector - 1) / s.vector;
  const int64_t want = pow2_ceil((loads + kLoadsPerThread - 1) / kLoadsPerThread);
  // A single pass (nothing read again) keeps a warp per row up to twice the
  // loads: its merge is shuffles only, and a block per 2048-element row
  // (64 threads, a shared-memory merge per row) reached 2.2 TB/s where ATen's
  // warp-per-row argmax reaches 2.6.
  const int64_t warp_loads = 32 * kLoadsPerThread * (again.empty() ? 2 : 1);
  s.threads = loads <= warp_loads ? static_cast<int>(std::min<int64_t>(want, 32))
                                  : static_cast<int>(std::clamp<int64_t>(want, 64, 1024));
  auto block_for = [&](int threads) {
    int block = threads >= 64 ? threads : 256;
    // Not more rows per block than there are rows, but a whole warp at least:
    // the warp shuffles name every lane.
    while (block > threads && block > 32 && block / threads / 2 >= l.rows) block /= 2;
    return block;
  };
  s.block = block_for(s.threads);
  if (!again.empty()) {
    // The thread count nearest the preferred one (more threads first) whose
    // share of the row fits in registers; none: the inputs stream.
    auto fits = [&](int threads) {
      const int64_t per_thread = (loads + threads - 1) / threads * s.vector;
      return cache_fits(l, again, per_thread, s.vector, block_for(threads), acc_words * s.vector,
                        int64_t{threads} * s.vector);
    };
    for (int step = 0; step <= 10 && !s.persistent; ++step)
      for (int t : {s.threads << step, s.threads >> step})
        if (t >= 1 && t <= 1024 && fits(t)) {
          s.threads = t;
          s.block = block_for(t);
          s.persistent = true;
          break;
        }
  }
  if (s.persistent) two_rows_per_sm(l, again, loads, acc_words, options, s);
  if (!s.persistent) {
    // Streaming: fewer threads per row where a block's registers would not
    // hold the loads in flight and the accumulators' slots.
    while (s.threads > 32 && streaming_unroll(s.block, s.vector, inputs, acc_words) < 4) {
      s.threads /= 2;
      s.block = block_for(s.threads);
    }
    s.unroll = std::max(1, streaming_unroll(s.block, s.vector, inputs, acc_words));
    // Fewer threads per row where the row's last round of loads would leave
    // most of them idle (a 24964-element batch-norm row at 512 threads x 4
    // loads of 4: a twentieth of the fourth round is used), while the rows
    // still fill the GPU.
    auto used = [&](int threads) {
      const int64_t round = int64_t{threads} * s.unroll;
      return static_cast<double>(loads) / static_cast<double>((loads + round - 1) / round * round);
    };
    while (s.threads > 64 && used(s.threads) < 0.9 && used(s.threads / 2) > used(s.threads) &&
           l.rows * (s.threads / 2) >= int64_t{options.target.sm_count} * 2048) {
      s.threads /= 2;
      s.block = block_for(s.threads);
    }
  }
  return s;
}

// Rows form with its transposed outputs staged (ReductionStrategy::staged):
// worth it when a block takes enough rows for its stores to fill sectors, and
// the tile (those rows' elements of each staged output) fits the static
// shared memory beside the merge's partials (kStageMinRows, kStageBytes).

int64_t stage_bytes(const codegen::ReductionLayout& l, int rows_per_block) {
  int64_t bytes = 0;
  for (const ReductionAccess& a : l.access)
    if (a.transposed()) bytes += int64_t{rows_per_block + 1} * l.length * dtype_size(a.dtype);
  return bytes;
}

std::optional<ReductionStrategy> staged_rows(const codegen::ReductionLayout& l, const Rereads& again, int inputs,
                                             int acc_words, const FusionOptions& options) {
  bool any = false;
  for (const ReductionAccess& a : l.access) any |= a.transposed();
  if (!any) return std::nullopt;
  ReductionStrategy s = rows(l, again, inputs, acc_words, true, options);
  // Fewer rows per block until the tile fits (a block stays a warp at least).
  while (s.block / s.threads >= 2 * kStageMinRows && s.block > 32 && stage_bytes(l, s.block / s.threads) > kStageBytes)
    s.block /= 2;
  if (s.block / s.threads < kStageMinRows || stage_bytes(l, s.block / s.threads) > kStageBytes) return std::nullopt;
  return s;
}

ReductionStrategy columns(const codegen::ReductionLayout& l, const Rereads& again, int inputs, int acc_words,
                          bool chunked, const FusionOptions& options, int max_vector) {
  ReductionStrategy s;
  s.form = ReductionStrategy::Form::Columns;
  const size_t c = static_cast<size_t>(l.contiguous_kept());
  s.vector = std::min(max_vector, vector_width(l, l.kept[c], false, c, false));
  const int64_t column_threads = (l.rows + s.vector - 1) / s.vector;
  const int64_t target = int64_t{options.target.sm_count} * 2048;
  // Each thread takes a round of loads (kColumnRound) of its columns before
  // the merge along y: a split-K sum of 8 partials at 8 threads along y (one
  // load each, three shared-memory merges) ran 10.8 us for 9 MB.
  const int max_y = static_cast<int>(
      std::min<int64_t>(kMaxColumnLanes, std::max<int64_t>(1, pow2_ceil(l.length + 1) / 2 / kColumnRound)));
  s.threads = std::min(max_y, pow2_ceil((target + column_threads - 1) / column_threads));
  auto fit_block = [&] { s.block = std::max(32, 256 / s.threads) * s.threads; };
  fit_block();
  if (chunked && again.empty()) {
    // A chunked accumulator (max-sum-exp, Welford) ends each round of loads
    // with its rebase, a dependent exp or division, so a thread's rounds do
    // not overlap, and more threads than keep kInFlightBytes loading per SM
    // only add waves (logsumexp over 512-long columns of 131072 on the H200:
    // 16 threads along y 0.082 ms, 4 threads 0.067 ms, 95 % of the copy
    // bandwidth). Narrow loads (one column a thread) need every thread.
    const int64_t per_thread = int64_t{std::max(1, streaming_unroll(s.block, s.vector, inputs, acc_words))} * s.vector *
                               dtype_size(l.access[static_cast<size_t>(l.main)].dtype);
    const int64_t threads = int64_t{options.target.sm_count} * kInFlightBytes / per_thread;
    while (s.threads > 1 && column_threads * s.threads > threads) s.threads /= 2;
    fit_block();
  }
  // Columns too long for a block's registers stream again in each pass.
  // Splitting them across a cluster of blocks (sm_90) measured slower on the
  // instance norm of a channels-last conv output (6144 columns of 8836,
  // H100): statistics and apply in one kernel, each block of 8 holding
  // its chunk in registers and merging through distributed shared memory,
  // took 254 us at best (64 registers, two blocks per SM, one thread per
  // column reading the peers), against 90 + 145 for the statistics' kernel
  // and a pointwise apply; the statistics alone over 2, 4 or 8 blocks took
  // 106, 131 and 156 us against 90 (8 blocks without a cluster or merge:
  // 110). Those merges had one thread per column read the peers' partials;
  // with every thread reading them, 8 blocks took 387 us.
  if (!again.empty()) {
    for (;;) {
      const int64_t per_thread = (l.length + s.threads - 1) / s.threads * s.vector;
      if (cache_fits(l, again, per_thread, s.vector, s.block, acc_words * s.vector)) {
        s.persistent = true;
        break;
      }
      if (s.threads >= max_y) break;
      s.threads *= 2;
      fit_block();
    }
  }
  // Shared memory for the merge along threadIdx.y: within 32 KiB.
  const int acc_bytes = acc_words * 8;
  auto merge_bytes = [&] { return s.threads > 1 ? int64_t{acc_bytes} * s.block * s.vector : 0; };
  while (s.vector > 1 && merge_bytes() > kMergeShared) s.vector /= 2;
  // Many accumulators over one domain (a backward's bias gradients of every
  // step of an unrolled loop) still overflow it: fewer columns a block, then
  // fewer threads along y, which then stream their columns again.
  while (merge_bytes() > kMergeShared) {
    if (s.block / s.threads > 32) {
      s.block /= 2;
    } else {
      s.threads /= 2;
      s.persistent = false;
      fit_block();
    }
  }
  if (!s.persistent) s.unroll = std::max(1, streaming_unroll(s.block, s.vector, inputs, acc_words));
  // Element outputs unit-stride along the rows, stored from the columns'
  // threads, would take a sector per element (a layer norm over the 32-wide
  // W of a channels-last conv3d result, written NCDHW: 77 us for 17 MB, where
  // torch.compile's contiguous kernel takes 9): they go through a tile of the
  // block's columns where it fits the static shared memory beside the
  // merge's partials, with fewer columns per block (a warp's at least) if need be.
  int64_t per_column = 0;  // tile bytes per column
  for (const ReductionAccess& a : l.access)
    if (a.along_rows(c)) per_column += (l.length + 1) * dtype_size(a.dtype);
  if (per_column > 0) {
    auto fits = [&] {
      const int64_t columns = int64_t{s.block} / s.threads * s.vector;
      const int64_t partials = s.threads > 1 ? int64_t{acc_bytes} * s.block * s.vector : 0;
      return columns * per_column + partials <= kStaticShared;
    };
    while (s.block / s.threads > 32 && !fits()) s.block /= 2;
    s.staged = fits();
  }
  return s;
}

}  // namespace

int64_t blocks_of(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l) {
  const int64_t rows_per_block =
      s.form == ReductionStrategy::Form::Rows ? s.block / s.threads : int64_t{s.block} / s.threads * s.vector;
  return (l.rows + rows_per_block - 1) / rows_per_block;
}

bool apply_pass_pays(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l,
                     const FusionOptions& options) {
  return s.persistent || blocks_of(s, l) >= 2 * options.target.sm_count;
}

bool writes_coalesced(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l) {
  if (s.form != ReductionStrategy::Form::Columns || s.staged) return true;
  const auto c = static_cast<size_t>(l.contiguous_kept());
  for (const ReductionAccess& a : l.access)
    if (a.along_rows(c)) return false;
  return true;
}

bool parallel_enough(const codegen::ReductionStrategy& s, const codegen::ReductionLayout& l,
                     const FusionOptions& options) {
  return !leaves_gpu_idle(blocks_of(s, l), l.rows * l.length, options.target);
}

codegen::ReductionStrategy choose_reduction_strategy(const Group& g, const ReductionDomain& d,
                                                     const codegen::ReductionLayout& l, const FusionOptions& options) {
  // What the kernel's passes read: which inputs a second pass reads again.
  const codegen::ReductionWriter probe(g, d, l, codegen::ReductionStrategy{}, 0, 1);
  Rereads again;
  int inputs = 0;
  for (const auto& a : l.access)
    if (!a.is_output && !a.per_row) {
      ++inputs;
      if (probe.read_again(&a)) again.push_back(&a);
    }
  const int acc_words = probe.accumulator_words();
  bool chunked = false;
  for (int p = 1; p <= d.levels; ++p) chunked |= probe.chunked(p);
  if (!l.inner() && l.contiguous_kept() >= 0) {
    // Where a block's wider column groups would leave the GPU idle
    // (parallel_enough) and the kernel fuses more than its one reduction,
    // narrower loads: more blocks, a warp still reading adjacent columns, and
    // the kernel keeps its fused work, where the scheduler would leave the
    // reduction to ATen with its prologue written out (a backward's bias
    // gradient: the sum over 8192 rows of 2048 columns of a product). A lone
    // reduction stays ATen's, which reads its input once as well; so does
    // one whose narrowed form would leave each thread a serial run of more
    // than kMaxSerialColumnTerms rows (kernel/reduction_domain.h).
    const ReductionStrategy wide = columns(l, again, inputs, acc_words, chunked, options, 16);
    ReductionStrategy s = wide;
    while (g.nodes.size() > 1 && s.vector > 1 && !parallel_enough(s, l, options))
      s = columns(l, again, inputs, acc_words, chunked, options, s.vector / 2);
    return (l.length + s.threads - 1) / s.threads <= kMaxSerialColumnTerms ? s : wide;
  }
  if (auto s = staged_rows(l, again, inputs, acc_words, options)) return *s;
  return rows(l, again, inputs, acc_words, false, options);
}

}  // namespace ff::fusion
