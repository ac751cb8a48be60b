// PoolScheduler: each floating-point max_pool/avg_pool becomes a kernel with
// the pointwise group that makes its input (computed at every window tap, so
// conv -> bias -> relu -> pool reads the conv's result once and never writes
// the activation) and the pointwise group that reads its result (so the pooled
// value is written once, after its epilogue).
#include <algorithm>

#include "codegen/cuda/pool.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

class PoolScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Pool; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (!options.reductions) return;
    for (auto& np : p.graph().nodes()) {
      Node* n = np.get();
      if (op_kind(n->op) != OpKind::Window || p.group_of(n) || !is_floating(n->result()->type.dtype)) continue;
      // Its epilogue: the pointwise group that reads its result (no cycle can
      // form: nothing outside reads the pool's result or its prologue's).
      const auto pro = p.pointwise_prologue(n), epi = p.pointwise_epilogue(n);
      std::vector<Node*> members;
      if (pro) members = p.release(*pro);
      members.push_back(n);
      if (epi) {
        std::vector<Node*> ep = p.release(*epi);
        members.insert(members.end(), ep.begin(), ep.end());
      }
      p.add_group(Group::Kind::Pool, std::move(members));
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions&) const override {
    return codegen::generate_pool(g, id);
  }
};

}  // namespace

const Scheduler& pool_scheduler() {
  static const PoolScheduler s;
  return s;
}

}  // namespace ff::fusion
