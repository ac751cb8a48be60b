#pragma once
// What every conv kernel (conv.cc's CUTLASS one, conv_sm90.cc's wgmma one, conv_direct.cc's)
// does after its mainloop, written once: a device struct `FusedEpilogue` whose
// store(row, col, acc) takes one accumulator of the implicit GEMM (row: the
// output pixel, col: the output channel), applies the conv's bias and the
// group's pointwise nodes, and writes the group's output through its strides;
// store_at(n, col, [z,] p, q, acc) does the same at output coordinates.
#include <string>

#include "codegen/cuda/kernel_source.h"
#include "kernel/conv.h"
#include "kernel/group.h"

namespace ff::codegen {

struct ConvEpilogue {
  std::string parameters;       // the kernel's parameters: out, x, w, then bias and the epilogue's inputs
  std::string arguments;        // the FusedEpilogue's members from those parameters, in order ("out, bias, in0")
  std::string definition;       // struct FusedEpilogue; reads the constants M and N (pixels, channels) of its kernel
  bool channels_inner = false;  // the output's unit stride runs along the channels
  int channel_operands = 0;     // staged: the operands read at the channel alone (CHANNEL_OPERANDS)
};

// The kernel's name up to its math and tile: "ff_conv2d_minimum_add_mul".
std::string conv_kernel_name(const fusion::Group& group, const fusion::ConvKernelSpec& spec);

// How the Hopper kernel's results leave it (sm90_ss_mainloop.h), where the
// output's channels hold contiguous runs of pixels (conv_stores_staged):
// staged through shared memory, with the per-channel operands in a table
// (ping-pong tiles), or without (wide tiles); or, for a transposed conv's
// packed phases, staged and written by the threads along the output's rows
// (phases: the epilogue then has operands_at(n, col, [z,] p, q, inside), the
// operands an element's value reads (those varying along the pixels only
// where `inside`); value_with(operands, acc), its value; prefetch_at(n, col,
// [z,] p, q), which prefetches those operands into L2; and put_at(n, col,
// [z,] p, q, v), which writes the value).
enum class PixelRunStores { none, staged, wide, phases };

// The group's epilogue, with the kernel's own `members` added to the struct;
// sets ks.inputs (x, w, bias, then the other tensors the epilogue reads) and
// ks.outputs. Both forms of `runs` add column(n, col), where output channel
// col of sample n (Epilogue::SAMPLE pixels, contiguous, a multiple of 4)
// begins; wide adds value(row, col, acc), the value alone; staged adds
// value(row, col, acc, table),
// the value alone with the operands read at the channel alone (the bias, a
// batch norm's scale and shift: CHANNEL_OPERANDS of them, channel_operand(i,
// col) loads one) taken from `table` (operand i of channel col at
// table[i * BN + col % BN], BN the Hopper kernel's tile).
ConvEpilogue conv_epilogue(const fusion::Group& group, const fusion::ConvKernelSpec& spec, KernelSource& ks,
                           const std::string& members = "", PixelRunStores runs = PixelRunStores::none);

// Whether the group's output can leave a kernel in runs of one channel's
// pixels (an f32 result, pixels contiguous per channel, 16-byte aligned runs):
// the Hopper kernel's staged stores (sm90_ss_mainloop.h).
bool conv_stores_staged(const fusion::Group& group);

}  // namespace ff::codegen
