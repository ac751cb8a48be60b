#pragma once
// Rewrites: a pass's new nodes placed before the nodes they replace, uses
// moved to the replacements and the replaced nodes erased, in one walk each
// at the end of the run. Inserting and replacing one rewrite at a time walks
// the graph per rewrite, and an unrolled loop rewrites every step.
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace ff::passes {

struct Rewrites {
  std::unordered_map<const Node*, std::vector<Node*>> before;  // anchor -> the nodes placed before it, in order
  std::unordered_map<const Value*, Value*> moved;              // replaced result -> its replacement
  std::vector<Node*> dead;                                     // the replaced nodes, and unused attempts

  // A new node, placed before `at` when applied.
  Node* add(Graph& g, Node* at, Op op, std::vector<Operand> operands, std::vector<TensorType> types, Attrs attrs = {}) {
    Node* n = g.add_node(op, std::move(operands), std::move(types), std::move(attrs));
    before[at].push_back(n);
    return n;
  }

  void apply(Graph& g) {
    if (before.empty()) return;
    std::unordered_set<const Node*> placed;
    for (const auto& [at, nodes] : before) placed.insert(nodes.begin(), nodes.end());
    std::vector<Node*> order;
    for (const auto& n : g.nodes()) {
      if (placed.count(n.get())) continue;
      if (auto it = before.find(n.get()); it != before.end())
        order.insert(order.end(), it->second.begin(), it->second.end());
      order.push_back(n.get());
    }
    g.set_node_order(order);
    g.replace_all_uses(moved);
    g.erase_nodes(dead);
  }
};

}  // namespace ff::passes
