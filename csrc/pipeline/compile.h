#pragma once
// The compiler driver: IR text in, optimized graph + execution plan + kernel
// sources out. Runs passes, partitions into fused groups and generates CUDA.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "fusion/partition.h"
#include "ir/graph.h"

namespace ff {

struct CompileOptions {
  std::vector<std::string> passes;  // empty: passes::default_pipeline()
  bool trace_passes = false;        // record the IR after every pass that changed it
  std::vector<DType> gemm_dtypes;   // matmuls of these dtypes as generated CUTLASS GEMMs (needs its headers)
  bool gemm_variants = false;       // also every other candidate tile of each GEMM (for autotuning)
  bool tf32 = false;                // f32 GEMM kernels in plain TF32 (opt-in precision), not 3xTF32
  int arch = 0;                     // the target GPU's compute capability (90: Hopper GEMM kernels); 0: unknown
};

struct CompiledGraph {
  std::string ir_before;                              // as captured (verified)
  std::string ir_after;                               // after passes (and split_gemm_reductions)
  std::vector<std::pair<std::string, std::string>> pass_trace;  // (pass, IR after it)
  std::unique_ptr<Graph> graph;                       // after passes; steps point into it
  fusion::Partition partition;
  std::vector<codegen::KernelSource> kernels;         // one per partition group
  std::vector<std::string> kernel_graphs;             // IR text of each group as a standalone graph
  std::vector<std::vector<codegen::KernelSource>> kernel_variants;  // per kernel: alternatives (gemm_variants)
};

CompiledGraph compile_graph(const std::string& ir_text, const CompileOptions& options = {});

}  // namespace ff
