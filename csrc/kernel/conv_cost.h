#pragma once
// The cost model of convolutions: how long one takes in each layout and on
// each engine (cuDNN through ATen, a generated implicit-GEMM or direct kernel), and
// what a layout conversion costs, at the target's engine rates (Target::rates).
// The layout pass (conv_layout.cc) and the conv scheduler both decide with it;
// FUSEFORGE_AUTOTUNE=1 confirms by timing (the front end's probe), and
// tools/conv_probe.py measures the figures.
#include <optional>

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
  double best_channels_last() const { return cudnn_channels_last < kernel ? cudnn_channels_last : kernel; }
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

// Bytes a separate pass of `conv`'s pointwise epilogue moves: it reads the
// conv's result and the epilogue's other operands (a residual, a bias) and
// writes its value. The epilogue: the pointwise nodes of the result's shape
// reached from it through pointwise nodes of that shape.
double epilogue_pass_bytes(const Graph& g, const Node& conv);

// Whether an implicit-GEMM kernel (modelled, with the margin against timed
// figures) beats cuDNN's channels-last conv as timed, which writes its result
// and, where the kernel would fuse the epilogue, has the epilogue's own pass
// move `epilogue_bytes` (epilogue_pass_bytes; 0 where nothing fuses);
// `rounding_in_place`: a 1xTF32 kernel whose operands are not rounded
// beforehand (kernel_rounding_in_place_ms).
bool kernel_beats_cudnn(const ConvSpec& spec, const Target& target, const CudnnTimes& cudnn, double epilogue_bytes,
                        bool rounding_in_place);

}  // namespace ff::fusion
