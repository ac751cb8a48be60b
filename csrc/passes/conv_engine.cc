// conv_engine: gives each convolution its engine and layout, once, and lays
// out the values around it so that the conversions cost nothing where they can.
//
// The engines (kernel/conv.h says which convs each computes): cuDNN through
// ATen on contiguous or on channels-last operands, a generated implicit-GEMM
// kernel (channels-last operands; where PassOptions::conv_kernels allows and
// cuDNN was timed, or everywhere with conv_always) and a generated direct
// kernel (operands where they are; where PassOptions::conv_direct allows).
// Each is weighed with the cost model (kernel/conv_cost.h), cuDNN's and the
// direct kernel's times as the front end measured them where it did
// (conv_precision records them on the conv); a generated kernel saves the
// separate pass of the pointwise epilogue it fuses (and a direct kernel that
// reduces over the channels, the write of the conv's result), and
// channels-last pays for the conversions it needs: the input's when no kernel
// can write it channels-last, the weight's, and the result's when it is
// returned or read by a library op that would copy it. The fastest wins; a
// timing of both layouts under autotuning (PassOptions::conv_channels_last)
// fixes the layout alone. Before time, memory: a conv stays contiguous where
// channels-last would raise the plan's peak above eager's (raises_peak). The
// choice is the conv's `engine` attribute ("cudnn", "implicit_gemm",
// "direct"); round_conv_operands and the conv scheduler only read it. (The
// executor still times a kernel against cuDNN at its first run: the model
// can be far off, and cuDNN then runs.)
//
// A channels-last conv gets channels-last operands and result. Then the
// layout spreads: a pointwise op, a normalization (softmax, layer_norm: its
// kernel then writes along the dim it reads along) or a pooling op (ATen
// keeps its input's memory format) reading a channels-last value of its own
// shape writes channels-last too, so conv -> norm -> relu -> pool -> conv
// chains stay channels-last; a conv's input made by a pointwise kernel is written
// channels-last by that kernel; only what remains gets a `copy`. Values that
// are returned keep the strides eager gives them (a conv's result through a
// `copy` back), and pointwise kernels read any strides, so the conversion
// back fuses into the epilogue that already reads the conv. A view of a
// conv's result that its channels-last memory allows (group norm's [N, G,
// C/G, H*W]) reads it in place with its strides; other views and layout ops
// derive their strides from their input's, so a conv result they read
// reaches them through that copy too, and the layout does not spread to a
// value they read.
#include <limits>
#include <set>
#include <unordered_set>
#include <vector>

#include "ir/conv.h"
#include "kernel/conv.h"
#include "kernel/conv_cost.h"
#include "kernel/reduction_domain.h"
#include "passes/pass.h"

namespace ff::passes {

namespace {

// Ops that return their input's memory format: pooling (the IR's, and ATen's
// forms capture keeps opaque).
bool keeps_memory_format(const Node& n) {
  if (op_kind(n.op) == OpKind::Window) return true;
  if (n.op != Op::Opaque || !n.has_attr("target")) return false;
  static const std::set<std::string> targets{"aten.max_pool2d.default", "aten.max_pool2d_with_indices.default",
                                             "aten.avg_pool2d.default", "aten.max_pool3d.default",
                                             "aten.max_pool3d_with_indices.default"};
  return targets.count(n.attr_string("target")) != 0;
}

// Library ops that read a channels-last value as fast as a contiguous one:
// reductions over given dims and batch/group norm's statistics (var_mean).
bool reads_any_layout(const Node& n) {
  if (n.op == Op::Convolution || keeps_memory_format(n)) return true;
  switch (n.op) {
    case Op::Sum:
    case Op::Mean:
    case Op::Amax:
    case Op::Amin:
    case Op::Var:
      return true;
    default:
      break;
  }
  return n.op == Op::Opaque && n.has_attr("target") && n.attr_string("target").rfind("aten.var_mean", 0) == 0;
}

bool pointwise(const Node& n) { return op_kind(n.op) == OpKind::Pointwise; }

// Ops whose result the layout spreads to from an operand of the result's shape.
bool follows_layout(const Node& n) { return pointwise(n) || fusion::is_normalization(n.op); }

// Whether a view (or another layout op, whose strides follow its input's) reads `v`.
bool read_by_layout_op(const Graph& g, const Value* v) {
  for (const Node* u : g.users(v))
    if (op_kind(u->op) == OpKind::Layout) return true;
  return false;
}

// Whether view `u` of a value can read it in layout `t` as a view still: its
// shape is a strided view of that memory (group norm's [N, G, C/G, H*W] of a
// channels-last conv result is), and what it makes is not returned (outputs
// keep eager's strides) nor read by another layout op (its strides would move too).
bool view_follows(const Graph& g, const Node& u, const TensorType& t) {
  return u.op == Op::View && view_strides(t.shape, t.strides, u.result()->type.shape) &&
         !g.is_graph_output(u.result()) && !read_by_layout_op(g, u.result());
}

// A value whose layout this pass may choose: rank 4 or 5, floating, not returned.
bool placeable(const Graph& g, const Value* v) {
  const size_t rank = v->type.shape.size();
  return (rank == 4 || rank == 5) && is_floating(v->type.dtype) && !g.is_graph_output(v);
}

TensorType channels_last(TensorType t) {
  t.strides = channels_last_strides(t.shape);
  return t;
}

// What a generated kernel saves by fusing `conv`'s pointwise epilogue
// (fusion::epilogue_nodes): the epilogue's own pass, where one would run.
// There is none where nothing pointwise reads the result, nor where every
// value the epilogue makes is read only by reductions, pools and scans, whose
// kernels take the pointwise work in as their prologue and read the conv's
// result once either way.
double epilogue_ms(const Graph& g, const Node& conv, const std::vector<const Node*>& epilogue, const Target& target) {
  const std::unordered_set<const Node*> inside(epilogue.begin(), epilogue.end());
  const auto takes_as_prologue = [](const Node& u) {
    const OpKind k = op_kind(u.op);
    return k == OpKind::Reduction || k == OpKind::Window || k == OpKind::Scan;
  };
  for (const Node* n : epilogue) {
    bool written = g.is_graph_output(n->result());
    for (const Node* u : g.users(n->result())) written |= !inside.count(u) && !takes_as_prologue(*u);
    if (written) return 1e3 * fusion::epilogue_pass_bytes(conv, epilogue) / target.rates.dram_bytes_per_s;
  }
  return 0.0;
}

// Whether the conv's result, through its pointwise epilogue, which returns
// nothing, reaches only reductions over the channels (a min, max, sum, mean
// or logsumexp over dim 1): a direct kernel then never writes it (the conv
// scheduler folds the reduction in).
bool reduced_over_channels(const Graph& g, const Node& conv, const std::vector<const Node*>& epilogue) {
  const std::unordered_set<const Node*> inside(epilogue.begin(), epilogue.end());
  const Shape& shape = conv.result()->type.shape;
  const auto rank = static_cast<int64_t>(shape.size());
  std::vector<const Value*> values{conv.result()};
  for (const Node* n : epilogue) values.push_back(n->result());
  bool reduced = false;
  for (const Value* v : values) {
    if (g.is_graph_output(v)) return false;
    for (const Node* u : g.users(v)) {
      if (inside.count(u)) continue;
      const bool reduction =
          u->op == Op::Amin || u->op == Op::Amax || u->op == Op::Sum || u->op == Op::Mean || u->op == Op::Logsumexp;
      if (!reduction || !u->has_attr("dims") || u->attr_ints("dims").size() != 1 ||
          normalize_dim(u->attr_ints("dims")[0], rank) != 1 || u->input(0)->type.shape != shape)
        return false;
      reduced = true;
    }
  }
  return reduced;
}

class ChooseConvEngines : public Pass {
 public:
  std::string_view name() const override { return "conv_engine"; }

  void configure(const PassOptions& options) override {
    kernels_ = options.conv_kernels;
    always_ = options.conv_always;
    direct_ = options.conv_direct;
    measured_ = &options.conv_channels_last;
    target_ = options.target;
  }

  bool run(Graph& g) override {
    std::vector<Node*> convs;                    // convs made channels-last here
    std::unordered_set<const Node*> contiguous;  // convs that stay on contiguous operands
    bool decided = false;
    for (auto& n : g.nodes()) {
      if (n->op != Op::Convolution || n->has_attr("engine") || !conv_spec(*n)) continue;
      const bool free = layout_free(g, *n);
      const Choice c = choose(g, *n, free);
      n->attrs["engine"] = std::string(conv_engine_name(c.engine));
      decided = true;
      if (!free) continue;
      if (c.channels_last)
        convs.push_back(n.get());
      else
        contiguous.insert(n.get());
    }
    if (convs.empty()) return decided;
    for (Node* conv : convs) {
      Value* w = conv->input(1);
      const TensorType wt = weight_layout(*conv);
      if (w->type.strides != wt.strides)
        conv->operands[1] = Operand::of(g.insert_before(conv, Op::Copy, {Operand::of(w)}, {wt})->result());
      Value* y = conv->result();
      const TensorType captured = y->type;
      y->type = channels_last(y->type);
      std::vector<Node*> copied_views;  // views that read the captured layout through a copy
      for (Node* u : g.users(y)) {
        if (op_kind(u->op) != OpKind::Layout) continue;
        if (view_follows(g, *u, y->type))
          u->result()->type.strides = *view_strides(y->type.shape, y->type.strides, u->result()->type.shape);
        else
          copied_views.push_back(u);
      }
      if (g.is_graph_output(y) || !copied_views.empty()) keep_captured_layout(g, conv, captured, copied_views);
    }
    spread(g, contiguous);
    for (Node* conv : convs) place_input(g, conv, contiguous);
    return true;
  }

 private:
  struct Choice {
    ConvEngine engine = ConvEngine::cudnn;
    bool channels_last = false;
  };

  bool kernels_ = false;
  bool always_ = false;
  bool direct_ = false;
  const std::map<std::string, bool>* measured_ = nullptr;
  Target target_;

  // A channels-last conv's weight: channels-last (as it is, where it is
  // already), but for an implicit GEMM of a transposed conv, the layout the
  // kernel reads (conv_kernel_weight_strides); cuDNN would convert that
  // layout at every call.
  static TensorType weight_layout(const Node& conv) {
    TensorType w = conv.input(1)->type;
    const ConvSpec spec = *conv_spec(conv);
    if (spec.transposed && conv_engine(conv) == ConvEngine::implicit_gemm)
      w.strides = fusion::conv_kernel_weight_strides(spec, w.shape);
    else if (!is_channels_last(w))
      w.strides = channels_last_strides(w.shape);
    return w;
  }

  // A 2-D or 3-D floating conv not yet channels-last (nor a buffer's new
  // value): this pass may choose its layout.
  static bool layout_free(const Graph& g, const Node& n) {
    const auto spec = conv_spec(n);
    if (!spec || !(spec->dims == 2 || spec->dims == 3) || n.results.size() != 1 || !is_floating(spec->dtype) ||
        spec->dtype == DType::f64 || is_channels_last(n.result()->type))
      return false;
    for (const auto& m : g.mutations())
      if (m.value == n.result()) return false;
    return true;
  }

  // The fastest engine and layout for `conv` (`free`: layout_free), each
  // way's time as the cost model (or the front end's timing) gives it, with
  // what it saves or costs around the conv.
  Choice choose(const Graph& g, const Node& conv, bool free) const {
    const ConvSpec spec = *conv_spec(conv);
    const bool is_cl = is_channels_last(conv.result()->type);
    const bool direct = direct_ && fusion::match_direct_conv(conv).has_value();
    // An implicit GEMM only against cuDNN as timed (the model's cuDNN rates
    // stray by 5x from shape to shape), unless every conv must be one.
    const auto cudnn = measured_cudnn(conv);
    const bool kernel = kernels_ && (cudnn || always_) && fusion::conv_kernel_may_take(conv, always_);
    // Either layout, where this pass chooses it: a timing under autotuning fixes it, and so does memory.
    bool contiguous_ok = free || !is_cl, channels_last_ok = free || is_cl;
    if (free && raises_peak(g, conv)) channels_last_ok = false;
    if (free && measured_ != nullptr) {
      auto it = measured_->find(conv_signature(conv));
      if (it != measured_->end()) (it->second ? contiguous_ok : channels_last_ok) = false;
    }
    if (always_ && kernel && channels_last_ok) return {ConvEngine::implicit_gemm, true};

    const fusion::ConvTimes t =
        fusion::conv_times(spec, target_, kernel, direct, cudnn ? &*cudnn : nullptr, measured_direct_ms(conv));
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<const Node*> epilogue = fusion::epilogue_nodes(g, conv);
    const double fused = epilogue_ms(g, conv, epilogue, target_);
    const bool input_copied = !input_is_free(g, *conv.input(0));  // channels-last needs a copy of it
    const bool weight_cl = is_channels_last(conv.input(1)->type);
    double conversions = 0;  // what channels-last costs around the conv
    if (free) {
      if (input_copied) conversions += fusion::copy_ms(conv.input(0)->type.bytes(), target_);
      if (!weight_cl && !from_weights(*conv.input(1)))
        conversions += fusion::copy_ms(conv.input(1)->type.bytes(), target_);
      if (!result_is_free(g, *conv.result())) conversions += fusion::copy_ms(conv.result()->type.bytes(), target_);
    }
    // A 1xTF32 implicit GEMM reads its operands as loaded on Hopper where
    // round_conv_operands rounds them in the kernels that write them: the
    // copies this pass adds, or a pointwise producer read by nothing else.
    const auto rounded_by_producer = [&](const Value& v) {
      return v.producer != nullptr && pointwise(*v.producer) && v.producer->results.size() == 1 &&
             g.users(&v).size() == 1;
    };
    const bool rounded = target_.arch == 90 && (input_copied || rounded_by_producer(*conv.input(0))) &&
                         (!weight_cl || rounded_by_producer(*conv.input(1)));
    const double kernel_ms = kernel && spec.dtype == DType::f32 && spec.tf32 && !rounded
                                 ? fusion::kernel_rounding_in_place_ms(spec, target_)
                                 : t.kernel;
    const double unwritten = spec.groups == 1 && reduced_over_channels(g, conv, epilogue)
                                 ? fusion::copy_ms(spec.output_bytes(), target_) / 2
                                 : 0.0;
    // A modelled implicit GEMM displaces a timed direct kernel only where it
    // wins by more than the model's error against timed kernels.
    double implicit_ms = kernel && channels_last_ok ? kernel_ms + conversions - fused : inf;
    const auto direct_timed = measured_direct_ms(conv);
    if (direct && direct_timed && implicit_ms * target_.rates.kernel_model_error >= t.direct - fused - unwritten)
      implicit_ms = inf;
    struct Way {
      Choice choice;
      double ms;
    };
    // In order of preference where times tie.
    const Way ways[] = {
        {{ConvEngine::cudnn, false}, contiguous_ok ? t.cudnn_nchw : inf},
        {{ConvEngine::cudnn, true}, channels_last_ok ? t.cudnn_channels_last + conversions : inf},
        {{ConvEngine::direct, is_cl}, direct ? t.direct - fused - unwritten : inf},
        {{ConvEngine::implicit_gemm, true}, implicit_ms},
    };
    const Way* best = &ways[0];
    for (const Way& w : ways)
      if (w.ms < best->ms) best = &w;
    if (best->ms == inf) return {ConvEngine::cudnn, is_cl};
    return best->choice;
  }

  // Whether a channels-last result would raise the plan's peak memory above
  // what a contiguous one (and eager) holds. A fused epilogue (pointwise ops
  // reading the result, and their chains) keeps the result alive until it has
  // written every returned value of the result's shape; those keep eager's
  // strides, so contiguous, one of them is written over the result, and
  // channels-last, the result lives beside them all. Where it writes two as
  // large as the result (a training forward returning the sum it saves
  // beside the activation; a mask of bools is a quarter of it), that is one
  // such tensor more than eager, which frees the result after its first
  // reader, ever holds there. The plan holds every returned value at its end,
  // so it costs nothing where those returned after the epilogue outweigh the
  // result. (A result that is itself returned is a value a backward reads: a
  // training step holds it later beside gradients of its size, so its copy
  // back, which the cost model charges in time, does not set the step's peak.)
  static bool raises_peak(const Graph& g, const Node& conv) {
    const Value* y = conv.result();
    if (g.is_graph_output(y)) return false;
    std::unordered_set<const Value*> epilogue{y};
    std::vector<const Value*> work{y};
    int returned = 0;
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      for (const Node* u : g.users(v)) {
        if (!pointwise(*u)) continue;
        for (const Value* r : u->results)
          if (r->type.shape == y->type.shape && epilogue.insert(r).second) {
            returned += g.is_graph_output(r) && r->type.bytes() >= y->type.bytes() ? 1 : 0;
            work.push_back(r);
          }
      }
    }
    if (returned < 2) return false;
    double returned_after = 0;  // bytes returned by the nodes after the epilogue's last
    for (const auto& n : g.nodes()) {
      bool in_epilogue = false;
      for (const Value* r : n->results) in_epilogue |= epilogue.count(r) != 0;
      if (in_epilogue) {
        returned_after = 0;
        continue;
      }
      for (const Value* r : n->results)
        if (g.is_graph_output(r)) returned_after += r->type.bytes();
    }
    return returned_after < y->type.bytes();
  }

  // A value computed from parameters, module buffers and constants only: its
  // conversion runs once, in the plan's prepare section, not per call.
  static bool from_weights(const Value& v) {
    if (v.is_input())
      return v.input_kind == InputKind::Param || v.input_kind == InputKind::Buffer || v.input_kind == InputKind::Const;
    const Node* p = v.producer;
    if (p == nullptr || p->op == Op::Opaque) return false;
    for (const Operand& o : p->operands)
      if (o.value != nullptr && !from_weights(*o.value)) return false;
    return true;
  }

  // The conv's input can be had channels-last without a copy: it is already,
  // or a kernel, a conv or a pooling op makes it (and may make it channels-last).
  static bool input_is_free(const Graph& g, const Value& x) {
    if (is_channels_last(x.type)) return true;
    const Node* p = x.producer;
    if (p == nullptr || !placeable(g, &x)) return false;
    return pointwise(*p) || p->op == Op::Convolution || keeps_memory_format(*p);
  }

  // The conv's channels-last result costs no conversion: it is not returned
  // and every library op that reads it reads any layout (not a view); a
  // normalization reads and writes it channels-last unless it returns it.
  static bool result_is_free(const Graph& g, const Value& y) {
    if (g.is_graph_output(&y)) return false;
    for (const Node* u : g.users(&y)) {
      const bool spreads = fusion::is_normalization(u->op) && placeable(g, u->result());
      if (!pointwise(*u) && !reads_any_layout(*u) && !spreads && !view_follows(g, *u, channels_last(y.type)))
        return false;
    }
    return true;
  }

  // The conv's result is returned or read by layout ops that cannot follow
  // it (`views`): a copy gives the captured strides back to the graph's
  // outputs and to those.
  static void keep_captured_layout(Graph& g, Node* conv, const TensorType& captured, const std::vector<Node*>& views) {
    Value* y = conv->result();
    Node* next = nullptr;
    for (size_t i = 0; i + 1 < g.nodes().size(); ++i)
      if (g.nodes()[i].get() == conv) next = g.nodes()[i + 1].get();
    Node* back = next ? g.insert_before(next, Op::Copy, {Operand::of(y)}, {captured})
                      : g.add_node(Op::Copy, {Operand::of(y)}, {captured});
    for (Value*& o : g.mutable_outputs())
      if (o == y) o = back->result();
    for (Node* v : views)
      for (Operand& o : v->operands)
        if (o.is_value() && o.value == y) o = Operand::of(back->result());
  }

  // Pointwise, normalization and pooling ops reading a channels-last value of
  // their own shape write channels-last too (not a returned value, nor the
  // input of a conv kept contiguous), in graph order so that chains follow.
  static void spread(Graph& g, const std::unordered_set<const Node*>& contiguous) {
    for (auto& np : g.nodes()) {
      Node& n = *np;
      if (!(follows_layout(n) || keeps_memory_format(n)) || n.results.empty()) continue;
      Value* r = n.result();
      if (!placeable(g, r) || is_channels_last(r->type) || feeds(g, r, contiguous) || read_by_layout_op(g, r)) continue;
      // Pooling follows its input; the others, their operands of their own shape.
      bool reads_channels_last = false;
      for (const Operand& o : n.operands)
        reads_channels_last |= o.is_value() && is_channels_last(o.value->type) &&
                               (keeps_memory_format(n) || o.value->type.shape == r->type.shape);
      if (!reads_channels_last) continue;
      for (Value* res : n.results)  // max_pool's indices too
        if (res->type.shape == r->type.shape) res->type = channels_last(res->type);
    }
  }

  // Whether `v` is the input of one of `convs`.
  static bool feeds(const Graph& g, const Value* v, const std::unordered_set<const Node*>& convs) {
    for (const Node* u : g.users(v))
      if (convs.count(u) && u->input(0) == v) return true;
    return false;
  }

  // A channels-last conv's input: written channels-last by the pointwise
  // kernel that makes it where it can, else copied.
  static void place_input(Graph& g, Node* conv, const std::unordered_set<const Node*>& contiguous) {
    Value* x = conv->input(0);
    if (is_channels_last(x->type)) return;
    const Node* p = x->producer;
    if (p != nullptr && pointwise(*p) && p->results.size() == 1 && placeable(g, x) && !feeds(g, x, contiguous) &&
        !read_by_layout_op(g, x)) {
      x->type = channels_last(x->type);
      return;
    }
    conv->operands[0] =
        Operand::of(g.insert_before(conv, Op::Copy, {Operand::of(x)}, {channels_last(x->type)})->result());
  }
};

}  // namespace

std::unique_ptr<Pass> make_conv_engine() { return std::make_unique<ChooseConvEngines>(); }

}  // namespace ff::passes
