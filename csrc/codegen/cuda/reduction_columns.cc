// Reduction kernels of the Columns form, for inputs that are unit-stride
// along a kept dim (a reduction over channels of NCHW, over the rows of a
// matrix): each thread takes `vector` adjacent rows ("columns" of the
// reduced extent), which the column index enumerates with that unit-stride
// dim innermost, so a warp's loads are contiguous; the `threads` threads
// along threadIdx.y split the reduced extent, thread y taking elements
// y, y + threads, ..., and their partials merge through shared memory.
#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/reduction_kernel.h"

namespace ff::codegen {

namespace {

class ColumnsKernel final : public ReductionKernel {
 public:
  using ReductionKernel::ReductionKernel;

  KernelSource generate() {
    const int Y = s_.threads, BX = s_.block / s_.threads, V = s_.vector;
    w_.ks.block = BX;
    w_.ks.block_y = Y;
    w_.ks.grid[0] = (l_.rows + int64_t{BX} * V - 1) / (int64_t{BX} * V);
    w_.ks.items = l_.rows * l_.length;
    items_ = s_.persistent ? static_cast<int>((l_.length + Y - 1) / Y) : s_.unroll;
    slots_ = s_.persistent ? 1 : s_.unroll;  // per column
    accumulators_ = V * slots_;
    // The kept dims, the unit-stride one innermost.
    const int inner = l_.contiguous_kept();
    for (size_t d = 0; d < l_.kept.size(); ++d)
      if (static_cast<int>(d) != inner) order_.push_back(d);
    if (inner >= 0) order_.push_back(static_cast<size_t>(inner));
    const Shape sizes = in_order(l_.kept);

    std::ostringstream& os = os_;
    w_.head(os, s_.describe());
    os << "  typedef " << w_.index_type() << " index_t;\n";
    os << "  constexpr index_t kColumns = " << l_.rows << ", kLength = " << l_.length
       << ";  // rows (columns of the reduced extent), elements per row\n";
    os << "  constexpr int kVec = " << V << ", kY = " << Y
       << ";  // adjacent columns per thread, threads along the reduced extent\n";
    if (!s_.persistent)
      os << "  constexpr int kUnroll = " << s_.unroll << ";  // loads in flight per thread and column\n";
    os << "  const index_t first = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;\n";
    os << "  const bool col_valid = first < kColumns;\n";
    os << "  // Threads past the last column still take part in the merges: they address the last columns.\n";
    os << "  const index_t col = col_valid ? first : kColumns - kVec;\n";
    os << "  // The column's offset in each tensor, from its coordinates over the kept dims (";
    for (size_t i = 0; i < order_.size(); ++i) os << (i ? ", " : "") << "k" << i << ": dim " << order_[i];
    os << ").\n";
    emit_unravel(os, "  ", "col", sizes, "k");
    for (const auto& a : l_.access)
      os << "  const index_t base_" << a.param << " = " << offset_expr("k", in_order(a.kept)) << ";\n";
    emit_aligned();
    ExprMap expr_of;
    w_.bind_scalars(expr_of);
    w_.emit_row_inputs(os, "  ", expr_of, [&](const ReductionAccess& a) { return "base_" + a.param + lane_step(a); });
    declare_caches();
    declare_stages();
    for (int p = 1; p <= w_.passes(); ++p) pass(p, expr_of);
    write_stages(sizes);
    const auto outs = w_.row_outputs();
    if (!outs.empty()) {
      os << "  if (threadIdx.y == 0 && col_valid) {\n#pragma unroll\n    for (int k = 0; k < kVec; ++k) {\n";
      for (const ReductionAccess* a : outs)
        os << "      " << a->param << "[base_" << a->param << lane_step(*a) << "] = ff_store<"
           << cuda_storage_type(a->dtype) << ">(" << expr_of.at(a->value) << ");\n";
      os << "    }\n  }\n";
    }
    os << "}\n";
    w_.ks.source = os.str();
    return w_.ks;
  }

 private:
  std::vector<size_t> order_;

  // Per-kept-dim values (an access's strides, the extents) in the column index's order.
  Shape in_order(const Shape& kept) const {
    Shape out;
    for (size_t d : order_) out.push_back(kept[d]);
    return out;
  }

  // How an access steps across a thread's columns: a vector load (unit
  // stride), one value for all (stride 0, or one column), or one load each.
  enum class Kind { Vector, Same, Lanes };
  int64_t column_stride(const ReductionAccess& a) const { return order_.empty() ? 0 : a.kept[order_.back()]; }
  Kind kind(const ReductionAccess& a) const {
    if (s_.vector == 1 || column_stride(a) == 0) return Kind::Same;
    return column_stride(a) == 1 ? Kind::Vector : Kind::Lanes;
  }
  // The offset from a thread's first column to its column k.
  std::string lane_step(const ReductionAccess& a) const {
    const int64_t st = column_stride(a);
    if (s_.vector == 1 || st == 0) return "";
    return st == 1 ? " + k" : " + k * " + std::to_string(st);
  }

  bool per_lane(const ReductionAccess& a) const override { return kind(a) != Kind::Same; }
  bool vectorized(const ReductionAccess& a) const override { return kind(a) == Kind::Vector; }
  std::string stream_loop() const override {
    return "for (index_t start = threadIdx.y; start < kLength; start += kY * kUnroll)";
  }
  std::string element(const std::string& u) const override {
    return s_.persistent ? "(" + u + " * kY + static_cast<index_t>(threadIdx.y))" : "start + " + u + " * kY";
  }
  bool tail() const override { return l_.length % (int64_t{s_.threads} * items_) != 0; }
  std::string slot() const override { return slots_ == 1 ? "k" : "k * kUnroll + u"; }
  std::string chunk_slot() const override { return slots_ == 1 ? "k" : "k * kUnroll"; }
  std::string index() const override { return "e"; }
  std::string valid() const override { return "col_valid"; }

  void load(const ReductionAccess& a, const std::string& dst, const std::string& in) override {
    switch (kind(a)) {
      case Kind::Same:
        os_ << in << dst << " = " << load_expr(a, elem_offset(a)) << ";\n";
        break;
      case Kind::Lanes:
        os_ << "#pragma unroll\n"
            << in << "for (int k = 0; k < kVec; ++k) " << dst << "[k] = " << load_expr(a, elem_offset(a) + lane_step(a))
            << ";\n";
        break;
      case Kind::Vector:
        vector_load(a, dst, in);
        break;
    }
  }

  bool staged(const ReductionAccess& a) const { return s_.staged && a.along_rows(order_.back()); }

  // A staged output's tile: column c of the block (threadIdx.x * kVec + k),
  // element e of its row at [c][e], each column padded by one slot.
  void declare_stages() {
    if (!s_.staged) return;
    os_ << "  constexpr int kTileColumns = " << s_.block / s_.threads * s_.vector
        << ", kStageStride = kLength + 1;  // the block's columns, and a column's slots in the tiles\n";
    for (const auto& a : l_.access)
      if (staged(a))
        os_ << "  __shared__ " << cuda_storage_type(a.dtype) << " stage_" << a.param
            << "[kTileColumns * kStageStride];  // the block's columns of %" << a.value->name << "\n";
  }

  // The tiles out: consecutive threads take consecutive elements of a
  // column's row, which are adjacent in memory, so the stores coalesce.
  void write_stages(const Shape& sizes) {
    if (!s_.staged) return;
    std::ostringstream& os = os_;
    os << "  // ---- the staged outputs, a run of stores along each row\n  __syncthreads();\n";
    os << "  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < kTileColumns * kLength; i += blockDim.x * "
          "blockDim.y) {\n";
    os << "    const int c = i / kLength;\n    const index_t e = i % kLength;\n";
    os << "    const index_t at = static_cast<index_t>(blockIdx.x) * kTileColumns + c;\n";
    os << "    if (at >= kColumns) continue;\n";
    emit_unravel(os, "    ", "at", sizes, "s");
    emit_unravel(os, "    ", "e", l_.reduced, "e");
    for (const auto& a : l_.access) {
      if (!staged(a)) continue;
      const std::string r = offset_expr("e", a.reduced);
      os << "    " << a.param << "[" << offset_expr("s", in_order(a.kept)) << (r == "0" ? "" : " + " + r)
         << "] = stage_" << a.param << "[c * kStageStride + e];\n";
    }
    os << "  }\n";
  }

  void store(const ReductionAccess& a, const std::string& in) override {
    if (staged(a)) {
      os_ << "#pragma unroll\n"
          << in << "for (int k = 0; k < kVec; ++k) stage_" << a.param
          << "[(threadIdx.x * kVec + k) * kStageStride + e] = ff_store<" << cuda_storage_type(a.dtype) << ">(y_"
          << a.param << "[k]);\n";
      return;
    }
    if (kind(a) == Kind::Vector) {
      vector_store(a, in);
      return;
    }
    os_ << "#pragma unroll\n"
        << in << "for (int k = 0; k < kVec; ++k) " << a.param << "[" << elem_offset(a) << lane_step(a)
        << "] = ff_store<" << cuda_storage_type(a.dtype) << ">(y_" << a.param << "[k]);\n";
  }

  // Each column's slots pairwise, then the kY threads along threadIdx.y.
  void merge(int p, ExprMap& expr_of) override {
    std::ostringstream& os = os_;
    // Lane k's merged partial (one lane: no loop over lanes around the row values).
    const std::string lane = s_.vector == 1 ? "0" : "k";
    const std::string first = slots_ == 1 ? lane : lane + " * kUnroll";
    for (const auto& a : w_.accs) {
      if (a.level != p) continue;
      if (slots_ > 1) {
        os << "#pragma unroll\n  for (int k = 0; k < kVec; ++k)\n#pragma unroll\n    for (int w = 1; w < kUnroll; w *= "
              "2)\n"
           << "#pragma unroll\n      for (int i = 0; i + w < kUnroll; i += 2 * w) " << a.name
           << "[k * kUnroll + i].merge(" << a.name << "[k * kUnroll + i + w]);\n";
      }
      if (s_.threads > 1) {
        os << "  __shared__ " << a.type << " partials_" << a.name << "[kY * " << s_.block / s_.threads << " * kVec];\n";
        const std::string at = slots_ == 1 ? "k" : "k * kUnroll";
        os << "#pragma unroll\n  for (int k = 0; k < kVec; ++k)\n    " << a.name << "[" << at
           << "] = ff_column_merge<kY>(" << a.name << "[" << at << "], partials_" << a.name
           << ", threadIdx.x * kVec + k, blockDim.x * kVec);\n";
      }
    }
    w_.emit_row_values(os, p, "  ", expr_of, [&](const Accumulator& a) { return a.name + "[" + first + "]"; });
  }
};

}  // namespace

KernelSource generate_reduction_columns(ReductionWriter& w) { return ColumnsKernel(w).generate(); }

}  // namespace ff::codegen
