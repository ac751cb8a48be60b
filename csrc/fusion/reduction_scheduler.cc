// ReductionScheduler: each reduction (sum, mean, var, amax, argmax, softmax,
// layer_norm, ...) becomes a kernel together with the work around it that
// fits its domain (reduction_domain.h):
//   - the pointwise group that produces what it reduces (the prologue: x*x of
//     an RMS norm, the residual add before a layer norm);
//   - other reductions over the same domain: of what it reads (mean and
//     var, amax and argmax: one pass; a tensor of the domain's size, not a
//     bias broadcast across it), of other tensors, and of values computed
//     from the first ones' results (the manual softmax's sum of
//     exp(x - max): a second pass over the row);
//   - the pointwise groups that read the results (the epilogue), at the
//     row's shape (rsqrt(var + eps)) or the domain's (x * rstd * w: the
//     results applied back to the rows), and views that only add or drop
//     size-1 dims on the way;
//   - pointwise groups beside it that read what it reads, written in the
//     same pass; but one that only another reduction reads comes in with
//     that reduction, or stays that reduction's prologue.
// Growing from a seed reduction, a pointwise group or node joins when the
// whole still forms one domain, no path leaves the kernel and comes back
// into it (a cycle through a library call), every value read outside the
// kernel spans its rows (or its whole domain), applying the results to the
// rows pays and the element outputs are written a run at a time
// (reduction_strategy.h), and while the kernel has at most
// kMaxKernelNodes nodes. A kernel with too few blocks to fill
// the GPU is not made at all. Pointwise groups run first
// (scheduler.h), GEMM kernels take their epilogues before this scheduler.
#include <algorithm>

#include "codegen/cuda/reduction.h"
#include "fusion/reduction_strategy.h"
#include "fusion/scheduler.h"
#include "kernel/reduction_domain.h"

namespace ff::fusion {

namespace {

bool is_row_reshape(const Node& n) { return n.op == Op::View || n.op == Op::Squeeze || n.op == Op::Unsqueeze; }

// Each step of a kernel's growth checks the whole kernel again for every
// candidate, so its cost grows with the cube of the kernel's size. Where one
// domain runs through a whole unrolled loop (the backward of a scan written
// as a Python loop: every step's tensors of the domain's size, each step's
// reductions siblings of the next's), the kernel would take in the loop:
// such a selective scan's backward planned in 3.5, 14 and 42 s at 12, 16 and
// 20 steps, and not within minutes at 32 (1938 nodes; 2 s with the bound).
// Models' reduction kernels have a few dozen nodes (22 at most in
// benchmarks/problems' forwards); the bound leaves them as they are and cuts
// such a loop into kernels of this size, which the cycle check through
// formed kernels keeps from waiting on each other.
constexpr size_t kMaxKernelNodes = 128;

class ReductionScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Reduction; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (!options.reductions) return;
    for (auto& n : p.graph().nodes())
      if (is_kernel_reduction(*n) && !p.group_of(n.get())) grow(p, n.get(), options);
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    std::string why;
    const auto d = analyze_reduction_group(g.nodes, &why);
    if (!d) throw IRError("reduction kernel " + std::to_string(id) + ": " + why + " (internal error)");
    const auto l = codegen::reduction_layout(g, *d);
    return codegen::generate_reduction(g, *d, l, choose_reduction_strategy(g, *d, l, options), id);
  }

 private:
  struct Unit {
    std::vector<Node*> nodes;
    int group = -1;  // the pointwise group they form, released when taken in
  };

  static std::vector<Node*> ordered(const PartitionBuilder& p, std::vector<Node*> nodes) {
    std::sort(nodes.begin(), nodes.end(), [&](Node* a, Node* b) { return p.index(a) < p.index(b); });
    return nodes;
  }

  // What may join `members` next: the pointwise groups and loose nodes that
  // produce their operands or read their results.
  static std::vector<Unit> candidates(const PartitionBuilder& p, const std::unordered_set<const Node*>& members,
                                      const std::vector<Node*>& order) {
    std::vector<Unit> out;
    std::unordered_set<int> seen_groups;
    std::unordered_set<const Node*> seen_nodes;
    auto consider = [&](Node* n, bool producer) {
      if (members.count(n)) return;
      if (auto gi = p.group_of(n)) {
        if (seen_groups.insert(*gi).second && p.describe(*gi).kind == Group::Kind::Pointwise)
          out.push_back({p.describe(*gi).nodes, *gi});
        return;
      }
      const bool loose = is_kernel_reduction(*n) || (!producer && is_row_reshape(*n));
      if (loose && seen_nodes.insert(n).second) out.push_back({{n}, -1});
    };
    int64_t full = 0;  // the domain's size: what its reductions reduce, the largest tensor members read
    for (const Node* m : order)
      for (const auto& o : m->operands)
        if (o.is_value()) full = std::max(full, numel(o.value->type.shape));
    for (Node* m : order) {
      for (auto& o : m->operands) {
        if (!o.is_value()) continue;
        if (o.value->producer) consider(o.value->producer, true);
        // Other readers of what the kernel reads (var beside mean, argmax
        // beside amax, x > t beside x * x): the same pass reads it for all.
        // Only through a tensor of the domain's size: one broadcast across it
        // (a bias, a norm's weight) is read for next to nothing, and would
        // tie every step of an unrolled loop into one kernel whose source,
        // and fusion time, grow with the loop.
        if (numel(o.value->type.shape) < full) continue;
        for (Node* sibling : p.users(o.value))
          if (is_kernel_reduction(*sibling) || op_kind(sibling->op) == OpKind::Pointwise) consider(sibling, false);
      }
      for (Node* u : p.users(m)) consider(u, false);
    }
    return out;
  }

  // Whether `nodes` can be one reduction kernel: one domain, no cycle through
  // outside nodes, and every value read outside spans what it must.
  static bool feasible(const PartitionBuilder& p, const std::vector<Node*>& nodes, const FusionOptions& options) {
    const auto d = analyze_reduction_group(nodes);
    if (!d) return false;
    const std::unordered_set<const Node*> members(nodes.begin(), nodes.end());
    bool applies = false;
    std::vector<const Node*> readers_outside;
    for (Node* n : nodes) {
      applies |= op_kind(n->op) == OpKind::Pointwise && !d->per_row.count(n->result()) && d->row_level(n->result()) > 0;
      bool outside = p.feeds_graph_output(n);
      for (Node* u : p.users(n)) {
        if (members.count(u)) continue;
        outside = true;
        readers_outside.push_back(u);
      }
      if (outside && !d->covers(n->result())) return false;
    }
    // One search from every outside reader: a kernel of many members (the
    // same reduction in each step of an unrolled loop) would otherwise walk
    // the graph between them once per reader. Through the kernels formed so
    // far: two reduction kernels, one reading a value of the other that is
    // computed from the first's own result (through a library view), would
    // each wait for the other.
    if (p.reaches_through_groups(readers_outside, members)) return false;
    const Group g = p.describe_nodes(Group::Kind::Reduction, nodes);
    const auto l = codegen::reduction_layout(g, *d);
    const auto s = choose_reduction_strategy(g, *d, l, options);
    return (!applies || apply_pass_pays(s, l, options)) && writes_coalesced(s, l);
  }

  // The reduction a pointwise group is the prologue of, where it is a sibling
  // of the kernel's members (it reads what they read, nothing they make, and
  // they read nothing it makes), its results go to that one reduction alone,
  // and no kernel has taken that reduction yet.
  static Node* prologue_of(const PartitionBuilder& p, const Unit& u, const std::unordered_set<const Node*>& members) {
    if (u.group < 0) return nullptr;
    const std::unordered_set<const Node*> unit(u.nodes.begin(), u.nodes.end());
    Node* reader = nullptr;
    for (Node* n : u.nodes) {
      if (p.feeds_graph_output(n)) return nullptr;
      for (auto& o : n->operands)
        if (o.is_value() && o.value->producer && members.count(o.value->producer)) return nullptr;
      for (Node* r : p.users(n)) {
        if (unit.count(r)) continue;
        if (members.count(r) || (reader != nullptr && reader != r)) return nullptr;
        reader = r;
      }
    }
    return reader != nullptr && is_kernel_reduction(*reader) && !p.group_of(reader) ? reader : nullptr;
  }

  static std::vector<Node*> joined(const PartitionBuilder& p, std::vector<Node*> a, const std::vector<Node*>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return ordered(p, std::move(a));
  }

  static void grow(PartitionBuilder& p, Node* seed, const FusionOptions& options) {
    std::vector<Node*> order{seed};
    std::unordered_set<const Node*> members{seed};
    std::vector<int> taken;
    if (!feasible(p, order, options)) return;
    for (bool changed = true; changed;) {
      changed = false;
      for (Unit& u : candidates(p, members, order)) {
        std::vector<Node*> nodes = u.nodes;
        // A sibling that is another reduction's prologue (x * x beside
        // amax(x), for sum(x * x)) joins with that reduction where both fit
        // this kernel; where only that reduction's kernel can take it, it is
        // left to it: written here for it, it would cost a write and a read.
        if (Node* r = prologue_of(p, u, members)) {
          std::vector<Node*> with_reader = nodes;
          with_reader.push_back(r);
          if (feasible(p, joined(p, order, with_reader), options))
            nodes = with_reader;
          else if (feasible(p, joined(p, {r}, u.nodes), options))
            continue;
        }
        const std::vector<Node*> trial = joined(p, order, nodes);
        if (trial.size() > kMaxKernelNodes || !feasible(p, trial, options)) continue;
        order = trial;
        members.insert(nodes.begin(), nodes.end());
        if (u.group >= 0) taken.push_back(u.group);
        changed = true;
        break;
      }
    }
    // Views nothing in the kernel reads stay library views of its outputs.
    std::vector<Node*> kept = order;
    for (bool pruned = true; pruned;) {
      pruned = false;
      const std::unordered_set<const Node*> in(kept.begin(), kept.end());
      for (auto it = kept.begin(); it != kept.end(); ++it) {
        if (!is_row_reshape(**it)) continue;
        bool read_inside = false;
        for (Node* u : p.users(*it)) read_inside |= in.count(u) != 0;
        if (read_inside) continue;
        kept.erase(it);
        pruned = true;
        break;
      }
    }
    if (feasible(p, kept, options)) order = kept;
    // Too few blocks for the GPU: the reductions stay library calls.
    const auto d = analyze_reduction_group(order);
    const Group g = p.describe_nodes(Group::Kind::Reduction, order);
    const auto l = codegen::reduction_layout(g, *d);
    if (!parallel_enough(choose_reduction_strategy(g, *d, l, options), l, options)) return;
    for (int gi : taken) p.release(gi);
    p.add_group(Group::Kind::Reduction, order);
  }
};

}  // namespace

const Scheduler& reduction_scheduler() {
  static const ReductionScheduler s;
  return s;
}

}  // namespace ff::fusion
