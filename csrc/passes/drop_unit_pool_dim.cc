// drop_unit_pool_dim: a pool of an unsqueezed tensor, squeezed back at the
// same dim, becomes the pool of the tensor itself, where the windows leave
// that unit dim alone (a kept dim, or a pooled one with a window of 1).
//
//   %u = unsqueeze(%x) {dim=2} : f32[48,80,1,40000]
//   %p = avg_pool(%u) {kernel=[1, 6], padding=[0, 2], stride=[1, 2]} : f32[48,80,1,20000]
//   %q = squeeze(%p) {dims=[2]} : f32[48,80,20000]
// becomes
//   %q = avg_pool(%x) {kernel=[6], padding=[2], stride=[2]} : f32[48,80,20000]
//
// This is ATen's avg_pool1d (and a pool written over an added dim): in the
// pool's own rank it reads the same value as a max_pool1d of %x with the
// same windows, so the two pool side by side in one kernel. Sound: a window
// of 1 tap at stride 1 without padding or dilation maps the unit dim's one
// element to itself (output extent 1, a factor 1 in an average's divisor),
// and a kept dim is carried through; the other dims' windows are unchanged.
// Only where the squeeze is the pool's one reader and its result contiguous
// (the pool's result type), and a pooled dim remains.
#include <algorithm>

#include "ir/pool.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

class DropUnitPoolDim final : public Pass {
 public:
  std::string_view name() const override { return "drop_unit_pool_dim"; }

  bool run(Graph& g) override {
    bool changed = false;
    std::vector<Node*> order;
    for (auto& n : g.nodes()) order.push_back(n.get());
    for (Node* squeeze : order) {
      Node* pool = squeeze->op == Op::Squeeze ? squeeze->input(0)->producer : nullptr;
      if (pool == nullptr || (pool->op != Op::MaxPool && pool->op != Op::AvgPool)) continue;
      const Node* unsqueeze = pool->input(0)->producer;
      if (unsqueeze == nullptr || unsqueeze->op != Op::Unsqueeze || g.users(pool->result()).size() != 1 ||
          g.is_graph_output(pool->result()) || !squeeze->result()->type.is_contiguous())
        continue;
      const auto dim = unit_dim(*squeeze, *pool, *unsqueeze);
      if (!dim) continue;
      Node* q =
          g.insert_before(squeeze, pool->op, {unsqueeze->operands[0]}, {squeeze->result()->type}, dropped(*pool, *dim));
      g.replace_all_uses(squeeze->result(), q->result());
      g.erase_nodes(std::vector<Node*>{squeeze, pool});
      changed = true;
    }
    return changed;
  }

 private:
  // The dim the unsqueeze adds and the squeeze removes, where the pool's
  // windows leave it alone and its attributes fit the unsqueeze's input.
  static std::optional<size_t> unit_dim(const Node& squeeze, const Node& pool, const Node& unsqueeze) {
    const Shape& shape = pool.input(0)->type.shape;
    const auto rank = static_cast<int64_t>(shape.size());
    const int64_t d = normalize_dim(unsqueeze.attr_int("dim"), rank);
    if (!squeeze.has_attr("dims") || squeeze.attr_ints("dims").size() != 1 ||
        normalize_dim(squeeze.attr_ints("dims")[0], rank) != d)
      return std::nullopt;
    const PoolSpec s = *pool_spec(pool);
    const int64_t lead = rank - s.dims;
    if (d < lead) {  // a kept dim: the input keeps one at least
      if (lead < 2) return std::nullopt;
    } else {
      const auto j = static_cast<size_t>(d - lead);
      if (s.dims < 2 || s.kernel[j] != 1 || s.stride[j] != 1 || s.padding[j] != 0 || s.dilation[j] != 1)
        return std::nullopt;
    }
    return static_cast<size_t>(d);
  }

  // The pool's attributes without the pooled dim `d`'s entries, if it is one.
  static Attrs dropped(const Node& pool, size_t d) {
    Attrs attrs = pool.attrs;
    const size_t rank = pool.input(0)->type.shape.size(), dims = pool.attr_ints("kernel").size();
    if (d < rank - dims) return attrs;
    for (const char* key : {"kernel", "stride", "padding", "dilation"}) {
      if (!pool.has_attr(key)) continue;
      std::vector<int64_t> v = pool.attr_ints(key);
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(d - (rank - dims)));
      attrs[key] = v;
    }
    return attrs;
  }
};

}  // namespace

std::unique_ptr<Pass> make_drop_unit_pool_dim() { return std::make_unique<DropUnitPoolDim>(); }

}  // namespace ff::passes
