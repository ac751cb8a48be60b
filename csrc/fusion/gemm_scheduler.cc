// GemmScheduler: each matmul a generated GEMM kernel covers (gemm.h) becomes a
// group, with the pointwise group that reads its result as the kernel's
// epilogue and a block reduction after it (split_gemm_reduction) folded in.
// It picks the kernel: on Hopper our warp-specialized wgmma kernel where it
// applies (gemm_sm90.h), else a CUTLASS 2.x kernel with the cost model's tile.
#include <algorithm>
#include <array>

#include "codegen/cuda/gemm.h"
#include "codegen/cuda/gemm_sm90.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

class GemmScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Gemm; }

  // The pointwise group that holds all of a matmul's users joins it as the
  // epilogue where it can, so the GEMM writes only the epilogue's output.
  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    for (auto& n : p.graph().nodes()) {
      auto spec = generated_gemm(*n, options);
      if (!spec) continue;
      std::vector<Node*> members{n.get()};
      if (const auto epilogue = epilogue_group(p, n.get(), *spec)) {
        std::vector<Node*> ep = p.release(*epilogue);
        members.insert(members.end(), ep.begin(), ep.end());
      }
      if (auto blocks = block_reduction(p, members.back(), *spec))
        members.insert(members.end(), blocks->begin(), blocks->end());
      p.add_group(Group::Kind::Gemm, std::move(members), *spec);
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    if (hopper(g, options)) return codegen::generate_gemm_sm90(g, g.gemm, id);
    return codegen::generate_gemm(g, g.gemm, id, options.target);
  }

  // The cost model's other tiles; the Hopper kernel has one tile.
  std::vector<codegen::KernelSource> variants(const Group& g, int id, const FusionOptions& options) const override {
    if (hopper(g, options)) return {};
    return codegen::gemm_variants(g, g.gemm, id, options.target);
  }

 private:
  static bool hopper(const Group& g, const FusionOptions& options) {
    return options.arch == 90 && codegen::sm90_gemm_applies(g.gemm);
  }

  // The pointwise group that can be `mm`'s epilogue: it holds every user of
  // the matmul's result (which is no graph output), has one output of the
  // result's type and reads no other value, except one that the GEMM can take
  // as its source operand (then `spec` is updated to read it).
  static std::optional<int> epilogue_group(const PartitionBuilder& p, const Node* mm, GemmSpec& spec) {
    const Value* r = mm->result();
    const auto gi = p.group_of_all_users(mm);
    if (!gi) return std::nullopt;
    const Group pg = p.describe(*gi);
    if (pg.kind != Group::Kind::Pointwise) return std::nullopt;
    if (pg.outputs.size() != 1 || !(pg.outputs[0]->type == r->type)) return std::nullopt;
    for (const Node* m : pg.nodes)
      if (m->result()->type.shape != r->type.shape) return std::nullopt;
    std::vector<const Value*> others;
    for (const Value* v : pg.inputs)
      if (v != r) others.push_back(v);
    if (others.size() > 1) return std::nullopt;
    if (others.size() == 1) {
      GemmSpec with = spec;
      if (!use_as_source(with, *others[0])) return std::nullopt;
      spec = with;
    }
    return gi;
  }

  // The view and the block reduction that read `last`'s result (the GEMM's
  // epilogue output), as split_gemm_reduction writes them, if any: then
  // `spec` says how the kernel reduces.
  static std::optional<std::array<Node*, 2>> block_reduction(const PartitionBuilder& p, const Node* last,
                                                             GemmSpec& spec) {
    if (spec.dtype != DType::f32 || p.feeds_graph_output(last) || p.users(last).size() != 1) return std::nullopt;
    Node* view = p.users(last).front();
    if (view->op != Op::View || p.feeds_graph_output(view) || p.users(view).size() != 1) return std::nullopt;
    Node* red = p.users(view).front();
    const Shape& in = last->result()->type.shape;
    const Shape& split = view->result()->type.shape;
    const int64_t rank = static_cast<int64_t>(in.size());
    if (split.size() != in.size() + 1 || !red->has_attr("dims") || red->attr_ints("dims").size() != 1 ||
        red->attr_bool_or("keepdim", false) || red->result()->type.dtype != DType::f32)
      return std::nullopt;
    const int64_t d = normalize_dim(red->attr_ints("dims")[0], rank + 1) - 1;  // the split dim; blocks: d + 1
    if (d != rank - 1 && d != rank - 2) return std::nullopt;
    const int64_t block = split[d + 1];
    Shape joined = split;
    joined[d] *= block;
    joined.erase(joined.begin() + d + 1);
    if (joined != in || block < kMinReduceBlock || kMaxReduceBlock % block != 0) return std::nullopt;
    switch (red->op) {
      case Op::Sum:
        spec.reduce = GemmSpec::Reduce::Sum;
        break;
      case Op::Mean:
        spec.reduce = GemmSpec::Reduce::Mean;
        break;
      case Op::Amax:
        spec.reduce = GemmSpec::Reduce::Max;
        break;
      case Op::Amin:
        spec.reduce = GemmSpec::Reduce::Min;
        break;
      default:
        return std::nullopt;
    }
    spec.reduce_rows = d == rank - 1;
    spec.reduce_block = static_cast<int>(block);
    return std::array<Node*, 2>{view, red};
  }
};

}  // namespace

std::optional<GemmSpec> generated_gemm(const Node& n, const FusionOptions& options) {
  auto spec = match_gemm(n);
  if (!spec ||
      std::find(options.gemm_dtypes.begin(), options.gemm_dtypes.end(), spec->dtype) == options.gemm_dtypes.end())
    return std::nullopt;
  spec->tf32 = options.tf32 && spec->dtype == DType::f32;
  return spec;
}

const Scheduler& gemm_scheduler() {
  static const GemmScheduler s;
  return s;
}

}  // namespace ff::fusion
