// PointwiseScheduler: connected pointwise nodes become one kernel.
//
// Greedy consumer-driven fusion: walking the graph backwards, each unfused
// pointwise node starts a group that pulls in its pointwise producers when
// (a) the producer has the group's shape, or it broadcasts to it and every
// user of it is in the group (then it is recomputed per element), and
// (b) pulling it in creates no cycle through nodes outside the group, and
// (c) the group then reads at most kMaxFullSizeInputs full-size tensors made
// outside it: a kernel keeps each one it reads alive until it runs, and the
// sum of an unrolled loop's per-step results (a shared layer's weight
// gradient, 160 steps of [1152, 512]) fused whole would hold every step's at
// once where the chain of adds frees each as it goes (kernels run as soon as
// their inputs are ready: fusion/partition.cc's schedule), and
// (d) a group that reads two or more results of GEMM kernels reads nothing
// else full-size: then one GEMM takes it as epilogue with the other result as
// its source operand (an LSTM's gates, x W + h U). Grown further, it would
// hold each partial product until the last is made where the GEMMs could
// each add their own into a running sum (`acc + a @ b`, the running sum the
// source), freeing them as they go: a shared layer's per-step weight
// gradients, held 16 at a time otherwise.
// Then the one-element groups that read only the graph's inputs (a train-mode
// batch norm's num_batches_tracked + 1, one per norm) become one kernel:
// nothing the graph computes comes before them, so merging them makes no
// cycle, and a network's dozens of one-thread launches become one.
#include <algorithm>

#include "codegen/cuda/pointwise.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

constexpr size_t kMaxFullSizeInputs = 16;

bool fusible(const Node* n) { return op_kind(n->op) == OpKind::Pointwise; }

size_t gemm_results(const std::unordered_set<const Value*>& values, const FusionOptions& options) {
  return std::count_if(values.begin(), values.end(),
                       [&](const Value* v) { return v->producer && generated_gemm(*v->producer, options); });
}

// The full-size values (`elements` of them) `n` reads that no member makes.
void add_full_size_inputs(const Node& n, int64_t elements, const std::unordered_set<const Node*>& members,
                          std::unordered_set<const Value*>& out) {
  for (const Operand& o : n.operands)
    if (o.is_value() && numel(o.value->type.shape) == elements && !members.count(o.value->producer))
      out.insert(o.value);
}

class PointwiseScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Pointwise; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    const auto& nodes = p.graph().nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = it->get();
      if (fusible(n) && !p.group_of(n)) grow(p, n, options);
    }
    merge_scalars_of_inputs(p);
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions&) const override {
    return codegen::generate_pointwise(g, id);
  }

 private:
  static bool can_pull(const PartitionBuilder& p, Node* producer, const Shape& shape,
                       const std::unordered_set<const Node*>& members) {
    if (!fusible(producer) || p.group_of(producer)) return false;
    const Shape& ps = producer->result()->type.shape;
    bool all_users_inside = !p.feeds_graph_output(producer);
    for (Node* u : p.users(producer)) all_users_inside &= members.count(u) != 0;
    if (ps != shape && !(broadcasts_to(ps, shape) && all_users_inside)) return false;
    // No cycle, through other kernels too: an outside user of the producer
    // must not lead back into the group, and an operand of it must not be
    // computed from the group's results.
    std::vector<const Node*> outside;
    for (Node* u : p.users(producer))
      if (!members.count(u)) outside.push_back(u);
    if (p.reaches_through_groups(outside, members)) return false;
    const std::vector<const Node*> inside(members.begin(), members.end());
    for (auto& o : producer->operands)
      if (o.is_value() && o.value->producer && !members.count(o.value->producer))
        if (p.reaches_through_groups(inside, {o.value->producer})) return false;
    return true;
  }

  static void grow(PartitionBuilder& p, Node* sink, const FusionOptions& options) {
    const Shape shape = sink->result()->type.shape;
    const int64_t elements = numel(shape);
    std::unordered_set<const Node*> members{sink};
    std::vector<Node*> order{sink};
    std::unordered_set<const Value*> wide;  // full-size values read from outside (see (c))
    add_full_size_inputs(*sink, elements, members, wide);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < order.size(); ++i)
        for (auto& o : order[i]->operands) {
          Node* producer = o.is_value() ? o.value->producer : nullptr;
          if (!producer || members.count(producer) || !can_pull(p, producer, shape, members)) continue;
          std::unordered_set<const Value*> pulled = wide;
          pulled.erase(producer->result());
          add_full_size_inputs(*producer, elements, members, pulled);
          if (pulled.size() > kMaxFullSizeInputs && pulled.size() > wide.size()) continue;
          if (const size_t gemms = gemm_results(pulled, options);
              gemms > 1 && pulled.size() > 2 && gemms > gemm_results(wide, options))
            continue;
          wide = std::move(pulled);
          members.insert(producer);
          order.push_back(producer);
          changed = true;
        }
    }
    std::sort(order.begin(), order.end(), [&](Node* a, Node* b) { return p.index(a) < p.index(b); });
    p.add_group(Group::Kind::Pointwise, std::move(order));
  }

  static void merge_scalars_of_inputs(PartitionBuilder& p) {
    std::vector<int> scalars;
    for (int g = 0; g < p.num_groups(); ++g) {
      const Group d = p.describe(g);
      if (d.kind != Group::Kind::Pointwise || d.nodes.empty()) continue;
      bool merge = true;
      for (const Node* n : d.nodes) merge &= numel(n->result()->type.shape) == 1;
      for (const Value* v : d.inputs) merge &= v->producer == nullptr;
      if (merge) scalars.push_back(g);
    }
    if (scalars.size() < 2) return;
    std::vector<Node*> nodes;
    for (int g : scalars) {
      std::vector<Node*> released = p.release(g);
      nodes.insert(nodes.end(), released.begin(), released.end());
    }
    std::sort(nodes.begin(), nodes.end(), [&](Node* a, Node* b) { return p.index(a) < p.index(b); });
    p.add_group(Group::Kind::Pointwise, std::move(nodes));
  }
};

}  // namespace

const Scheduler& pointwise_scheduler() {
  static const PointwiseScheduler s;
  return s;
}

}  // namespace ff::fusion
