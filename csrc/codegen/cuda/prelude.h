#pragma once
#include <string>
#include <string_view>

namespace ff::codegen {
// Device helpers shared by generated kernels (NaN-propagating min/max, exact
// activation formulas matching ATen's CUDA kernels, aligned vector type).
std::string_view cuda_prelude();
// Additions for kernels that touch f16/bf16 tensors: 16-bit storage types and conversions.
std::string_view cuda_half_prelude();
// Additions for kernels launched in thread-block clusters (sm_90): the
// primitives (the block's rank, the cluster barrier, a peer block's shared
// memory), then ff_cluster_exclusive_scan: a value folded (a scan's combine,
// from its identity) over the cluster's blocks of lower rank, in rank order,
// through distributed shared memory.
std::string_view cuda_cluster_primitives();
std::string cuda_cluster_prelude();
// The declaration of a kernel's dynamic shared memory (ff_dynamic_shared,
// 16-byte aligned), one line; the kernel emulator swaps it for host storage.
std::string_view cuda_dynamic_shared();
}  // namespace ff::codegen
