#include "fusion/partition.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace ff::fusion {

PartitionBuilder::PartitionBuilder(const Graph& g) : g_(g) {
  for (size_t i = 0; i < g.nodes().size(); ++i) index_[g.nodes()[i].get()] = static_cast<int>(i);
  while (span_leaves_ < g.nodes().size()) span_leaves_ *= 2;
  span_tree_.assign(2 * span_leaves_, -1);
  group_at_.assign(g.nodes().size(), -1);
  seen_.assign(g.nodes().size(), 0);
  member_.assign(g.nodes().size(), 0);
  for (auto& n : g.nodes())
    for (auto& o : n->operands) {
      if (!o.is_value()) continue;
      auto& readers = value_users_[o.value];
      if (readers.empty() || readers.back() != n.get()) readers.push_back(n.get());
      if (o.value->producer) {
        auto& u = users_[o.value->producer];
        if (std::find(u.begin(), u.end(), n.get()) == u.end()) u.push_back(n.get());
      }
    }
  user_indices_.resize(g.nodes().size());
  for (const auto& [n, us] : users_)
    for (const Node* u : us) user_indices_[index(n)].push_back(index(u));
}

const std::vector<Node*>& PartitionBuilder::users(const Node* n) const {
  static const std::vector<Node*> none;
  auto it = users_.find(n);
  return it == users_.end() ? none : it->second;
}

const std::vector<Node*>& PartitionBuilder::users(const Value* v) const {
  static const std::vector<Node*> none;
  auto it = value_users_.find(v);
  return it == value_users_.end() ? none : it->second;
}

bool PartitionBuilder::feeds_graph_output(const Node* n) const {
  for (Value* r : n->results)
    if (g_.is_graph_output(r)) return true;
  return false;
}

std::optional<int> PartitionBuilder::group_of(const Node* n) const {
  auto it = group_of_.find(n);
  if (it == group_of_.end()) return std::nullopt;
  return it->second;
}

std::optional<int> PartitionBuilder::group_of_all_users(const Node* n) const {
  if (feeds_graph_output(n) || users(n).empty()) return std::nullopt;
  const auto g = group_of(users(n).front());
  for (Node* u : users(n))
    if (!g || group_of(u) != g) return std::nullopt;
  return g;
}

std::optional<int> PartitionBuilder::pointwise_epilogue(const Node* n, bool shared) const {
  auto gi = group_of_all_users(n);
  std::vector<const Node*> others;  // readers outside the group (shared only)
  if (!gi && shared) {
    for (Node* u : users(n)) {
      const auto g = group_of(u);
      if (!g || describe(*g).kind != Group::Kind::Pointwise)
        others.push_back(u);
      else if (gi && *gi != *g)
        return std::nullopt;  // two pointwise groups read it
      else
        gi = g;
    }
  }
  if (!gi || !pointwise_at(*gi, n->result()->type.shape)) return std::nullopt;
  if (!others.empty()) {
    const Group pg = describe(*gi);
    if (reaches(others, std::unordered_set<const Node*>(pg.nodes.begin(), pg.nodes.end()))) return std::nullopt;
  }
  return gi;
}

bool PartitionBuilder::pointwise_at(int group, const Shape& shape) const {
  const Group pg = describe(group);
  if (pg.kind != Group::Kind::Pointwise) return false;
  for (const Value* v : pg.outputs)
    if (v->type.shape != shape) return false;
  for (const Node* m : pg.nodes)
    if (!broadcasts_to(m->result()->type.shape, shape)) return false;
  for (const Value* v : pg.inputs)
    if (!broadcasts_to(v->type.shape, shape)) return false;
  return true;
}

std::optional<int> PartitionBuilder::pointwise_prologue(const Node* n) const {
  return pointwise_prologue(std::vector<const Node*>{n});
}

std::optional<int> PartitionBuilder::pointwise_prologue(const std::vector<const Node*>& readers) const {
  const Value* x = readers.front()->input(0);
  if (!x->producer || feeds_graph_output(x->producer)) return std::nullopt;
  for (const Node* u : users(x->producer))
    if (std::find(readers.begin(), readers.end(), u) == readers.end()) return std::nullopt;
  const auto gi = group_of(x->producer);
  if (!gi) return std::nullopt;
  const Group pg = describe(*gi);
  if (pg.kind != Group::Kind::Pointwise || pg.outputs.size() != 1 || pg.outputs[0] != x) return std::nullopt;
  return gi;
}

bool PartitionBuilder::reaches(const Node* from, const std::unordered_set<const Node*>& members) const {
  return reaches(std::vector<const Node*>{from}, members);
}

bool PartitionBuilder::reaches(const std::vector<const Node*>& from,
                               const std::unordered_set<const Node*>& members) const {
  // The node order is topological: a node after the last member leads to
  // none, so the search stays between `from` and the members (in a network of
  // repeated blocks, near them) instead of walking the rest of the graph.
  int last = -1;
  for (const Node* m : members) last = std::max(last, index(m));
  std::vector<const Node*> stack;
  for (const Node* n : from)
    if (index(n) < last) stack.push_back(n);
  std::unordered_set<const Node*> seen;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (Node* u : users(n)) {
      if (members.count(u)) return true;
      if (index(u) < last && seen.insert(u).second) stack.push_back(u);
    }
  }
  return false;
}

bool PartitionBuilder::reaches_through_groups(const std::vector<const Node*>& from,
                                              const std::unordered_set<const Node*>& members) const {
  // Node edges go forward in the node order and a group joins its nodes
  // whatever their order, so a path to a member stays before `last`: the
  // members' last index, raised to the last node of every group with a node
  // before it, until none raises it further.
  int last = -1;
  for (const Node* m : members) last = std::max(last, index(m));
  for (int end = last_end_of_groups_before(last); end > last; end = last_end_of_groups_before(last)) last = end;
  if (++stamp_ == 0) {  // the marks wrapped: clear them once
    std::fill(seen_.begin(), seen_.end(), 0);
    std::fill(member_.begin(), member_.end(), 0);
    std::fill(entered_.begin(), entered_.end(), 0);
    stamp_ = 1;
  }
  for (const Node* m : members) member_[index(m)] = stamp_;
  std::vector<int> stack;
  const auto visit = [&](int i) {
    if (i > last || seen_[i] == stamp_) return;
    seen_[i] = stamp_;
    stack.push_back(i);
    const int gi = group_at_[i];
    if (gi < 0 || entered_[gi] == stamp_) return;
    entered_[gi] = stamp_;
    for (const Node* g : groups_[gi].nodes) {
      const int j = index(g);
      if (member_[j] != stamp_ && j <= last && seen_[j] != stamp_) {
        seen_[j] = stamp_;
        stack.push_back(j);
      }
    }
  };
  for (const Node* n : from) visit(index(n));
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    for (int u : user_indices_[i]) {
      if (member_[u] == stamp_) return true;
      visit(u);
    }
  }
  return false;
}

void PartitionBuilder::set_span(const std::vector<Node*>& nodes, bool present) {
  if (nodes.empty()) return;
  int first = index(nodes.front()), end = first;
  for (const Node* n : nodes) {
    first = std::min(first, index(n));
    end = std::max(end, index(n));
  }
  size_t at = span_leaves_ + static_cast<size_t>(first);
  span_tree_[at] = present ? end : -1;
  for (at /= 2; at >= 1; at /= 2) span_tree_[at] = std::max(span_tree_[2 * at], span_tree_[2 * at + 1]);
}

int PartitionBuilder::last_end_of_groups_before(int position) const {
  int best = -1;  // the maximum over the leaves [0, position)
  size_t lo = span_leaves_, hi = span_leaves_ + static_cast<size_t>(std::max(position, 0));
  for (; lo < hi; lo /= 2, hi /= 2) {
    if (lo & 1) best = std::max(best, span_tree_[lo++]);
    if (hi & 1) best = std::max(best, span_tree_[--hi]);
  }
  return best;
}

int PartitionBuilder::add_group(Group::Kind kind, std::vector<Node*> nodes, const GemmSpec& gemm,
                                const ConvKernelSpec& conv) {
  const int id = static_cast<int>(groups_.size());
  set_span(nodes, true);
  entered_.push_back(0);
  for (Node* n : nodes) {
    group_of_[n] = id;
    group_at_[index(n)] = id;
  }
  groups_.push_back({kind, gemm, conv, std::move(nodes)});
  return id;
}

std::vector<Node*> PartitionBuilder::release(int group) {
  Members& m = groups_.at(group);
  set_span(m.nodes, false);
  for (Node* n : m.nodes) {
    group_of_.erase(n);
    group_at_[index(n)] = -1;
  }
  m.released = true;
  return std::move(m.nodes);
}

void PartitionBuilder::set_library_epilogue(int group, Group::Kind kind) { groups_.at(group).library_epilogue = kind; }

Group PartitionBuilder::describe(int group) const { return describe(groups_.at(group)); }

Group PartitionBuilder::describe(const Members& m) const {
  Group pg = describe_nodes(m.kind, m.nodes);
  pg.gemm = m.gemm;
  pg.conv = m.conv;
  return pg;
}

Group PartitionBuilder::describe_nodes(Group::Kind kind, const std::vector<Node*>& nodes) const {
  Group pg;
  pg.kind = kind;
  pg.nodes = nodes;
  pg.shape = nodes.back()->result()->type.shape;
  std::unordered_set<const Node*> in(nodes.begin(), nodes.end());
  std::unordered_set<const Value*> listed;
  for (Node* n : nodes) {
    for (auto& o : n->operands)
      if (o.is_value() && (!o.value->producer || !in.count(o.value->producer)) && listed.insert(o.value).second)
        pg.inputs.push_back(o.value);
    bool used_outside = feeds_graph_output(n);
    for (Node* u : users(n)) used_outside |= !in.count(u);
    if (used_outside) pg.outputs.push_back(n->result());
  }
  return pg;
}

Partition PartitionBuilder::finish() const {
  Partition p;
  std::vector<int> kept;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Members& m = groups_[i];
    if (m.released) continue;
    kept.push_back(static_cast<int>(i));
    p.groups.push_back(describe(m));
    if (m.library_epilogue && m.nodes.size() > 1) {
      p.groups.back().library_epilogue = static_cast<int>(p.library_epilogues.size());
      p.library_epilogues.push_back(
          describe_nodes(*m.library_epilogue, std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end())));
    }
  }
  p.steps = schedule(kept);
  return p;
}

// Topological order of the contracted graph (groups as single steps), keeping
// the original order where dependencies allow (Kahn's algorithm keyed by the
// earliest original position of each step).
std::vector<Step> PartitionBuilder::schedule(const std::vector<int>& kept) const {
  std::vector<Step> steps;
  std::unordered_map<const Node*, int> step_of;
  for (size_t k = 0; k < kept.size(); ++k) {
    for (Node* n : groups_[kept[k]].nodes) step_of[n] = static_cast<int>(steps.size());
    steps.push_back({Step::Kind::Kernel, static_cast<int>(k), nullptr});
  }
  for (auto& n : g_.nodes())
    if (!group_of_.count(n.get())) {
      step_of[n.get()] = static_cast<int>(steps.size());
      steps.push_back({Step::Kind::Node, -1, n.get()});
    }
  const size_t ns = steps.size();
  std::vector<int> key(ns, 1 << 30), indegree(ns, 0);
  std::vector<std::unordered_set<int>> succ(ns);
  for (auto& n : g_.nodes()) {
    const int s = step_of.at(n.get());
    key[s] = std::min(key[s], index_.at(n.get()));
    for (auto& o : n->operands)
      if (o.is_value() && o.value->producer) {
        const int ps = step_of.at(o.value->producer);
        if (ps != s && succ[ps].insert(s).second) indegree[s]++;
      }
  }
  using Item = std::pair<int, int>;  // (key, step)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t s = 0; s < ns; ++s)
    if (indegree[s] == 0) ready.push({key[s], static_cast<int>(s)});
  std::vector<Step> order;
  while (!ready.empty()) {
    const int s = ready.top().second;
    ready.pop();
    order.push_back(steps[s]);
    for (int t : succ[s])
      if (--indegree[t] == 0) ready.push({key[t], t});
  }
  if (order.size() != ns) throw IRError("fusion produced a cyclic schedule (internal error)");
  return order;
}

}  // namespace ff::fusion
