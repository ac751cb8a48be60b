#include "codegen/cuda/reduction_kernel.h"

#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/prelude.h"

namespace ff::codegen {

std::string ReductionKernel::elem_offset(const ReductionAccess& a) const {
  const std::string r = offset_expr("e", a.reduced);
  return "base_" + a.param + (r == "0" ? "" : " + " + r);
}

void ReductionKernel::emit_aligned() {
  std::string cond;
  for (const auto& a : l_.access)
    if (!a.per_row && vectorized(a))
      cond += std::string(cond.empty() ? "" : " &&") + " (reinterpret_cast<unsigned long long>(" + a.param + ") % " +
              std::to_string(s_.vector * dtype_size(a.dtype)) + " == 0)";
  if (cond.empty()) return;
  os_ << "  // Vector loads and stores where the pointers allow them (views may start anywhere).\n";
  os_ << "  const bool aligned =" << cond << ";\n";
}

bool ReductionKernel::item_invariant(const ReductionAccess& a) const {
  return items_ > 1 && l_.repeats_within(a, item_step());
}

void ReductionKernel::declare_caches() {
  if (!s_.persistent) return;
  for (const auto& a : l_.access)
    if (!a.is_output && !a.per_row && w_.read_again(&a)) cached_.insert(&a);
  int64_t shared_bytes = 0;
  for (const ReductionAccess* a : cached_) {
    const bool split = in_shared(*a);
    if (split && shared_bytes == 0) {
      os_ << "  constexpr int kRegItems = " << items_ - s_.shared_items
          << ";  // a thread's first items of the inputs held "
          << "across passes, in registers; the other " << s_.shared_items << " in shared memory\n";
      os_ << "  " << cuda_dynamic_shared() << "\n";
    }
    os_ << "  " << cuda_compute_type(a->dtype) << " c_" << a->param << "["
        << (split ? "kRegItems" : std::to_string(items_of(*a))) << "]" << (per_lane(*a) ? "[kVec]" : "") << ";  // %"
        << a->value->name << ", held in registers across the passes\n";
    if (!split) continue;
    const std::string vec = storage_vector(*a);
    os_ << "  " << vec << "* const s_" << a->param << " = reinterpret_cast<" << vec << "*>(ff_dynamic_shared + "
        << shared_bytes << ");  // and its items from kRegItems on\n";
    shared_bytes += int64_t{s_.shared_items} * s_.threads * s_.vector * dtype_size(a->dtype);
  }
  w_.ks.shared_bytes = static_cast<int>(shared_bytes);
}

std::string ReductionKernel::storage_vector(const ReductionAccess& a) {
  return "ff_vec<" + cuda_storage_type(a.dtype) + ", kVec>";
}

// Item u (>= kRegItems) of lane t at [(u - kRegItems) * kThreads + t]: a
// warp's 16-byte slots are adjacent, so its accesses take no bank conflicts.
std::string ReductionKernel::shared_slot(const ReductionAccess& a) {
  return "s_" + a.param + "[(u - kRegItems) * kThreads + lane]";
}

void ReductionKernel::shared_load(const ReductionAccess& a, const std::string& in) {
  const std::string slot = shared_slot(a);
  os_ << in << "if (aligned) {\n"
      << in << "  ff_cp_async<sizeof(" << storage_vector(a) << ")>(&" << slot << ", " << a.param << " + "
      << elem_offset(a) << ");\n";
  os_ << in << "} else {\n#pragma unroll\n"
      << in << "  for (int k = 0; k < kVec; ++k) " << slot << ".v[k] = " << a.param << "[" << elem_offset(a)
      << " + k];\n"
      << in << "}\n";
}

std::string ReductionKernel::cached_value(const ReductionAccess& a) const {
  const std::string reg = "c_" + a.param + item(a) + (per_lane(a) ? "[k]" : "");
  if (!in_shared(a)) return reg;
  return "(u < kRegItems ? " + reg + " : ff_load(" + shared_slot(a) + ".v[k]))";
}

void ReductionKernel::vector_load(const ReductionAccess& a, const std::string& dst, const std::string& in) {
  const std::string vec = storage_vector(a);
  os_ << in << "if (aligned) {\n"
      << in << "  const " << vec << " v = *reinterpret_cast<const " << vec << "*>(" << a.param << " + "
      << elem_offset(a) << ");\n";
  os_ << "#pragma unroll\n" << in << "  for (int k = 0; k < kVec; ++k) " << dst << "[k] = ff_load(v.v[k]);\n";
  os_ << in << "} else {\n#pragma unroll\n"
      << in << "  for (int k = 0; k < kVec; ++k) " << dst << "[k] = " << load_expr(a, elem_offset(a) + " + k") << ";\n"
      << in << "}\n";
}

void ReductionKernel::vector_store(const ReductionAccess& a, const std::string& in) {
  const std::string st = cuda_storage_type(a.dtype), vec = storage_vector(a);
  os_ << in << "if (aligned) {\n" << in << "  " << vec << " v;\n";
  os_ << "#pragma unroll\n"
      << in << "  for (int k = 0; k < kVec; ++k) v.v[k] = ff_store<" << st << ">(y_" << a.param << "[k]);\n";
  os_ << in << "  *reinterpret_cast<" << vec << "*>(" << a.param << " + " << elem_offset(a) << ") = v;\n";
  os_ << in << "} else {\n#pragma unroll\n"
      << in << "  for (int k = 0; k < kVec; ++k) " << a.param << "[" << elem_offset(a) << " + k] = ff_store<" << st
      << ">(y_" << a.param << "[k]);\n"
      << in << "}\n";
}

void ReductionKernel::pass(int p, ExprMap& expr_of) {
  std::ostringstream& os = os_;
  const bool reduce = p <= w_.d.levels;
  os << "  // ---- pass " << p << ": " << (reduce ? "reduce" : "apply the row values") << "\n";
  if (reduce) w_.declare_accumulators(os, p, "  ", accumulators_);
  const auto& inputs = w_.element_inputs(p);
  const std::string x = "x" + std::to_string(p) + "_";  // this pass's registers
  std::string ind = "  ";
  if (!s_.persistent) {
    os << ind << stream_loop() << " {\n";
    ind += "  ";
  }
  // Loads first, for all items, so that their latencies overlap.
  std::vector<const ReductionAccess*> local;
  for (const ReductionAccess* a : inputs) {
    const bool cached = cached_.count(a) != 0;
    if (cached && loaded_.count(a)) continue;
    if (!cached)
      os << ind << cuda_compute_type(a->dtype) << " " << x << a->param << "[" << items_of(*a) << "]"
         << (per_lane(*a) ? "[kVec]" : "") << ";\n";
    local.push_back(a);
  }
  auto open_items = [&](bool with_e) {
    os << "#pragma unroll\n" << ind << "for (int u = 0; u < " << items_ << "; ++u) {\n";
    if (with_e || tail()) os << ind << "  const index_t e = " << element("u") << ";\n";
    std::string in = ind + "  ";
    if (tail()) {
      os << in << "if (e < kLength) {\n";
      in += "  ";
    }
    return in;
  };
  auto close_items = [&] {
    if (tail()) os << ind << "  }\n";
    os << ind << "}\n";
  };
  std::vector<const ReductionAccess*> varying, invariant;
  for (const ReductionAccess* a : local) (item_invariant(*a) ? invariant : varying).push_back(a);
  if (!invariant.empty()) {
    // Item 0's elements serve every item; its element index may pass the
    // row's end, but these offsets only take it modulo the inner dims.
    os << ind << "{  // the same elements for every item\n";
    os << ind << "  const index_t e = " << element("0") << ";\n";
    emit_unravel(os, ind + "  ", "e", l_.reduced, "e");
    for (const ReductionAccess* a : invariant) load(*a, (cached_.count(a) ? "c_" : x) + a->param + "[0]", ind + "  ");
    os << ind << "}\n";
  }
  if (!varying.empty()) {
    const std::string in = open_items(true);
    emit_unravel(os, in, "e", l_.reduced, "e");
    bool shared = false;
    for (const ReductionAccess* a : varying) {
      if (!in_shared(*a)) {
        load(*a, (cached_.count(a) ? "c_" : x) + a->param + "[u]", in);
        continue;
      }
      shared = true;
      os << in << "if (u < kRegItems) {\n";
      load(*a, "c_" + a->param + "[u]", in + "  ");
      os << in << "} else {\n";
      shared_load(*a, in + "  ");
      os << in << "}\n";
    }
    close_items();
    if (shared) os << ind << "ff_cp_async_wait_all();  // this thread's copies, which only it reads\n";
  }
  for (const ReductionAccess* a : local)
    if (cached_.count(a)) loaded_.insert(a);
  // Then the arithmetic, element by element.
  auto registers = [&] {
    ExprMap local_expr = expr_of;
    for (const ReductionAccess* a : inputs)
      local_expr[a->value] =
          cached_.count(a) ? cached_value(*a) : x + a->param + item(*a) + (per_lane(*a) ? "[k]" : "");
    return local_expr;
  };
  const bool chunked = reduce && w_.chunked(p);
  if (chunked) {  // a sweep over the chunk first: its max, or its mean
    w_.emit_chunk_begin(os, p, ind, accumulators_);
    const std::string in = open_items(false);
    os << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) {\n";
    ExprMap local_expr = registers();
    w_.emit_sees(os, p, in + "  ", local_expr, chunk_slot());
    os << in << "}\n";
    close_items();
    before_rebase(p);
    w_.emit_rebase(os, p, ind, chunk_slot());
  }
  const auto& outs = w_.element_outputs(p);
  bool indexed = false;
  for (const auto& a : w_.accs) indexed |= a.level == p && a.indexed();
  const std::string in = open_items(!outs.empty() || indexed);
  if (!outs.empty()) emit_unravel(os, in, "e", l_.reduced, "e");
  for (const ReductionAccess* a : outs) os << in << cuda_compute_type(a->dtype) << " y_" << a->param << "[kVec];\n";
  os << "#pragma unroll\n" << in << "for (int k = 0; k < kVec; ++k) {\n";
  ExprMap local_expr = registers();
  w_.emit_element(os, p, in + "  ", local_expr, slot(), chunk_slot(), index());
  for (const ReductionAccess* a : outs) os << in << "  y_" << a->param << "[k] = " << local_expr.at(a->value) << ";\n";
  os << in << "}\n";
  // Only the tensor's rows are written. A thread past the end stands in for
  // the last row (column) in the merges, and may read it after that row's
  // own thread wrote an output over it (a backward plan's Kernel::over).
  if (!outs.empty()) os << in << "if (" << valid() << ") {\n";
  for (const ReductionAccess* a : outs) store(*a, in + "  ");
  if (!outs.empty()) os << in << "}\n";
  close_items();
  if (chunked) w_.emit_chunk_end(os, p, ind, chunk_slot());
  if (!s_.persistent) os << "  }\n";
  if (reduce) merge(p, expr_of);
}

}  // namespace ff::codegen
