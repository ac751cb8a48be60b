#pragma once
// A fusion group (the nodes one generated kernel computes) and a partition of
// a graph into groups and library calls.
#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "kernel/conv.h"
#include "kernel/gemm.h"

namespace ff::fusion {

// The nodes of one kernel. Every output has the group's iteration shape;
// interior nodes may have smaller shapes (broadcast operands such as a
// per-row scale) and are recomputed per element.
//
// Pointwise: a connected set of pointwise nodes. Gemm: one matmul node that a
// generated GEMM kernel computes (`gemm` says how), followed by the pointwise
// epilogue it applies to each result element and, if `gemm.reduce` is set, a
// view and block reduction whose partials it writes instead. Reduction:
// reductions over one domain with the pointwise work before and after them
// (reduction_domain.h); interior and output values may have the domain's
// shape or a per-row one. Pool: one max_pool/avg_pool with the pointwise
// nodes that produce its input (computed at every window tap; shapes
// broadcast to the pooled input's) and those that read its result (shapes
// broadcast to the result's, the iteration shape). Scan: cumsums and
// cumprods along the same rows, each with the pointwise nodes that produce
// its input and those that read its result (the iteration shape). Conv: one
// convolution that a generated implicit-GEMM or direct kernel computes
// (`conv` says how), followed by the pointwise epilogue it applies before
// writing; a direct kernel's may instead be a reduction over the output
// channels with the pointwise nodes before and after it (conv.channel_reduce),
// so that only the reduced result is written. A conv group with nodes after
// the conv also has a library form: cuDNN's conv, then those nodes as a
// kernel of their own (library_epilogue), what runs where the conv kernel
// does not.
struct Group {
  enum class Kind { Pointwise, Gemm, Reduction, Pool, Scan, Conv } kind = Kind::Pointwise;
  GemmSpec gemm;                // Kind::Gemm only
  ConvKernelSpec conv;          // Kind::Conv only
  std::vector<Node*> nodes;     // topological order
  std::vector<Value*> inputs;   // values read from outside the group (tensors and scalar inputs)
  std::vector<Value*> outputs;  // group values read outside it (or graph outputs)
  Shape shape;                  // iteration shape: the last node's result shape
  int library_epilogue = -1;    // Conv: index into Partition::library_epilogues; -1: none
};

std::string_view group_kind_name(Group::Kind kind);  // "pointwise", "gemm", "reduction", "pool", "scan", "conv"
std::optional<Group::Kind> parse_group_kind(std::string_view name);

struct Step {
  enum class Kind { Kernel, Node } kind;
  int group = -1;        // Kernel: index into Partition::groups
  Node* node = nullptr;  // Node: the op to run as a library call
};

struct Partition {
  std::vector<Group> groups;
  std::vector<Step> steps;  // a valid execution order
  // The conv groups' nodes after the conv, each a group of its own kind
  // (pointwise, or a reduction over the channels) reading the conv's result:
  // no step runs them; the conv kernel's library form does.
  std::vector<Group> library_epilogues;
};

}  // namespace ff::fusion
