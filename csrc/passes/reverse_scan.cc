// reverse_scan: a scan of flipped elements, flipped back, becomes a scan from
// the other end of the elements themselves.
//
//   %f = flip(%x) {dims=[1]} ; %y = add(%f, 1.0) ; %s = cumprod(%y) {dim=1} ; %r = flip(%s) {dims=[1]}
// becomes
//   %y2 = add(%x, 1.0) ; %r = cumprod(%y2) {dim=1, reverse=true}
//
// Element i of flip(scan(flip(x))) folds x[n-1-j] for j <= n-1-i, that is
// x[k] for k >= i in order from the end: the reverse scan, which the scan
// kernel runs reading x in place, where the flips were two copies and kept the
// scan apart from the work around it. The pointwise nodes between the flip and
// the scan move with it: a pointwise result at position n-1-i reads its
// operands there, which for a flip along the scan's dim is x at i, and for an
// operand the same all along that dim (a literal, a per-row tensor) anything.
// Done when every user of the scan is a flip along exactly its dim, and the
// pointwise nodes' results are read only on the way to the scan.
#include <unordered_map>
#include <unordered_set>

#include "passes/pass.h"

namespace ff::passes {

namespace {

// The dim of `v` that lies along the scan's dim `d` of a rank-`rank` result
// (right-aligned broadcast), if it has one.
std::optional<int64_t> aligned_dim(const Value* v, int64_t d, int64_t rank) {
  const int64_t k = d - (rank - static_cast<int64_t>(v->type.shape.size()));
  if (k < 0) return std::nullopt;
  return k;
}

// Whether `v` is the same at every position along the scan's dim.
bool constant_along(const Value* v, int64_t d, int64_t rank) {
  const auto k = aligned_dim(v, d, rank);
  return !k || v->type.shape[static_cast<size_t>(*k)] == 1;
}

// Whether `n` flips exactly the dim of its input along the scan's dim.
bool flips_along(const Node& n, int64_t d, int64_t rank) {
  if (n.op != Op::Flip) return false;
  const auto k = aligned_dim(n.input(0), d, rank);
  const std::vector<int64_t>& dims = n.attr_ints("dims");
  const int64_t r = static_cast<int64_t>(n.input(0)->type.shape.size());
  return k && dims.size() == 1 && normalize_dim(dims[0], r) == *k;
}

// What lies between the flips and the scan: the pointwise nodes in graph
// order, and the results of the flips along the dim they (or the scan) read.
struct Between {
  std::vector<Node*> pointwise;
  std::unordered_set<const Value*> flipped;
};

class Matcher {
 public:
  Matcher(const Graph& g, const Node& scan)
      : g_(g),
        scan_(scan),
        rank_(static_cast<int64_t>(scan.result()->type.shape.size())),
        d_(normalize_dim(scan.attr_int("dim"), rank_)) {}

  // The nodes between, where the scan's input is made of flipped elements
  // (one flip at least) and values the same all along the dim, and the
  // pointwise results on the way are read on the way only.
  std::optional<Between> between() {
    if (!unflippable(scan_.input(0)) || b_.flipped.empty()) return std::nullopt;
    for (const Node* n : inside_)
      for (const Node* u : g_.users(n->result()))
        if (u != &scan_ && !inside_.count(u)) return std::nullopt;
    for (auto& n : g_.nodes())
      if (inside_.count(n.get())) b_.pointwise.push_back(n.get());
    return b_;
  }

 private:
  const Graph& g_;
  const Node& scan_;
  const int64_t rank_, d_;
  Between b_;
  std::unordered_set<const Node*> inside_;

  // Whether the scan's input can read `v` unflipped, noting what is between.
  bool unflippable(const Value* v) {
    if (b_.flipped.count(v) || (v->producer && inside_.count(v->producer)) || constant_along(v, d_, rank_)) return true;
    Node* p = v->producer;
    if (!p || g_.is_graph_output(v)) return false;
    if (flips_along(*p, d_, rank_)) {
      b_.flipped.insert(v);
      return true;
    }
    if (op_kind(p->op) != OpKind::Pointwise) return false;
    inside_.insert(p);
    for (const Operand& o : p->operands)
      if (o.is_value() && !unflippable(o.value)) return false;
    return true;
  }
};

// The flips along the scan's dim that read its result: all of its readers, or none.
std::vector<Node*> flips_after(const Graph& g, const Node& scan) {
  const Value* s = scan.result();
  if (g.is_graph_output(s)) return {};
  const int64_t rank = static_cast<int64_t>(s->type.shape.size());
  const int64_t d = normalize_dim(scan.attr_int("dim"), rank);
  std::vector<Node*> users = g.users(s);
  for (const Node* u : users)
    if (!flips_along(*u, d, rank)) return {};
  return users;
}

class ReverseScan final : public Pass {
 public:
  std::string_view name() const override { return "reverse_scan"; }

  bool run(Graph& g) override {
    std::vector<Node*> scans;
    for (auto& n : g.nodes())
      if (op_kind(n->op) == OpKind::Scan && !n->result()->type.shape.empty()) scans.push_back(n.get());
    bool changed = false;
    for (Node* scan : scans) changed |= rewrite(g, scan);
    return changed;
  }

 private:
  static bool rewrite(Graph& g, Node* scan) {
    const std::vector<Node*> after = flips_after(g, *scan);
    if (after.empty()) return false;
    const auto b = Matcher(g, *scan).between();
    if (!b) return false;
    // The pointwise nodes again, on the unflipped values, before the scan.
    std::unordered_map<const Value*, Value*> unflipped;
    for (const Value* f : b->flipped) unflipped[f] = f->producer->input(0);
    auto read = [&](const Operand& o) {
      if (!o.is_value()) return o;
      auto it = unflipped.find(o.value);
      return it == unflipped.end() ? o : Operand::of(it->second);
    };
    for (Node* n : b->pointwise) {
      std::vector<Operand> ops;
      for (const Operand& o : n->operands) ops.push_back(read(o));
      unflipped[n->result()] = g.insert_before(scan, n->op, ops, {n->result()->type}, n->attrs)->result();
    }
    Attrs attrs = scan->attrs;
    if (scan->attr_bool_or("reverse", false))
      attrs.erase("reverse");
    else
      attrs["reverse"] = true;
    Node* reversed = g.insert_before(scan, scan->op, {read(scan->operands[0])}, {scan->result()->type}, attrs);
    for (Node* f : after) g.replace_all_uses(f->result(), reversed->result());
    // What only the old chain read goes with it (a flip read elsewhere stays).
    std::vector<const Node*> old(after.begin(), after.end());
    old.push_back(scan);
    for (auto it = b->pointwise.rbegin(); it != b->pointwise.rend(); ++it) old.push_back(*it);
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it)
      if (b->flipped.count((*it)->result())) old.push_back(it->get());
    std::unordered_set<const Node*> dead;
    for (const Node* n : old) {
      bool unread = !g.is_graph_output(n->result());
      for (const Node* u : g.users(n->result())) unread &= dead.count(u) != 0;
      if (unread) dead.insert(n);
    }
    g.erase_nodes_if([&](const Node* n) { return dead.count(n) != 0; });
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_reverse_scan() { return std::make_unique<ReverseScan>(); }

}  // namespace ff::passes
