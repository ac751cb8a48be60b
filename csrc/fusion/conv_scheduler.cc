// ConvScheduler: each convolution whose engine (conv_engine's choice, its
// `engine` attribute) is a generated kernel (kernel/conv.h: an implicit GEMM
// over channels-last operands, or a direct kernel over any) becomes a group,
// with the pointwise group that reads its result as the kernel's epilogue:
// bias, activations, scale, clamp, per-channel ops, residuals, so that the
// result is written once, in whatever layout the epilogue's output has. A
// direct kernel also takes in a reduction over the output channels that alone
// reads the conv (a min, max, sum, mean or logsumexp over dim 1, with the
// pointwise work before and after it): its result is then never written.
// Either way the epilogue's group is kept (Partition::library_epilogues) for
// the kernel's library form: cuDNN's conv, then that group's own kernel.
// Nothing here weighs engines: a conv whose kernel cannot be built as it
// stands (a transposed conv off Hopper) stays cuDNN's.
#include <unordered_set>
#include <utility>

#include "codegen/cuda/conv.h"
#include "codegen/cuda/conv_direct.h"
#include "codegen/cuda/conv_sm90.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

class ConvScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Conv; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    for (auto& n : p.graph().nodes()) {
      if (n->op != Op::Convolution) continue;
      const auto engine = conv_engine(*n);
      if (!engine || *engine == ConvEngine::cudnn) continue;
      const auto epilogue = epilogue_group(p, n.get());
      const auto reduction = epilogue ? std::nullopt : channel_reduction(p, n.get());
      std::optional<ConvKernelSpec> spec;
      if (*engine == ConvEngine::direct) {
        spec = match_direct_conv(*n);
        // A block computes one group's channels: a reduction over all needs one group.
        if (spec && reduction && spec->conv.groups == 1) spec->channel_reduce = reduction->second;
      } else {
        spec = match_conv_kernel(*n);
        // A transposed conv's only kernel: Hopper's, on rounded operands.
        if (spec && spec->conv.transposed && !(hopper(*spec, options) && spec->rounded_operands)) spec.reset();
      }
      if (!spec) continue;
      std::vector<Node*> members{n.get()};
      std::optional<int> fused = epilogue;
      if (spec->channel_reduce != ConvKernelSpec::ChannelReduce::none) fused = reduction->first;
      std::optional<Group::Kind> fused_kind;
      if (fused) {
        fused_kind = p.describe(*fused).kind;
        std::vector<Node*> ep = p.release(*fused);
        members.insert(members.end(), ep.begin(), ep.end());
      }
      const int group = p.add_group(Group::Kind::Conv, std::move(members), {}, *spec);
      // Where cuDNN's conv times faster (or the kernel does not build), the
      // epilogue is still one kernel: the group it would have been unfused.
      if (fused_kind) p.set_library_epilogue(group, *fused_kind);
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    if (g.conv.direct) return codegen::generate_conv_direct(g, g.conv, id, options.target);
    if (hopper(g.conv, options)) return codegen::generate_conv_sm90(g, g.conv, id, options.target);
    return codegen::generate_conv(g, g.conv, id, options.target);
  }

  // Autotuning's other candidates: CUTLASS's tiles (all of them beside a
  // Hopper kernel; none for a transposed conv, which CUTLASS's forms do not compute).
  std::vector<codegen::KernelSource> variants(const Group& g, int id, const FusionOptions& options) const override {
    if (g.conv.direct || g.conv.conv.transposed) return {};
    std::vector<codegen::KernelSource> out = codegen::conv_variants(g, g.conv, id, options.target);
    if (hopper(g.conv, options)) out.insert(out.begin(), codegen::generate_conv(g, g.conv, id, options.target));
    return out;
  }

 private:
  static bool hopper(const ConvKernelSpec& spec, const FusionOptions& options) {
    return options.arch == 90 && codegen::sm90_conv_applies(spec);
  }

  // The pointwise group that can be `conv`'s epilogue (pointwise_epilogue)
  // when it computes one floating output and reads no scalar inputs (kernel
  // arguments the conv kernel does not take).
  static std::optional<int> epilogue_group(const PartitionBuilder& p, const Node* conv) {
    const auto gi = p.pointwise_epilogue(conv);
    if (!gi) return std::nullopt;
    const Group pg = p.describe(*gi);
    if (pg.outputs.size() != 1) return std::nullopt;
    const DType out = pg.outputs[0]->type.dtype;
    if (!(out == DType::f32 || out == DType::f16 || out == DType::bf16)) return std::nullopt;
    for (const Value* v : pg.inputs)
      if (v->is_input() && v->input_kind == InputKind::Scalar) return std::nullopt;
    return gi;
  }

  // The reduction group that can end `conv`'s direct kernel, and how it
  // combines: it holds every user of the conv's result, computes one f32
  // output and one reduction, a min, max, sum, mean or logsumexp over the channels
  // (dim 1) of a value computed per element from the result (pointwise
  // nodes of the result's shape, reading per-channel vectors and the like),
  // and after it pointwise nodes that read nothing from outside the group.
  static std::optional<std::pair<int, ConvKernelSpec::ChannelReduce>> channel_reduction(const PartitionBuilder& p,
                                                                                        const Node* conv) {
    using R = ConvKernelSpec::ChannelReduce;
    const auto gi = p.group_of_all_users(conv);
    if (!gi) return std::nullopt;
    const Group rg = p.describe(*gi);
    if (rg.kind != Group::Kind::Reduction || rg.outputs.size() != 1 || rg.outputs[0]->type.dtype != DType::f32)
      return std::nullopt;
    const Shape& shape = conv->result()->type.shape;
    std::optional<R> how;
    std::unordered_set<const Value*> reduced;  // the reduction's result and what the nodes after it compute
    for (const Node* m : rg.nodes) {
      if (how) {  // after the reduction: reads those and literals only
        if (op_kind(m->op) != OpKind::Pointwise) return std::nullopt;
        for (const Operand& o : m->operands)
          if (o.is_value() && reduced.count(o.value) == 0) return std::nullopt;
        reduced.insert(m->result());
        continue;
      }
      if (op_kind(m->op) == OpKind::Pointwise) {
        if (m->result()->type.shape != shape) return std::nullopt;
        continue;
      }
      const R r = m->op == Op::Amin        ? R::min
                  : m->op == Op::Amax      ? R::max
                  : m->op == Op::Sum       ? R::sum
                  : m->op == Op::Mean      ? R::mean
                  : m->op == Op::Logsumexp ? R::logsumexp
                                           : R::none;
      const std::vector<int64_t>& dims = m->has_attr("dims") ? m->attr_ints("dims") : std::vector<int64_t>{};
      if (r == R::none || dims.size() != 1 || normalize_dim(dims[0], static_cast<int64_t>(shape.size())) != 1 ||
          m->input(0)->type.shape != shape || m->result()->type.dtype != DType::f32)
        return std::nullopt;
      how = r;
      reduced.insert(m->result());
    }
    if (!how) return std::nullopt;
    return std::make_pair(*gi, *how);
  }
};

}  // namespace

const Scheduler& conv_scheduler() {
  static const ConvScheduler s;
  return s;
}

}  // namespace ff::fusion
