#pragma once
// How the values of a reduction group lie over one iteration domain: the shape
// of the tensor every reduction of the group reads, with its reduced dims
// marked. Each value of the group (its inputs, and every node result) is
// described by the domain dim each of its own dims runs along, so that a
// kernel can address it from a (row, element) position; values constant along
// the reduced dims are per-row values, computed once per row.
//
// The group's nodes: reductions of the domain (several, also of different
// tensors; a reduction may read values computed from an earlier reduction's
// results: the manual softmax's sum of exp(x - max)), the pointwise nodes
// before and after them at the domain's shape or a per-row shape, and views
// that only add or drop size-1 dims of a value.
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/target.h"

namespace ff::fusion {

// Reductions a generated reduction kernel computes: sum, mean, prod, amax,
// amin, var, any, argmax, argmin, logsumexp, softmax, log_softmax and
// layer_norm of a floating tensor (any: also bool) with at least one element.
bool is_kernel_reduction(const Node& n);

// The dims a reduction reduces, as a mask over its input's dims.
std::vector<bool> reduced_mask(const Node& n);

// Reductions whose result has the input's shape (the reduced values are
// applied back to every element).
bool is_normalization(Op op);

// Whether a reduction kernel of `blocks` blocks over `elements` elements
// would leave most of `target` idle: then no kernel is made for it
// (fusion/reduction_strategy.cc), and a normalization of that few rows is
// decomposed so that its statistics split (passes/decompose_long_norm.cc).
bool leaves_gpu_idle(int64_t blocks, int64_t elements, const Target& target);

// The columns form of a reduction kernel (the kept dim innermost in memory)
// gives each column at most kMaxColumnLanes threads, and each thread sums at
// most kMaxSerialColumnTerms rows in a row: an f32 sum of n terms in a row
// errs by up to n ulps (a weight gradient summed over 32768 rows, 1024 per
// thread, came out 3x further from fp64 than ATen's). Longer columns are
// split into partials first (passes/split_long_reduction.cc).
constexpr int kMaxColumnLanes = 32;
constexpr int64_t kMaxSerialColumnTerms = 256;
constexpr int64_t kLongestColumn = kMaxColumnLanes * kMaxSerialColumnTerms;

struct ReductionDomain {
  Shape shape;                // the reduced tensor's shape
  std::vector<bool> reduced;  // per dim of `shape`
  // Per group value: for each of its dims, the domain dim it runs along, or
  // -1 where it has size 1.
  std::unordered_map<const Value*, std::vector<int>> dims;
  // Values constant along the reduced dims (reduction results and what is
  // computed from them and per-row inputs alone).
  std::unordered_set<const Value*> per_row;
  std::vector<const Node*> reductions;  // group order
  // Reductions: 1 + the highest level among the reductions whose results the
  // input is computed from (a pass over the rows per level).
  std::unordered_map<const Node*, int> level;
  int levels = 0;

  int64_t length() const;  // elements per row: the product of the reduced extents
  int64_t rows() const;    // the product of the kept extents
  // `v`'s strides over the domain's dims (0 along dims it does not run along).
  Shape strides(const Value* v) const;
  // The highest reduction level `v` depends on (0: none).
  int row_level(const Value* v) const;
  std::unordered_map<const Value*, int> value_level;  // row_level() of every group value
  // Whether `v` runs along every kept dim of size > 1 (and, unless per-row,
  // every reduced one): a value a kernel can write as an output.
  bool covers(const Value* v) const;
};

// Describes `nodes` (topological order) as one reduction group; nullopt, with
// the reason in *why, when they do not form one.
std::optional<ReductionDomain> analyze_reduction_group(const std::vector<Node*>& nodes, std::string* why = nullptr);

}  // namespace ff::fusion
