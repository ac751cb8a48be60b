#include "fusion/partition.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace ff::fusion {

namespace {

bool fusible(const Node* n) { return op_kind(n->op) == OpKind::Pointwise; }

class Partitioner {
 public:
  Partitioner(const Graph& g, const PartitionOptions& options) : g_(g), options_(options) {
    for (size_t i = 0; i < g.nodes().size(); ++i) index_[g.nodes()[i].get()] = static_cast<int>(i);
    for (auto& n : g.nodes())
      for (auto& o : n->operands)
        if (o.is_value() && o.value->producer) {
          auto& u = users_[o.value->producer];
          if (std::find(u.begin(), u.end(), n.get()) == u.end()) u.push_back(n.get());
        }
  }

  Partition run() {
    for (auto it = g_.nodes().rbegin(); it != g_.nodes().rend(); ++it) {
      Node* n = it->get();
      if (!fusible(n) || group_of_.count(n)) continue;
      grow(n);
    }
    if (!options_.gemm_dtypes.empty()) add_gemm_groups();
    Partition p;
    for (size_t i = 0; i < groups_.size(); ++i) {
      p.groups.push_back(describe(groups_[i]));
      if (auto it = gemm_of_.find(i); it != gemm_of_.end()) {
        p.groups.back().kind = PointwiseGroup::Kind::Gemm;
        p.groups.back().gemm = it->second;
      }
    }
    p.steps = schedule();
    return p;
  }

 private:
  const Graph& g_;
  const PartitionOptions options_;
  std::unordered_map<size_t, GemmSpec> gemm_of_;  // group index -> its GEMM (Gemm groups)
  std::unordered_map<const Node*, int> index_;
  std::unordered_map<const Node*, std::vector<Node*>> users_;
  std::unordered_map<const Node*, int> group_of_;
  std::vector<std::vector<Node*>> groups_;

  // Each matmul a GEMM kernel covers becomes a group; the pointwise group that
  // holds all of its result's users joins it as the epilogue where it can
  // (epilogue_group), so the GEMM writes only the epilogue's output.
  void add_gemm_groups() {
    std::vector<bool> absorbed(groups_.size(), false);
    for (auto& n : g_.nodes()) {
      auto spec = match_gemm(*n);
      if (!spec || std::find(options_.gemm_dtypes.begin(), options_.gemm_dtypes.end(), spec->dtype) ==
                       options_.gemm_dtypes.end())
        continue;
      spec->tf32 = options_.tf32 && spec->dtype == DType::f32;
      std::vector<Node*> members{n.get()};
      if (auto ep = epilogue_group(n.get(), *spec)) {
        members.insert(members.end(), groups_[*ep].begin(), groups_[*ep].end());
        absorbed[*ep] = true;
      }
      if (auto blocks = block_reduction(members.back(), *spec)) members.insert(members.end(), blocks->begin(), blocks->end());
      gemm_of_[groups_.size()] = *spec;
      groups_.push_back(std::move(members));
      absorbed.push_back(false);
    }
    // Drop the absorbed groups and renumber.
    std::vector<std::vector<Node*>> kept;
    std::unordered_map<size_t, GemmSpec> gemm_of;
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (absorbed[i]) continue;
      if (auto it = gemm_of_.find(i); it != gemm_of_.end()) gemm_of[kept.size()] = it->second;
      for (Node* m : groups_[i]) group_of_[m] = static_cast<int>(kept.size());
      kept.push_back(std::move(groups_[i]));
    }
    groups_ = std::move(kept);
    gemm_of_ = std::move(gemm_of);
  }

  // The pointwise group that can be `mm`'s epilogue: it holds every user of
  // the matmul's result (which is no graph output), has one output of the
  // result's type and reads no other value, except one that the GEMM can take
  // as its source operand (then `spec` is updated to read it).
  std::optional<size_t> epilogue_group(const Node* mm, GemmSpec& spec) const {
    const Value* r = mm->result();
    if (feeds_graph_output(mm) || users(mm).empty()) return std::nullopt;
    auto first = group_of_.find(users(mm).front());
    if (first == group_of_.end()) return std::nullopt;
    const size_t gi = static_cast<size_t>(first->second);
    for (Node* u : users(mm)) {
      auto it = group_of_.find(u);
      if (it == group_of_.end() || static_cast<size_t>(it->second) != gi) return std::nullopt;
    }
    if (gemm_of_.count(gi)) return std::nullopt;
    const PointwiseGroup pg = describe(groups_[gi]);
    if (pg.outputs.size() != 1 || !(pg.outputs[0]->type == r->type)) return std::nullopt;
    for (const Node* m : pg.nodes)
      if (m->result()->type.shape != r->type.shape) return std::nullopt;
    std::vector<const Value*> others;
    for (const Value* v : pg.inputs)
      if (v != r) others.push_back(v);
    if (others.size() > 1) return std::nullopt;
    if (others.size() == 1) {
      GemmSpec with = spec;
      if (!use_as_source(with, *others[0])) return std::nullopt;
      spec = with;
    }
    return gi;
  }

  // The view and the block reduction that read `last`'s result (the GEMM's
  // epilogue output), if any: then `spec` says how the kernel reduces.
  std::optional<std::array<Node*, 2>> block_reduction(const Node* last, GemmSpec& spec) const {
    if (spec.dtype != DType::f32 || feeds_graph_output(last) || users(last).size() != 1)
      return std::nullopt;
    Node* view = users(last).front();
    if (view->op != Op::View || feeds_graph_output(view) || users(view).size() != 1) return std::nullopt;
    Node* red = users(view).front();
    const Shape& in = last->result()->type.shape;
    const Shape& split = view->result()->type.shape;
    const int64_t rank = static_cast<int64_t>(in.size());
    if (split.size() != in.size() + 1 || !red->has_attr("dims") || red->attr_ints("dims").size() != 1 ||
        red->attr_bool_or("keepdim", false) || red->result()->type.dtype != DType::f32)
      return std::nullopt;
    const int64_t d = normalize_dim(red->attr_ints("dims")[0], rank + 1) - 1;  // the split dim; blocks: d + 1
    if (d != rank - 1 && d != rank - 2) return std::nullopt;
    const int64_t block = split[d + 1];
    Shape joined = split;
    joined[d] *= block;
    joined.erase(joined.begin() + d + 1);
    if (joined != in || block < kMinReduceBlock || kMaxReduceBlock % block != 0) return std::nullopt;
    switch (red->op) {
      case Op::Sum: spec.reduce = GemmSpec::Reduce::Sum; break;
      case Op::Mean: spec.reduce = GemmSpec::Reduce::Mean; break;
      case Op::Amax: spec.reduce = GemmSpec::Reduce::Max; break;
      case Op::Amin: spec.reduce = GemmSpec::Reduce::Min; break;
      default: return std::nullopt;
    }
    spec.reduce_rows = d == rank - 1;
    spec.reduce_block = static_cast<int>(block);
    return std::array<Node*, 2>{view, red};
  }

  const std::vector<Node*>& users(const Node* n) const {
    static const std::vector<Node*> none;
    auto it = users_.find(n);
    return it == users_.end() ? none : it->second;
  }
  bool feeds_graph_output(const Node* n) const {
    for (Value* r : n->results)
      if (g_.is_graph_output(r)) return true;
    return false;
  }

  // Whether `from` reaches any node of `group` through nodes outside it.
  bool reaches(const Node* from, const std::unordered_set<const Node*>& group) const {
    std::vector<const Node*> stack{from};
    std::unordered_set<const Node*> seen;
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      for (Node* u : users(n)) {
        if (group.count(u)) return true;
        if (seen.insert(u).second) stack.push_back(u);
      }
    }
    return false;
  }

  bool can_pull(Node* p, const Shape& shape, const std::unordered_set<const Node*>& members) const {
    if (!fusible(p) || group_of_.count(p)) return false;
    const Shape& ps = p->result()->type.shape;
    bool all_users_inside = !feeds_graph_output(p);
    for (Node* u : users(p)) all_users_inside &= members.count(u) != 0;
    if (ps != shape && !(broadcasts_to(ps, shape) && all_users_inside)) return false;
    // No cycle: an outside user of p must not lead back into the group, and an
    // operand of p must not be computed from the group's results.
    for (Node* u : users(p))
      if (!members.count(u) && reaches(u, members)) return false;
    for (auto& o : p->operands)
      if (o.is_value() && o.value->producer && !members.count(o.value->producer)) {
        const Node* q = o.value->producer;
        for (const Node* m : members)
          if (q == m || reaches(m, {q})) return false;
      }
    return true;
  }

  void grow(Node* sink) {
    const Shape shape = sink->result()->type.shape;
    std::unordered_set<const Node*> members{sink};
    std::vector<Node*> order{sink};
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < order.size(); ++i)
        for (auto& o : order[i]->operands) {
          Node* p = o.is_value() ? o.value->producer : nullptr;
          if (!p || members.count(p) || !can_pull(p, shape, members)) continue;
          members.insert(p);
          order.push_back(p);
          changed = true;
        }
    }
    std::sort(order.begin(), order.end(), [&](Node* a, Node* b) { return index_.at(a) < index_.at(b); });
    int id = static_cast<int>(groups_.size());
    for (Node* n : order) group_of_[n] = id;
    groups_.push_back(std::move(order));
  }

  PointwiseGroup describe(const std::vector<Node*>& members) const {
    PointwiseGroup pg;
    pg.nodes = members;
    pg.shape = members.back()->result()->type.shape;
    std::unordered_set<const Node*> in(members.begin(), members.end());
    for (Node* n : members) {
      for (auto& o : n->operands)
        if (o.is_value() && (!o.value->producer || !in.count(o.value->producer)) &&
            std::find(pg.inputs.begin(), pg.inputs.end(), o.value) == pg.inputs.end())
          pg.inputs.push_back(o.value);
      bool used_outside = feeds_graph_output(n);
      for (Node* u : users(n)) used_outside |= !in.count(u);
      if (used_outside) pg.outputs.push_back(n->result());
    }
    return pg;
  }

  // Topological order of the contracted graph (groups as single steps), keeping
  // the original order where dependencies allow (Kahn's algorithm keyed by the
  // earliest original position of each step).
  std::vector<Step> schedule() const {
    std::vector<Step> steps;
    std::unordered_map<const Node*, int> step_of;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      for (Node* n : groups_[gi]) step_of[n] = static_cast<int>(steps.size());
      steps.push_back({Step::Kind::Kernel, static_cast<int>(gi), nullptr});
    }
    for (auto& n : g_.nodes())
      if (!group_of_.count(n.get())) {
        step_of[n.get()] = static_cast<int>(steps.size());
        steps.push_back({Step::Kind::Node, -1, n.get()});
      }
    size_t ns = steps.size();
    std::vector<int> key(ns, 1 << 30), indegree(ns, 0);
    std::vector<std::unordered_set<int>> succ(ns);
    for (auto& n : g_.nodes()) {
      int s = step_of.at(n.get());
      key[s] = std::min(key[s], index_.at(n.get()));
      for (auto& o : n->operands)
        if (o.is_value() && o.value->producer) {
          int ps = step_of.at(o.value->producer);
          if (ps != s && succ[ps].insert(s).second) indegree[s]++;
        }
    }
    using Item = std::pair<int, int>;  // (key, step)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
    for (size_t s = 0; s < ns; ++s)
      if (indegree[s] == 0) ready.push({key[s], static_cast<int>(s)});
    std::vector<Step> order;
    while (!ready.empty()) {
      int s = ready.top().second;
      ready.pop();
      order.push_back(steps[s]);
      for (int t : succ[s])
        if (--indegree[t] == 0) ready.push({key[t], t});
    }
    if (order.size() != ns) throw IRError("fusion produced a cyclic schedule (internal error)");
    return order;
  }
};

}  // namespace

Partition partition(const Graph& g, const PartitionOptions& options) { return Partitioner(g, options).run(); }

}  // namespace ff::fusion
