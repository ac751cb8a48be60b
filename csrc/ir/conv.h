#pragma once
// A convolution node's parameters, read once from its operands and attributes
// for the passes, schedulers and front end that reason about convolutions.
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace ff {

struct ConvSpec {
  DType dtype = DType::f32;
  int dims = 2;  // spatial dims (1, 2 or 3)
  bool transposed = false;
  int64_t batch = 0;
  int64_t in_channels = 0;   // of the input x
  int64_t out_channels = 0;  // of the result
  int64_t groups = 1;
  Shape input_size, output_size, kernel;            // spatial extents
  Shape stride, padding, dilation, output_padding;  // one per spatial dim
  bool has_bias = false;
  // f32 only: the math the convolution may use (its fp32_precision attribute,
  // conv_precision.cc): TF32, or IEEE fp32 (none: not decided, taken as IEEE).
  bool tf32 = false;

  int64_t in_per_group() const { return in_channels / groups; }
  int64_t out_per_group() const { return out_channels / groups; }
  // One input channel per group (groups > 1): a depthwise (or depthwise-multiplier) conv.
  bool depthwise() const { return groups > 1 && in_per_group() == 1; }
  // Several groups with several input channels each.
  bool grouped() const { return groups > 1 && in_per_group() > 1; }
  // Multiply-adds times two.
  double flops() const;
  // As an implicit GEMM (no groups): M = batch x output pixels, K = input
  // channels x kernel window. A transposed conv is one GEMM per phase (each
  // output pixel's position modulo the stride, which fixes the window taps
  // that reach it): M = the phases' pixels, each phase a grid of output
  // size / stride (rounded up) a sample; K = input channels x the taps of a
  // phase (kernel / stride, rounded up, a dim). Where the phases are packed
  // (phases_packed), one GEMM computes them all: M = batch x the grid of
  // input-aligned pixels (phase_grid), N = phases x output channels.
  int64_t gemm_m() const;
  int64_t gemm_n() const;
  int64_t gemm_k() const;
  int64_t phases() const;  // stride product of a transposed conv; 1 otherwise
  // A transposed 2-D conv whose strides divide its window (every phase has
  // all kernel / stride taps a dim) and whose column stride divides 8 (a
  // warp's stores take all column phases of its channels together,
  // sm90_ss_mainloop.h): phase (ph, pw)'s output pixel (stride_h i + ph -
  // pad_h, stride_w j + pw - pad_w) takes tap (ph + stride_h th, pw +
  // stride_w tw) from input pixel (i - th, j - tw), so every phase of grid
  // pixel (i, j) reads the same input pixels and the phases are columns of
  // one GEMM: column (ph, output channel, pw), pw innermost.
  bool phases_packed() const;
  // Spatial dim d's grid pixels i (phases_packed) that some phase's output
  // pixel lies at: [first, first + extent).
  struct GridRange {
    int64_t first = 0, extent = 0;
  };
  GridRange phase_grid(size_t d) const;
  // Bytes at the conv's dtype of the input, the weight, the result, all three.
  double input_bytes() const;
  double weight_bytes() const;
  double output_bytes() const;
  double bytes() const { return input_bytes() + weight_bytes() + output_bytes(); }
};

// The parameters of a convolution node (stride etc. broadcast to every spatial
// dim); nullopt for any other node or a shape that does not fit.
std::optional<ConvSpec> conv_spec(const Node& n);

// What identifies a convolution's numerics to the front end's precision probe:
// dtype, input and weight shapes and strides, stride, padding, dilation,
// transposition, output padding and groups (not the bias: ATen adds it
// separately, the conv kernel is the same). One line, stable across versions.
std::string conv_signature(const Node& conv);

// cuDNN's milliseconds for a convolution on contiguous and on channels-last
// operands, timed on the GPU the plan is for (the front end's probe,
// runtime/conv_probe.py); the cost model's cuDNN figures give way to them.
struct CudnnTimes {
  double contiguous_ms = 0;
  double channels_last_ms = 0;
};
// The times conv_precision recorded on a convolution (its attributes
// cudnn_contiguous_ms and cudnn_channels_last_ms), if any.
std::optional<CudnnTimes> measured_cudnn(const Node& conv);
// Our direct kernel's milliseconds for the conv alone, timed where the cost
// model could not tell it from cuDNN (runtime/conv_probe.py): the attribute
// direct_ms conv_precision recorded, if any.
std::optional<double> measured_direct_ms(const Node& conv);

// The engine a convolution runs on: its `engine` attribute, which the
// conv_engine pass sets once ("cudnn": ATen's call, "implicit_gemm" and
// "direct": generated kernels, kernel/conv.h) and the conv scheduler reads;
// nullopt where no pass has decided (the conv stays cuDNN's).
enum class ConvEngine { cudnn, implicit_gemm, direct };
std::string_view conv_engine_name(ConvEngine e);
// Throws IRError on an engine name it does not know.
std::optional<ConvEngine> conv_engine(const Node& conv);

// Channels-last strides of a [N, C, spatial...] shape: C unit-stride, then
// the spatial dims in order, N outermost (torch.channels_last / _3d).
Shape channels_last_strides(const Shape& shape);
// Whether `t` (rank >= 3) is laid out channels-last: C unit-stride and dense.
bool is_channels_last(const TensorType& t);

}  // namespace ff
