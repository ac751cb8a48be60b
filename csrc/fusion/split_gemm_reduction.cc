#include "fusion/split_gemm_reduction.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

namespace ff::fusion {

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

}  // namespace

bool split_gemm_reductions(Graph& g, const std::vector<DType>& gemm_dtypes) {
  if (std::find(gemm_dtypes.begin(), gemm_dtypes.end(), DType::f32) == gemm_dtypes.end()) return false;
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
    auto spec = match_gemm(*epilogue->matmul);
    // An f16/bf16 matmul cast to f32 would not take the blocks in (partition.h).
    if (!spec || spec->dtype != DType::f32 ||
        (epilogue->reads.size() == 1 && !use_as_source(*spec, *epilogue->reads[0])))
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

}  // namespace ff::fusion
