// ConvScheduler: each convolution a generated kernel covers (conv.h: an
// implicit GEMM over channels-last operands, or a direct kernel over any)
// becomes a group where the cost model says the kernel beats cuDNN, with the
// pointwise group that reads its result as the kernel's epilogue: bias,
// activations, scale, clamp, per-channel ops, residuals, so that the result
// is written once, in whatever layout the epilogue's output has.
#include <algorithm>

#include "codegen/cuda/conv.h"
#include "codegen/cuda/conv_direct.h"
#include "codegen/cuda/conv_sm90.h"
#include "fusion/conv_cost.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

class ConvScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Conv; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (options.conv_dtypes.empty() && !options.conv_direct) return;
    for (auto& n : p.graph().nodes()) {
      if (n->op != Op::Convolution) continue;
      auto spec = match_conv_kernel(*n);
      if (spec && std::find(options.conv_dtypes.begin(), options.conv_dtypes.end(), spec->conv.dtype) ==
                      options.conv_dtypes.end())
        spec.reset();
      const auto epilogue = epilogue_group(p, n.get());
      if (spec && !options.conv_always && !kernel_is_faster(*spec, epilogue.has_value())) spec.reset();
      if (!spec && options.conv_direct) {
        spec = match_direct_conv(*n);
        if (spec && !direct_is_faster(*spec, *n, epilogue.has_value())) spec.reset();
      }
      if (!spec) continue;
      std::vector<Node*> members{n.get()};
      if (epilogue) {
        std::vector<Node*> ep = p.release(*epilogue);
        members.insert(members.end(), ep.begin(), ep.end());
      }
      p.add_group(Group::Kind::Conv, std::move(members), {}, *spec);
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    if (g.conv.direct) return codegen::generate_conv_direct(g, g.conv, id);
    if (hopper(g, options)) return codegen::generate_conv_sm90(g, g.conv, id);
    return codegen::generate_conv(g, g.conv, id);
  }

  // Autotuning's other candidates: CUTLASS's tiles (all of them beside a Hopper kernel).
  std::vector<codegen::KernelSource> variants(const Group& g, int id, const FusionOptions& options) const override {
    if (g.conv.direct) return {};
    std::vector<codegen::KernelSource> out = codegen::conv_variants(g, g.conv, id);
    if (hopper(g, options)) out.insert(out.begin(), codegen::generate_conv(g, g.conv, id));
    return out;
  }

 private:
  static bool hopper(const Group& g, const FusionOptions& options) {
    return options.arch == 90 && codegen::sm90_conv_applies(g.conv);
  }

  // The kernel against cuDNN's channels-last conv, which writes its result
  // and has the epilogue read it back.
  static bool kernel_is_faster(const ConvKernelSpec& spec, bool fuses_epilogue) {
    const ConvTimes t = conv_times(spec.conv, true);
    const double unfused = t.cudnn_channels_last + (fuses_epilogue ? copy_ms(spec.conv.output_bytes()) : 0.0);
    return t.kernel < unfused;
  }

  // The direct kernel against cuDNN in the conv's layout, which writes its
  // result and has the epilogue read it back.
  static bool direct_is_faster(const ConvKernelSpec& spec, const Node& conv, bool fuses_epilogue) {
    const ConvTimes t = conv_times(spec.conv, false, true);
    const double cudnn = is_channels_last(conv.input(0)->type) ? t.cudnn_channels_last : t.cudnn_nchw;
    return t.direct < cudnn + (fuses_epilogue ? copy_ms(spec.conv.output_bytes()) : 0.0);
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
};

}  // namespace

const Scheduler& conv_scheduler() {
  static const ConvScheduler s;
  return s;
}

}  // namespace ff::fusion
