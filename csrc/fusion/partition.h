#pragma once
// The machinery schedulers share to form groups (scheduler.h): users of each
// node, which group holds a node, cycle checks, and the final schedule of
// groups and library calls in an order that respects every dependency.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "kernel/group.h"

namespace ff::fusion {

class PartitionBuilder {
 public:
  explicit PartitionBuilder(const Graph& g);

  const Graph& graph() const { return g_; }
  // Nodes that read a result of `n`, each once, in graph order.
  const std::vector<Node*>& users(const Node* n) const;
  // Nodes that read `v`, each once, in graph order (Graph::users without
  // walking the graph).
  const std::vector<Node*>& users(const Value* v) const;
  // Whether a result of `n` is a graph output (or a mutation's new value).
  bool feeds_graph_output(const Node* n) const;
  // Position of `n` in the graph's node order.
  int index(const Node* n) const { return index_.at(n); }
  // The group that holds `n`, if any.
  std::optional<int> group_of(const Node* n) const;
  // The group that holds every user of `n` (which has users and no result a
  // graph output), if one does: where an epilogue for `n` can come from.
  std::optional<int> group_of_all_users(const Node* n) const;
  // That group when it is a pointwise one whose outputs have `n`'s result
  // shape and whose nodes and inputs broadcast to it (per-channel vectors,
  // residuals): an epilogue a kernel computing `n` can apply per element.
  // With `shared`, `n`'s result may also be a graph output or read by nodes
  // outside that group that lead nowhere into it (its one pointwise group
  // among the readers): the kernel then writes the result too.
  std::optional<int> pointwise_epilogue(const Node* n, bool shared = false) const;
  // Whether group `group` is a pointwise one whose outputs have `shape` and
  // whose nodes and inputs broadcast to it: the test pointwise_epilogue
  // applies to the group it finds.
  bool pointwise_at(int group, const Shape& shape) const;
  // The pointwise group that makes `n`'s first operand and nothing else: its
  // one output, read by `n` alone (no graph output). A prologue a kernel
  // computing `n` can apply as it loads (pools at each tap, scans per element).
  std::optional<int> pointwise_prologue(const Node* n) const;
  // The same for nodes that read one value as their first operand (pools of
  // one input side by side): its group's one output, read by `readers` alone.
  std::optional<int> pointwise_prologue(const std::vector<const Node*>& readers) const;
  // Whether `from` reaches any node of `members` through nodes outside it.
  bool reaches(const Node* from, const std::unordered_set<const Node*>& members) const;
  // Whether any node of `from` does: one search for all of them.
  bool reaches(const std::vector<const Node*>& from, const std::unordered_set<const Node*>& members) const;
  // The same between kernels: a path that enters a group leaves it from any
  // of its nodes, since the group's kernel runs once all it reads is there.
  // Two kernels can each read the other's results with no path between
  // their nodes; this sees that cycle.
  bool reaches_through_groups(const std::vector<const Node*>& from,
                              const std::unordered_set<const Node*>& members) const;

  // Adds a group of `nodes`, in the order its kernel computes them (a
  // topological one); returns its index.
  int add_group(Group::Kind kind, std::vector<Node*> nodes, const GemmSpec& gemm = {}, const ConvKernelSpec& conv = {});
  // Empties group `group` (dropped at finish()) and returns its nodes, for a
  // new group to take them in.
  std::vector<Node*> release(int group);
  // Gives group `group` a library form: its first node as a library call,
  // then the rest as a `kind` group of their own (Partition::library_epilogues).
  void set_library_epilogue(int group, Group::Kind kind);
  // The group as it stands: its nodes, inputs, outputs and shape.
  Group describe(int group) const;
  // The same for a group of `nodes` (topological order) not added yet.
  Group describe_nodes(Group::Kind kind, const std::vector<Node*>& nodes) const;
  int num_groups() const { return static_cast<int>(groups_.size()); }

  // The groups (absorbed ones dropped) and every step in a valid order.
  Partition finish() const;

 private:
  struct Members {
    Group::Kind kind;
    GemmSpec gemm;
    ConvKernelSpec conv;
    std::vector<Node*> nodes;
    bool released = false;
    std::optional<Group::Kind> library_epilogue;
  };
  const Graph& g_;
  std::unordered_map<const Node*, int> index_;
  std::unordered_map<const Node*, std::vector<Node*>> users_;
  std::unordered_map<const Value*, std::vector<Node*>> value_users_;
  std::unordered_map<const Node*, int> group_of_;
  std::vector<Members> groups_;
  // Each group's last node index at the position of its first, as a
  // segment tree of maxima (-1: none): reaches_through_groups finds the last
  // node of the groups that start before a point in log time.
  std::vector<int> span_tree_;
  size_t span_leaves_ = 1;
  // reaches_through_groups' search by node index: each node's users and
  // group (-1: none), and marks of this search (== stamp_) for what it saw,
  // the members and the groups it entered, so that no search hashes.
  std::vector<std::vector<int>> user_indices_;
  std::vector<int> group_at_;
  mutable std::vector<uint32_t> seen_, member_, entered_;  // entered_: by group
  mutable uint32_t stamp_ = 0;

  void set_span(const std::vector<Node*>& nodes, bool present);
  int last_end_of_groups_before(int position) const;

  Group describe(const Members& m) const;
  std::vector<Step> schedule(const std::vector<int>& kept) const;
};

}  // namespace ff::fusion
