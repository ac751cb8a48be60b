#include "codegen/cuda/gemm_sm80_reduce.h"

#include <algorithm>
#include <sstream>

namespace ff::codegen {

int sm80_reduce_shared_bytes(const GemmTile& t) {
  // CUTLASS's Sm80 tensor-op epilogue exchanges at most half the tile's rows
  // at a time, rows padded by 8 (measured: 8.5 to 34 KiB for the f32 tiles);
  // each kernel static_asserts the bound.
  const int exchange = t.m / 2 * (t.n + 8) * 4;
  const int tile = t.m * (t.n + 1) * 4;
  return std::max(t.shared_bytes(DType::f32), exchange + tile);
}

std::string tile_visitor_noop_hooks() {
  return "  CUTLASS_DEVICE void set_k_partition(int, int) {}\n"
         "  CUTLASS_DEVICE void set_batch_index(int) {}\n"
         "  CUTLASS_DEVICE void begin_epilogue() {}\n"
         "  CUTLASS_DEVICE void begin_step(int) {}\n"
         "  CUTLASS_DEVICE void begin_row(int) {}\n"
         "  CUTLASS_DEVICE void end_row(int) {}\n"
         "  CUTLASS_DEVICE void end_epilogue() {}\n";
}

std::string tile_shared_storage(int shared_bytes) {
  return "using Epilogue = cutlass::epilogue::threadblock::EpilogueWithVisitorFromExistingEpilogue<\n"
         "    TileVisitor, Default::Epilogue>::Epilogue;\n"
         "// The tile is written after the mainloop is done with its stages.\n"
         "union SharedStorage {\n"
         "  Mma::SharedStorage main_loop;\n"
         "  struct {\n    Epilogue::SharedStorage exchange;\n    float tile[BM * TILE_LD];\n  } epilogue;\n"
         "};\n"
         "static_assert(sizeof(SharedStorage) <= " +
         std::to_string(shared_bytes) +
         ", \"shared memory size\");\n"
         "static_assert(Mma::WarpCount::kCount * 32 == THREADS, \"block size\");\n"
         "}  // namespace\n\n";
}

std::string sm80_reduce_kernel(const KernelSource& ks, const fusion::GemmSpec& s, const GemmTile& t, bool addmm,
                               bool has_source) {
  using Source = fusion::GemmSpec::Source;
  const int b = s.reduce_block;
  const int64_t per_batch = s.m * s.n / b;  // partials
  std::ostringstream os;
  os << "using Mma = Default::Mma;\n"
     << "using OutputTileIterator = Default::Epilogue::OutputTileIterator;\n"
     << "constexpr int M = " << s.m << ", N = " << s.n << ", K = " << s.k << ";\n"
     << "constexpr int BM = " << t.m << ", BN = " << t.n << ", BLOCK = " << b << ", THREADS = " << ks.block << ";\n"
     << "constexpr int TILE_LD = BN + 1;  // odd: threads walking rows or columns of the tile hit distinct banks\n"
     << "// CUTLASS's epilogue hands each thread's accumulators over in steps; this\n"
     << "// visitor writes their epilogue values (the reduction's identity off the\n"
     << "// matrix) into the CTA's BM x BN tile in shared memory.\n"
     << "struct TileVisitor {\n"
     << "  static int const kIterations = OutputTileIterator::kIterations;\n"
     << "  static int const kElementsPerAccess = OutputTileIterator::kElementsPerAccess;\n"
     << "  using AccumulatorFragment = cutlass::Array<float, kElementsPerAccess>;\n"
     << "  struct SharedStorage {};\n"
     << "  OutputTileIterator where;  // the coordinates of this thread's values; it never loads or stores\n"
     << "  float* tile;\n"
     << "  const Element* src;  // addmm's bias or the epilogue's source tensor, this batch's\n"
     << "  cutlass::MatrixCoord origin;\n"
     << "  CUTLASS_DEVICE TileVisitor(float* tile_, const Element* src_, int thread, cutlass::MatrixCoord origin_)\n"
     << "      : where(OutputTileIterator::Params(cutlass::layout::RowMajor(N)), nullptr, cutlass::MatrixCoord(M, N),\n"
     << "              thread, origin_),\n"
     << "        tile(tile_), src(src_), origin(origin_) {}\n"
     << gemm_epilogue_value(s, "EpilogueOp::apply") << gemm_reduction_members(s) << tile_visitor_noop_hooks()
     << "  CUTLASS_DEVICE void visit(int, int, int, int frag, AccumulatorFragment const& acc) {\n"
     << "    const cutlass::MatrixCoord at = where.thread_start() + "
        "OutputTileIterator::ThreadMap::iteration_offset(frag);\n"
     << "    CUTLASS_PRAGMA_UNROLL\n"
     << "    for (int j = 0; j < kElementsPerAccess; ++j) {\n"
     << "      const int row = at.row(), col = at.column() + j;\n"
     << "      tile[(row - origin.row()) * TILE_LD + col - origin.column()] =\n"
     << "          row < M && col < N ? value(row, col, acc[j]) : identity();\n"
     << "    }\n  }\n"
     << "  CUTLASS_DEVICE void end_step(int) { ++where; }  // the next step's rows\n"
     << "};\n"
     << "// x[0], x[stride], ..., x[(BLOCK - 1) * stride] combined pairwise.\n"
     << "__device__ __forceinline__ float fold(const float* x, int stride) {\n"
     << "  float v[BLOCK];\n"
     << "  CUTLASS_PRAGMA_UNROLL\n"
     << "  for (int k = 0; k < BLOCK; ++k) v[k] = x[k * stride];\n"
     << "  CUTLASS_PRAGMA_UNROLL\n"
     << "  for (int half = BLOCK / 2; half > 0; half /= 2)\n"
     << "    CUTLASS_PRAGMA_UNROLL\n"
     << "    for (int k = 0; k < half; ++k) v[k] = TileVisitor::combine(v[k], v[k + half]);\n"
     << "  return v[0];\n"
     << "}\n"
     << tile_shared_storage(ks.shared_bytes);
  const std::string src = s.source == Source::Bias ? "bias" : s.source == Source::EpilogueInput ? "source" : "";
  os << "FF_EXTERN_C __global__ void __launch_bounds__(" << ks.block << ") " << ks.name
     << "(float* out, const float* a, const float* b" << (addmm ? ", const float* bias" : "")
     << (has_source ? ", const float* source" : "") << ") {\n"
     << "  extern __shared__ __align__(16) unsigned char smem[];\n"
     << "  SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);\n"
     << "  const long long z = blockIdx.z;\n"
     << "  const int thread = threadIdx.x, warp = cutlass::canonical_warp_idx_sync(), lane = threadIdx.x % 32;\n"
     << "  const cutlass::MatrixCoord origin(static_cast<int>(blockIdx.x) * BM, static_cast<int>(blockIdx.y) * BN);\n"
     << "  Mma::IteratorA iterator_a(Mma::IteratorA::Params(Mma::IteratorA::Layout(" << s.a.ld << ")),\n"
     << "                            const_cast<float*>(a) + z * " << s.a.batch_stride
     << "LL, {M, K}, thread, {origin.row(), 0});\n"
     << "  Mma::IteratorB iterator_b(Mma::IteratorB::Params(Mma::IteratorB::Layout(" << s.b.ld << ")),\n"
     << "                            const_cast<float*>(b) + z * " << s.b.batch_stride
     << "LL, {K, N}, thread, {0, origin.column()});\n"
     << "  Mma mma(shared.main_loop, thread, warp, lane);\n"
     << "  Mma::FragmentC acc;\n  acc.clear();\n"
     << "  mma((K + Mma::Shape::kK - 1) / Mma::Shape::kK, acc, iterator_a, iterator_b, acc);\n"
     << "  TileVisitor visitor(shared.epilogue.tile, "
     << (src.empty() ? "nullptr" : src + " + z * " + std::to_string(s.batch_stride_c) + "LL") << ", thread, origin);\n"
     << "  Epilogue epilogue(shared.epilogue.exchange, thread, warp, lane);\n"
     << "  epilogue(visitor, acc);\n"
     << "  __syncthreads();\n"
     << "  // Fold each block of the tile pairwise (deterministic, and a sum's rounding\n"
     << "  // error grows with log2(BLOCK), not BLOCK); thread t takes task t, t + THREADS, ...\n"
     << "  float* partials = out + z * " << per_batch << "LL;\n";
  if (s.reduce_rows) {
    os << "  for (int task = thread; task < BM * (BN / BLOCK); task += THREADS) {\n"
       << "    const int r = task % BM, blk = task / BM;  // tile row, block of columns\n"
       << "    const float v = fold(shared.epilogue.tile + r * TILE_LD + blk * BLOCK, 1);\n"
       << "    const int row = origin.row() + r, col_block = origin.column() / BLOCK + blk;\n"
       << "    if (row < M && col_block < N / BLOCK) partials[row * (N / BLOCK) + col_block] = v * "
       << gemm_reduction_scale(s) << ";\n  }\n";
  } else {
    os << "  for (int task = thread; task < BN * (BM / BLOCK); task += THREADS) {\n"
       << "    const int c = task % BN, blk = task / BN;  // tile column, block of rows\n"
       << "    const float v = fold(shared.epilogue.tile + blk * BLOCK * TILE_LD + c, TILE_LD);\n"
       << "    const int row_block = origin.row() / BLOCK + blk, col = origin.column() + c;\n"
       << "    if (col < N && row_block < M / BLOCK) partials[row_block * N + col] = v * " << gemm_reduction_scale(s)
       << ";\n  }\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace ff::codegen
