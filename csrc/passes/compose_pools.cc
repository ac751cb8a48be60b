// compose_pools: a pool of a pool of the same kind becomes one pool over the
// first one's input, so that the smaller intermediate is never written and
// read back and one kernel (or library call) runs instead of two.
//
//   %p = max_pool(%x) {kernel=[2, 2, 2], stride=[2, 2, 2]}
//   %q = max_pool(%p) {kernel=[3, 3, 3], stride=[3, 3, 3]}
// becomes
//   %q = max_pool(%x) {kernel=[6, 6, 6], stride=[6, 6, 6]}
//
// Per pooled dim, output i of the second pool covers the first's outputs
// [i s2, i s2 + k2), whose windows tile the input from i s1 s2 on for
// (k2 - 1) s1 + k1 elements when they leave no gaps (s1 <= k1): the max over
// them is the max over that one window. An average is the average of equal,
// disjoint windows only (k1 = s1, k2 = s2: each input element counted once,
// with equal weight). Both pools without padding, dilation, ceil_mode or a
// divisor override, and the composed pool's output size the second's (the
// rewrite is checked against its declared type). Not where the first pool's
// input is a softmax: the pool scheduler takes the softmax into the first
// pool's kernel (pool_scheduler.cc), whose threads would each walk the whole
// composed window.
#include "ir/pool.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

bool plain(const PoolSpec& s) {
  if (s.ceil_mode || s.divisor_override != 0) return false;
  for (size_t d = 0; d < s.kernel.size(); ++d)
    if (s.padding[d] != 0 || s.dilation[d] != 1) return false;
  return true;
}

class ComposePools : public Pass {
 public:
  std::string_view name() const override { return "compose_pools"; }

  bool run(Graph& g) override {
    bool changed = false;
    for (auto& np : g.nodes()) {
      Node* outer = np.get();
      if (outer->op != Op::MaxPool && outer->op != Op::AvgPool) continue;
      Value* mid = outer->input(0);
      Node* inner = mid->producer;
      if (inner == nullptr || inner->op != outer->op || g.users(mid).size() != 1 || g.is_graph_output(mid)) continue;
      const Node* source = inner->input(0)->producer;
      if (source != nullptr && (source->op == Op::Softmax || source->op == Op::LogSoftmax)) continue;
      const auto a = pool_spec(*inner), b = pool_spec(*outer);
      if (!a || !b || a->kernel.size() != b->kernel.size() || !plain(*a) || !plain(*b)) continue;
      Shape kernel, stride;
      bool composes = true;
      for (size_t d = 0; d < a->kernel.size() && composes; ++d) {
        const bool disjoint = a->kernel[d] == a->stride[d] && b->kernel[d] == b->stride[d];
        composes = outer->op == Op::MaxPool ? a->stride[d] <= a->kernel[d] : disjoint;
        kernel.push_back((b->kernel[d] - 1) * a->stride[d] + a->kernel[d]);
        stride.push_back(a->stride[d] * b->stride[d]);
      }
      if (!composes || !rewrites(*outer, *inner->input(0), kernel, stride)) continue;
      outer->operands[0] = inner->operands[0];
      outer->attrs["kernel"] = kernel;
      outer->attrs["stride"] = stride;
      changed = true;
    }
    return changed;
  }

 private:
  // Whether the composed pool over `x` gives `outer`'s declared output size.
  static bool rewrites(const Node& outer, const Value& x, const Shape& kernel, const Shape& stride) {
    Node composed = outer;
    composed.attrs["kernel"] = kernel;
    composed.attrs["stride"] = stride;
    try {
      const auto s = pool_spec(composed, x.type.shape);
      const Shape& out = outer.result()->type.shape;
      return s && Shape(out.end() - static_cast<std::ptrdiff_t>(kernel.size()), out.end()) == s->output_size;
    } catch (const IRError&) {
      return false;
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_compose_pools() { return std::make_unique<ComposePools>(); }

}  // namespace ff::passes
