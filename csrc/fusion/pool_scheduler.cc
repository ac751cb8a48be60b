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
// Pools of one input with the same windows (an average and a max pool of x,
// combined by a subtraction) are one group: each tap is loaded, and the
// prologue computed, once for all of them, and the pointwise groups reading
// any of their results join as their epilogue, so avg_pool(x) - max_pool(x)
// reads x once and writes only the difference.
#include <algorithm>
#include <unordered_set>

#include "codegen/cuda/pool.h"
#include "fusion/scheduler.h"
#include "ir/pool.h"

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
      if (!unclaimed_pool(p, n)) continue;
      // A pool that takes in a softmax is alone: its kernel form holds one
      // pool's accumulators for every channel.
      const std::vector<Node*> pools = normalized_ ? std::vector<Node*>{n} : siblings(p, *n);
      const auto pro = p.pointwise_prologue(std::vector<const Node*>(pools.begin(), pools.end()));
      Node* norm = pools.size() == 1 ? normalization(p, *n, pro) : nullptr;
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
      members.insert(members.end(), pools.begin(), pools.end());
      const std::vector<int> epis = epilogues(p, pools, members);
      const size_t first = members.size();
      for (int e : epis) {
        std::vector<Node*> ep = p.release(e);
        members.insert(members.end(), ep.begin(), ep.end());
      }
      // Several epilogues may read each other's results: graph order is a topological one.
      if (epis.size() > 1)
        std::stable_sort(members.begin() + static_cast<std::ptrdiff_t>(first), members.end(),
                         [&](const Node* a, const Node* b) { return p.index(a) < p.index(b); });
      p.add_group(Group::Kind::Pool, std::move(members));
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions&) const override {
    return codegen::generate_pool(g, id);
  }

 private:
  bool normalized_;

  static bool unclaimed_pool(const PartitionBuilder& p, const Node* n) {
    return op_kind(n->op) == OpKind::Window && !p.group_of(n) && is_floating(n->result()->type.dtype);
  }

  // `n` and the unclaimed pools that read its input with its windows (at
  // most kPoolMostSiblings), in graph order.
  static std::vector<Node*> siblings(const PartitionBuilder& p, const Node& n) {
    const PoolSpec windows = *pool_spec(n);
    std::vector<Node*> out;
    for (Node* u : p.users(n.input(0)))
      if (out.size() < codegen::kPoolMostSiblings &&
          (u == &n || (unclaimed_pool(p, u) && u->input(0) == n.input(0) && pool_spec(*u)->same_windows(windows))))
        out.push_back(u);
    return out;
  }

  // The pointwise groups the kernel of `members` (its prologue and `pools`)
  // takes as its epilogue. A lone pool's: the group of all its readers, at
  // the pooled shape, which closes no cycle (nothing outside reads the pool's
  // result or its prologue's). Pools side by side: every pointwise group at
  // the pooled shape that reads any of them (their difference, a scale of
  // one), but one that would close a cycle (it reads a reduction of another
  // pool's result) stays a kernel of its own.
  static std::vector<int> epilogues(const PartitionBuilder& p, const std::vector<Node*>& pools,
                                    std::vector<Node*> members) {
    if (pools.size() == 1) {
      const auto e = p.pointwise_epilogue(pools.front());
      return e ? std::vector<int>{*e} : std::vector<int>{};
    }
    std::vector<int> out;
    for (const Node* q : pools)
      for (const Node* u : p.users(q)) {
        const auto e = p.group_of(u);
        if (!e || std::find(out.begin(), out.end(), *e) != out.end() || !p.pointwise_at(*e, q->result()->type.shape))
          continue;
        const Group g = p.describe(*e);
        std::vector<Node*> with = members;
        with.insert(with.end(), g.nodes.begin(), g.nodes.end());
        if (closes_cycle(p, with)) continue;
        out.push_back(*e);
        members = std::move(with);
      }
    return out;
  }

  // Whether a node outside `members` that reads one of them leads back into them.
  static bool closes_cycle(const PartitionBuilder& p, const std::vector<Node*>& members) {
    const std::unordered_set<const Node*> set(members.begin(), members.end());
    std::vector<const Node*> outside;
    for (const Node* m : members)
      for (const Node* u : p.users(m))
        if (!set.count(u)) outside.push_back(u);
    return p.reaches(outside, set);
  }

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
