#pragma once
// Small graph queries shared by passes.
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

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

// A layout op whose result is a view of its operand's memory (not cat or
// flip, which copy).
inline bool is_view_op(Op op) {
  switch (op) {
    case Op::View:
    case Op::Permute:
    case Op::Expand:
    case Op::Unsqueeze:
    case Op::Squeeze:
    case Op::Slice:
    case Op::Select:
      return true;
    default:
      return false;
  }
}

// A reduction over its `dims` attribute, with no other operand or epilogue
// (sum, mean, amax, amin, prod, var, any, logsumexp).
inline bool reduces_dims(Op op) {
  switch (op) {
    case Op::Sum:
    case Op::Mean:
    case Op::Amax:
    case Op::Amin:
    case Op::Prod:
    case Op::Var:
    case Op::Any:
    case Op::Logsumexp:
      return true;
    default:
      return false;
  }
}

// A literal or a 0-d value: a scalar next to a tensor.
inline bool is_rank0(const Operand& o) { return !o.is_value() || o.value->type.shape.empty(); }

// A reshape's runs: the ranges of dims of `a` and `b` (same element count)
// that it maps onto each other, as pairs of [begin, end) with equal products,
// as short as they can be; size-1 dims join the run before them (or the
// first). Empty where the shapes differ in element count.
using ReshapeRun = std::pair<std::pair<size_t, size_t>, std::pair<size_t, size_t>>;
inline std::vector<ReshapeRun> reshape_runs(const Shape& a, const Shape& b) {
  std::vector<ReshapeRun> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const size_t i0 = i, j0 = j;
    int64_t pa = a[i++], pb = b[j++];
    while (pa != pb) {
      if (pa < pb) {
        if (i == a.size()) return {};
        pa *= a[i++];
      } else {
        if (j == b.size()) return {};
        pb *= b[j++];
      }
    }
    while (i < a.size() && a[i] == 1 && (j == b.size() || b[j] != 1)) ++i;
    while (j < b.size() && b[j] == 1 && (i == a.size() || a[i] != 1)) ++j;
    out.push_back({{i0, i}, {j0, j}});
  }
  if (i != a.size() || j != b.size()) return {};
  return out;
}

// The shape an operand broadcast against `from` (right-aligned) takes to be
// broadcast the same way against `to`, a reshape of `from`: per run of the
// reshape, the operand must span it whole or be 1 across it (a per-channel
// value, through a reshape that splits the channels into groups and merges
// the pixels, stays per channel). None where it is partly broadcast in a run.
inline std::optional<Shape> broadcast_through_reshape(const Shape& operand, const Shape& from, const Shape& to) {
  if (operand.size() > from.size()) return std::nullopt;
  Shape padded(from.size() - operand.size(), 1);
  padded.insert(padded.end(), operand.begin(), operand.end());
  const std::vector<ReshapeRun> runs = reshape_runs(from, to);
  if (runs.empty()) return std::nullopt;
  Shape out(to.size(), 1);
  for (const auto& [in, mapped] : runs) {
    bool whole = true, ones = true;
    for (size_t d = in.first; d < in.second; ++d) {
      whole &= padded[d] == from[d];
      ones &= padded[d] == 1;
    }
    if (whole)
      for (size_t d = mapped.first; d < mapped.second; ++d) out[d] = to[d];
    else if (!ones)
      return std::nullopt;
  }
  return out;
}

}  // namespace ff::passes
