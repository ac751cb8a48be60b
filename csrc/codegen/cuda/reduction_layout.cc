#include "codegen/cuda/reduction_layout.h"

#include <algorithm>
#include <cstdlib>

namespace ff::codegen {

namespace {

// Collapses the dims of `dims` (domain order, size-1 dims dropped): a dim
// merges into the one before it when every access steps over it contiguously
// (outer stride = inner extent * inner stride), which keeps the row-major
// index over them unchanged.
void collapse(const Shape& domain, const std::vector<size_t>& dims, const std::vector<Shape>& strides, Shape& sizes,
              std::vector<Shape>& out) {
  for (size_t d : dims) {
    if (domain[d] == 1) continue;
    bool merge = !sizes.empty();
    for (size_t t = 0; t < strides.size() && merge; ++t) merge = out[t].back() == domain[d] * strides[t][d];
    if (merge) {
      sizes.back() *= domain[d];
      for (size_t t = 0; t < strides.size(); ++t) out[t].back() = strides[t][d];
    } else {
      sizes.push_back(domain[d]);
      for (size_t t = 0; t < strides.size(); ++t) out[t].push_back(strides[t][d]);
    }
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (auto& s : out) s.push_back(0);
  }
}

}  // namespace

bool ReductionLayout::inner() const { return main >= 0 && access[main].reduced.back() == 1 && reduced.back() > 1; }

int ReductionLayout::contiguous_kept() const {
  if (main < 0) return -1;
  for (size_t d = 0; d < kept.size(); ++d)
    if (kept[d] > 1 && access[main].kept[d] == 1) return static_cast<int>(d);
  return -1;
}

const ReductionAccess* ReductionLayout::find(const Value* v) const {
  for (const auto& a : access)
    if (a.value == v) return &a;
  return nullptr;
}

int64_t ReductionLayout::max_offset() const {
  int64_t m = 0;
  for (const auto& a : access) {
    int64_t off = 0;
    for (size_t d = 0; d < kept.size(); ++d) off += (kept[d] - 1) * std::llabs(a.kept[d]);
    for (size_t d = 0; d < reduced.size(); ++d) off += (reduced[d] - 1) * std::llabs(a.reduced[d]);
    m = std::max(m, off);
  }
  return m;
}

bool ReductionLayout::repeats_within(const ReductionAccess& a, int64_t step) const {
  if (step <= 0 || a.reduced.empty() || a.reduced.front() != 0) return false;
  for (size_t d = 1; d < a.reduced.size(); ++d)
    if (a.reduced[d] != 0) {
      int64_t period = 1;  // the extent of the dims `a` varies along and those inside them
      for (size_t i = d; i < reduced.size(); ++i) period *= reduced[i];
      return step % period == 0;
    }
  return false;  // constant along the row: a per-row value
}

ReductionLayout reduction_layout(const fusion::Group& g, const fusion::ReductionDomain& d) {
  ReductionLayout l;
  std::vector<const Value*> values;
  for (const Value* v : g.outputs) {
    l.access.push_back(
        {v, "out" + std::to_string(l.access.size()), v->type.dtype, true, d.per_row.count(v) != 0, {}, {}});
    values.push_back(v);
  }
  for (const Value* v : g.inputs) {
    if (v->is_input() && v->input_kind == InputKind::Scalar) {
      l.scalars.push_back(v);
      continue;
    }
    const bool along_reduced = [&] {
      const Shape s = d.strides(v);
      for (size_t i = 0; i < s.size(); ++i)
        if (d.reduced[i] && d.shape[i] != 1 && s[i] != 0) return true;
      return false;
    }();
    const size_t n_in = l.access.size() - g.outputs.size();
    l.access.push_back({v, "in" + std::to_string(n_in), v->type.dtype, false, !along_reduced, {}, {}});
    values.push_back(v);
  }
  std::vector<Shape> strides;
  for (const Value* v : values) strides.push_back(d.strides(v));
  // The main input: the one read most (bytes over the dims it steps along).
  int64_t best = 0;
  for (size_t t = 0; t < l.access.size(); ++t) {
    const ReductionAccess& a = l.access[t];
    if (a.is_output || a.per_row) continue;
    int64_t bytes = dtype_size(a.dtype);
    for (size_t i = 0; i < d.shape.size(); ++i) bytes *= strides[t][i] ? d.shape[i] : 1;
    if (bytes > best) best = bytes, l.main = static_cast<int>(t);
  }
  std::vector<size_t> kept, reduced;
  for (size_t i = 0; i < d.shape.size(); ++i) (d.reduced[i] ? reduced : kept).push_back(i);
  // The reduced elements in the main input's memory order (largest stride
  // first), so that its unit-stride dim is innermost and a warp's loads are
  // adjacent: group norm's [N, G, C/G, H*W] view of a channels-last tensor
  // reduces C/G (stride 1) inside H*W (stride C). Not where argmax/argmin
  // number the elements in the domain's order.
  bool indexed = false;
  for (const Node* n : g.nodes) indexed |= n->op == Op::Argmax || n->op == Op::Argmin;
  if (l.main >= 0 && !indexed) {
    const Shape& ms = strides[static_cast<size_t>(l.main)];
    std::stable_sort(reduced.begin(), reduced.end(),
                     [&](size_t a, size_t b) { return std::llabs(ms[a]) > std::llabs(ms[b]); });
  }
  std::vector<Shape> ks(values.size()), rs(values.size());
  collapse(d.shape, kept, strides, l.kept, ks);
  collapse(d.shape, reduced, strides, l.reduced, rs);
  for (size_t t = 0; t < l.access.size(); ++t) {
    l.access[t].kept = ks[t];
    l.access[t].reduced = rs[t];
  }
  l.rows = d.rows();
  l.length = d.length();
  return l;
}

}  // namespace ff::codegen
