// recompute_pointwise: a cheap pointwise value that several kernels read is
// computed in each of them instead of written once and read back.
//
//   %y = add(%conv, %bias_view)                  (%conv large, %bias_view small)
//   %m = mean(%y) ... ; %v = var(%y) ... ; %z = sub(%y, ...)
// becomes
//   %y0 = add(%conv, %bias_view) ; %m = mean(%y0) ... ; %v = var(%y0) ...
//   %y1 = add(%conv, %bias_view) ; %z = sub(%y1, ...)
//
// Each copy fuses into its reader's kernel (a reduction's prologue, a pointwise
// group), which reads %conv where it read %y: the same bytes, and %y is never
// written. Reductions over the same dims (var and mean, as above) share one
// copy, being one kernel. Only where every reader fuses (pointwise ops and
// reductions that become kernels): a library call would need %y written anyway.
// Only nodes reading one tensor of their size and small others (per-channel
// values, scalars), so no reader reads more than it did; that tensor an input,
// an ATen op's or a convolution's result (a GEMM kernel would take the node
// into its epilogue). Then chains the same way: a node whose full-size
// operands come, through pointwise nodes nothing else reads, from one such
// tensor (an activation of several ops, hardswish or mish, between a conv
// and a norm's statistics and apply) is copied with its chain, at most
// kMostChained nodes: the readers recompute it from the conv's result, which
// they read in place of the chain's. A conv is written whole
// by cuDNN or by a conv kernel, which takes a pointwise epilogue only where
// one group reads all of it, so its copies there are the same bytes read.
//
// The pipeline runs it once, after the others (compile.cc): cse would merge
// the copies back.
#include <algorithm>
#include <unordered_map>

#include "fusion/reduction_domain.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

constexpr int64_t kSmallRatio = 16;  // an operand this many times smaller than the result is "small"

constexpr size_t kMostChained = 12;  // nodes a recomputed chain may have

class RecomputePointwise : public Pass {
 public:
  std::string_view name() const override { return "recompute_pointwise"; }

  // Single nodes first (a conv's bias add read by both links of a hardswish),
  // then whole chains ending in a node several kernels read.
  bool run(Graph& g) override { return recompute(g, false) | recompute(g, true); }

 private:
  bool recompute(Graph& g, bool chains) const {
    std::vector<std::vector<Node*>> candidates;  // each node's chain, in order, the node last
    for (auto& n : g.nodes()) {
      std::vector<Node*> chain = recomputable(g, *n, chains);
      if (!chain.empty()) candidates.push_back(std::move(chain));
    }
    for (const std::vector<Node*>& chain : candidates) {
      Node* n = chain.back();
      const std::vector<Node*> users = g.users(n->result());
      // Reductions over the same dims share a copy: they become one kernel
      // (var and mean in one pass), which a copy each would split.
      std::vector<std::pair<std::string, Value*>> shared{{reduction_key(*users[0]), n->result()}};
      for (size_t i = 1; i < users.size(); ++i) {
        const std::string key = reduction_key(*users[i]);
        Value* value = nullptr;
        for (const auto& [k, v] : shared)
          if (!key.empty() && k == key) value = v;
        if (value == nullptr) {
          value = copy_before(g, users[i], chain);
          shared.emplace_back(key, value);
        }
        for (Operand& o : users[i]->operands)
          if (o.is_value() && o.value == n->result()) o = Operand::of(value);
      }
    }
    return !candidates.empty();
  }

  // A copy of `chain` (in order) before `user`; its last node's result.
  static Value* copy_before(Graph& g, Node* user, const std::vector<Node*>& chain) {
    std::unordered_map<const Value*, Value*> copied;
    Value* last = nullptr;
    for (const Node* c : chain) {
      std::vector<Operand> ops = c->operands;
      for (Operand& o : ops)
        if (o.is_value() && copied.count(o.value)) o = Operand::of(copied.at(o.value));
      last = g.insert_before(user, c->op, ops, {c->result()->type}, c->attrs)->result();
      copied[c->result()] = last;
    }
    return last;
  }

  // What a reduction reduces ("" for other nodes): reductions with equal keys
  // over one value are computed in one kernel.
  static std::string reduction_key(const Node& u) {
    if (op_kind(u.op) != OpKind::Reduction || !u.has_attr("dims")) return "";
    std::string key = u.attr_bool_or("keepdim", false) ? "keep" : "drop";
    for (int64_t d : u.attr_ints("dims")) key += " " + std::to_string(d);
    return key;
  }

  static bool fuses(const Node& u) { return op_kind(u.op) == OpKind::Pointwise || fusion::is_kernel_reduction(u); }

  static bool materialized(const Node* p) {
    return p == nullptr || p->op == Op::Opaque || p->op == Op::Convolution;
  }

  static bool pointwise_link(const Graph& g, const Node& n) {
    return op_kind(n.op) == OpKind::Pointwise && n.results.size() == 1 && !g.is_graph_output(n.result());
  }

  // The nodes to copy for each further reader of n (n last, the others in
  // graph order), or none where n is not worth it: n pointwise, read by
  // several kernels that take pointwise work in (pointwise groups,
  // reductions); its full-size operands lead, through pointwise nodes that
  // only the chain reads (`chains`; else n alone), to one materialized
  // tensor of n's size, every other operand small. The copies then read that
  // tensor where the readers read n: the same bytes, and n is never written.
  std::vector<Node*> recomputable(const Graph& g, const Node& n, bool chains) const {
    if (!pointwise_link(g, n)) return {};
    const std::vector<Node*> users = g.users(n.result());
    if (users.size() < 2) return {};
    for (const Node* u : users)
      if (!fuses(*u)) return {};
    const int64_t size = numel(n.result()->type.shape);
    std::vector<const Node*> chain{&n}, pending{&n};
    const Value* root = nullptr;
    while (!pending.empty()) {
      const Node* c = pending.back();
      pending.pop_back();
      for (const Operand& o : c->operands) {
        if (!o.is_value()) continue;
        const int64_t k = numel(o.value->type.shape);
        if (k * kSmallRatio <= size) continue;
        if (k != size) return {};
        const Node* p = o.value->producer;
        if (materialized(p)) {
          if (root != nullptr && root != o.value) return {};
          root = o.value;
          continue;
        }
        if (!chains) return {};
        if (std::find(chain.begin(), chain.end(), p) != chain.end()) continue;
        if (!pointwise_link(g, *p)) return {};
        for (const Node* u : g.users(p->result()))
          if (std::find(chain.begin(), chain.end(), u) == chain.end()) return {};  // read outside the chain
        chain.push_back(p);
        pending.push_back(p);
        if (chain.size() > kMostChained) return {};
      }
    }
    // Single nodes: n alone. Chains: more than n (n alone was the first round's).
    if (root == nullptr || (chains && chain.size() == 1)) return {};
    std::vector<Node*> ordered;
    for (const auto& node : g.nodes())
      if (std::find(chain.begin(), chain.end(), node.get()) != chain.end()) ordered.push_back(node.get());
    return ordered;
  }
};

}  // namespace

std::unique_ptr<Pass> make_recompute_pointwise() { return std::make_unique<RecomputePointwise>(); }

}  // namespace ff::passes
