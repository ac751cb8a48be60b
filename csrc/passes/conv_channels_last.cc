// conv_channels_last: runs 2-D convolutions in channels-last (NHWC) layout
// when only pointwise code reads their result.
//
// cuDNN's NHWC kernels are about twice as fast as NCHW on Hopper for fp32
// (TF32) convolutions. The input and weight get a layout-changing `copy`, the
// convolution's result is declared NHWC, and the pointwise epilogue that
// already reads it writes the NCHW output eager returns (codegen stages such
// transposing reads through shared-memory tiles), so the layout change back
// costs nothing extra.
#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

Shape channels_last_strides(const Shape& s) {  // [N,C,H,W] -> {HWC, 1, WC, C}
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

class ConvChannelsLast : public Pass {
 public:
  std::string_view name() const override { return "conv_channels_last"; }

  bool run(Graph& g) override {
    std::vector<Node*> convs;
    for (auto& n : g.nodes())
      if (applies(g, *n)) convs.push_back(n.get());
    for (Node* conv : convs) {
      for (size_t i = 0; i < 2; ++i) {
        Value* v = conv->operands[i].value;
        TensorType t = v->type;
        t.strides = channels_last_strides(t.shape);
        if (v->type.strides == t.strides) continue;
        conv->operands[i] = Operand::of(g.insert_before(conv, Op::Copy, {Operand::of(v)}, {t})->result());
      }
      conv->result()->type.strides = channels_last_strides(conv->result()->type.shape);
    }
    return !convs.empty();
  }

 private:
  static bool applies(const Graph& g, const Node& n) {
    if (n.op != Op::Convolution || n.results.size() != 1) return false;
    const TensorType& t = n.result()->type;
    if (t.shape.size() != 4 || !is_floating(t.dtype) || t.dtype == DType::f64) return false;
    if (t.strides == channels_last_strides(t.shape)) return false;
    for (size_t i = 0; i < 2; ++i)
      if (!n.operands[i].is_value() || n.operands[i].value->type.shape.size() != 4) return false;
    return feeds_only_pointwise(g, n.result());
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_channels_last() { return std::make_unique<ConvChannelsLast>(); }

}  // namespace ff::passes
