// region_before_view: the work reading a reshaped copy of a broadcast runs
// in the broadcast's shape and reads the broadcast, so that the copy is never
// written.
//
//   %e = expand(%g1) : f32[16,48,12,2,24,2]{6912,576,24,0,1,0}
//   %c = copy(%e) : f32[16,48,12,2,24,2]
//   %v = view(%c) : f32[16,48,24,48]
//   %y = mul(%v, %x) : f32[16,48,24,48]
//   %s = sum(%y) {dims=[3], keepdim=true} : f32[16,48,24,1]
// becomes
//   %xs = view(%x) : f32[16,48,12,2,24,2]
//   %y' = mul(%e, %xs) : f32[16,48,12,2,24,2]
//   %s' = sum(%y') {dims=[4, 5], keepdim=true} : f32[16,48,12,2,1,1]
//   %s = view(%s') : f32[16,48,24,1]
//
// An average pool's gradient (and a tiling max pool's) gives every input
// element its window's value: a broadcast over the window cells, merged into
// the input's shape, which only a copy can do. Written whole, it costs the
// full tensor's bytes once and again for each kernel reading it (a layer
// norm's gradient reads it twice); read in the split shape, it is the
// pooled gradient's bytes through a broadcast.
//
// The region is what reads the view, onward: pointwise nodes of its shape (or
// broadcast in it) and reductions over whole dims of it. Its other operands
// take the split shape too (broadcast_through_reshape): graph inputs and
// library results through a view, pointwise work through a copy of it in the
// split shape (what then reads it nowhere else is dropped by dce). A
// region value read outside it (a library call, a graph output) is viewed
// back. Nothing where the view's shape does not split whole into the
// broadcast's, an operand is partly broadcast across a run of it, or an
// operand is a reduction's result (it would then be written for the view,
// apart from the kernel that computes it).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/patterns.h"
#include "passes/rewrites.h"

namespace ff::passes {

namespace {

constexpr size_t kMostCopied = 32;  // pointwise operand nodes copied into the split shape, per region

// Whether `t` reads fewer elements than it has: some dim of size > 1 is broadcast.
bool broadcast(const TensorType& t) {
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] > 1 && t.strides[d] == 0) return true;
  return false;
}

class RegionBeforeView final : public Pass {
 public:
  std::string_view name() const override { return "region_before_view"; }

  // One region at a time: a rewrite replaces nodes a later region may read.
  bool run(Graph& g) override {
    bool changed = false;
    std::unordered_set<std::string> refused;  // views by name (a node's address may be reused)
    for (bool again = true; again;) {
      again = false;
      for (auto& n : g.nodes()) {
        Node* view = n.get();
        if (view->op != Op::View || refused.count(view->result()->name)) continue;
        const Node* copy = view->input(0)->producer;
        if (!copy || copy->op != Op::Copy || !broadcast(copy->input(0)->type)) continue;
        Region r(g, view);
        if (!r.find()) {
          refused.insert(view->result()->name);
          continue;
        }
        r.rewrite();
        changed = again = true;
        break;
      }
    }
    return changed;
  }

 private:
  class Region {
   public:
    Region(Graph& g, Node* view)
        : g_(g),
          users_(g),
          view_(view),
          from_(view->result()->type.shape),
          to_(view->input(0)->type.shape),
          runs_(reshape_runs(from_, to_)) {
      for (const Value* v : g.outputs()) escapes_.insert(v);
      for (const auto& m : g.mutations()) escapes_.insert(m.value);
    }

    // Grows the region from the view; whether every node of it and every
    // operand it reads can take the split shape.
    bool find() {
      if (runs_.empty() || from_ == to_ || escapes_.count(view_->result())) return false;
      std::vector<const Value*> pending{view_->result()};
      while (!pending.empty()) {
        const Value* v = pending.back();
        pending.pop_back();
        for (Node* u : users_.of(v)) {
          if (in_.count(u)) continue;
          if (!joins(*u)) {
            if (v == view_->result()) return false;  // the copy would be written for it anyway
            continue;
          }
          in_.insert(u);
          if (u->results.size() == 1 && same_rank(u->result()->type)) pending.push_back(u->result());
        }
      }
      for (auto& n : g_.nodes())
        if (in_.count(n.get())) nodes_.push_back(n.get());
      if (nodes_.empty()) return false;  // an unread view: dce's
      for (const Node* n : nodes_)
        for (const Operand& o : n->operands) {
          if (is_rank0(o) || o.value == view_->result()) continue;
          // A region value of another rank (a reduction without keepdim) broadcasts differently split.
          if (produced_in(o.value) ? !same_rank(o.value->type) : !reachable(o.value)) return false;
        }
      return true;
    }

    void rewrite() {
      for (Node* n : nodes_) {
        std::vector<Operand> ops = n->operands;
        for (Operand& o : ops)
          if (!is_rank0(o)) o = Operand::of(split_form(o.value, n));
        const TensorType& t = n->result()->type;
        Attrs attrs = n->attrs;
        Shape shape;
        if (op_kind(n->op) == OpKind::Reduction) {
          const std::vector<int64_t> dims = split_dims(*n);
          shape = reduced_shape(ops[0].value->type.shape, dims, n->attr_bool_or("keepdim", false));
          attrs["dims"] = dims;
        } else {
          shape = *broadcast_through_reshape(t.shape, from_, to_);
        }
        Value* made = rw_.add(g_, n, n->op, ops, {TensorType::contiguous(t.dtype, shape)}, attrs)->result();
        now_[n->result()] = made;
        rw_.dead.push_back(n);
        if (read_outside(n->result()))
          rw_.moved[n->result()] =
              made->type == t ? made : rw_.add(g_, n, Op::View, {Operand::of(made)}, {t})->result();
      }
      rw_.dead.push_back(view_);
      // The copy's readers in its own shape read the broadcast too, where they
      // read it element by element.
      Value* copy = view_->input(0);
      for (Node* u : users_.of(copy))
        if (u != view_ && (op_kind(u->op) == OpKind::Pointwise || (reduces_dims(u->op) && u->operands.size() == 1)))
          for (Operand& o : u->operands)
            if (o.is_value() && o.value == copy) o = Operand::of(broadcast_of());
      rw_.apply(g_);
    }

   private:
    Value* broadcast_of() const { return view_->input(0)->producer->operands[0].value; }

    bool same_rank(const TensorType& t) const { return t.shape.size() == from_.size() && t.is_contiguous(); }

    // Whether `u`, reading a region value, can compute in the split shape:
    // pointwise work whose result broadcasts through the reshape, or a
    // reduction over whole runs of its dims.
    bool joins(const Node& u) const {
      if (u.results.size() != 1 || !u.result()->type.is_contiguous()) return false;
      if (op_kind(u.op) == OpKind::Pointwise)
        return u.op != Op::Full && same_rank(u.result()->type) &&
               broadcast_through_reshape(u.result()->type.shape, from_, to_).has_value();
      if (!reduces_dims(u.op) || !u.has_attr("dims") || u.operands.size() != 1 || !same_rank(u.input(0)->type))
        return false;
      const std::unordered_set<int64_t> reduced = reduced_dims(u);
      for (const auto& [in, out] : runs_) {
        size_t hits = 0;
        for (size_t d = in.first; d < in.second; ++d) hits += reduced.count(static_cast<int64_t>(d));
        if (hits != 0 && hits != in.second - in.first) return false;
      }
      return true;
    }

    bool produced_in(const Value* v) const { return v->producer && in_.count(v->producer); }

    bool read_outside(const Value* v) const {
      if (escapes_.count(v)) return true;
      for (const Node* u : users_.of(v))
        if (!in_.count(u)) return true;
      return false;
    }

    // Whether operand `v` from outside the region can be had in the split
    // shape: viewed (a graph input, a library call's or a layout op's
    // contiguous result), or, pointwise work, copied with its own operands.
    bool reachable(const Value* v) {
      if (reach_.count(v)) return reach_.at(v);
      bool ok =
          v->type.shape.size() <= from_.size() && broadcast_through_reshape(v->type.shape, from_, to_).has_value();
      const Node* p = v->producer;
      if (ok && p && op_kind(p->op) == OpKind::Pointwise && p->results.size() == 1) {
        ok = ++copied_ <= kMostCopied;
        for (const Operand& o : p->operands) ok = ok && (is_rank0(o) || reachable(o.value));
      } else {
        ok = ok && v->type.is_contiguous() &&
             (!p || (op_kind(p->op) != OpKind::Reduction && op_kind(p->op) != OpKind::Pointwise));
      }
      return reach_[v] = ok;
    }

    // `v` in the split shape, its nodes placed before `at`.
    Value* split_form(Value* v, Node* at) {
      if (v == view_->result()) return broadcast_of();
      if (auto it = now_.find(v); it != now_.end()) return it->second;
      const Shape shape = *broadcast_through_reshape(v->type.shape, from_, to_);
      const TensorType t = TensorType::contiguous(v->type.dtype, shape);
      const Node* p = v->producer;
      Value* made;
      if (p && op_kind(p->op) == OpKind::Pointwise) {
        std::vector<Operand> ops = p->operands;
        for (Operand& o : ops)
          if (!is_rank0(o)) o = Operand::of(split_form(o.value, at));
        made = rw_.add(g_, at, p->op, ops, {t}, p->attrs)->result();
      } else {
        made = rw_.add(g_, at, Op::View, {Operand::of(v)}, {t})->result();
      }
      return now_[v] = made;
    }

    // The dims a reduction of a view-shaped value reduces, negative ones counted from the end.
    std::unordered_set<int64_t> reduced_dims(const Node& n) const {
      std::unordered_set<int64_t> out;
      for (int64_t d : n.attr_ints("dims")) out.insert(d < 0 ? d + static_cast<int64_t>(from_.size()) : d);
      return out;
    }

    // A region reduction's dims in the split shape: each reduced dim's run.
    std::vector<int64_t> split_dims(const Node& n) const {
      const std::unordered_set<int64_t> reduced = reduced_dims(n);
      std::vector<int64_t> dims;
      for (const auto& [in, out] : runs_)
        if (reduced.count(static_cast<int64_t>(in.first)))
          for (size_t d = out.first; d < out.second; ++d) dims.push_back(static_cast<int64_t>(d));
      return dims;
    }

    static Shape reduced_shape(const Shape& input, const std::vector<int64_t>& dims, bool keepdim) {
      Shape out;
      for (size_t i = 0; i < input.size(); ++i) {
        if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) == dims.end())
          out.push_back(input[i]);
        else if (keepdim)
          out.push_back(1);
      }
      return out;
    }

    Graph& g_;
    const Users users_;
    Node* view_;
    const Shape from_, to_;  // the view's shape, and the broadcast's it splits into
    const std::vector<ReshapeRun> runs_;
    std::unordered_set<const Value*> escapes_;  // read past the graph
    std::unordered_set<const Node*> in_;
    std::vector<Node*> nodes_;  // the region, in graph order
    std::unordered_map<const Value*, bool> reach_;
    size_t copied_ = 0;
    std::unordered_map<const Value*, Value*> now_;  // value -> its split form
    Rewrites rw_;
  };
};

}  // namespace

std::unique_ptr<Pass> make_region_before_view() { return std::make_unique<RegionBeforeView>(); }

}  // namespace ff::passes
