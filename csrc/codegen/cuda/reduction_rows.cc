// Reduction kernels of the Rows form: `threads` threads share a row and read
// along it, `vector` elements per load; several rows per block when a row
// takes less than a warp, a block per row otherwise. Each thread's element
// p of the row (p = 0, 1, ...) starts at (p * threads + lane) * vector, so a
// warp's loads are contiguous.
#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/reduction_kernel.h"

namespace ff::codegen {

namespace {

class RowsKernel final : public ReductionKernel {
 public:
  using ReductionKernel::ReductionKernel;

  KernelSource generate() {
    const int T = s_.threads, B = s_.block, V = s_.vector;
    const int64_t per_block = B / T;
    w_.ks.block = B;
    w_.ks.grid[0] = (l_.rows + per_block - 1) / per_block;
    w_.ks.items = l_.rows * l_.length;
    items_ = s_.persistent ? static_cast<int>((l_.length + int64_t{T} * V - 1) / (int64_t{T} * V)) : s_.unroll;
    slots_ = s_.persistent ? V : s_.unroll * V;
    accumulators_ = slots_;

    std::ostringstream& os = os_;
    w_.head(os, s_.describe());
    os << "  typedef " << w_.index_type() << " index_t;\n";
    if (T == B)
      os << "  constexpr index_t kLength = " << l_.length << ";  // elements per row (a block per row)\n";
    else
      os << "  constexpr index_t kRows = " << l_.rows << ", kLength = " << l_.length
         << ";  // rows, elements per row\n";
    os << "  constexpr int kThreads = " << T << ", kVec = " << V << ";  // threads per row, elements per load\n";
    if (!s_.persistent) os << "  constexpr int kUnroll = " << s_.unroll << ";  // loads in flight per thread\n";
    os << "  const int lane = threadIdx.x" << (T == B ? "" : " % kThreads") << ";\n";
    if (T == B) {
      os << "  const index_t row = blockIdx.x;\n  constexpr bool row_valid = true;\n";
    } else {
      os << "  const index_t first = static_cast<index_t>(blockIdx.x) * " << per_block
         << " + threadIdx.x / kThreads;\n";
      os << "  const bool row_valid = first < kRows;\n";
      os << "  // Lanes of a row past the last one still take part in the shuffles: they address the last row.\n";
      os << "  const index_t row = row_valid ? first : kRows - 1;\n";
    }
    os << "  // The row's offset in each tensor, from its coordinates over the kept dims.\n";
    emit_unravel(os, "  ", "row", l_.kept, "k");
    for (const auto& a : l_.access)
      os << "  const index_t base_" << a.param << " = " << offset_expr("k", a.kept) << ";\n";
    emit_aligned();
    ExprMap expr_of;
    w_.bind_scalars(expr_of);
    w_.emit_row_inputs(os, "  ", expr_of, [](const ReductionAccess& a) { return "base_" + a.param; });
    declare_caches();
    declare_stages();
    for (int p = 1; p <= w_.passes(); ++p) pass(p, expr_of);
    write_stages();
    const auto outs = w_.row_outputs();
    if (!outs.empty()) {
      os << "  if (lane == 0 && row_valid) {\n";
      for (const ReductionAccess* a : outs)
        os << "    " << a->param << "[base_" << a->param << "] = ff_store<" << cuda_storage_type(a->dtype) << ">("
           << expr_of.at(a->value) << ");\n";
      os << "  }\n";
    }
    os << "}\n";
    w_.ks.source = os.str();
    return w_.ks;
  }

 private:
  // Moving along the row's innermost dim: kVec values per item, one vector
  // load where the stride is 1, else one load each (strided()).
  bool per_lane(const ReductionAccess& a) const override { return s_.vector > 1 && a.reduced.back() != 0; }
  bool vectorized(const ReductionAccess& a) const override { return per_lane(a) && a.reduced.back() == 1; }
  bool strided(const ReductionAccess& a) const { return per_lane(a) && !vectorized(a); }
  // a's offset at lane k of the item, for strided accesses.
  std::string strided_offset(const ReductionAccess& a) const {
    return elem_offset(a) + " + k * static_cast<index_t>(" + std::to_string(a.reduced.back()) + ")";
  }
  int64_t item_step() const override { return int64_t{s_.threads} * s_.vector; }
  std::string stream_loop() const override {
    return "for (index_t start = static_cast<index_t>(lane) * kVec; start < kLength; start += kThreads * kVec * "
           "kUnroll)";
  }
  std::string element(const std::string& u) const override {
    return s_.persistent ? "(" + u + " * kThreads + lane) * kVec" : "start + " + u + " * (kThreads * kVec)";
  }
  bool tail() const override { return l_.length % (int64_t{s_.threads} * s_.vector * items_) != 0; }
  std::string slot() const override { return s_.persistent ? "k" : "u * kVec + k"; }
  std::string chunk_slot() const override { return "k"; }
  std::string index() const override { return "e + k"; }
  std::string valid() const override { return "row_valid"; }

  void load(const ReductionAccess& a, const std::string& dst, const std::string& in) override {
    if (vectorized(a))
      vector_load(a, dst, in);
    else if (strided(a))
      os_ << "#pragma unroll\n"
          << in << "for (int k = 0; k < kVec; ++k) " << dst << "[k] = " << load_expr(a, strided_offset(a)) << ";\n";
    else
      os_ << in << dst << " = " << load_expr(a, elem_offset(a)) << ";\n";
  }

  bool staged(const ReductionAccess& a) const { return s_.staged && a.transposed(); }

  // A staged output's tile: element e of the block's row r at [e][r], each
  // element's rows padded by one slot against bank conflicts.
  void declare_stages() {
    if (!s_.staged) return;
    os_ << "  constexpr int kRowsPerBlock = " << s_.block / s_.threads << ", kStageStride = kRowsPerBlock + 1;\n";
    os_ << "  const int block_row = threadIdx.x / kThreads;\n";
    for (const auto& a : l_.access)
      if (staged(a))
        os_ << "  __shared__ " << cuda_storage_type(a.dtype) << " stage_" << a.param
            << "[kLength * kStageStride];  // the block's rows of %" << a.value->name << ", transposed\n";
  }

  // The tiles out: consecutive threads take consecutive rows of an element,
  // which are adjacent in memory, so the stores coalesce.
  void write_stages() {
    if (!s_.staged) return;
    std::ostringstream& os = os_;
    os << "  // ---- the staged outputs, a row-adjacent run of stores per element\n  __syncthreads();\n";
    os << "  for (int i = threadIdx.x; i < kRowsPerBlock * kLength; i += blockDim.x) {\n";
    os << "    const int r = i % kRowsPerBlock;\n    const index_t e = i / kRowsPerBlock;\n";
    os << "    const index_t at = static_cast<index_t>(blockIdx.x) * kRowsPerBlock + r;\n";
    os << "    if (at >= kRows) continue;\n";
    emit_unravel(os, "    ", "at", l_.kept, "s");
    emit_unravel(os, "    ", "e", l_.reduced, "e");
    for (const auto& a : l_.access) {
      if (!staged(a)) continue;
      const std::string r = offset_expr("e", a.reduced);
      os << "    " << a.param << "[" << offset_expr("s", a.kept) << (r == "0" ? "" : " + " + r) << "] = stage_"
         << a.param << "[e * kStageStride + r];\n";
    }
    os << "  }\n";
  }

  void store(const ReductionAccess& a, const std::string& in) override {
    if (staged(a)) {
      os_ << "#pragma unroll\n"
          << in << "for (int k = 0; k < kVec; ++k) stage_" << a.param
          << "[(e + k) * kStageStride + block_row] = ff_store<" << cuda_storage_type(a.dtype) << ">(y_" << a.param
          << "[k]);\n";
      return;
    }
    if (vectorized(a))
      vector_store(a, in);
    else if (strided(a))
      os_ << "#pragma unroll\n"
          << in << "for (int k = 0; k < kVec; ++k) " << a.param << "[" << strided_offset(a) << "] = ff_store<"
          << cuda_storage_type(a.dtype) << ">(y_" << a.param << "[k]);\n";
    else  // kVec == 1
      os_ << in << a.param << "[" << elem_offset(a) << "] = ff_store<" << cuda_storage_type(a.dtype) << ">(y_"
          << a.param << "[0]);\n";
  }

  // A persistent row's chunked accumulators take the row's figure before the
  // element sweep, as eager's two passes do: a max-sum-exp the row's max, so
  // every sum is of exp(x - max) and the merges add them, where rescaling
  // each partial sum by exp(m - max) gave up to 1.5x eager's error (softmax
  // over 32768, against fp64); a Welford the row's mean (within an ulp: the
  // slot's sum becomes mean * count), so the deviations are from it and
  // Chan's merges add nothing of their own. One more merge a row.
  void before_rebase(int p) override {
    if (!s_.persistent) return;
    for (const auto& a : w_.accs) {
      if (a.level != p) continue;
      const bool max = a.kind == Accumulator::Kind::MaxSumExp;
      if (!max && a.kind != Accumulator::Kind::Welford) continue;
      const std::string t = cuda_compute_type(a.input->type.dtype);
      const std::string part = max ? "ff_max<" + t + ">" : "ff_sum<" + t + ">";
      const std::string field = max ? ".m" : ".s";
      // The row's max or sum, merged over the thread's slots and the row's threads.
      auto row_total = [&](const std::string& var, const std::string& slot, const std::string& combine) {
        os_ << "    " << t << " " << var << " = " << slot << "[0];\n"
            << "#pragma unroll\n"
            << "    for (int i = 1; i < " << slots_ << "; ++i) " << var << " = " << combine << ";\n";
        if (s_.threads > 32)
          os_ << "    __shared__ " << part << " partials_" << var << "_" << a.name << "[kThreads / 32];\n"
              << "    " << var << " = ff_block_merge<kThreads>(" << part << "{" << var << "}, partials_" << var << "_"
              << a.name << ")" << field << ";\n";
        else if (s_.threads > 1)
          os_ << "    " << var << " = ff_warp_merge<kThreads>(" << part << "{" << var << "})" << field << ";\n";
      };
      if (max) {
        const std::string next = "next_" + a.name;
        os_ << "  {  // the row's max, in every slot\n";
        row_total("row_max", next, "ff_max_nan(row_max, " + next + "[i])");
        os_ << "#pragma unroll\n"
            << "    for (int i = 0; i < " << slots_ << "; ++i) " << next << "[i] = row_max;\n"
            << "  }\n";
      } else {
        const std::string sum = "sum_" + a.name, n = "n_" + a.name;
        os_ << "  {  // the row's mean, in every slot\n";
        row_total("row_sum", sum, "row_sum + " + sum + "[i]");
        os_ << "    const " << t << " row_mean = row_sum / static_cast<" << t << ">(kLength);\n"
            << "#pragma unroll\n"
            << "    for (int i = 0; i < " << slots_ << "; ++i) " << sum << "[i] = row_mean * " << n << "[i];\n"
            << "  }\n";
      }
    }
  }

  // The thread's slots pairwise, then the row's threads; every thread of the
  // row ends with the row's result and computes the row values.
  void merge(int p, ExprMap& expr_of) override {
    std::ostringstream& os = os_;
    for (const auto& a : w_.accs) {
      if (a.level != p) continue;
      if (slots_ > 1) {
        os << "#pragma unroll\n  for (int w = 1; w < " << slots_ << "; w *= 2)\n"
           << "#pragma unroll\n    for (int i = 0; i + w < " << slots_ << "; i += 2 * w) " << a.name << "[i].merge("
           << a.name << "[i + w]);\n";
      }
      if (s_.threads > 32) {
        os << "  __shared__ " << a.type << " partials_" << a.name << "[kThreads / 32];\n";
        os << "  " << a.name << "[0] = ff_block_merge<kThreads>(" << a.name << "[0], partials_" << a.name << ");\n";
      } else if (s_.threads > 1) {
        os << "  " << a.name << "[0] = ff_warp_merge<kThreads>(" << a.name << "[0]);\n";
      }
    }
    w_.emit_row_values(os, p, "  ", expr_of, [](const Accumulator& a) { return a.name + "[0]"; });
  }
};

}  // namespace

KernelSource generate_reduction_rows(ReductionWriter& w) { return RowsKernel(w).generate(); }

}  // namespace ff::codegen
