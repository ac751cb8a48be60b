#pragma once
// Generated scan kernels: cumsums and cumprods along one dim, either
// direction, each with the pointwise work that produces its input (the
// prologue: `x * mask` before the cumsum) computed as each element is loaded
// and the pointwise work that reads its result (the epilogue: `cumsum(x) - x`)
// computed as each element is stored, so neither the scan's input nor its
// result is written.
#include <optional>

#include "codegen/cuda/kernel_source.h"
#include "kernel/group.h"

namespace ff::codegen {

// How a scan kernel lays threads over its rows (fusion/scan_scheduler.cc
// chooses): `cluster` blocks of `threads` threads share a row, each thread
// holding `items` elements in registers (a warp holds 32 * items consecutive
// ones, lane by lane in 16-byte chunks); a row is at most
// cluster * threads * items long.
struct ScanStrategy {
  int threads = 32;
  int items = 16;
  int cluster = 1;  // > 1: a thread-block cluster (sm_90), block totals shared through distributed shared memory
  std::string describe() const;
};

// The first scan node of a Scan group (its scans share their shape and dim).
const Node& scan_node(const fusion::Group& g);

// The kernel of a Scan group: per row, and for each scan in turn, each thread
// loads its elements (a warp's chunks are one contiguous span, counted from
// the row's end in a reverse scan; 16-byte vectors where the scanned dim is
// unit-stride and the pointers allow) and computes the prologue on them; each
// round, a lane folds its chunk (ops.def's FF_SCAN op: add, mul) with the
// chunks of the lanes below (warp shuffles) and the warp's earlier rounds;
// then the warps' totals through shared memory, then the cluster's earlier
// blocks' totals; then the epilogue per element (its own inputs loaded after
// the scan) and stores.
// Folds in f32 (f64 for f64) and rounds the scan's result to its dtype before
// the epilogue reads it. The order is fixed: the same result every run.
// Parameters: a pointer per output, a pointer per tensor input, a double per
// scalar input.
KernelSource generate_scan(const fusion::Group& g, const ScanStrategy& s, int id);

}  // namespace ff::codegen
