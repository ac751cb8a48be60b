#pragma once
// Hopper convolution kernels: the wgmma GEMM mainloop (sm90_mainloop.h) over
// a conv's implicit GEMM, with the conv's fused epilogue (conv_epilogue.h).
#include "codegen/cuda/kernel_source.h"
#include "ir/target.h"
#include "kernel/conv.h"
#include "kernel/group.h"

namespace ff::codegen {

// Whether generate_conv_sm90 covers `spec`: f32 (3xTF32, or 1xTF32 where the
// conv's fp32_precision is "tf32") with input channels a multiple of 4, so
// that each 16-byte chunk of a row of the implicit GEMM's A is 4 channels of
// one window tap, contiguous in the channels-last input.
bool sm90_conv_applies(const fusion::ConvKernelSpec& spec);

// The kernel of a Conv group: 128 x 128 tiles (output pixels x output
// channels) of 384 threads; the producer warpgroup gathers A's rows from the
// channels-last input (window taps outside it read as zeros), B is the
// channels-last weight as a K-contiguous matrix; the epilogue stores each
// value through the group's pointwise nodes; persistent CTAs, at most one per
// SM of `target`. Parameters as conv.h's.
KernelSource generate_conv_sm90(const fusion::Group& group, const fusion::ConvKernelSpec& spec, int id,
                                const Target& target);

}  // namespace ff::codegen
