// pointwise_before_view: moves pointwise work on a reshaped tensor before
// the reshape.
//
//   %v = view(%y) : [64,96,94,94] ; %z = relu(%v)
// becomes
//   %r = relu(%y) : <%y's shape> ; %z = view(%r) : [64,96,94,94]
//
// Group and instance norms normalize a reshaped view of their input (the
// channels split into groups, the batch merged into channels) and reshape
// the result back; the activation after the norm then joins the norm's
// kernel instead of reading its result in another one. Done for pointwise
// nodes whose only tensor operand (maybe several times) is a view, squeeze or
// unsqueeze of a contiguous tensor, the other operands literals or 0-d values,
// and whose result is contiguous: every element is computed as before, only
// addressed through the other shape.
#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/rewrites.h"

namespace ff::passes {

namespace {

bool is_reshape(Op op) { return op == Op::View || op == Op::Squeeze || op == Op::Unsqueeze; }

// The one tensor `n` reads (maybe several times), if `n` is pointwise work
// with a contiguous result that could move; the other operands are literals
// or 0-d values.
const Value* sole_tensor_read(const Node& n) {
  if (op_kind(n.op) != OpKind::Pointwise || n.op == Op::Full || !n.result()->type.is_contiguous()) return nullptr;
  const Value* x = nullptr;
  for (const Operand& o : n.operands) {
    if (is_rank0(o)) continue;
    if (x && o.value != x) return nullptr;
    x = o.value;
  }
  return x;
}

// The reshape that `n` reads as its only tensor operand, if it can move.
// `rw.moved`: the results this run replaces, each by the view back of its moved
// form, which a reader of it reads as its reshape.
const Node* reshape_read(const Users& users, const Rewrites& rw, const Node& n) {
  const Value* read = sole_tensor_read(n);
  if (!read) return nullptr;
  const auto replaced = rw.moved.find(read);
  const Value* x = replaced == rw.moved.end() ? read : replaced->second;
  if (!x->producer || !is_reshape(x->producer->op)) return nullptr;
  const Node* reshape = x->producer;
  const Value* src = reshape->input(0);
  if (!src->type.is_contiguous() || !x->type.is_contiguous() || src->type.shape.empty()) return nullptr;
  // A graph input has no kernel for the work to join before the reshape;
  // moved, it would only part from its readers after it (a reduction over
  // the reshaped dims reads it in that shape, and takes pointwise work in
  // that shape alone).
  if (!src->producer) return nullptr;
  // Every reader of the reshape moves, or none: moving some parts them from
  // the rest (a GELU's terms from the sum that reads the view and them),
  // which then runs in a kernel of its own reading what they wrote.
  for (const Node* u : users.of(read))
    if (sole_tensor_read(*u) != read) return nullptr;
  return reshape;
}

class PointwiseBeforeView final : public Pass {
 public:
  std::string_view name() const override { return "pointwise_before_view"; }

  // In graph order, so that a chain of pointwise nodes moves whole: each
  // reads the view back of the one moved before it.
  bool run(Graph& g) override {
    const Users users(g);
    std::vector<Node*> order;  // the nodes before this run adds any
    for (auto& n : g.nodes()) order.push_back(n.get());
    Rewrites rw;
    for (Node* n : order) {
      const Node* reshape = reshape_read(users, rw, *n);
      if (!reshape) continue;
      const Value* read = sole_tensor_read(*n);
      std::vector<Operand> ops = n->operands;
      for (Operand& o : ops)
        if (o.is_value() && o.value == read) o.value = reshape->input(0);
      const TensorType& t = n->result()->type;
      const Shape& shape = reshape->input(0)->type.shape;
      Node* moved = rw.add(g, n, n->op, ops, {TensorType::contiguous(t.dtype, shape)}, n->attrs);
      Node* back = rw.add(g, n, Op::View, {Operand::of(moved->result())}, {t});
      rw.moved[n->result()] = back->result();
      rw.dead.push_back(n);
    }
    if (rw.dead.empty()) return false;
    rw.apply(g);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_pointwise_before_view() { return std::make_unique<PointwiseBeforeView>(); }

}  // namespace ff::passes
