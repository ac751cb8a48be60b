#pragma once
#include "codegen/cuda/kernel_source.h"
#include "kernel/group.h"

namespace ff::codegen {

// CUDA source for one Group: a grid-stride loop over the group's
// iteration shape in the memory order of its first output, with dims that are
// contiguous for every operand collapsed, 4-element (up to 16-byte) vector
// loads/stores when every operand is unit-stride or broadcast along the
// innermost dim (and pointers are aligned, checked at run time), 32-bit index
// math unless offsets need 64 bits. `id` makes the kernel name unique.
KernelSource generate_pointwise(const fusion::Group& group, int id);

}  // namespace ff::codegen
