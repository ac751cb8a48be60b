#pragma once
// The machinery schedulers share to form groups (scheduler.h): users of each
// node, which group holds a node, cycle checks, and the final schedule of
// groups and library calls in an order that respects every dependency.
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

  Group describe(const Members& m) const;
  std::vector<Step> schedule(const std::vector<int>& kept) const;
};

}  // namespace ff::fusion
