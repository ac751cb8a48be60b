#include "kernel/reduction_domain.h"

#include <algorithm>

namespace ff::fusion {

namespace {

using DimMap = std::vector<int>;

struct Failure {
  std::string why;
};

[[noreturn]] void fail(const Node& n, const std::string& why) { throw Failure{"%" + n.result()->name + ": " + why}; }

// The map of a value of `shape` broadcast right-aligned to the domain.
std::optional<DimMap> right_aligned(const Shape& shape, const Shape& domain) {
  if (!broadcasts_to(shape, domain)) return std::nullopt;
  DimMap m(shape.size(), -1);
  const size_t off = domain.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) m[i] = static_cast<int>(off + i);
  return m;
}

class Analysis {
 public:
  Analysis(const std::vector<Node*>& nodes) : nodes_(nodes) {
    for (Node* n : nodes) members_.insert(n);
  }

  ReductionDomain run() {
    const Node* first = nullptr;
    for (Node* n : nodes_)
      if (is_kernel_reduction(*n)) {
        first = n;
        break;
      }
    if (!first) throw Failure{"no reduction"};
    d_.shape = first->input(0)->type.shape;
    d_.reduced = reduced_mask(*first);
    for (size_t i = 0; i < d_.shape.size(); ++i) identity_.push_back(d_.shape[i] == 1 ? -1 : static_cast<int>(i));
    for (Node* n : nodes_)
      if (!is_kernel_reduction(*n) && op_kind(n->op) != OpKind::Pointwise && n->op != Op::View &&
          n->op != Op::Squeeze && n->op != Op::Unsqueeze)
        fail(*n, std::string(op_name(n->op)) + " cannot be part of a reduction kernel");
    // Nodes are mapped once what they read is (in group order where it is);
    // a node that reads only group inputs takes its map from a node that
    // reads its result, and only failing that the domain's, right-aligned.
    std::vector<Node*> pending = nodes_;
    while (!pending.empty()) {
      bool progress = false;
      for (bool guess : {false, true}) {
        for (auto it = pending.begin(); it != pending.end(); ++it)
          if (map_node(**it, guess)) {
            pending.erase(it);
            progress = true;
            break;
          }
        if (progress) break;
      }
      if (!progress) fail(*pending.front(), "its dims do not line up with the domain");
    }
    levels();
    return std::move(d_);
  }

 private:
  const std::vector<Node*>& nodes_;
  std::unordered_set<const Node*> members_;
  ReductionDomain d_;
  DimMap identity_;

  bool in_group(const Value* v) const { return v->producer && members_.count(v->producer); }
  bool runs_along_reduced(const DimMap& m) const {
    for (int d : m)
      if (d >= 0 && d_.reduced[d]) return true;
    return false;
  }

  // Records `m` for `v`, or checks it against the map recorded before.
  void assign(const Node& n, const Value* v, const DimMap& m) {
    auto [it, fresh] = d_.dims.emplace(v, m);
    if (!fresh && it->second != m) fail(n, "operand %" + v->name + " is read along other dims elsewhere in the group");
  }

  // The map an operand of shape `os` has under the IR's right-aligned
  // broadcasting to a result mapped by `rm`.
  static DimMap operand_map(const Shape& os, const Shape& rs, const DimMap& rm) {
    DimMap m(os.size(), -1);
    const size_t off = rs.size() - os.size();
    for (size_t i = 0; i < os.size(); ++i)
      if (os[i] != 1) m[i] = rm[off + i];
    return m;
  }

  bool mapped(const Value* v) const { return d_.dims.count(v) != 0; }

  // Maps `n` if it can be now; `guess`: a node reading only group inputs
  // that no mapped node reads takes the domain's dims, right-aligned.
  bool map_node(const Node& n, bool guess) {
    for (auto& o : n.operands)
      if (o.is_value() && in_group(o.value) && !mapped(o.value)) return false;
    if (is_kernel_reduction(n)) {
      reduction(n);
      return true;
    }
    if (op_kind(n.op) == OpKind::Layout) {
      reshape(n);
      return true;
    }
    bool known = false;
    for (auto& o : n.operands) known |= o.is_value() && mapped(o.value);
    const Shape& rs = n.result()->type.shape;
    if (known || std::all_of(rs.begin(), rs.end(), [](int64_t e) { return e == 1; })) {
      pointwise(n, std::nullopt);
      return true;
    }
    if (auto m = map_from_users(n)) {
      pointwise(n, m);
      return true;
    }
    if (!guess) return false;
    pointwise(n, std::nullopt);
    return true;
  }

  // The map that a mapped node reading `n`'s result implies for it.
  std::optional<DimMap> map_from_users(const Node& n) const {
    const Value* r = n.result();
    for (const Node* u : nodes_) {
      if (u == &n) continue;
      // An unmapped user's dims from its mapped operands (the per-row
      // statistic beside a running average it updates).
      std::optional<DimMap> um;
      if (mapped(u->result()))
        um = d_.dims.at(u->result());
      else if (op_kind(u->op) == OpKind::Pointwise)
        um = per_row_map(*u);
      if (!um) continue;
      for (size_t i = 0; i < u->operands.size(); ++i) {
        if (u->operands[i].value != r) continue;
        if (op_kind(u->op) == OpKind::Pointwise) return operand_map(r->type.shape, u->result()->type.shape, *um);
        if (is_kernel_reduction(*u))
          return i == 0 ? std::optional<DimMap>(identity_) : right_aligned(r->type.shape, d_.shape);
      }
    }
    return std::nullopt;
  }

  void reduction(const Node& n) {
    const Value* x = n.input(0);
    if (x->type.shape != d_.shape || reduced_mask(n) != d_.reduced) fail(n, "reduces another domain");
    if (in_group(x) && (d_.per_row.count(x) || d_.dims.at(x) != identity_)) fail(n, "input does not span the domain");
    assign(n, x, identity_);
    if (n.op == Op::LayerNorm)
      for (size_t i = 1; i < 3; ++i)
        if (const Value* w = n.input(i)) {
          auto m = right_aligned(w->type.shape, d_.shape);
          if (!m || (in_group(w) && d_.dims.at(w) != *m)) fail(n, "weight or bias does not line up with the domain");
          assign(n, w, *m);
        }
    const Value* r = n.result();
    if (is_normalization(n.op)) {
      d_.dims[r] = identity_;
      return;
    }
    const bool keepdim = n.attr_bool_or("keepdim", false);
    DimMap m;
    for (size_t i = 0; i < d_.shape.size(); ++i)
      if (!d_.reduced[i])
        m.push_back(identity_[i]);
      else if (keepdim)
        m.push_back(-1);
    if (m.size() != r->type.shape.size()) fail(n, "result rank does not match its reduced dims");
    d_.dims[r] = m;
    d_.per_row.insert(r);
  }

  // Per-row when no operand varies along the reduced dims; its dims are `m`
  // if given, else those of the operands they line up with (a non-keepdim
  // reduction result keeps its own), else the domain's, right-aligned.
  // Per-element nodes have a shape that broadcasts to the domain. Group
  // inputs take the map that the node's broadcasting gives them.
  void pointwise(const Node& n, std::optional<DimMap> m) {
    const Value* r = n.result();
    const Shape& rs = r->type.shape;
    bool reads_full = false;
    for (auto& o : n.operands)
      if (o.is_value() && d_.dims.count(o.value) && !d_.per_row.count(o.value) &&
          (in_group(o.value) || runs_along_reduced(d_.dims.at(o.value))))
        reads_full = true;
    if (!m && !reads_full) m = per_row_map(n);
    if (!m) m = right_aligned(rs, d_.shape);
    if (!m) fail(n, "shape does not broadcast to the domain");
    const bool row = !reads_full && !runs_along_reduced(*m);
    for (auto& o : n.operands)
      if (o.is_value()) assign(n, o.value, operand_map(o.value->type.shape, rs, *m));
    d_.dims[r] = *m;
    if (row) d_.per_row.insert(r);
  }

  std::optional<DimMap> per_row_map(const Node& n) const {
    const Shape& rs = n.result()->type.shape;
    DimMap m(rs.size(), -1);
    for (size_t j = 0; j < rs.size(); ++j) {
      if (rs[j] == 1) continue;
      int found = -1;
      for (auto& o : n.operands) {
        if (!o.is_value() || !d_.dims.count(o.value)) continue;
        const Shape& os = o.value->type.shape;
        const int64_t i = static_cast<int64_t>(j) - static_cast<int64_t>(rs.size() - os.size());
        if (i < 0 || os[i] != rs[j]) continue;
        const int dim = d_.dims.at(o.value)[i];
        if (dim >= 0 && found >= 0 && dim != found) return std::nullopt;
        if (dim >= 0) found = dim;
      }
      if (found < 0 || d_.reduced[found] || std::count(m.begin(), m.end(), found)) return std::nullopt;
      m[j] = found;
    }
    return m;
  }

  // A view, squeeze or unsqueeze that only adds or drops size-1 dims: the
  // other dims keep their domain dims, in order.
  void reshape(const Node& n) {
    const Value* x = n.input(0);
    if (!in_group(x)) fail(n, "reshapes a value the group does not compute");
    const Shape &xs = x->type.shape, &rs = n.result()->type.shape;
    const DimMap& xm = d_.dims.at(x);
    DimMap m(rs.size(), -1);
    size_t i = 0;
    for (size_t j = 0; j < rs.size(); ++j) {
      if (rs[j] == 1) continue;
      while (i < xs.size() && xs[i] == 1) ++i;
      if (i == xs.size() || xs[i] != rs[j]) fail(n, "reshape moves elements between dims");
      m[j] = xm[i++];
    }
    while (i < xs.size() && xs[i] == 1) ++i;
    if (i != xs.size()) fail(n, "reshape moves elements between dims");
    d_.dims[n.result()] = m;
    if (d_.per_row.count(x)) d_.per_row.insert(n.result());
  }

  void levels() {
    for (Node* n : nodes_) {
      int in = 0;
      for (auto& o : n->operands)
        if (o.is_value() && d_.value_level.count(o.value)) in = std::max(in, d_.value_level.at(o.value));
      int lv = in;
      if (is_kernel_reduction(*n)) {
        lv = in + 1;
        d_.level[n] = lv;
        d_.reductions.push_back(n);
        d_.levels = std::max(d_.levels, lv);
      }
      d_.value_level[n->result()] = lv;
    }
  }
};

}  // namespace

bool is_normalization(Op op) { return op == Op::Softmax || op == Op::LogSoftmax || op == Op::LayerNorm; }

bool leaves_gpu_idle(int64_t blocks, int64_t elements, const Target& target) {
  constexpr int64_t kSmall = 1 << 20;  // elements: launch-bound either way
  return elements > kSmall && blocks * 4 < target.sm_count;
}

bool is_kernel_reduction(const Node& n) {
  switch (n.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::Prod:
    case Op::Amax:
    case Op::Amin:
    case Op::Var:
    case Op::Any:
    case Op::Argmax:
    case Op::Argmin:
    case Op::Logsumexp:
    case Op::Softmax:
    case Op::LogSoftmax:
    case Op::LayerNorm:
      break;
    default:
      return false;
  }
  const Value* x = n.input(0);
  if (!x || numel(x->type.shape) == 0) return false;
  const DType in = x->type.dtype, out = n.result()->type.dtype;
  if (n.op == Op::Any) return in == DType::boolean || is_floating(in);
  if (!is_floating(in)) return false;
  if (n.op == Op::Argmax || n.op == Op::Argmin) return out == DType::i64;
  if (n.op == Op::LayerNorm)
    for (size_t i = 1; i < 3; ++i)
      if (n.operands[i].is_value() && !is_floating(n.operands[i].value->type.dtype)) return false;
  return out == in;
}

std::vector<bool> reduced_mask(const Node& n) {
  const int64_t rank = static_cast<int64_t>(n.input(0)->type.shape.size());
  std::vector<bool> mask(rank, false);
  auto mark = [&](int64_t d) {
    if (rank > 0) mask[normalize_dim(d, rank)] = true;
  };
  switch (n.op) {
    case Op::Softmax:
    case Op::LogSoftmax:
      mark(n.attr_int("dim"));
      break;
    case Op::LayerNorm:
      for (int64_t d = rank - n.attr_int("ndims"); d < rank; ++d) mark(d);
      break;
    case Op::Argmax:
    case Op::Argmin:
      if (n.has_attr("dim"))
        mark(n.attr_int("dim"));
      else
        mask.assign(rank, true);
      break;
    default: {
      std::vector<int64_t> dims = n.has_attr("dims") ? n.attr_ints("dims") : std::vector<int64_t>{};
      if (dims.empty()) mask.assign(rank, true);
      for (int64_t d : dims) mark(d);
    }
  }
  return mask;
}

int64_t ReductionDomain::length() const {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (reduced[i]) n *= shape[i];
  return n;
}

int64_t ReductionDomain::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (!reduced[i]) n *= shape[i];
  return n;
}

Shape ReductionDomain::strides(const Value* v) const {
  Shape s(shape.size(), 0);
  const auto& m = dims.at(v);
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i] >= 0) s[m[i]] = v->type.strides[i];
  return s;
}

int ReductionDomain::row_level(const Value* v) const {
  auto it = value_level.find(v);
  return it == value_level.end() ? 0 : it->second;
}

bool ReductionDomain::covers(const Value* v) const {
  const auto& m = dims.at(v);
  const bool row = per_row.count(v) != 0;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && (row ? !reduced[d] : true) && std::find(m.begin(), m.end(), static_cast<int>(d)) == m.end())
      return false;
  return true;
}

std::optional<ReductionDomain> analyze_reduction_group(const std::vector<Node*>& nodes, std::string* why) {
  try {
    return Analysis(nodes).run();
  } catch (const Failure& f) {
    if (why) *why = f.why;
  } catch (const IRError& e) {
    if (why) *why = e.what();
  }
  return std::nullopt;
}

}  // namespace ff::fusion
