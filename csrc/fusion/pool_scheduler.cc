// PoolScheduler: each floating-point max_pool/avg_pool becomes a kernel with
// the pointwise group that makes its input (computed at every window tap, so
// conv -> bias -> relu -> pool reads the conv's result once and never writes
// the activation) and the pointwise group that reads its result (so the pooled
// value is written once, after its epilogue). Where that input comes from a
// softmax (log_softmax) over a dim the windows keep, of few elements
// (codegen::pool_normalizes), the softmax and the pointwise group before it
// join too: conv -> bias -> softmax over channels -> pool reads the conv's
// result once and writes only the pooled tensor, where a softmax kernel
// would write and the pool read the whole activation. Those pools are
// claimed before the reduction scheduler, which would take the softmax.
#include <algorithm>

#include "codegen/cuda/pool.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

class PoolScheduler final : public Scheduler {
 public:
  // `normalized`: claim only the pools with a softmax to take in (the claim
  // before the reduction scheduler's); otherwise the others.
  explicit PoolScheduler(bool normalized) : normalized_(normalized) {}

  Group::Kind kind() const override { return Group::Kind::Pool; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (!options.reductions) return;
    for (auto& np : p.graph().nodes()) {
      Node* n = np.get();
      if (op_kind(n->op) != OpKind::Window || p.group_of(n) || !is_floating(n->result()->type.dtype)) continue;
      // Its epilogue: the pointwise group that reads its result (no cycle can
      // form: nothing outside reads the pool's result or its prologue's).
      const auto pro = p.pointwise_prologue(n), epi = p.pointwise_epilogue(n);
      Node* norm = normalization(p, *n, pro);
      if ((norm != nullptr) != normalized_) continue;
      std::vector<Node*> members;
      if (norm) {
        if (const auto before = p.pointwise_prologue(norm)) members = p.release(*before);
        members.push_back(norm);
      }
      if (pro) {
        std::vector<Node*> pr = p.release(*pro);
        members.insert(members.end(), pr.begin(), pr.end());
      }
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

 private:
  bool normalized_;

  // The softmax the pool's kernel can take in: it makes the pool's input, or
  // an input of the pool's pointwise prologue `pro`; it is in no group yet,
  // and only the pool or that prologue reads it.
  static Node* normalization(const PartitionBuilder& p, const Node& pool, const std::optional<int>& pro) {
    std::vector<const Node*> readers{&pool};
    std::vector<const Value*> candidates{pool.input(0)};
    if (pro) {
      const Group g = p.describe(*pro);
      readers.assign(g.nodes.begin(), g.nodes.end());
      candidates.assign(g.inputs.begin(), g.inputs.end());
    }
    for (const Value* v : candidates) {
      Node* s = v->producer;
      if (s == nullptr || p.group_of(s) || p.feeds_graph_output(s) || !codegen::pool_normalizes(*s, pool)) continue;
      const auto& users = p.users(s);
      if (std::all_of(users.begin(), users.end(),
                      [&](Node* u) { return std::find(readers.begin(), readers.end(), u) != readers.end(); }))
        return s;
    }
    return nullptr;
  }
};

}  // namespace

const Scheduler& pool_normalization_scheduler() {
  static const PoolScheduler s(true);
  return s;
}

const Scheduler& pool_scheduler() {
  static const PoolScheduler s(false);
  return s;
}

}  // namespace ff::fusion
