// recompute_pointwise: a cheap pointwise value that several kernels read is
// computed in each of them instead of written once and read back.
//
//   %y = add(%conv, %bias_view)                  (%conv large, %bias_view small)
//   %m = mean(%y) ... ; %v = var(%y) ... ; %z = sub(%y, ...)
// becomes
//   %y0 = add(%conv, %bias_view) ; %m = mean(%y0) ... ; %v = var(%y0) ...
//   %y1 = add(%conv, %bias_view) ; %z = sub(%y1, ...)
//
// Each copy fuses into its reader's kernel (a reduction's prologue, a pointwise
// group), which reads %conv where it read %y: the same bytes, and %y is never
// written. Readers that land in one kernel share one copy: reductions over
// the same dims (var and mean, as above), pointwise readers whose work ends
// in the same places (mish's links; an activation's gradient, kernel_of); a
// value only one kernel reads is left as it is. Only where every reader fuses
// (pointwise ops and reductions that become kernels): a library call would
// need %y written anyway.
// Only nodes reading one tensor of their size and small others (per-channel
// values, scalars), so no reader reads more than it did; that tensor an input,
// an ATen op's or a convolution's result, or a view of one (a GEMM kernel
// would take the node into its epilogue). Then chains the same way: a node whose full-size
// operands come, through pointwise nodes nothing else reads, from one such
// tensor (an activation of several ops, hardswish or mish, between a conv
// and a norm's statistics and apply) is copied with its chain, at most
// kMostChained nodes: the readers recompute it from the conv's result, which
// they read in place of the chain's. A reader may be a reshape whose readers
// all fuse (a group norm's apply on the [N, G, C/G, H*W] view): its copy
// computes in the reshape's shape, the tensor and the small operands viewed
// (a per-channel bias as [1, G, C/G, 1]), where every small operand spans
// or skips each run of dims the reshape merges or splits. A conv is written
// whole by cuDNN or by a conv kernel, which takes a pointwise epilogue only
// where one group reads all of it, so its copies there are the same bytes read.
//
// The pipeline runs it once, after the others (compile.cc): cse would merge
// the copies back.
#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "kernel/reduction_domain.h"
#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

constexpr int64_t kSmallRatio = 16;  // an operand this many times smaller than the result is "small"

constexpr size_t kMostChained = 12;  // nodes a recomputed chain may have

constexpr size_t kMostFollowed = 256;  // nodes kernel_of follows from one reader

class RecomputePointwise : public Pass {
 public:
  std::string_view name() const override { return "recompute_pointwise"; }

  // Single nodes first (a conv's bias add read by a norm's statistics and
  // its apply), then whole chains ending in a node several kernels read.
  bool run(Graph& g) override { return recompute(g, false) | recompute(g, true); }

 private:
  // A chain to copy (in order, the node last) and the kernel each reader of
  // its node lands in (kernel_of).
  struct Candidate {
    std::vector<Node*> chain;
    std::unordered_map<const Node*, std::string> kernel_of;
  };

  bool recompute(Graph& g, bool chains) const {
    std::vector<Candidate> candidates;
    {
      const Users users(g);  // the search changes nothing: one walk for every node's users
      for (auto& n : g.nodes()) {
        Candidate c = recomputable(g, users, *n, chains);
        if (!c.chain.empty()) candidates.push_back(std::move(c));
      }
    }
    std::vector<const Node*> dead;
    for (const Candidate& c : candidates) {
      const std::vector<Node*>& chain = c.chain;
      Node* n = chain.back();
      // Readers that land in one kernel share a copy: the first reader's
      // kernel keeps n itself.
      std::vector<std::pair<std::string, Value*>> shared;
      for (Node* u : g.users(n->result())) {
        if (u->op == Op::View) {  // a copy in the reshape's shape takes its place
          g.replace_all_uses(u->result(), copy_before(g, u, chain, &u->result()->type.shape));
          dead.push_back(u);
          continue;
        }
        const std::string& kernel = c.kernel_of.at(u);
        Value* value = nullptr;
        for (const auto& [k, v] : shared)
          if (k == kernel) value = v;
        if (value == nullptr) {
          value = shared.empty() ? n->result() : copy_before(g, u, chain);
          shared.emplace_back(kernel, value);
        }
        for (Operand& o : u->operands)
          if (o.is_value() && o.value == n->result()) o = Operand::of(value);
      }
      if (shared.empty()) dead.insert(dead.end(), chain.begin(), chain.end());  // every reader a reshape
    }
    g.erase_nodes_if([&](const Node* x) { return std::find(dead.begin(), dead.end(), x) != dead.end(); });
    return !candidates.empty();
  }

  // A copy of `chain` (in order) before `user`; its last node's result. With
  // `shape`, the copy computes in that reshape of the chain's shape, reading
  // the chain's tensor and its small operands through views
  // (reshaped_operand).
  static Value* copy_before(Graph& g, Node* user, const std::vector<Node*>& chain, const Shape* shape = nullptr) {
    std::unordered_map<const Value*, Value*> copied;
    Value* last = nullptr;
    for (const Node* c : chain) {
      std::vector<Operand> ops = c->operands;
      for (Operand& o : ops) {
        if (is_rank0(o)) continue;
        if (!copied.count(o.value)) {
          if (shape == nullptr) continue;
          const Shape& from = c->result()->type.shape;
          copied[o.value] =
              g.insert_before(user, Op::View, {Operand::of(o.value)},
                              {TensorType::contiguous(o.value->type.dtype, *reshaped_operand(*o.value, from, *shape))})
                  ->result();
        }
        o = Operand::of(copied.at(o.value));
      }
      const TensorType& t = c->result()->type;
      last =
          g.insert_before(user, c->op, ops, {shape ? TensorType::contiguous(t.dtype, *shape) : t}, c->attrs)->result();
      copied[c->result()] = last;
    }
    return last;
  }

  // The shape operand `v` of a chain node of shape `from` takes in a copy of
  // the chain in the reshape `to` (broadcast_through_reshape), if it can be
  // viewed so: contiguous.
  static std::optional<Shape> reshaped_operand(const Value& v, const Shape& from, const Shape& to) {
    if (!v.type.is_contiguous()) return std::nullopt;
    return broadcast_through_reshape(v.type.shape, from, to);
  }

  // The kernel a reader of a recomputed value lands in, as a key: readers
  // with equal keys are one kernel. The key is where the reader's work ends:
  // following every reader on through pointwise nodes, the reductions it
  // feeds and the nodes no pointwise group continues past (other ops, views,
  // returned values). A connected pointwise region with the same ends is one
  // group, so readers whose chains meet inside it (mish's links, x *
  // tanh(softplus(x)); an activation's gradient, which reads x and its
  // intermediate values in a dozen nodes that all end in one value) would
  // compute a copy each side by side. Past kMostFollowed nodes the first
  // node read by several ends it, which keeps copies apart rather than
  // merging kernels that may not be one.
  static std::string kernel_of(const Graph& g, const Users& readers, const Node& u) {
    std::set<std::string> ends;
    std::vector<const Node*> pending{&u};
    std::unordered_set<const Node*> seen{&u};
    while (!pending.empty()) {
      const Node* x = pending.back();
      pending.pop_back();
      if (!pointwise_link(g, *x)) {
        ends.insert(end_key(*x));
        continue;
      }
      for (const Node* r : readers.of(x->result()))
        if (seen.insert(r).second) pending.push_back(r);
      if (seen.size() > kMostFollowed) {
        const Node* y = &u;
        while (pointwise_link(g, *y) && readers.of(y->result()).size() == 1) y = readers.of(y->result()).front();
        return end_key(*y);
      }
    }
    std::string key;
    for (const std::string& e : ends) key += e + ";";
    return key;
  }

  // Where pointwise work ends, as a key: a reduction by what it reduces
  // (reductions over the same dims are computed in one kernel: var and mean
  // in one pass), any other node by itself.
  static std::string end_key(const Node& x) {
    if (op_kind(x.op) != OpKind::Reduction || !x.has_attr("dims")) return "node " + x.results.front()->name;
    std::string key = x.attr_bool_or("keepdim", false) ? "keep" : "drop";
    for (int64_t d : x.attr_ints("dims")) key += " " + std::to_string(d);
    return key;
  }

  static bool fuses(const Node& u) { return op_kind(u.op) == OpKind::Pointwise || fusion::is_kernel_reduction(u); }

  // A tensor in memory before the kernels run: an input, a library call's or
  // a conv's result, or a view of one (its reader reads the same bytes).
  static bool materialized(const Node* p) {
    while (p && is_view_op(p->op)) p = p->input(0)->producer;
    return p == nullptr || p->op == Op::Opaque || p->op == Op::Convolution;
  }

  static bool pointwise_link(const Graph& g, const Node& n) {
    return op_kind(n.op) == OpKind::Pointwise && n.results.size() == 1 && !g.is_graph_output(n.result());
  }

  // A reshape of n whose readers all take pointwise work in (a group norm's
  // apply on the [N, G, C/G, H*W] view of an activation): it gets a copy of
  // the chain computed in its shape.
  static bool fused_reshape(const Graph& g, const Users& users, const Node& n, const Node& u) {
    if (u.op != Op::View || g.is_graph_output(u.result()) || !n.result()->type.is_contiguous() ||
        !u.result()->type.is_contiguous())
      return false;
    const std::vector<Node*>& readers = users.of(u.result());
    return !readers.empty() && std::all_of(readers.begin(), readers.end(), [](const Node* r) { return fuses(*r); });
  }

  // Whether `chain` (all of one shape, reading `root` of that shape) can be
  // computed in the reshape `to`: each of its other operands viewed so.
  static bool reshapes(const std::vector<const Node*>& chain, const Value& root, const Shape& to) {
    const Shape& from = chain.front()->result()->type.shape;
    if (root.type.shape != from || !root.type.is_contiguous()) return false;
    for (const Node* c : chain) {
      if (c->result()->type.shape != from) return false;
      for (const Operand& o : c->operands)
        if (!is_rank0(o) && o.value != &root &&
            std::find(chain.begin(), chain.end(), o.value->producer) == chain.end() &&
            !reshaped_operand(*o.value, from, to))
          return false;
    }
    return true;
  }

  // The nodes to copy for each further reader of n (n last, the others in
  // graph order) and the kernel each reader lands in, or none where n is not
  // worth it: n pointwise, read by several kernels that take pointwise work
  // in (pointwise groups, reductions, directly or through a reshape); its
  // full-size operands lead, through pointwise nodes that only the chain
  // reads (`chains`; else n alone), to one materialized tensor of n's size,
  // every other operand small. The copies then read that tensor where the
  // readers read n: the same bytes, and n is never written.
  Candidate recomputable(const Graph& g, const Users& readers, const Node& n, bool chains) const {
    if (!pointwise_link(g, n)) return {};
    const std::vector<Node*>& users = readers.of(n.result());
    if (users.size() < 2) return {};
    Candidate found;
    std::unordered_set<std::string> kernels;
    for (const Node* u : users) {
      if (!fuses(*u) && !fused_reshape(g, readers, n, *u)) return {};
      if (u->op == Op::View) {
        kernels.insert("view " + u->result()->name);
        continue;
      }
      kernels.insert(found.kernel_of[u] = kernel_of(g, readers, *u));
    }
    if (kernels.size() < 2) return {};  // one kernel reads it all: nothing to save
    const int64_t size = numel(n.result()->type.shape);
    std::vector<const Node*> chain{&n}, pending{&n};
    const Value* root = nullptr;
    while (!pending.empty()) {
      const Node* c = pending.back();
      pending.pop_back();
      for (const Operand& o : c->operands) {
        if (!o.is_value()) continue;
        const int64_t k = numel(o.value->type.shape);
        if (k * kSmallRatio <= size) continue;
        if (k != size) return {};
        const Node* p = o.value->producer;
        if (materialized(p)) {
          if (root != nullptr && root != o.value) return {};
          root = o.value;
          continue;
        }
        if (!chains) return {};
        if (std::find(chain.begin(), chain.end(), p) != chain.end()) continue;
        if (!pointwise_link(g, *p)) return {};
        chain.push_back(p);
        pending.push_back(p);
        if (chain.size() > kMostChained) return {};
      }
    }
    // Single nodes: n alone. Chains: more than n (n alone was the first round's).
    if (root == nullptr || (chains && chain.size() == 1)) return {};
    for (size_t i = 1; i < chain.size(); ++i)  // links only the chain reads (a bias add read by two of them)
      for (const Node* u : readers.of(chain[i]->result()))
        if (std::find(chain.begin(), chain.end(), u) == chain.end()) return {};
    for (const Node* u : users)
      if (u->op == Op::View && !reshapes(chain, *root, u->result()->type.shape)) return {};
    for (const auto& node : g.nodes())
      if (std::find(chain.begin(), chain.end(), node.get()) != chain.end()) found.chain.push_back(node.get());
    return found;
  }
};

}  // namespace

std::unique_ptr<Pass> make_recompute_pointwise() { return std::make_unique<RecomputePointwise>(); }

}  // namespace ff::passes
