// reduction_before_view: reduces a reshaped tensor before the reshape, where
// the reduced dims are whole dims of the reshape's input.
//
//   %v = view(%y) : f32[64,64,64,64]          (%y: f32[64,8,8,4096])
//   %m = mean(%v) {dims=[2, 3]} : f32[64,64]
// becomes
//   %r = mean(%y) {dims=[3]} : f32[64,8,8] ; %m = view(%r) : f32[64,64]
//
// A group norm normalizes the [N, G, C/G, H*W] view of its input and views
// the result back to NCHW; a mean over H and W after it then reads the
// norm's result as it is made, so the norm's apply becomes the mean's
// prologue instead of a kernel that writes the normalized tensor for the
// mean to read again. The shapes split into runs of dims with equal products
// (the reshape maps each run to one); every run of the view's dims must be
// reduced whole or kept whole. Reductions over `dims` (sum, mean, amax, amin,
// prod, var, any, logsumexp) of a contiguous view of a contiguous tensor.
#include <algorithm>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

class ReductionBeforeView final : public Pass {
 public:
  std::string_view name() const override { return "reduction_before_view"; }

  bool run(Graph& g) override {
    bool changed = false;
    std::vector<Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    for (Node* n : order) {
      if (!reduces_dims(n->op) || !n->has_attr("dims")) continue;
      Value* v = n->input(0);
      const Node* view = v ? v->producer : nullptr;
      if (!view || view->op != Op::View) continue;
      Value* src = view->input(0);
      if (!src->type.is_contiguous() || !v->type.is_contiguous() || !n->result()->type.is_contiguous()) continue;
      const Shape& from = src->type.shape;
      const Shape& to = v->type.shape;
      std::unordered_set<int64_t> reduced;
      for (int64_t d : n->attr_ints("dims")) reduced.insert(d < 0 ? d + static_cast<int64_t>(to.size()) : d);
      const auto mapped = reshape_runs(from, to);
      if (mapped.empty()) continue;
      std::vector<int64_t> dims;
      bool whole = true;
      for (const auto& [in, out] : mapped) {
        size_t hits = 0;
        for (size_t d = out.first; d < out.second; ++d) hits += reduced.count(static_cast<int64_t>(d));
        if (hits == 0) continue;
        whole &= hits == out.second - out.first;
        for (size_t d = in.first; d < in.second; ++d) dims.push_back(static_cast<int64_t>(d));
      }
      // Nothing to gain where the reduction already reads the input's dims as they are.
      if (!whole || dims.empty() || from == to) continue;
      Shape kept;
      for (size_t d = 0; d < from.size(); ++d)
        if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) kept.push_back(from[d]);
      Attrs attrs = n->attrs;
      attrs["dims"] = dims;
      attrs["keepdim"] = false;
      const TensorType& t = n->result()->type;
      Node* early = g.insert_before(n, n->op, {Operand::of(src)}, {TensorType::contiguous(t.dtype, kept)}, attrs);
      Node* back = g.insert_before(n, Op::View, {Operand::of(early->result())}, {t});
      g.replace_all_uses(n->result(), back->result());
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_reduction_before_view() { return std::make_unique<ReductionBeforeView>(); }

}  // namespace ff::passes
