#pragma once
// Direct convolution kernels: 2-D and 3-D forward convs computed with IEEE f32 FMAs
// straight from the input's and weight's own layouts (any strides; NCHW
// normally), the pointwise group after the conv fused as its epilogue
// (conv_epilogue.h) and written once, or a reduction over the output
// channels (ConvKernelSpec::channel_reduce), whose result alone is written.
// Made for convs with few multiply-adds per output (few input channels per
// group: first layers, depthwise convs), which are bandwidth-bound, and where
// cuDNN's kernels idle most of their lanes and then write a result the
// epilogue reads back.
#include "codegen/cuda/kernel_source.h"
#include "ir/target.h"
#include "kernel/conv.h"
#include "kernel/direct_conv_tile.h"
#include "kernel/group.h"

namespace ff::codegen {

KernelSource generate_conv_direct(const fusion::Group& group, const fusion::ConvKernelSpec& spec, int id,
                                  const Target& target);

}  // namespace ff::codegen
