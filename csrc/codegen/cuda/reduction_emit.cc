#include "codegen/cuda/reduction_emit.h"

#include <algorithm>
#include <set>

#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/op_expr.h"
#include "codegen/cuda/prelude.h"
#include "codegen/cuda/reduction_prelude.h"

namespace ff::codegen {

namespace {

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

std::string rounded(const std::string& e, DType t) {
  if (t == DType::f16) return "ff_round_f16(" + e + ")";
  if (t == DType::bf16) return "ff_round_bf16(" + e + ")";
  return e;
}

std::string kernel_name(const fusion::Group& g, const fusion::ReductionDomain& d, int id) {
  std::vector<std::string> ops;
  for (const Node* r : d.reductions) ops.emplace_back(op_name(r->op));
  for (const Node* n : g.nodes)
    if (op_kind(n->op) == OpKind::Pointwise) ops.emplace_back(op_name(n->op));
  std::string name = "ff_reduce";
  std::set<std::string> seen;
  for (const auto& op : ops) {
    if (!seen.insert(op).second) continue;
    if (seen.size() > 5) {
      name += "_etc";
      break;
    }
    name += "_" + op;
  }
  return name + "_" + std::to_string(id);
}

}  // namespace

std::string load_expr(const ReductionAccess& a, const std::string& offset) {
  return "ff_load(" + a.param + "[" + offset + "])";
}

void emit_unravel(std::ostringstream& os, const std::string& ind, const std::string& index, const Shape& sizes,
                  const std::string& name) {
  if (sizes.size() == 1) {
    os << ind << "const index_t " << name << "0 = " << index << ";\n";
    return;
  }
  os << ind << "index_t " << name << "_rest = " << index << ";\n";
  for (size_t d = sizes.size(); d-- > 1;)
    os << ind << "const index_t " << name << d << " = " << name << "_rest % " << sizes[d] << "; " << name
       << "_rest /= " << sizes[d] << ";\n";
  os << ind << "const index_t " << name << "0 = " << name << "_rest;\n";
}

std::string offset_expr(const std::string& name, const Shape& strides) {
  std::string e;
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] == 0) continue;
    e += (e.empty() ? "" : " + ") + name + std::to_string(d) +
         (strides[d] == 1 ? "" : " * " + std::to_string(strides[d]));
  }
  return e.empty() ? "0" : e;
}

ReductionWriter::ReductionWriter(const fusion::Group& g, const fusion::ReductionDomain& d, const ReductionLayout& l,
                                 const ReductionStrategy& s, int id, int lanes)
    : g(g), d(d), l(l), s(s), lanes_(lanes) {
  ks.name = kernel_name(g, d, id);
  for (const auto& a : l.access) (a.is_output ? ks.outputs : ks.inputs).push_back(a.value->name);
  for (const Value* v : l.scalars) {
    ks.scalars.push_back(v->name);
    scalars_.insert(v);
  }
  ks.vector_width = s.vector;
  ks.unroll = 1;
  plan_accumulators();
  plan_passes();
}

void ReductionWriter::plan_accumulators() {
  using K = Accumulator::Kind;
  std::set<const Value*> welford, argmax, argmin;
  for (const Node* r : d.reductions) {
    if (r->op == Op::Var || r->op == Op::LayerNorm) welford.insert(r->input(0));
    if (r->op == Op::Argmax) argmax.insert(r->input(0));
    if (r->op == Op::Argmin) argmin.insert(r->input(0));
  }
  for (const Node* r : d.reductions) {
    const Value* x = r->input(0);
    K kind = K::Sum;
    switch (r->op) {
      case Op::Sum:
        kind = K::Sum;
        break;
      case Op::Mean:
        kind = welford.count(x) ? K::Welford : K::Sum;
        break;
      case Op::Var:
      case Op::LayerNorm:
        kind = K::Welford;
        break;
      case Op::Prod:
        kind = K::Prod;
        break;
      case Op::Amax:
        kind = argmax.count(x) ? K::ArgMax : K::Max;
        break;
      case Op::Amin:
        kind = argmin.count(x) ? K::ArgMin : K::Min;
        break;
      case Op::Argmax:
        kind = K::ArgMax;
        break;
      case Op::Argmin:
        kind = K::ArgMin;
        break;
      case Op::Any:
        kind = K::Any;
        break;
      default:
        kind = K::MaxSumExp;
        break;  // softmax, log_softmax, logsumexp
    }
    int found = -1;
    for (size_t i = 0; i < accs.size(); ++i)
      if (accs[i].kind == kind && accs[i].input == x) found = static_cast<int>(i);
    if (found < 0) {
      const std::string t = cuda_compute_type(x->type.dtype);
      static const char* names[] = {"ff_sum",     "ff_prod",   "ff_max",    "ff_min",      "ff_any",
                                    "ff_welford", "ff_argmax", "ff_argmin", "ff_maxsumexp"};
      std::string type = names[static_cast<int>(kind)];
      if (kind == K::ArgMax || kind == K::ArgMin)
        type += "<" + t + ", " + index_type() + ">";
      else if (kind != K::Any)
        type += "<" + t + ">";
      found = static_cast<int>(accs.size());
      accs.push_back({kind, x, d.level.at(r), "a" + std::to_string(found), type});
    }
    acc_of_[r] = found;
  }
}

void ReductionWriter::plan_passes() {
  const int levels = d.levels;
  std::unordered_map<int, std::vector<const Value*>> targets;
  for (const Node* r : d.reductions) targets[d.level.at(r)].push_back(r->input(0));
  bool apply = false;
  for (const auto& a : l.access) {
    if (!a.is_output || a.per_row) continue;
    int pass = d.row_level(a.value) + 1;
    if (pass > levels) pass = levels + 1, apply = true;
    targets[pass].push_back(a.value);
    element_outputs_[pass].push_back(&a);
  }
  passes_ = levels + (apply ? 1 : 0);
  std::unordered_map<const Node*, size_t> order;
  for (size_t i = 0; i < g.nodes.size(); ++i) order[g.nodes[i]] = i;
  for (int p = 1; p <= passes_; ++p) {
    std::set<const Node*> in_pass;
    std::set<const ReductionAccess*> inputs;
    std::vector<const Value*> stack = targets[p];
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (d.per_row.count(v)) continue;
      if (!v->producer || !order.count(v->producer)) {
        // Per-row inputs (a conv bias beside per-channel statistics) are
        // loaded once per row (emit_row_inputs), not per element.
        if (const ReductionAccess* a = l.find(v); a && !a->per_row) inputs.insert(a);
        continue;
      }
      if (!in_pass.insert(v->producer).second) continue;
      for (auto& o : v->producer->operands)
        if (o.is_value()) stack.push_back(o.value);
    }
    auto& nodes = element_nodes_[p];
    for (Node* n : g.nodes)
      if (in_pass.count(n)) nodes.push_back(n);
    auto& element_inputs = element_inputs_[p];  // none where every input is per-row
    for (const auto& a : l.access)
      if (inputs.count(&a)) element_inputs.push_back(&a);
    element_outputs_[p];
  }
  for (const auto& a : l.access)
    if (!a.is_output && a.per_row) row_inputs_.push_back(&a);
}

bool ReductionWriter::read_again(const ReductionAccess* a) const {
  int n = 0;
  for (int p = 1; p <= passes_; ++p) {
    const auto& in = element_inputs_.at(p);
    n += std::find(in.begin(), in.end(), a) != in.end();
  }
  return n > 1;
}

std::vector<const ReductionAccess*> ReductionWriter::row_outputs() const {
  std::vector<const ReductionAccess*> out;
  for (const auto& a : l.access)
    if (a.is_output && a.per_row) out.push_back(&a);
  return out;
}

int ReductionWriter::accumulator_words() const {
  int w = 0;
  for (const auto& a : accs) {
    switch (a.kind) {
      case Accumulator::Kind::Welford:
        w += 3;
        break;
      case Accumulator::Kind::ArgMax:
      case Accumulator::Kind::ArgMin:
        w += index_type() == "int" ? 2 : 3;
        break;
      case Accumulator::Kind::MaxSumExp:
        w += 2;
        break;
      default:
        w += 1;
    }
  }
  return w;
}

std::string ReductionWriter::index_type() const {
  const int64_t reach = std::max({l.max_offset(), l.rows, l.length}) + 64LL * 1024 * 16;
  return reach >= (int64_t{1} << 31) ? "long long" : "int";
}

void ReductionWriter::head(std::ostringstream& os, const std::string& form) const {
  std::string shape, reduced;
  for (size_t i = 0; i < d.shape.size(); ++i) {
    shape += (i ? "," : "") + std::to_string(d.shape[i]);
    if (d.reduced[i]) reduced += (reduced.empty() ? "" : ",") + std::to_string(i);
  }
  os << "// Generated by fuseforge: reduction group over [" << shape << "], dims [" << reduced << "] reduced ("
     << l.rows << " rows of " << l.length << "), " << d.levels << " reduction pass(es)"
     << (passes_ > d.levels ? " and an apply pass" : "") << "; " << form << "\n";
  for (const Node* n : g.nodes) os << "//   " << print_node(*n) << "\n";
  bool half = false;
  for (const auto& a : l.access) half |= is_16bit(a.dtype);
  for (const Node* n : g.nodes) half |= is_16bit(n->result()->type.dtype);
  os << cuda_prelude();
  if (half) os << cuda_half_prelude();
  os << cuda_reduction_prelude();
  // Inputs partly in shared memory are there for two blocks per SM: registers
  // for two (else the compiler keeps the shared-memory items in registers too).
  os << "\nFF_EXTERN_C __global__ void __launch_bounds__(" << s.block << (s.shared_items > 0 ? ", 2" : "") << ") "
     << ks.name << "(";
  for (size_t t = 0; t < l.access.size(); ++t) {
    const auto& a = l.access[t];
    os << (t ? ", " : "") << (a.is_output ? "" : "const ") << cuda_storage_type(a.dtype) << "* __restrict__ "
       << a.param;
  }
  for (size_t i = 0; i < l.scalars.size(); ++i) os << (l.access.empty() && i == 0 ? "" : ", ") << "double s" << i;
  os << ") {\n";
}

void ReductionWriter::bind_scalars(ExprMap& expr_of) const {
  for (size_t i = 0; i < l.scalars.size(); ++i) expr_of[l.scalars[i]] = "s" + std::to_string(i);
}

std::string ReductionWriter::normalization_expr(const Node& n, const ExprMap& expr_of) const {
  const DType c = compute_dtype(n.result()->type.dtype);
  const std::string t = cuda_compute_type(n.result()->type.dtype);
  const std::string x = expr_of.at(n.input(0));
  const auto& st = stats_.at(&n);
  std::string e;
  if (n.op == Op::Softmax)
    e = "ff_div_rcp(ff_exp(" + x + " - " + st[0] + "), " + st[1] + ", " + st[2] + ")";
  else if (n.op == Op::LogSoftmax)
    e = x + " - " + st[0] + " - " + st[1];
  else {
    auto affine = [&](size_t i) {
      const Operand& o = n.operands[i];
      if (!o.is_value()) return cuda_literal(o.literal, c);
      const std::string& w = expr_of.at(o.value);
      return compute_dtype(o.value->type.dtype) == c ? w : "static_cast<" + t + ">(" + w + ")";
    };
    e = "(" + x + " - " + st[0] + ") * " + st[1] + " * " + affine(1) + " + " + affine(2);
  }
  return rounded(e, n.result()->type.dtype);
}

void ReductionWriter::emit_values(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of) {
  std::vector<Node*> chunk;
  auto flush = [&] {
    if (!chunk.empty()) emit_pointwise_nodes(os, chunk, ind, scalars_, expr_of, tmp_, "t");
    chunk.clear();
  };
  for (Node* n : element_nodes(pass)) {
    if (op_kind(n->op) == OpKind::Pointwise) {
      chunk.push_back(n);
      continue;
    }
    flush();
    if (op_kind(n->op) == OpKind::Layout) {
      expr_of[n->result()] = expr_of.at(n->input(0));
      continue;
    }
    const std::string t = "t" + std::to_string(tmp_++);
    os << ind << "const " << cuda_compute_type(n->result()->type.dtype) << " " << t << " = "
       << normalization_expr(*n, expr_of) << ";  // " << op_name(n->op) << "\n";
    expr_of[n->result()] = t;
  }
  flush();
}

namespace {
bool takes_chunks(const Accumulator& a) {
  return a.kind == Accumulator::Kind::MaxSumExp || a.kind == Accumulator::Kind::Welford;
}
}  // namespace

bool ReductionWriter::chunked(int pass) const {
  for (const auto& a : accs)
    if (a.level == pass && takes_chunks(a)) return true;
  return false;
}

void ReductionWriter::emit_chunk_begin(std::ostringstream& os, int pass, const std::string& ind, int slots) const {
  for (const auto& a : accs) {
    if (a.level != pass) continue;
    const std::string t = cuda_compute_type(a.input->type.dtype);
    if (a.kind == Accumulator::Kind::MaxSumExp)
      os << ind << t << " next_" << a.name << "[" << slots << "];  // " << a.name
         << "'s max with this chunk's\n#pragma unroll\n"
         << ind << "for (int i = 0; i < " << slots << "; ++i) next_" << a.name << "[i] = " << a.name << "[i].m;\n";
    if (a.kind == Accumulator::Kind::Welford)
      os << ind << t << " sum_" << a.name << "[" << slots << "] = {}, n_" << a.name << "[" << slots
         << "] = {};  // the chunk's sum and count, for its mean\n"
         << ind << a.type << " chunk_" << a.name << "[" << slots << "];  // its count, mean and squared deviations\n";
  }
}

void ReductionWriter::emit_sees(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of,
                                const std::string& chunk_slot) {
  emit_values(os, pass, ind, expr_of);
  for (const auto& a : accs) {
    if (a.level != pass) continue;
    const std::string x = expr_of.at(a.input), at = a.name + "[" + chunk_slot + "]";
    if (a.kind == Accumulator::Kind::MaxSumExp)
      os << ind << "next_" << at << " = ff_max_nan(next_" << at << ", " << x << ");\n";
    if (a.kind == Accumulator::Kind::Welford)
      os << ind << "sum_" << at << " += " << x << ";\n" << ind << "n_" << at << " += 1;\n";
  }
}

void ReductionWriter::emit_rebase(std::ostringstream& os, int pass, const std::string& ind,
                                  const std::string& chunk_slot) const {
  for (const auto& a : accs) {
    if (a.level != pass || !takes_chunks(a)) continue;
    const std::string at = a.name + "[" + chunk_slot + "]";
    os << "#pragma unroll\n" << ind << "for (int k = 0; k < kVec; ++k) ";
    if (a.kind == Accumulator::Kind::MaxSumExp)
      os << at << ".rebase(next_" << at << ");\n";
    else
      os << "chunk_" << at << " = " << a.type << "::of_chunk(n_" << at << ", sum_" << at << ");\n";
  }
}

void ReductionWriter::emit_chunk_end(std::ostringstream& os, int pass, const std::string& ind,
                                     const std::string& chunk_slot) const {
  for (const auto& a : accs)
    if (a.level == pass && a.kind == Accumulator::Kind::Welford)
      os << "#pragma unroll\n"
         << ind << "for (int k = 0; k < kVec; ++k) " << a.name << "[" << chunk_slot << "].merge(chunk_" << a.name << "["
         << chunk_slot << "]);\n";
}

void ReductionWriter::emit_element(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of,
                                   const std::string& slot, const std::string& chunk_slot, const std::string& index) {
  emit_values(os, pass, ind, expr_of);
  for (const auto& a : accs) {
    if (a.level != pass) continue;
    std::string x = expr_of.at(a.input);
    if (a.kind == Accumulator::Kind::Any && a.input->type.dtype != DType::boolean) x = "(" + x + " != 0)";
    if (a.kind == Accumulator::Kind::Welford) {  // the deviation from its chunk's mean
      os << ind << "chunk_" << a.name << "[" << chunk_slot << "].push_deviation(" << x << ");\n";
      continue;
    }
    os << ind << a.name << "[" << (a.kind == Accumulator::Kind::MaxSumExp ? chunk_slot : slot) << "].push(" << x
       << (a.indexed() ? ", static_cast<" + index_type() + ">(" + index + ")" : "") << ");\n";
  }
}

void ReductionWriter::declare_accumulators(std::ostringstream& os, int pass, const std::string& ind, int slots) const {
  for (size_t i = 0; i < accs.size(); ++i) {
    const Accumulator& a = accs[i];
    if (a.level != pass) continue;
    std::string what;
    for (const Node* r : d.reductions)
      if (acc_of_.at(r) == static_cast<int>(i))
        what += (what.empty() ? "" : ", ") + std::string(op_name(r->op)) + " %" + r->result()->name;
    os << ind << a.type << " " << a.name << "[" << slots << "];  // " << what << " of %" << a.input->name << "\n";
    os << "#pragma unroll\n"
       << ind << "for (int i = 0; i < " << slots << "; ++i) " << a.name << "[i] = " << a.type << "::identity();\n";
  }
}

std::string ReductionWriter::finalize_expr(const Node& n, const std::string& a) const {
  const Accumulator& acc = accs[acc_of_.at(&n)];
  const DType x = n.input(0)->type.dtype;
  const std::string len = cuda_literal(Scalar::of_float(static_cast<double>(l.length)), x);
  const bool arg = acc.kind == Accumulator::Kind::ArgMax || acc.kind == Accumulator::Kind::ArgMin;
  switch (n.op) {
    case Op::Sum:
      return a + ".s";
    case Op::Mean:
      return acc.kind == Accumulator::Kind::Welford ? a + ".mean" : a + ".s / " + len;
    case Op::Prod:
      return a + ".p";
    case Op::Amax:
    case Op::Amin:
      return a + (arg ? ".v" : ".m");
    case Op::Any:
      return a + ".a";
    case Op::Argmax:
    case Op::Argmin:
      return a + ".i";
    case Op::Logsumexp:
      return a + ".logsumexp()";
    case Op::Var: {
      const int64_t dof = std::max<int64_t>(0, l.length - n.attr_int_or("correction", 1));
      return a + ".m2 / " + cuda_literal(Scalar::of_float(static_cast<double>(dof)), x);
    }
    default:
      break;
  }
  throw IRError("reduction codegen: no result for '" + std::string(op_name(n.op)) + "'");
}

void ReductionWriter::emit_row_values(std::ostringstream& os, int level, const std::string& ind, ExprMap& expr_of,
                                      const std::function<std::string(const Accumulator&)>& acc) {
  // Stats of normalizations are declared as arrays up front when each lane has its own.
  std::vector<std::pair<std::string, std::string>> stat_arrays;  // (type, temp)
  std::unordered_set<const Node*> block;                         // nodes this block computes
  std::vector<std::pair<const Value*, const Value*>> aliases;    // (reshape result, what it reshapes)
  auto body = [&](std::ostringstream& o, const std::string& in,
                  std::vector<std::pair<const Value*, std::string>>& produced) {
    auto row_temp = [&](const std::string& type, const std::string& e, const std::string& comment) {
      const std::string t = "r" + std::to_string(tmp_++);
      o << in << "const " << type << " " << t << " = " << e << ";  // " << comment << "\n";
      return t;
    };
    for (const Node* r : d.reductions) {
      if (d.level.at(r) != level) continue;
      const std::string a = acc(accs[acc_of_.at(r)]);
      const std::string c = cuda_compute_type(r->input(0)->type.dtype);
      std::vector<std::string> stats;
      if (r->op == Op::Softmax || r->op == Op::LogSoftmax) {
        stats.push_back(row_temp(c, a + ".m", "row max"));
        stats.push_back(row_temp(c, r->op == Op::Softmax ? a + ".sum()" : "ff_log(" + a + ".sum())",
                                 r->op == Op::Softmax ? "sum of exp(x - max)" : "log of the sum of exp(x - max)"));
        // Softmax divides by the sum through its reciprocal (ff_div_rcp): a
        // division per element is about eight instructions, and a 4096x32768
        // softmax is bound by them (with ff_max_nan: 0.378 -> 0.334 ms on an H200).
        if (r->op == Op::Softmax) stats.push_back(row_temp(c, c + "(1) / " + stats[1], "its reciprocal"));
      } else if (r->op == Op::LayerNorm) {
        const std::string eps = cuda_literal(Scalar::of_float(r->attr_float("eps")), r->input(0)->type.dtype);
        const std::string len = cuda_literal(Scalar::of_float(static_cast<double>(l.length)), r->input(0)->type.dtype);
        stats.push_back(row_temp(c, a + ".mean", "mean"));
        stats.push_back(row_temp(c, "ff_rsqrt(" + a + ".m2 / " + len + " + " + eps + ")", "rstd"));
      } else {
        const std::string t =
            row_temp(cuda_compute_type(r->result()->type.dtype), rounded(finalize_expr(*r, a), r->result()->type.dtype),
                     std::string(op_name(r->op)) + " %" + r->result()->name);
        expr_of[r->result()] = t;
        produced.push_back({r->result(), t});
        block.insert(r);
        continue;
      }
      stats_[r] = stats;
      for (const auto& st : stats) {
        stat_arrays.push_back({c, st});
        produced.push_back({nullptr, st});
      }
    }
    // The per-row nodes whose operands are now known, in group order.
    std::vector<Node*> chunk;
    auto flush = [&] {
      if (chunk.empty()) return;
      emit_pointwise_nodes(o, chunk, in, scalars_, expr_of, tmp_, "r");
      for (Node* n : chunk) produced.push_back({n->result(), expr_of.at(n->result())});
      chunk.clear();
    };
    for (Node* n : g.nodes) {
      const Value* v = n->result();
      if (!d.per_row.count(v) || fusion::is_kernel_reduction(*n) || row_done_.count(n) || d.row_level(v) > level)
        continue;
      row_done_.insert(n);
      block.insert(n);
      if (op_kind(n->op) == OpKind::Layout) {
        flush();
        expr_of[v] = expr_of.at(n->input(0));
        aliases.push_back({v, n->input(0)});
        continue;
      }
      chunk.push_back(n);
    }
    flush();
  };
  std::vector<std::pair<const Value*, std::string>> produced;  // (value, or null for a statistic; its temporary)
  if (lanes_ == 1) {
    body(os, ind, produced);
    return;
  }
  // Each lane's row values: arrays filled in a loop over the lanes, for the
  // values read after it (statistics, outputs, and what other nodes read).
  std::ostringstream inner;
  body(inner, ind + "  ", produced);
  std::function<bool(const Value*)> read_later = [&](const Value* v) {
    if (!v || std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return true;
    for (const Node* u : g.nodes)
      for (auto& o : u->operands)
        if (o.value == v && !block.count(u)) return true;
    for (auto& [a, src] : aliases)
      if (src == v && read_later(a)) return true;
    return false;
  };
  produced.erase(std::remove_if(produced.begin(), produced.end(), [&](auto& p) { return !read_later(p.first); }),
                 produced.end());
  if (produced.empty()) return;  // nothing computed here is read after the loop
  std::vector<std::string> arrays;
  for (auto& [v, temp] : produced) {
    std::string type;
    if (v) type = cuda_compute_type(v->type.dtype);
    for (auto& [t, name] : stat_arrays)
      if (name == temp) type = t;
    arrays.push_back(temp + "v");
    os << ind << type << " " << arrays.back() << "[" << lanes_ << "];\n";
  }
  os << "#pragma unroll\n" << ind << "for (int k = 0; k < " << lanes_ << "; ++k) {\n" << inner.str();
  for (size_t i = 0; i < produced.size(); ++i)
    os << ind << "  " << arrays[i] << "[k] = " << produced[i].second << ";\n";
  os << ind << "}\n";
  for (size_t i = 0; i < produced.size(); ++i) {
    if (produced[i].first) expr_of[produced[i].first] = arrays[i] + "[k]";
    for (auto& [n, names] : stats_)
      for (auto& name : names)
        if (name == produced[i].second) name = arrays[i] + "[k]";
  }
  for (auto& [a, src] : aliases) expr_of[a] = expr_of.at(src);
}

void ReductionWriter::emit_row_inputs(std::ostringstream& os, const std::string& ind, ExprMap& expr_of,
                                      const std::function<std::string(const ReductionAccess&)>& offset) {
  std::ostringstream inner;
  const std::string in = lanes_ == 1 ? ind : ind + "  ";
  std::vector<std::string> temps;
  for (const ReductionAccess* a : row_inputs_) {
    const std::string t = "r" + std::to_string(tmp_++);
    inner << in << "const " << cuda_compute_type(a->dtype) << " " << t << " = " << load_expr(*a, offset(*a))
          << ";  // %" << a->value->name << "\n";
    temps.push_back(t);
    expr_of[a->value] = t;
  }
  if (lanes_ == 1 || row_inputs_.empty()) {
    os << inner.str();
  } else {
    for (size_t i = 0; i < row_inputs_.size(); ++i)
      os << ind << cuda_compute_type(row_inputs_[i]->dtype) << " " << temps[i] << "v[" << lanes_ << "];\n";
    os << "#pragma unroll\n" << ind << "for (int k = 0; k < " << lanes_ << "; ++k) {\n" << inner.str();
    for (const auto& t : temps) os << in << t << "v[k] = " << t << ";\n";
    os << ind << "}\n";
    for (size_t i = 0; i < row_inputs_.size(); ++i) expr_of[row_inputs_[i]->value] = temps[i] + "v[k]";
  }
  emit_row_values(os, 0, ind, expr_of, [](const Accumulator&) { return std::string(); });
}

}  // namespace ff::codegen
