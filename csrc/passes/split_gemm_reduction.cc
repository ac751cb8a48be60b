// split_gemm_reduction: lets a GEMM kernel reduce its epilogue's values. A
// reduction over the last or second-last dim of a matmul's result (after
// pointwise ops of its shape) is split into a reduction over blocks of that
// dim and a reduction of the block partials,
//
//   %s = sum(%y) {dims=[1], keepdim=false} : [M]        (%y: [M, N], N = T * B)
// becomes
//   %v = view(%y) : [M, T, B]
//   %p = sum(%v) {dims=[2], keepdim=false} : [M, T]
//   %s = sum(%p) {dims=[1], keepdim=false} : [M]
//
// and the GEMM scheduler takes the view and the block reduction into the GEMM's
// group (gemm_scheduler.cc), so the kernel writes M x T partials, not M x N
// values. sum, amax, amin and mean (a mean of equal-size block means) of f32.
// B is the largest of 64, 32 and 16 that divides the dim: every GEMM tile's
// sides are multiples of 64, so no block straddles two tiles.
//
// Only f32 matmuls that match_gemm accepts are split, and the pipeline runs
// this pass only where f32 matmuls become GEMM kernels (compile.cc): where
// they stay library calls the split would only add work.
#include <algorithm>
#include <optional>
#include <unordered_set>

#include "kernel/gemm.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

bool block_reducible(Op op) { return op == Op::Sum || op == Op::Mean || op == Op::Amax || op == Op::Amin; }

// The matmul whose result reaches `y` through pointwise nodes of y's shape,
// each read only inside that set (and no graph output), and what else they
// read: as the partitioner's epilogues, at most one tensor that the GEMM
// takes as its source operand.
struct Epilogue {
  const Node* matmul = nullptr;
  std::vector<const Value*> reads;  // values from outside, the matmul's operands excepted
};

std::optional<Epilogue> epilogue_of(const Graph& g, const Value* y, const Node* reduce) {
  const Shape& shape = y->type.shape;
  std::vector<const Node*> inside{reduce};
  std::vector<const Value*> work{y};
  Epilogue e;
  std::unordered_set<const Value*> seen;
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    const Node* p = v->producer;
    const bool pointwise = p != nullptr && op_kind(p->op) == OpKind::Pointwise && v->type.shape == shape;
    if (p != nullptr && op_kind(p->op) == OpKind::Matmul && v->type.shape == shape) {
      if (e.matmul != nullptr && e.matmul != p) return std::nullopt;
      e.matmul = p;
    } else if (!pointwise) {
      e.reads.push_back(v);
      continue;
    } else {
      for (const Operand& o : p->operands)
        if (o.is_value()) work.push_back(o.value);
    }
    inside.push_back(p);
  }
  if (e.matmul == nullptr) return std::nullopt;
  for (const Node* n : inside) {
    if (n == reduce) continue;
    if (g.is_graph_output(n->result())) return std::nullopt;
    for (const Node* u : g.users(n->result()))
      if (std::find(inside.begin(), inside.end(), u) == inside.end()) return std::nullopt;
  }
  return e;
}

bool split(Graph& g) {
  using fusion::kMaxReduceBlock, fusion::kMinReduceBlock;
  std::vector<Node*> reductions;
  for (auto& n : g.nodes())
    if (block_reducible(n->op) && n->operands[0].is_value()) reductions.push_back(n.get());
  bool changed = false;
  for (Node* r : reductions) {
    Value* y = r->input(0);
    const int64_t rank = static_cast<int64_t>(y->type.shape.size());
    if (y->type.dtype != DType::f32 || r->result()->type.dtype != DType::f32 || !y->type.is_contiguous() ||
        !r->has_attr("dims"))
      continue;
    const auto& dims = r->attr_ints("dims");
    if (dims.size() != 1 || rank < 2 || rank > 3) continue;
    const int64_t d = normalize_dim(dims[0], rank);
    if (d < rank - 2) continue;  // the batch dim of a bmm
    const auto epilogue = epilogue_of(g, y, r);
    if (!epilogue || epilogue->reads.size() > 1) continue;
    auto spec = fusion::match_gemm(*epilogue->matmul);
    // An f16/bf16 matmul cast to f32 would not take the blocks in (partition.h).
    if (!spec || spec->dtype != DType::f32 ||
        (epilogue->reads.size() == 1 && !fusion::use_as_source(*spec, *epilogue->reads[0])))
      continue;
    const int64_t extent = y->type.shape[d];
    int64_t block = kMaxReduceBlock;
    while (block >= kMinReduceBlock && extent % block != 0) block /= 2;
    if (block < kMinReduceBlock) continue;
    Shape split = y->type.shape;
    split[d] = extent / block;
    split.insert(split.begin() + d + 1, block);
    Value* v = g.insert_before(r, Op::View, {Operand::of(y)}, {TensorType::contiguous(DType::f32, split)})->result();
    Shape partial = split;
    partial.erase(partial.begin() + d + 1);
    Value* p = g.insert_before(r, r->op, {Operand::of(v)}, {TensorType::contiguous(DType::f32, partial)},
                               {{"dims", std::vector<int64_t>{d + 1}}, {"keepdim", false}})
                   ->result();
    r->operands[0] = Operand::of(p);
    r->attrs["dims"] = std::vector<int64_t>{d};
    changed = true;
  }
  return changed;
}

class SplitGemmReduction final : public Pass {
 public:
  std::string_view name() const override { return "split_gemm_reduction"; }
  bool run(Graph& g) override { return split(g); }
};

}  // namespace

std::unique_ptr<Pass> make_split_gemm_reduction() { return std::make_unique<SplitGemmReduction>(); }

}  // namespace ff::passes
