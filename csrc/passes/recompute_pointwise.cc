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
// into its epilogue; a pointwise chain is left whole). A conv is written whole
// by cuDNN or by a conv kernel, which takes a pointwise epilogue only where
// one group reads all of it, so its copies there are the same bytes read.
//
// The pipeline runs it once, after the others (compile.cc): cse would merge
// the copies back.
#include "fusion/reduction_domain.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

constexpr int64_t kSmallRatio = 16;  // an operand this many times smaller than the result is "small"

class RecomputePointwise : public Pass {
 public:
  std::string_view name() const override { return "recompute_pointwise"; }

  bool run(Graph& g) override {
    std::vector<Node*> candidates;
    for (auto& n : g.nodes())
      if (recomputable(g, *n)) candidates.push_back(n.get());
    for (Node* n : candidates) {
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
          value = g.insert_before(users[i], n->op, n->operands, {n->result()->type}, n->attrs)->result();
          shared.emplace_back(key, value);
        }
        for (Operand& o : users[i]->operands)
          if (o.is_value() && o.value == n->result()) o = Operand::of(value);
      }
    }
    return !candidates.empty();
  }

 private:
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

  bool recomputable(const Graph& g, const Node& n) const {
    if (op_kind(n.op) != OpKind::Pointwise || n.results.size() != 1 || g.is_graph_output(n.result())) return false;
    const std::vector<Node*> users = g.users(n.result());
    if (users.size() < 2) return false;
    for (const Node* u : users)
      if (!fuses(*u)) return false;
    const int64_t size = numel(n.result()->type.shape);
    int large = 0;
    for (const Operand& o : n.operands) {
      if (!o.is_value()) continue;
      const int64_t k = numel(o.value->type.shape);
      if (k * kSmallRatio <= size) continue;
      if (k != size || !materialized(o.value->producer) || ++large > 1) return false;
    }
    return large == 1;
  }
};

}  // namespace

std::unique_ptr<Pass> make_recompute_pointwise() { return std::make_unique<RecomputePointwise>(); }

}  // namespace ff::passes
