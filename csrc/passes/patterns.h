#pragma once
// Small graph queries shared by passes.
#include <cmath>

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

// The float policy of rewrites that reorder rounding (canonicalize.cc
// explains it): f32 and f64 only; f16/bf16 one rounding step is ~1e-3.
inline bool reassociates(DType t) { return t == DType::f32 || t == DType::f64; }

// A finite, non-zero power of two: scaling by it is exact (barring over/underflow).
inline bool is_pow2(double v) {
  if (!std::isfinite(v) || v == 0.0) return false;
  int e;
  return std::fabs(std::frexp(v, &e)) == 0.5;
}

// A literal or a 0-d value: a scalar next to a tensor.
inline bool is_rank0(const Operand& o) { return !o.is_value() || o.value->type.shape.empty(); }

}  // namespace ff::passes
