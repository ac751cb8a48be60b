// conv_precision: records on every f32 convolution the math it may use, as
// the attribute fp32_precision = "ieee" | "tf32" (torch's own names).
//
// The fp32 policy promises each convolution an error against fp64 at most
// twice eager's for the same conv under the same flags. cuDNN chooses TF32
// per algorithm: eager's NCHW conv of one shape may run in full fp32 while
// the channels-last conv of the same shape runs TF32 (measured: 3.4e-4 against
// 1.9e-7), so a layout change alone can bring TF32 in. Hence a conv may use
// TF32 only under the opt-in "tf32" policy or where eager's own conv of that
// signature does (PassOptions::eager_conv_tf32, probed once per signature on
// the GPU by the front end); anything unknown is IEEE. The attribute is what
// the library call applies (cuDNN's TF32 switch around it), what a conv kernel
// compiles to (1xTF32 or 3xTF32) and what explain prints.
//
// Where the front end timed cuDNN on a conv's signature (PassOptions::
// conv_cudnn), the times go on the conv too, as cudnn_contiguous_ms and
// cudnn_channels_last_ms (measured_cudnn()): the conv scheduler weighs its
// kernels against them, after the conv's operands, and so its signature,
// changed. Our direct kernel's time, where the front end timed it as well
// (PassOptions::conv_direct_ms), goes on as direct_ms (measured_direct_ms()).
//
// A convolution that already has the attribute keeps it: the decision is
// made once, on the captured graph, before other passes change the conv.
#include "ir/conv.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

class ConvPrecision : public Pass {
 public:
  std::string_view name() const override { return "conv_precision"; }

  void configure(const PassOptions& options) override {
    tf32_ = options.tf32;
    eager_ = &options.eager_conv_tf32;
    cudnn_ = &options.conv_cudnn;
    direct_ = &options.conv_direct_ms;
  }

  bool run(Graph& g) override {
    bool changed = false;
    for (auto& n : g.nodes()) {
      if (n->op != Op::Convolution || !conv_spec(*n)) continue;
      const std::string signature = conv_signature(*n);
      if (cudnn_ != nullptr && !n->has_attr("cudnn_contiguous_ms")) {
        auto it = cudnn_->find(signature);
        if (it != cudnn_->end()) {
          n->attrs["cudnn_contiguous_ms"] = it->second.contiguous_ms;
          n->attrs["cudnn_channels_last_ms"] = it->second.channels_last_ms;
          changed = true;
        }
      }
      if (direct_ != nullptr && !n->has_attr("direct_ms")) {
        auto it = direct_->find(signature);
        if (it != direct_->end()) {
          n->attrs["direct_ms"] = it->second;
          changed = true;
        }
      }
      if (n->has_attr("fp32_precision") || n->result()->type.dtype != DType::f32) continue;
      n->attrs["fp32_precision"] = std::string(tf32_ || eager_tf32(signature) ? "tf32" : "ieee");
      changed = true;
    }
    return changed;
  }

 private:
  bool tf32_ = false;
  const std::map<std::string, bool>* eager_ = nullptr;
  const std::map<std::string, CudnnTimes>* cudnn_ = nullptr;
  const std::map<std::string, double>* direct_ = nullptr;

  bool eager_tf32(const std::string& signature) const {
    if (eager_ == nullptr) return false;
    auto it = eager_->find(signature);
    return it != eager_->end() && it->second;
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_precision() { return std::make_unique<ConvPrecision>(); }

}  // namespace ff::passes
