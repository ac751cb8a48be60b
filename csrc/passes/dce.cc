// dce: dead code elimination.
//
// A node is live when one of its results is a graph output, a mutation's new
// value, or an operand of a live node. Everything else is removed, including
// opaque nodes (captured ATen ops are functional: their only effects are their
// results) and multi-result nodes, which go only when all their results are
// dead. Graph inputs are the calling convention and are never removed.
// One walk backwards over the topological order marks and sweeps.
#include <unordered_set>

#include "passes/pass.h"

namespace ff::passes {

namespace {

class DCE : public Pass {
 public:
  std::string_view name() const override { return "dce"; }

  bool run(Graph& g) override {
    std::unordered_set<const Value*> live(g.outputs().begin(), g.outputs().end());
    for (auto& m : g.mutations()) live.insert(m.value);
    std::unordered_set<const Node*> dead;
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
      const Node* n = it->get();
      bool used = false;
      for (const Value* r : n->results) used |= live.count(r) != 0;
      if (!used) {
        dead.insert(n);
        continue;
      }
      for (auto& o : n->operands)
        if (o.is_value()) live.insert(o.value);
    }
    if (dead.empty()) return false;
    g.erase_nodes_if([&](const Node* n) { return dead.count(n) != 0; });
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dce() { return std::make_unique<DCE>(); }

}  // namespace ff::passes
