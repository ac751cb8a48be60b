// split_gemm_k: a matmul with too few output tiles to fill the GPU and a long
// K becomes S matmuls over slices of K (one bmm) and the sum of their partial
// results (split-K).
//
//   %y = addmm(%bias, %a, %b) : f32[256,1000]       (%a: [256,2048], %b: [2048,1000])
// becomes
//   %0 = view(%a) : f32[256,8,256]
//   %1 = permute(%0) {dims=[1, 0, 2]} : f32[8,256,256]{256,2048,1}
//   %2 = view(%b) : f32[8,256,1000]
//   %3 = bmm(%1, %2) : f32[8,256,1000]
//   %4 = sum(%3) {dims=[0], keepdim=false} : f32[256,1000]
//   %y = add(%4, %bias) : f32[256,1000]
//
// A GEMM kernel gives each output tile (up to 128 x 128) one CTA: 256 x 1000
// is 16 CTAs on an H100's 132 SMs, each running all 2048 of K. Split 8 ways
// the bmm has 128 CTAs of 256 each; the sum (a column reduction in a fixed
// order: the same result every run) reads back 8 MB, and the bias and any
// pointwise work after it fuse into that reduction's kernel. Each slice is an
// fp32-accurate GEMM (a shorter one) and the slices are summed in fp32, so
// accuracy is that of the unsplit GEMM.
//
// Only f32 mm/addmm that match_gemm accepts (alpha 1, beta 0 or 1). Like
// split_gemm_reduction the pipeline runs it only where f32 matmuls become
// GEMM kernels (compile.cc): a library GEMM splits K itself.
#include <optional>

#include "kernel/gemm.h"
#include "passes/pass.h"
#include "passes/rewrites.h"

namespace ff::passes {

namespace {

constexpr int64_t kTile = 128;      // the largest GEMM tile's side: a CTA each
constexpr int64_t kMinSlice = 256;  // K per slice at least: 8 k-blocks of 32

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A matmul to split: `slices` of K, and whether it adds addmm's bias (beta 1).
struct Split {
  Node* n;
  int64_t slices;
  bool bias;
};

// About one wave of CTAs on `target`: the most, a power of two, its SMs run
// at once, one each (128 on an H100's 132 SMs).
int64_t wave_ctas(const Target& target) {
  int64_t w = 1;
  while (w * 2 <= target.sm_count) w *= 2;
  return w;
}

// How to split `n`, if at all: a power of two of slices that fills about one
// wave (`wave` CTAs), each kMinSlice or more of K.
std::optional<Split> plan_split(Node& n, int64_t wave) {
  if (n.op != Op::Mm && n.op != Op::Addmm) return std::nullopt;
  const auto spec = fusion::match_gemm(n);
  if (!spec || spec->dtype != DType::f32 || spec->alpha != 1.0 || (spec->beta != 0.0 && spec->beta != 1.0))
    return std::nullopt;
  const int64_t tiles = ceil_div(spec->m, kTile) * ceil_div(spec->n, kTile);
  if (tiles * 4 > wave) return std::nullopt;  // a quarter of the GPU or more: whole
  int64_t s = 1;
  while (tiles * s * 2 <= wave && spec->k % (s * 2) == 0 && spec->k / (s * 2) >= kMinSlice) s *= 2;
  if (s < 2) return std::nullopt;
  return Split{&n, s, n.op == Op::Addmm && spec->beta != 0.0};
}

Node* view(Graph& g, Rewrites& rw, Node* at, Value* x, Shape shape) {
  Node* v = rw.add(g, at, Op::View, {Operand::of(x)}, {TensorType::contiguous(x->type.dtype, shape)});
  v->result()->type = infer_result_types(*v).at(0);
  return v;
}

// Rewrites the matmul into its sliced products and their sum (applied by
// Rewrites::apply); false when the bmm is no GEMM kernel's (its nodes then
// dropped). Splitting one dim of a 2-D operand is always a view (no copy),
// whatever its strides.
bool split(Graph& g, Rewrites& rw, const Split& sp) {
  Node* n = sp.n;
  const int64_t s = sp.slices;
  const bool addmm = n->op == Op::Addmm;
  Value* a = n->input(addmm ? 1 : 0);
  Value* b = n->input(addmm ? 2 : 1);
  const TensorType& y = n->result()->type;
  const int64_t m = y.shape[0], cols = y.shape[1], k = a->type.shape[1], slice = k / s;
  Node* av = view(g, rw, n, a, {m, s, slice});
  Node* at =
      rw.add(g, n, Op::Permute, {Operand::of(av->result())}, {a->type}, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  at->result()->type = infer_result_types(*at).at(0);
  Node* bv = view(g, rw, n, b, {s, slice, cols});
  Node* bmm = rw.add(g, n, Op::Bmm, {Operand::of(at->result()), Operand::of(bv->result())},
                     {TensorType::contiguous(y.dtype, {s, m, cols})});
  if (!fusion::match_gemm(*bmm)) {
    std::vector<Node*>& added = rw.before[n];
    rw.dead.insert(rw.dead.end(), added.begin(), added.end());
    return false;
  }
  Node* sum = rw.add(g, n, Op::Sum, {Operand::of(bmm->result())}, {TensorType::contiguous(y.dtype, {m, cols})},
                     {{"dims", std::vector<int64_t>{0}}, {"keepdim", false}});
  Node* last = sum;
  if (sp.bias) last = rw.add(g, n, Op::Add, {Operand::of(sum->result()), Operand::of(n->input(0))}, {y});
  rw.moved[n->result()] = last->result();
  rw.dead.push_back(n);
  return true;
}

class SplitGemmK final : public Pass {
 public:
  std::string_view name() const override { return "split_gemm_k"; }
  void configure(const PassOptions& options) override { wave_ = wave_ctas(options.target); }

  bool run(Graph& g) override {
    std::vector<Split> todo;
    for (auto& n : g.nodes())
      if (auto sp = plan_split(*n, wave_)) todo.push_back(*sp);
    Rewrites rw;
    bool changed = false;
    for (const Split& sp : todo) changed |= split(g, rw, sp);
    rw.apply(g);
    return changed;
  }

 private:
  int64_t wave_ = wave_ctas(default_target());
};

}  // namespace

std::unique_ptr<Pass> make_split_gemm_k() { return std::make_unique<SplitGemmK>(); }

}  // namespace ff::passes
