// conv_bias_epilogue: moves a convolution's bias into the pointwise code after it.
//
//   %y = convolution(%x, %w, %b) ; %z = <pointwise>(%y, ...)
// becomes
//   %c = convolution(%x, %w) ; %bv = view(%b) : [C,1,..,1] ; %y = add(%c, %bv)
//
// cuDNN adds a bias in a separate pass over the output; as a pointwise add it
// fuses into the kernel that already reads the output. Done only when every
// user of the result is pointwise or a reduction (whose kernel takes the add
// in as its prologue), so the add always lands in an existing kernel.
//
// Group and instance norms read the result through a reshape (channels split
// into groups; batch and channels merged): the add then follows the reshape,
// the bias reshaped alike, and expanded over the dims its channels merge with
// (instance norm's batch) where it is not a broadcast there:
//   %c = convolution(%x, %w) ; %r = view(%c) ; %y = add(%r, <bias as %r's>)

#include <algorithm>

#include "kernel/reduction_staging.h"
#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/split_long_reduction.h"

namespace ff::passes {

namespace {

// Whether every user of `v` (a convolution's result) is pointwise or a
// reduction. For a 2-D convolution only reductions over the channels, or ones
// split_long_reduction splits, or over H and W: the add makes conv_engine run
// it NHWC, where a reduction over the channels reads rows of unit stride (a
// softmax over them staging its NCHW result through shared memory, up to the
// row length that allows) and a batch norm's statistics over N, H, W partials
// of many columns, but another over N, H, W would have few columns, and
// layer_norm would write its NCHW result across rows (uncoalesced).
bool feeds_only_fusible(const Graph& g, const Value* v, bool maybe_nhwc) {
  if (g.is_graph_output(v)) return false;
  auto users = g.users(v);
  if (users.empty()) return false;
  const bool nhwc_next = maybe_nhwc && v->type.shape.size() == 4;
  for (const Node* u : users) {
    if (op_kind(u->op) == OpKind::Pointwise) continue;
    if (op_kind(u->op) != OpKind::Reduction) return false;
    if (!nhwc_next) continue;
    const bool softmax = u->op == Op::Softmax || u->op == Op::LogSoftmax;
    const std::vector<int64_t> dims = !softmax && u->has_attr("dims") ? u->attr_ints("dims") : std::vector<int64_t>{};
    const bool over_channels = softmax ? u->attr_int("dim") == 1 : dims == std::vector<int64_t>{1};
    if (softmax && over_channels && v->type.shape[1] <= fusion::max_staged_row_length(v->type.dtype)) continue;
    // Instance norm's statistics (per sample and channel, over H, W): a
    // column reduction over the NHWC rows, the bias add its prologue.
    const bool over_spatial = dims == std::vector<int64_t>{2, 3};
    if (softmax || u->op == Op::LayerNorm || !(over_channels || over_spatial || splits_into_partials(*u))) return false;
  }
  return true;
}

// The dims of a reshape from `from` to `to`, in groups of equal element
// count: {0,1} -> {0,1} for [64,96,H,W] -> [1,6144,H,W]. Empty if the
// extents do not factor so.
struct DimGroup {
  std::vector<size_t> from, to;
};
std::vector<DimGroup> reshape_groups(const Shape& from, const Shape& to) {
  std::vector<DimGroup> groups;
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    DimGroup grp;
    int64_t a = 1, b = 1;
    if (i < from.size()) a *= from[i], grp.from.push_back(i++);
    if (j < to.size()) b *= to[j], grp.to.push_back(j++);
    while (a != b) {
      if (a < b && i < from.size())
        a *= from[i], grp.from.push_back(i++);
      else if (b < a && j < to.size())
        b *= to[j], grp.to.push_back(j++);
      else
        return {};
    }
    groups.push_back(std::move(grp));
  }
  return groups;
}

// The reshape group holding the channels (dim 1).
const DimGroup* channel_group(const std::vector<DimGroup>& groups) {
  for (const DimGroup& grp : groups)
    if (std::find(grp.from.begin(), grp.from.end(), size_t{1}) != grp.from.end()) return &grp;
  return nullptr;
}

// The only user of a conv's result when it is a view.
Node* only_view(const Graph& g, const Value* y) {
  auto users = g.users(y);
  return users.size() == 1 && users[0]->op == Op::View && !g.is_graph_output(y) ? users[0] : nullptr;
}

class ConvBiasEpilogue : public Pass {
 public:
  std::string_view name() const override { return "conv_bias_epilogue"; }

  bool run(Graph& g) override {
    std::vector<Node*> candidates;
    for (auto& n : g.nodes())
      if (movable(g, *n)) candidates.push_back(n.get());
    std::vector<Node*> dead;  // the reshapes replaced, then the convs
    for (Node* conv : candidates) {
      Value* y = conv->result();
      Value* bias = conv->operands[2].value;
      const TensorType& t = y->type;
      Node* bare = g.insert_before(conv, Op::Convolution, {conv->operands[0], conv->operands[1]}, {t}, conv->attrs);
      if (Node* reshape = only_view(g, y)) {
        add_after_view(g, bare->result(), bias, reshape);
        dead.push_back(reshape);
        continue;
      }
      Shape per_channel(t.shape.size() - 1, 1);
      per_channel[0] = t.shape[1];
      Node* view = g.insert_before(conv, Op::View, {Operand::of(bias)}, {TensorType::contiguous(t.dtype, per_channel)});
      Node* add = g.insert_before(conv, Op::Add, {Operand::of(bare->result()), Operand::of(view->result())}, {t});
      g.replace_all_uses(y, add->result());
    }
    if (candidates.empty()) return false;
    dead.insert(dead.end(), candidates.begin(), candidates.end());
    g.erase_nodes(dead);
    return true;
  }

 private:
  // A convolution with a per-output-channel bias whose result only pointwise
  // code and reductions read.
  static bool movable(const Graph& g, const Node& n) {
    if (n.op != Op::Convolution || n.operands.size() != 3 || !n.operands[2].is_value()) return false;
    const TensorType& bias = n.operands[2].value->type;
    const TensorType& out = n.result()->type;
    if (bias.shape.size() != 1 || bias.shape[0] != out.shape.at(1) || bias.dtype != out.dtype) return false;
    if (const Node* reshape = only_view(g, n.result()))
      return channel_group(reshape_groups(out.shape, reshape->result()->type.shape)) != nullptr &&
             feeds_only_fusible(g, reshape->result(), false);
    return feeds_only_fusible(g, n.result(), true);
  }

  // %r = view(%c) -> %r' = view(%c) ; add(%r', bias shaped as %r): the bias
  // viewed over the conv's dims, expanded (and copied) over those the
  // channels merge with, then viewed over the reshape's.
  static void add_after_view(Graph& g, Value* c, Value* bias, Node* reshape) {
    const TensorType& t = c->type;
    const TensorType& r = reshape->result()->type;
    const std::vector<DimGroup> groups = reshape_groups(t.shape, r.shape);
    const DimGroup& grp = *channel_group(groups);
    Shape per_channel(t.shape.size(), 1), expanded(t.shape.size(), 1), reshaped(r.shape.size(), 1);
    per_channel[1] = t.shape[1];
    for (size_t d : grp.from) expanded[d] = t.shape[d];
    for (size_t d : grp.to) reshaped[d] = r.shape[d];
    Value* b = g.insert_before(reshape, Op::View, {Operand::of(bias)}, {TensorType::contiguous(t.dtype, per_channel)})
                   ->result();
    if (expanded != per_channel) {
      TensorType wide = TensorType::contiguous(t.dtype, expanded);
      wide.strides = TensorType::contiguous(t.dtype, per_channel).strides;
      for (size_t d = 0; d < expanded.size(); ++d)
        if (per_channel[d] != expanded[d]) wide.strides[d] = 0;
      b = g.insert_before(reshape, Op::Expand, {Operand::of(b)}, {wide})->result();
      b = g.insert_before(reshape, Op::Copy, {Operand::of(b)}, {TensorType::contiguous(t.dtype, expanded)})->result();
    }
    b = g.insert_before(reshape, Op::View, {Operand::of(b)}, {TensorType::contiguous(t.dtype, reshaped)})->result();
    Value* moved = g.insert_before(reshape, Op::View, {Operand::of(c)}, {r})->result();
    Node* add = g.insert_before(reshape, Op::Add, {Operand::of(moved), Operand::of(b)}, {r});
    g.replace_all_uses(reshape->result(), add->result());
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_bias_epilogue() { return std::make_unique<ConvBiasEpilogue>(); }

}  // namespace ff::passes
