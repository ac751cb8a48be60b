#pragma once
// The cost model of convolutions: how long one takes in each layout and on
// each engine (cuDNN through ATen, a generated implicit-GEMM or direct kernel), and
// what a layout conversion costs, at the target's engine rates (Target::rates).
// The conv_engine pass decides with it, alone; tools/conv_probe.py measures
// its error (section D).
#include <optional>
#include <vector>

#include "ir/conv.h"
#include "ir/graph.h"
#include "ir/target.h"

namespace ff::fusion {

// Modelled milliseconds of one convolution per way of running it; infinity
// where a way does not apply.
struct ConvTimes {
  double cudnn_nchw = 0;           // ATen/cuDNN, contiguous (NCHW/NCDHW) operands
  double cudnn_channels_last = 0;  // ATen/cuDNN, channels-last operands
  double kernel = 0;               // a generated implicit-GEMM kernel (channels-last), when applicable
  double direct = 0;               // a generated direct kernel (any layout), when applicable
};

// `kernel_applies`: whether a generated implicit-GEMM kernel can run this
// conv; `direct_applies`: whether a direct kernel can; `measured`: cuDNN's
// timed figures for it, if any (our kernels' modelled figures then carry a
// margin); `direct_measured`: the direct kernel's timed figure, if any. A
// 1xTF32 kernel is modelled as Hopper's on rounded operands
// (sm90_ss_mainloop.h), the form round_conv_operands sets up.
ConvTimes conv_times(const ConvSpec& spec, const Target& target, bool kernel_applies, bool direct_applies = false,
                     const CudnnTimes* measured = nullptr, std::optional<double> direct_measured = std::nullopt);

// The Hopper 1xTF32 kernel on operands not rounded beforehand (it rounds its
// tiles itself: sm90_mainloop.h), against cuDNN as timed (with the margin).
double kernel_rounding_in_place_ms(const ConvSpec& spec, const Target& target);

// Milliseconds to read and write `bytes` once (a layout conversion).
double copy_ms(double bytes, const Target& target);

// `conv`'s pointwise epilogue: the pointwise nodes of one result, of the
// conv result's shape, reached from it through such nodes (in the order found).
std::vector<const Node*> epilogue_nodes(const Graph& g, const Node& conv);

// Bytes a separate pass of `conv`'s pointwise epilogue (`epilogue`, as
// epilogue_nodes gives it) moves: it reads the conv's result and the
// epilogue's other operands (a residual, a bias) and writes its value.
double epilogue_pass_bytes(const Node& conv, const std::vector<const Node*>& epilogue);

}  // namespace ff::fusion
