#include "fusion/scheduler.h"

namespace ff::fusion {

const Scheduler& pointwise_scheduler();           // pointwise_scheduler.cc
const Scheduler& gemm_scheduler();                // gemm_scheduler.cc
const Scheduler& reduction_scheduler();           // reduction_scheduler.cc
const Scheduler& pool_scheduler();                // pool_scheduler.cc
const Scheduler& pool_normalization_scheduler();  // pool_scheduler.cc: pools taking in a softmax
const Scheduler& scan_scheduler();                // scan_scheduler.cc
const Scheduler& conv_scheduler();                // conv_scheduler.cc

// Reductions claim before convs: a conv's epilogue that a reduction also reads
// (a bias before a softmax) joins the reduction, which reads the conv's result
// once either way. Pools claim after reductions (a pointwise group between a
// pool and a reduction is the reduction's prologue or the pool's epilogue,
// the same traffic either way) and before convs (a conv's pointwise epilogue
// that a pool reads is the pool's prologue: the conv kernel's result is
// written once either way). Pools that take in the softmax making their
// input claim before reductions (which would take the softmax alone). Scans
// claim like pools, the pointwise group that makes their input.
const std::vector<const Scheduler*>& schedulers() {
  static const std::vector<const Scheduler*> all{
      &pointwise_scheduler(), &gemm_scheduler(), &pool_normalization_scheduler(),
      &reduction_scheduler(), &pool_scheduler(), &scan_scheduler(),
      &conv_scheduler()};
  return all;
}

const Scheduler& scheduler_for(Group::Kind kind) {
  for (const Scheduler* s : schedulers())
    if (s->kind() == kind) return *s;
  throw IRError("no scheduler for " + std::string(group_kind_name(kind)) + " groups (internal error)");
}

Partition partition(const Graph& g, const FusionOptions& options) {
  PartitionBuilder p(g);
  for (const Scheduler* s : schedulers()) s->claim(p, options);
  return p.finish();
}

}  // namespace ff::fusion
