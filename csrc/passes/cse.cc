// cse: common subexpression elimination.
//
// Two nodes are the same computation when they have the same op, the same
// operands (the same Values; literals of the same kind and bit pattern, so 0.0
// and -0.0 differ), the same attributes (floats compared bitwise) and the same
// result types. The later node's results are replaced by the earlier node's
// (it becomes dead; `dce` removes it). One walk in graph order suffices: uses
// are redirected before later nodes are looked at, so chains of duplicates
// collapse together.
//
// Operands of add, mul, eq, ne, logical_and and logical_or are compared as an
// unordered pair (those are bitwise commutative in IEEE arithmetic; maximum and
// minimum are not: max(+0, -0) depends on the order).
//
// Not merged:
//   * opaque nodes: they run an arbitrary ATen op, which may be random
//     (dropout, rand_like) or otherwise not a function of its operands;
//   * a duplicate whose result is a graph output (or a mutation's new value)
//     when the kept node's result is one too: the outputs would become one
//     tensor, aliasing each other where eager returns two.
// `full` and everything else is pure and is merged.
#include <cstring>
#include <unordered_map>

#include "passes/pass.h"

namespace ff::passes {

namespace {

bool commutative(Op op) {
  switch (op) {
    case Op::Add:
    case Op::Mul:
    case Op::Eq:
    case Op::Ne:
    case Op::LogicalAnd:
    case Op::LogicalOr:
      return true;
    default:
      return false;
  }
}

std::string bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return std::to_string(u);
}

std::string operand_key(const Operand& o) {
  if (o.is_value()) return "v" + std::to_string(reinterpret_cast<uintptr_t>(o.value));
  const Scalar& s = o.literal;
  switch (s.kind) {
    case Scalar::Kind::Float:
      return "f" + bits(s.f);
    case Scalar::Kind::Int:
      return "i" + std::to_string(s.i);
    case Scalar::Kind::Bool:
      return s.i ? "b1" : "b0";
  }
  return "?";
}

std::string attr_key(const AttrValue& a) {
  struct {
    std::string operator()(int64_t v) const { return "i" + std::to_string(v); }
    std::string operator()(double v) const { return "f" + bits(v); }
    std::string operator()(bool v) const { return v ? "b1" : "b0"; }
    std::string operator()(const std::string& v) const { return "s" + std::to_string(v.size()) + ":" + v; }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::string s = "l" + std::to_string(v.size());
      for (int64_t x : v) s += "," + std::to_string(x);
      return s;
    }
  } visitor;
  return std::visit(visitor, a);
}

std::string type_key(const TensorType& t) {
  std::string s(dtype_name(t.dtype));
  for (int64_t d : t.shape) s += "," + std::to_string(d);
  s += "/";
  for (int64_t d : t.strides) s += "," + std::to_string(d);
  return s;
}

// A string that is equal for two nodes exactly when they compute the same thing.
std::string node_key(const Node& n) {
  std::string k(op_name(n.op));
  std::vector<std::string> ops;
  for (auto& o : n.operands) ops.push_back(operand_key(o));
  if (commutative(n.op) && ops.size() == 2 && ops[1] < ops[0]) std::swap(ops[0], ops[1]);
  k += "(";
  for (auto& o : ops) k += o + ";";
  k += "){";
  for (auto& [name, v] : n.attrs) k += std::to_string(name.size()) + ":" + name + "=" + attr_key(v) + ";";
  k += "}:";
  for (Value* r : n.results) k += type_key(r->type) + ";";
  return k;
}

class CSE : public Pass {
 public:
  std::string_view name() const override { return "cse"; }

  bool run(Graph& g) override {
    // Uses of a repeated node's results move to the first node's as the walk
    // reaches them (every reader comes after its producer), so the graph is
    // walked once, not once per repeat (an unrolled loop repeats its weights'
    // views in every step).
    const Users users(g);
    std::unordered_map<const Value*, Value*> moved;
    std::unordered_map<std::string, Node*> seen;
    bool changed = false;
    for (auto& np : g.nodes()) {
      Node* n = np.get();
      for (Operand& o : n->operands)
        if (o.is_value())
          if (auto it = moved.find(o.value); it != moved.end()) o.value = it->second;
      if (n->op == Op::Opaque || n->results.empty()) continue;
      auto [it, fresh] = seen.emplace(node_key(*n), n);
      if (fresh) continue;
      Node* first = it->second;
      bool both_outputs = false;
      for (size_t i = 0; i < n->results.size(); ++i)
        both_outputs |= g.is_graph_output(n->results[i]) && g.is_graph_output(first->results[i]);
      if (both_outputs) continue;
      for (size_t i = 0; i < n->results.size(); ++i) {
        Value* r = n->results[i];
        const bool output = g.is_graph_output(r);
        if (users.of(r).empty() && !output) continue;
        moved[r] = first->results[i];
        if (output) g.replace_all_uses(r, first->results[i]);  // the graph's outputs and mutations too
        changed = true;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_cse() { return std::make_unique<CSE>(); }

}  // namespace ff::passes
