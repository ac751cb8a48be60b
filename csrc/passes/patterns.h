#pragma once
// Small graph queries shared by passes.
#include "ir/graph.h"

namespace ff::passes {

// True when `v` has users, all of them pointwise, and is not a graph output:
// then whatever pointwise work is added after it fuses into an existing kernel.
inline bool feeds_only_pointwise(const Graph& g, const Value* v) {
  if (g.is_graph_output(v)) return false;
  auto users = g.users(v);
  if (users.empty()) return false;
  for (const Node* u : users)
    if (op_kind(u->op) != OpKind::Pointwise) return false;
  return true;
}

}  // namespace ff::passes
