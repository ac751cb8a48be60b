// view_before_pointwise: reshapes the operands of pointwise work instead of
// its result, where the result is only read through the reshape.
//
//   %1 = where(%mask, 0.0, %grad) : f32[64,96,94,94]
//   %2 = mul(%1, 0.5) : f32[64,96,94,94]
//   %3 = view(%2) : f32[1,6144,94,94]
// becomes
//   %a = view(%mask) : bool[1,6144,94,94] ; %b = view(%grad) : f32[1,6144,94,94]
//   %1 = where(%a, 0.0, %b) : f32[1,6144,94,94]
//   %3 = mul(%1, 0.5) : f32[1,6144,94,94]
//
// An instance norm's backward reduces the [1, N*C, H, W] view of the
// gradient that reaches it; computed in that shape, the ReLU's and scale's
// gradients join the norm's reduction kernel instead of writing a full-size
// tensor for it to read. Only where a reduction reads the reshape and its
// other readers are pointwise work of its shape (a value read broadcast
// stays where it is computed once). The work moved is the cone of pointwise
// nodes behind the reshape whose results nothing else reads (same shape,
// contiguous); what they read from outside it (its leaves) is reshaped,
// broadcast operands through broadcast_through_reshape. A cone reading a
// reduction's result stays: it applies that reduction, in its kernel (a
// norm's forward, whose result is viewed back to the input's shape).
//
// pointwise_before_view moves work reading one reshaped computed tensor the
// other way: a cone whose node would qualify there (its only tensor operand
// a computed leaf) stays, so that the two passes never undo each other.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/rewrites.h"

namespace ff::passes {

namespace {

bool movable(const Node* n, const Shape& shape) {
  return n && op_kind(n->op) == OpKind::Pointwise && n->op != Op::Full && n->results.size() == 1 &&
         n->result()->type.is_contiguous() && n->result()->type.shape == shape;
}

class ViewBeforePointwise final : public Pass {
 public:
  std::string_view name() const override { return "view_before_pointwise"; }

  bool run(Graph& g) override {
    const Users users(g);
    std::unordered_set<const Value*> results(g.outputs().begin(), g.outputs().end());  // read past the graph
    for (const auto& m : g.mutations()) results.insert(m.value);
    std::vector<Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    // The cones of two reshapes are apart: a cone's nodes are read only
    // inside it, and its top only by its reshape.
    Rewrites rw;
    for (Node* view : order) {
      if (view->op != Op::View || !view->result()->type.is_contiguous()) continue;
      const Value* src = view->input(0);
      const Shape& from = src->type.shape;
      if (!src->type.is_contiguous() || !movable(src->producer, from) || users.of(src).size() != 1 ||
          results.count(src))
        continue;
      if (!read_whole(users, view)) continue;
      const std::vector<Node*> cone = cone_behind(users, results, src->producer, from);
      if (!cone.empty()) move(g, rw, view, cone);
    }
    if (rw.dead.empty()) return false;
    rw.apply(g);
    return true;
  }

 private:
  // Whether every reader of the view works over its shape: pointwise work of
  // that shape, or a reduction of it. A view read broadcast (a per-channel
  // value beside a full-size tensor) is computed once where it is.
  static bool read_whole(const Users& users, const Node* view) {
    const Value* v = view->result();
    bool reduced = false;
    for (const Node* u : users.of(v)) {
      const bool reduces = op_kind(u->op) == OpKind::Reduction && u->input(0) == v && u->operands.size() == 1;
      reduced |= reduces;
      if (!reduces && !(op_kind(u->op) == OpKind::Pointwise && u->result()->type.shape == v->type.shape)) return false;
    }
    return reduced;
  }

  // A reduction's result, maybe through views: the work applying it stays
  // in the shape of the reduction's input (the reduction's own kernel).
  static bool reduced(const Value* v) {
    while (v->producer && op_kind(v->producer->op) == OpKind::Layout) v = v->producer->input(0);
    return v->producer && op_kind(v->producer->op) == OpKind::Reduction;
  }

  // The pointwise nodes behind `top` (itself included) whose results only
  // nodes of the set read, in graph order; empty where a node of it would
  // move back under pointwise_before_view.
  static std::vector<Node*> cone_behind(const Users& users, const std::unordered_set<const Value*>& results, Node* top,
                                        const Shape& shape) {
    std::unordered_set<const Node*> in{top};
    for (bool grew = true; grew;) {
      grew = false;
      for (const Node* n : std::vector<const Node*>(in.begin(), in.end()))
        for (const Operand& o : n->operands) {
          if (!o.is_value() || in.count(o.value->producer) || !movable(o.value->producer, shape) ||
              results.count(o.value))
            continue;
          const auto& readers = users.of(o.value);
          if (std::all_of(readers.begin(), readers.end(), [&](const Node* u) { return in.count(u); }))
            grew = in.insert(o.value->producer).second || grew;
        }
    }
    for (const Node* n : in) {
      std::unordered_set<const Value*> tensors;
      bool computed_leaf = false;
      for (const Operand& o : n->operands) {
        if (is_rank0(o)) continue;
        tensors.insert(o.value);
        computed_leaf |= o.value->producer && !in.count(o.value->producer);
      }
      if (tensors.size() == 1 && computed_leaf) return {};
    }
    return sorted(in, top);
  }

  // `in`'s nodes in graph order (their producers first).
  static std::vector<Node*> sorted(const std::unordered_set<const Node*>& in, Node* top) {
    std::vector<Node*> out;
    std::unordered_set<const Node*> done;
    std::vector<std::pair<Node*, size_t>> stack{{top, 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->operands.size()) {
        const Operand& o = n->operands[next++];
        if (o.is_value() && in.count(o.value->producer) && !done.count(o.value->producer))
          stack.push_back({o.value->producer, 0});
        continue;
      }
      if (done.insert(n).second) out.push_back(n);
      stack.pop_back();
    }
    return out;
  }

  // Rebuilds `cone` in the view's shape before it; nothing where a leaf is
  // broadcast partly across a run of the reshape.
  static void move(Graph& g, Rewrites& rw, Node* view, const std::vector<Node*>& cone) {
    const Shape& from = view->input(0)->type.shape;
    const Shape& to = view->result()->type.shape;
    std::unordered_set<const Node*> in(cone.begin(), cone.end());
    std::vector<std::pair<Value*, Shape>> leaves;  // in the order the cone reads them
    std::unordered_set<const Value*> seen;
    for (const Node* n : cone)
      for (const Operand& o : n->operands) {
        if (is_rank0(o) || in.count(o.value->producer) || !seen.insert(o.value).second) continue;
        const auto shape = broadcast_through_reshape(o.value->type.shape, from, to);
        if (!shape || !o.value->type.is_contiguous() || reduced(o.value)) return;
        leaves.emplace_back(o.value, *shape);
      }
    std::unordered_map<const Value*, Value*> now;  // old value -> its form in the view's shape
    for (const auto& [leaf, shape] : leaves)
      now[leaf] =
          rw.add(g, view, Op::View, {Operand::of(leaf)}, {TensorType::contiguous(leaf->type.dtype, shape)})->result();
    for (Node* n : cone) {
      std::vector<Operand> ops = n->operands;
      for (Operand& o : ops)
        if (!is_rank0(o)) o.value = now.at(o.value);
      const TensorType t = TensorType::contiguous(n->result()->type.dtype, to);
      now[n->result()] = rw.add(g, view, n->op, ops, {t}, n->attrs)->result();
      rw.dead.push_back(n);
    }
    rw.moved[view->result()] = now.at(cone.back()->result());
    rw.dead.push_back(view);
  }
};

}  // namespace

std::unique_ptr<Pass> make_view_before_pointwise() { return std::make_unique<ViewBeforePointwise>(); }

}  // namespace ff::passes
