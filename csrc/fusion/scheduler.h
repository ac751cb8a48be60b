#pragma once
// One scheduler per kind of fusion group. Each forms the groups of its kind
// (`claim`, in the order of schedulers(): pointwise groups first, so that the
// others can take them in as prologues and epilogues) and owns the kernel
// choice for them (`generate`: which kernel form, tile or strategy).
#include <optional>
#include <string_view>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "fusion/partition.h"
#include "ir/target.h"
#include "kernel/group.h"

namespace ff::fusion {

// What the schedulers need to know of the compile: which matmuls may become
// GEMM kernels, whether reductions do, and the GPU the kernels are for (which
// convs become conv kernels, conv_engine decided: their `engine` attribute).
struct FusionOptions {
  std::vector<DType> gemm_dtypes;  // empty: every matmul stays a library call
  bool tf32 = false;               // f32 GEMM kernels in plain TF32 (GemmSpec::tf32)
  int arch = 0;                    // the target GPU's compute capability; 0: unknown
  Target target;                   // the target GPU's facts (SM count, shared memory): what fills it
  bool variants = false;           // also every other candidate kernel of a group (autotuning)
  bool reductions = true;  // reductions, norms, softmax, pools and scans as generated kernels (else library calls)
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual Group::Kind kind() const = 0;
  // Forms this kind's groups in `p`.
  virtual void claim(PartitionBuilder& p, const FusionOptions& options) const = 0;
  // The kernel for one of this kind's groups; `id` makes its name unique.
  virtual codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const = 0;
  // Other candidate kernels for the group, with the same parameters, for
  // autotuning (only asked when options.variants is set).
  virtual std::vector<codegen::KernelSource> variants(const Group& g, int id, const FusionOptions& options) const {
    return {};
  }
};

// The GEMM kernel `n` becomes under `options` (the GEMM scheduler's choice,
// which the pointwise scheduler reads ahead of it); nullopt: a library call.
std::optional<GemmSpec> generated_gemm(const Node& n, const FusionOptions& options);

// Every scheduler, in claim order.
const std::vector<const Scheduler*>& schedulers();
const Scheduler& scheduler_for(Group::Kind kind);

// Partitions `g`: each scheduler claims its groups, in order; the nodes no
// group takes run as library calls.
Partition partition(const Graph& g, const FusionOptions& options = {});

}  // namespace ff::fusion
