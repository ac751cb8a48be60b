// Reduction kernels of the Columns form, for inputs that are unit-stride
// along a kept dim (a reduction over channels of NCHW, over the rows of a
// matrix): each thread takes `vector` adjacent rows ("columns" of the
// reduced extent), which the column index enumerates with that unit-stride
// dim innermost, so a warp's loads are contiguous; the `threads` threads
// along threadIdx.y split the reduced extent, thread y taking elements
// y, y + threads, ..., and their partials merge through shared memory.
#include <set>

#include "codegen/cuda/pointwise.h"
#include "codegen/cuda/reduction_emit.h"

namespace ff::codegen {

namespace {

class ColumnsKernel {
 public:
  explicit ColumnsKernel(ReductionWriter& w) : w_(w), l_(w.l), s_(w.s) {}

  KernelSource generate() {
    const int Y = s_.threads, BX = s_.block / s_.threads, V = s_.vector;
    w_.ks.block = BX;
    w_.ks.block_y = Y;
    w_.ks.grid[0] = (l_.rows + int64_t{BX} * V - 1) / (int64_t{BX} * V);
    w_.ks.items = l_.rows * l_.length;
    items_ = s_.persistent ? static_cast<int>((l_.length + Y - 1) / Y) : s_.unroll;
    slots_ = s_.persistent ? 1 : s_.unroll;
    // The kept dims, the unit-stride one innermost.
    const int inner = l_.contiguous_kept();
    for (size_t d = 0; d < l_.kept.size(); ++d)
      if (static_cast<int>(d) != inner) order_.push_back(d);
    if (inner >= 0) order_.push_back(static_cast<size_t>(inner));
    Shape sizes;
    for (size_t d : order_) sizes.push_back(l_.kept[d]);

    std::ostringstream& os = os_;
    w_.head(os, s_.describe());
    os << "  typedef " << w_.index_type() << " index_t;\n";
    os << "  constexpr index_t kColumns = " << l_.rows << ", kLength = " << l_.length
       << ";  // rows (columns of the reduced extent), elements per row\n";
    os << "  constexpr int kVec = " << V << ", kY = " << Y << ";  // adjacent columns per thread, threads along the reduced extent\n";
    if (!s_.persistent) os << "  constexpr int kUnroll = " << s_.unroll << ";  // loads in flight per thread and column\n";
    os << "  const index_t first = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;\n";
    os << "  const bool col_valid = first < kColumns;\n";
    os << "  // Threads past the last column still take part in the merges: they address the last columns.\n";
    os << "  const index_t col = col_valid ? first : kColumns - kVec;\n";
    os << "  // The column's offset in each tensor, from its coordinates over the kept dims (";
    for (size_t i = 0; i < order_.size(); ++i) os << (i ? ", " : "") << "k" << i << ": dim " << order_[i];
    os << ").\n";
    emit_unravel(os, "  ", "col", sizes, "k");
    for (const auto& a : l_.access) {
      Shape st;
      for (size_t d : order_) st.push_back(a.kept[d]);
      os << "  const index_t base_" << a.param << " = " << offset_expr("k", st) << ";\n";
    }
    emit_aligned();
    ExprMap expr_of;
    w_.bind_scalars(expr_of);
    w_.emit_row_inputs(os, "  ", expr_of, [&](const ReductionAccess& a) { return "base_" + a.param + lane_step(a); });
    for (const auto& a : l_.access)
      if (!a.is_output && !a.per_row && s_.persistent && w_.read_again(&a)) {
        os << "  " << cuda_compute_type(a.dtype) << " c_" << a.param << "[" << items_ << "]"
           << (kind(a) == Kind::Same ? "" : "[kVec]") << ";  // %" << a.value->name
           << ", held in registers across the passes\n";
        cached_.insert(&a);
      }
    for (int p = 1; p <= w_.passes(); ++p) pass(p, expr_of);
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
  ReductionWriter& w_;
  const ReductionLayout& l_;
  const ReductionStrategy& s_;
  std::ostringstream os_;
  std::vector<size_t> order_;
  int items_ = 1, slots_ = 1;
  std::set<const ReductionAccess*> cached_, loaded_;

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

  void emit_aligned() {
    std::string cond;
    for (const auto& a : l_.access)
      if (!a.per_row && kind(a) == Kind::Vector)
        cond += std::string(cond.empty() ? "" : " &&") + " (reinterpret_cast<unsigned long long>(" + a.param + ") % " +
                std::to_string(s_.vector * dtype_size(a.dtype)) + " == 0)";
    if (cond.empty()) return;
    os_ << "  // Vector loads and stores across columns where the pointers allow them.\n";
    os_ << "  const bool aligned =" << cond << ";\n";
  }

  std::string element(const std::string& u) const {
    return s_.persistent ? "(" + u + " * kY + static_cast<index_t>(threadIdx.y))" : "start + " + u + " * kY";
  }
  bool tail() const { return l_.length % (int64_t{s_.threads} * items_) != 0; }
  std::string elem_offset(const ReductionAccess& a) const {
    const std::string r = offset_expr("e", a.reduced);
    return "base_" + a.param + (r == "0" ? "" : " + " + r);
  }

  void load(const ReductionAccess& a, const std::string& dst, const std::string& in) {
    if (kind(a) == Kind::Same) {
      os_ << in << dst << " = " << load_expr(a, elem_offset(a)) << ";\n";
      return;
    }
    if (kind(a) == Kind::Lanes) {
      os_ << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) " << dst << "[k] = "
          << load_expr(a, elem_offset(a) + lane_step(a)) << ";\n";
      return;
    }
    const std::string st = cuda_storage_type(a.dtype);
    os_ << in << "if (aligned) {\n" << in << "  const ff_vec<" << st << ", kVec> v = *reinterpret_cast<const ff_vec<" << st
        << ", kVec>*>(" << a.param << " + " << elem_offset(a) << ");\n";
    os_ << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << dst << "[k] = ff_load(v.v[k]);\n";
    os_ << in << "} else {\n" << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << dst << "[k] = "
        << load_expr(a, elem_offset(a) + " + k") << ";\n" << in << "}\n";
  }

  void store(const ReductionAccess& a, const std::string& in) {
    const std::string st = cuda_storage_type(a.dtype);
    if (kind(a) == Kind::Vector) {
      os_ << in << "if (aligned) {\n" << in << "  ff_vec<" << st << ", kVec> v;\n";
      os_ << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) v.v[k] = ff_store<" << st << ">(y_"
          << a.param << "[k]);\n";
      os_ << in << "  *reinterpret_cast<ff_vec<" << st << ", kVec>*>(" << a.param << " + " << elem_offset(a) << ") = v;\n";
      os_ << in << "} else {\n";
      os_ << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << a.param << "[" << elem_offset(a)
          << " + k] = ff_store<" << st << ">(y_" << a.param << "[k]);\n" << in << "}\n";
      return;
    }
    os_ << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) " << a.param << "[" << elem_offset(a)
        << lane_step(a) << "] = ff_store<" << st << ">(y_" << a.param << "[k]);\n";
  }

  void pass(int p, ExprMap& expr_of) {
    std::ostringstream& os = os_;
    const bool reduce = p <= w_.d.levels;
    os << "  // ---- pass " << p << ": " << (reduce ? "reduce" : "apply the row values") << "\n";
    if (reduce) w_.declare_accumulators(os, p, "  ", s_.vector * slots_);
    const auto& inputs = w_.element_inputs(p);
    const std::string x = "x" + std::to_string(p) + "_";
    std::string ind = "  ";
    if (!s_.persistent) {
      os << ind << "for (index_t start = threadIdx.y; start < kLength; start += kY * kUnroll) {\n";
      ind += "  ";
    }
    std::vector<const ReductionAccess*> local;
    for (const ReductionAccess* a : inputs) {
      const bool cached = cached_.count(a) != 0;
      if (cached && loaded_.count(a)) continue;
      if (!cached)
        os << ind << cuda_compute_type(a->dtype) << " " << x << a->param << "[" << items_ << "]"
           << (kind(*a) == Kind::Same ? "" : "[kVec]") << ";\n";
      local.push_back(a);
    }
    if (!local.empty()) {  // loads first, so that their latencies overlap
      os << "#pragma unroll\n" << ind << "for (int u = 0; u < " << items_ << "; ++u) {\n";
      os << ind << "  const index_t e = " << element("u") << ";\n";
      std::string in = ind + "  ";
      if (tail()) {
        os << in << "if (e < kLength) {\n";
        in += "  ";
      }
      emit_unravel(os, in, "e", l_.reduced, "e");
      for (const ReductionAccess* a : local) load(*a, (cached_.count(a) ? "c_" : x) + a->param + "[u]", in);
      if (tail()) os << ind << "  }\n";
      os << ind << "}\n";
      for (const ReductionAccess* a : local)
        if (cached_.count(a)) loaded_.insert(a);
    }
    os << "#pragma unroll\n" << ind << "for (int u = 0; u < " << items_ << "; ++u) {\n";
    const auto& outs = w_.element_outputs(p);
    bool indexed = false;
    for (const auto& a : w_.accs) indexed |= a.level == p && a.indexed();
    if (tail() || !outs.empty() || indexed) os << ind << "  const index_t e = " << element("u") << ";\n";
    std::string in = ind + "  ";
    if (tail()) {
      os << in << "if (e < kLength) {\n";
      in += "  ";
    }
    if (!outs.empty()) emit_unravel(os, in, "e", l_.reduced, "e");
    for (const ReductionAccess* a : outs) os << in << cuda_compute_type(a->dtype) << " y_" << a->param << "[kVec];\n";
    os << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) {\n";
    ExprMap local_expr = expr_of;
    for (const ReductionAccess* a : inputs)
      local_expr[a->value] = (cached_.count(a) ? "c_" : x) + a->param + "[u]" + (kind(*a) == Kind::Same ? "" : "[k]");
    w_.emit_element(os, p, in + "  ", local_expr, slots_ == 1 ? "k" : "k * kUnroll + u", "e");
    for (const ReductionAccess* a : outs) os << in << "  y_" << a->param << "[k] = " << local_expr.at(a->value) << ";\n";
    os << in << "}\n";
    for (const ReductionAccess* a : outs) store(*a, in);
    if (tail()) os << ind << "  }\n";
    os << ind << "}\n";
    if (!s_.persistent) os << "  }\n";
    if (reduce) merge(p, expr_of);
  }

  // Each column's slots pairwise, then the kY threads along threadIdx.y.
  void merge(int p, ExprMap& expr_of) {
    std::ostringstream& os = os_;
    // Lane k's merged partial (one lane: no loop over lanes around the row values).
    const std::string lane = s_.vector == 1 ? "0" : "k";
    const std::string first = slots_ == 1 ? lane : lane + " * kUnroll";
    for (const auto& a : w_.accs) {
      if (a.level != p) continue;
      if (slots_ > 1) {
        os << "#pragma unroll\n  for (int k = 0; k < kVec; ++k)\n#pragma unroll\n    for (int w = 1; w < kUnroll; w *= 2)\n"
           << "#pragma unroll\n      for (int i = 0; i + w < kUnroll; i += 2 * w) " << a.name << "[k * kUnroll + i].merge("
           << a.name << "[k * kUnroll + i + w]);\n";
      }
      if (s_.threads > 1) {
        os << "  __shared__ " << a.type << " partials_" << a.name << "[kY * " << s_.block / s_.threads << " * kVec];\n";
        const std::string at = slots_ == 1 ? "k" : "k * kUnroll";
        os << "#pragma unroll\n  for (int k = 0; k < kVec; ++k)\n    " << a.name << "[" << at << "] = ff_column_merge<kY>("
           << a.name << "[" << at << "], partials_" << a.name << ", threadIdx.x * kVec + k, blockDim.x * kVec);\n";
      }
    }
    w_.emit_row_values(os, p, "  ", expr_of, [&](const Accumulator& a) { return a.name + "[" + first + "]"; });
  }
};

}  // namespace

KernelSource generate_reduction_columns(ReductionWriter& w) { return ColumnsKernel(w).generate(); }

}  // namespace ff::codegen
