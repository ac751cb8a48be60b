#pragma once
// Which convolutions a generated kernel computes, and how. An implicit-GEMM
// kernel (codegen/cuda/conv.h): forward 2-D and 3-D convs without groups
// whose input, weight and result are channels-last (conv_engine puts them
// so), in f32 (3xTF32, or 1xTF32 where the conv's fp32_precision is "tf32"),
// f16 or bf16; as an implicit GEMM: M = batch x output pixels, N = output
// channels, K = input channels x kernel window. Transposed 2-D 1xTF32 convs
// too, on Hopper, one GEMM per phase of the stride (ConvSpec::gemm_m). A direct kernel
// (codegen/cuda/conv_direct.h): forward 2-D and 3-D f32 convs of any groups and
// layout, in IEEE f32, where the conv's math is IEEE. Anything else stays a
// cuDNN call.
#include <optional>

#include "ir/conv.h"

namespace ff::fusion {

struct ConvKernelSpec {
  ConvSpec conv;
  // Elements per vector load of the input and weight (CUTLASS's access size):
  // the largest power of two up to 16 bytes dividing the input channels (3-D
  // convs: 16 bytes, their only form).
  int alignment = 1;
  bool direct = false;  // a direct kernel (conv_direct.h), not an implicit GEMM
  // A 1xTF32 conv whose input and weight are round_tf32 results
  // (round_conv_operands): its kernel reads them as loaded.
  bool rounded_operands = false;
  // A direct kernel whose group ends in a reduction over the output channels
  // (ConvScheduler: the conv's result is then never written): which one.
  enum class ChannelReduce { none, sum, mean, max, min, logsumexp } channel_reduce = ChannelReduce::none;
  int64_t gemm_m() const { return conv.gemm_m(); }
  int64_t gemm_n() const { return conv.gemm_n(); }
  int64_t gemm_k() const { return conv.gemm_k(); }
};

// The kernel spec of a conv node, or nullopt where no kernel covers it.
std::optional<ConvKernelSpec> match_conv_kernel(const Node& conv);

// Whether a kernel covers a conv of these parameters once its operands and
// result are channels-last, the weight as conv_kernel_weight_strides says.
bool conv_kernel_covers(const ConvSpec& spec);

// The strides of the weight (of shape `w`) an implicit-GEMM kernel reads:
// each output channel's row of B contiguous, input channels innermost. A
// forward conv's [out, in, window...]: channels-last. A transposed conv's
// [in, out, window...]: in unit-stride, then the window, out outermost.
Shape conv_kernel_weight_strides(const ConvSpec& spec, const Shape& w);

// Whether the conv scheduler may make this conv an implicit-GEMM kernel
// (`always`: every conv a kernel covers must be one): one that covers it,
// but a transposed conv whose phases are not packed only where every conv
// must be a kernel (its strided stores ran it at 2x its model with a
// residual epilogue, conv_cost.cc, so it has no cost test yet).
bool conv_kernel_may_take(const ConvSpec& spec, bool always);
// The same for a conv node, whose operands must also be of its dtype: what
// conv_engine asks before it lays the operands out for the kernel.
bool conv_kernel_may_take(const Node& conv, bool always);

// The direct kernel's spec of a conv node (any layout), or nullopt where it does not apply.
std::optional<ConvKernelSpec> match_direct_conv(const Node& conv);
// Whether a direct kernel computes this conv as specified (IEEE f32 math only).
bool direct_conv_covers(const ConvSpec& spec);

}  // namespace ff::fusion
