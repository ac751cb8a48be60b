// Reduction kernels of the Rows form: `threads` threads share a row and read
// along it, `vector` elements per load; several rows per block when a row
// takes less than a warp, a block per row otherwise. Each thread's element
// p of the row (p = 0, 1, ...) starts at (p * threads + lane) * vector, so a
// warp's loads are contiguous.
#include <set>

#include "codegen/cuda/pointwise.h"
#include "codegen/cuda/reduction_emit.h"

namespace ff::codegen {

namespace {

class RowsKernel {
 public:
  explicit RowsKernel(ReductionWriter& w) : w_(w), l_(w.l), s_(w.s) {}

  KernelSource generate() {
    const int T = s_.threads, B = s_.block, V = s_.vector;
    const int64_t per_block = B / T;
    w_.ks.block = B;
    w_.ks.grid[0] = (l_.rows + per_block - 1) / per_block;
    w_.ks.items = l_.rows * l_.length;
    items_ = s_.persistent ? static_cast<int>((l_.length + int64_t{T} * V - 1) / (int64_t{T} * V)) : s_.unroll;
    slots_ = s_.persistent ? V : s_.unroll * V;

    std::ostringstream& os = os_;
    w_.head(os, s_.describe());
    os << "  typedef " << w_.index_type() << " index_t;\n";
    if (T == B) os << "  constexpr index_t kLength = " << l_.length << ";  // elements per row (a block per row)\n";
    else os << "  constexpr index_t kRows = " << l_.rows << ", kLength = " << l_.length << ";  // rows, elements per row\n";
    os << "  constexpr int kThreads = " << T << ", kVec = " << V << ";  // threads per row, elements per load\n";
    if (!s_.persistent) os << "  constexpr int kUnroll = " << s_.unroll << ";  // loads in flight per thread\n";
    os << "  const int lane = threadIdx.x" << (T == B ? "" : " % kThreads") << ";\n";
    if (T == B) {
      os << "  const index_t row = blockIdx.x;\n  constexpr bool row_valid = true;\n";
    } else {
      os << "  const index_t first = static_cast<index_t>(blockIdx.x) * " << per_block << " + threadIdx.x / kThreads;\n";
      os << "  const bool row_valid = first < kRows;\n";
      os << "  // Lanes of a row past the last one still take part in the shuffles: they address the last row.\n";
      os << "  const index_t row = row_valid ? first : kRows - 1;\n";
    }
    os << "  // The row's offset in each tensor, from its coordinates over the kept dims.\n";
    emit_unravel(os, "  ", "row", l_.kept, "k");
    for (const auto& a : l_.access) os << "  const index_t base_" << a.param << " = " << offset_expr("k", a.kept) << ";\n";
    emit_aligned();
    ExprMap expr_of;
    w_.bind_scalars(expr_of);
    w_.emit_row_inputs(os, "  ", expr_of, [](const ReductionAccess& a) { return "base_" + a.param; });
    for (const auto& a : l_.access)
      if (!a.is_output && !a.per_row && s_.persistent && w_.read_again(&a)) {
        os << "  " << cuda_compute_type(a.dtype) << " c_" << a.param << "[" << items_ << "]" << (lanes(a) ? "[kVec]" : "")
           << ";  // %" << a.value->name << ", held in registers across the passes\n";
        cached_.insert(&a);
      }
    for (int p = 1; p <= w_.passes(); ++p) pass(p, expr_of);
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
  ReductionWriter& w_;
  const ReductionLayout& l_;
  const ReductionStrategy& s_;
  std::ostringstream os_;
  int items_ = 1, slots_ = 1;
  std::set<const ReductionAccess*> cached_;

  // Whether `a` holds kVec values per load (unit stride along the row's innermost dim).
  bool lanes(const ReductionAccess& a) const { return s_.vector > 1 && a.reduced.back() == 1; }

  void emit_aligned() {
    std::string cond;
    for (const auto& a : l_.access)
      if (!a.per_row && lanes(a))
        cond += std::string(cond.empty() ? "" : " &&") + " (reinterpret_cast<unsigned long long>(" + a.param + ") % " +
                std::to_string(s_.vector * dtype_size(a.dtype)) + " == 0)";
    if (cond.empty()) return;
    os_ << "  // Vector loads and stores where the pointers allow them (views may start anywhere).\n";
    os_ << "  const bool aligned =" << cond << ";\n";
  }

  std::string element(const std::string& u) const {
    return s_.persistent ? "(" + u + " * kThreads + lane) * kVec" : "start + " + u + " * (kThreads * kVec)";
  }
  // Whether element positions can run past the row's end.
  bool tail() const {
    const int64_t step = int64_t{s_.threads} * s_.vector * items_;
    return l_.length % step != 0;
  }

  std::string elem_offset(const ReductionAccess& a) const {
    const std::string r = offset_expr("e", a.reduced);
    return "base_" + a.param + (r == "0" ? "" : " + " + r);
  }

  void pass(int p, ExprMap& expr_of) {
    std::ostringstream& os = os_;
    const bool reduce = p <= w_.d.levels;
    os << "  // ---- pass " << p << ": " << (reduce ? "reduce" : "apply the row values") << "\n";
    if (reduce) w_.declare_accumulators(os, p, "  ", slots_);
    const auto& inputs = w_.element_inputs(p);
    const std::string x = "x" + std::to_string(p) + "_";  // this pass's registers
    std::string ind = "  ";
    if (!s_.persistent) {
      os << ind << "for (index_t start = static_cast<index_t>(lane) * kVec; start < kLength; start += kThreads * kVec * kUnroll) {\n";
      ind += "  ";
    }
    // Loads first, for all items, so that their latencies overlap.
    std::vector<const ReductionAccess*> local;
    for (const ReductionAccess* a : inputs) {
      const bool cached = cached_.count(a) != 0;
      if (cached && loaded_.count(a)) continue;
      if (!cached)
        os << ind << cuda_compute_type(a->dtype) << " " << x << a->param << "[" << items_ << "]" << (lanes(*a) ? "[kVec]" : "")
           << ";\n";
      local.push_back(a);
    }
    if (!local.empty()) {
      os << "#pragma unroll\n" << ind << "for (int u = 0; u < " << items_ << "; ++u) {\n";
      os << ind << "  const index_t e = " << element("u") << ";\n";
      std::string in = ind + "  ";
      if (tail()) {
        os << in << "if (e < kLength) {\n";
        in += "  ";
      }
      emit_unravel(os, in, "e", l_.reduced, "e");
      for (const ReductionAccess* a : local) {
        const std::string dst = (cached_.count(a) ? "c_" : x) + a->param + "[u]";
        if (!lanes(*a)) {
          os << in << dst << " = " << load_expr(*a, elem_offset(*a)) << ";\n";
          continue;
        }
        const std::string st = cuda_storage_type(a->dtype);
        os << in << "if (aligned) {\n" << in << "  const ff_vec<" << st << ", kVec> v = *reinterpret_cast<const ff_vec<"
           << st << ", kVec>*>(" << a->param << " + " << elem_offset(*a) << ");\n";
        os << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << dst << "[k] = ff_load(v.v[k]);\n";
        os << in << "} else {\n" << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << dst
           << "[k] = " << load_expr(*a, elem_offset(*a) + " + k") << ";\n" << in << "}\n";
      }
      if (tail()) os << ind << "  }\n";
      os << ind << "}\n";
      for (const ReductionAccess* a : local)
        if (cached_.count(a)) loaded_.insert(a);
    }
    // Then the arithmetic, element by element.
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
    for (const ReductionAccess* a : outs)
      os << in << cuda_compute_type(a->dtype) << " y_" << a->param << "[kVec];\n";
    os << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) {\n";
    ExprMap local_expr = expr_of;
    for (const ReductionAccess* a : inputs)
      local_expr[a->value] = (cached_.count(a) ? "c_" : x) + a->param + "[u]" + (lanes(*a) ? "[k]" : "");
    w_.emit_element(os, p, in + "  ", local_expr, s_.persistent ? "k" : "u * kVec + k", "e + k");
    for (const ReductionAccess* a : outs) os << in << "  y_" << a->param << "[k] = " << local_expr.at(a->value) << ";\n";
    os << in << "}\n";
    for (const ReductionAccess* a : outs) store(*a, in);
    if (tail()) os << ind << "  }\n";
    os << ind << "}\n";
    if (!s_.persistent) os << "  }\n";
    if (reduce) merge(p, expr_of);
  }

  void store(const ReductionAccess& a, const std::string& in) {
    const std::string st = cuda_storage_type(a.dtype);
    if (!lanes(a)) {  // kVec == 1
      os_ << in << a.param << "[" << elem_offset(a) << "] = ff_store<" << st << ">(y_" << a.param << "[0]);\n";
      return;
    }
    os_ << in << "if (aligned) {\n" << in << "  ff_vec<" << st << ", kVec> v;\n";
    os_ << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) v.v[k] = ff_store<" << st << ">(y_"
        << a.param << "[k]);\n";
    os_ << in << "  *reinterpret_cast<ff_vec<" << st << ", kVec>*>(" << a.param << " + " << elem_offset(a) << ") = v;\n";
    os_ << in << "} else {\n" << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << a.param << "["
        << elem_offset(a) << " + k] = ff_store<" << st << ">(y_" << a.param << "[k]);\n" << in << "}\n";
  }

  // The thread's slots pairwise, then the row's threads; every thread of the
  // row ends with the row's result and computes the row values.
  void merge(int p, ExprMap& expr_of) {
    std::ostringstream& os = os_;
    for (const auto& a : w_.accs) {
      if (a.level != p) continue;
      if (slots_ > 1) {
        os << "#pragma unroll\n  for (int w = 1; w < " << slots_ << "; w *= 2)\n"
           << "#pragma unroll\n    for (int i = 0; i + w < " << slots_ << "; i += 2 * w) " << a.name
           << "[i].merge(" << a.name << "[i + w]);\n";
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

  std::set<const ReductionAccess*> loaded_;
};

}  // namespace

KernelSource generate_reduction_rows(ReductionWriter& w) { return RowsKernel(w).generate(); }

}  // namespace ff::codegen
