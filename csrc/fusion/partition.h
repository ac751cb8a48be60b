#pragma once
// Partitions a graph into execution steps: PointwiseGroups (each becomes one
// generated kernel) and single nodes that run as library (ATen) calls.
#include <vector>

#include "fusion/gemm.h"
#include "ir/graph.h"

namespace ff::fusion {

// A connected set of pointwise nodes computed by one kernel over one iteration
// shape. Every output has that shape; interior nodes may have smaller shapes
// (broadcast operands such as a per-row scale) and are recomputed per element.
//
// A group of kind Gemm starts with one matmul node that a generated GEMM
// kernel computes (`gemm` says how), followed by the pointwise epilogue it
// applies to each result element, if any; its shape is the matmul's result shape.
struct PointwiseGroup {
  enum class Kind { Pointwise, Gemm } kind = Kind::Pointwise;
  GemmSpec gemm;                // Kind::Gemm only
  std::vector<Node*> nodes;     // topological order
  std::vector<Value*> inputs;   // values read from outside the group (tensors and scalar inputs)
  std::vector<Value*> outputs;  // group values read outside it (or graph outputs)
  Shape shape;                  // iteration shape
};

struct Step {
  enum class Kind { Kernel, Node } kind;
  int group = -1;         // Kernel: index into Partition::groups
  Node* node = nullptr;   // Node: the op to run as a library call
};

struct Partition {
  std::vector<PointwiseGroup> groups;
  std::vector<Step> steps;  // a valid execution order
};

// Greedy consumer-driven fusion: walking the graph backwards, each unfused
// pointwise node starts a group that pulls in its pointwise producers when
// (a) the producer has the group's shape, or it broadcasts to it and every
// user of it is in the group (then it is recomputed per element), and
// (b) pulling it in creates no cycle through nodes outside the group.
// Each matmul node of a dtype in `gemm_dtypes` that match_gemm accepts becomes
// a GEMM group instead of a library call, taking as its epilogue the pointwise
// group that holds all of the result's users and reads no other value but one
// the GEMM can take as its source operand (see use_as_source).
// An f32 GEMM group whose epilogue's output is read only by a view that splits
// its last or second-last dim into blocks of 16, 32 or 64 and a sum, mean,
// amax or amin over the blocks (as split_gemm_reductions writes them) takes
// both in: its kernel writes the block partials.
struct PartitionOptions {
  std::vector<DType> gemm_dtypes;  // empty: every matmul stays a library call
  bool tf32 = false;               // f32 GEMM kernels in plain TF32 (GemmSpec::tf32)
};
Partition partition(const Graph& g, const PartitionOptions& options = {});

}  // namespace ff::fusion
