// split_long_reduction: a reduction of few long rows becomes a reduction of
// many shorter rows (partials) and a small reduction of the partials.
//
//   %m = mean(%x) {dims=[0, 2, 3]} : f32[48]            (%x: f32[96,48,158,158])
// becomes
//   %p = mean(%x) {dims=[2, 3], keepdim=true} : f32[96,48,1,1]
//   %m = mean(%p) {dims=[0, 2, 3]} : f32[48]
//
// A reduction kernel gives each row a block (or, for a channels-last input,
// a few threads per column); 48 rows of 2.4M elements would leave most of the
// GPU idle (the reduction scheduler hands such a group to ATen). The partial
// reduction has rows enough to fill it and reads the input once; its
// consumers' work (running statistics, rsqrt) fuses into the small final one.
//
// Columns longer than kLongestColumn (the kept dim innermost in memory: a
// weight gradient's sum over 16 x 2048 rows of 4096 columns) are split along
// their reduced dims however many they are: one kernel would sum too many
// rows in a row per thread (kernel/reduction_domain.h), and the scheduler
// would hand the sum to ATen with its prologue written out.
//
// The partials keep the reduced dims outermost in memory and reduce the rest,
// so each partial row reads a contiguous stretch where the layout allows.
// Exact regroupings, for f32 and f64 (the others would round each partial to
// their own precision):
//   sum, amax, amin, logsumexp: the op of the op's partials;
//   mean: the mean of equal-size partial means;
//   var (correction c over L elements): the law of total variance over
//     equal-size groups, (mean of partial vars + var of partial means, both
//     with correction 0) * L / (L - c).
// One reduced dim (a contiguous input) is first viewed as two, [A, B].
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "passes/split_long_reduction.h"

#include "kernel/reduction_domain.h"
#include "passes/pass.h"
#include "passes/patterns.h"

namespace ff::passes {

namespace {

constexpr int64_t kFewRows = 1024;          // rows below which a reduction does not fill the GPU
constexpr int64_t kMinElements = 1 << 20;   // smaller reductions are launch-bound either way
constexpr int64_t kPartialColumns = 16384;  // partial columns aimed at (partial_target)
constexpr int64_t kMinChunk = 64;           // elements each partial reduces at least

bool splittable_op(Op op) {
  switch (op) {
    case Op::Sum:
    case Op::Mean:
    case Op::Amax:
    case Op::Amin:
    case Op::Var:
    case Op::Logsumexp:
      return true;
    default:
      return false;
  }
}

int64_t product(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= shape[d];
  return p;
}

// The rows a reduction over the dims in `mask` leaves: its kept elements.
int64_t kept_rows(const Shape& shape, const std::vector<bool>& mask) {
  int64_t rows = 1;
  for (size_t d = 0; d < mask.size(); ++d)
    if (!mask[d]) rows *= shape[d];
  return rows;
}

// How to split one reduction: the dims its partials keep (P) and reduce (Q).
struct Split {
  std::vector<int64_t> keep, reduce;
};

// The partial rows to aim at: with the input unit-stride along a reduced dim a
// block reads each row and kFewRows fill the GPU; along a kept dim a few
// threads share each column (fusion/reduction_strategy.h) and it takes more.
// Reductions of kFewRows rows or more stay whole whatever the layout: an
// instance norm's statistics over a channels-last conv output (6144 columns
// of 8836) took 89.6 us on an H100 whole, 101 us split per image row (the
// partials stored channels innermost) plus 6 us for the final merges.
// The input's innermost dim in memory of size > 1, or -1 for none.
int64_t innermost_dim(const TensorType& x) {
  int64_t innermost = -1;
  for (int64_t d = 0; d < static_cast<int64_t>(x.shape.size()); ++d)
    if (x.shape[d] > 1 && (innermost < 0 || x.strides[d] < x.strides[innermost])) innermost = d;
  return innermost;
}

int64_t partial_target(const TensorType& x, const std::vector<bool>& mask) {
  const int64_t innermost = innermost_dim(x);
  return innermost >= 0 && mask[innermost] ? kFewRows : kPartialColumns;
}

// Whether the reduction is over columns (its innermost dim kept) longer than
// one kernel sums accurately.
bool long_columns(const TensorType& x, const std::vector<bool>& mask, int64_t length) {
  const int64_t innermost = innermost_dim(x);
  return innermost >= 0 && !mask[innermost] && length > fusion::kLongestColumn;
}

// The split of a reduction of `x` over the dims in `mask`, or nothing when it
// has rows enough, is small, or cannot leave each partial kMinChunk elements.
std::optional<Split> plan_split(const TensorType& x, const std::vector<bool>& mask) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> reduced, kept;
  for (int64_t d = 0; d < rank; ++d) (mask[d] ? reduced : kept).push_back(d);
  const int64_t rows = product(x.shape, kept), length = product(x.shape, reduced);
  const bool few_rows = rows < kFewRows, too_long = long_columns(x, mask, length);
  if ((!few_rows && !too_long) || rows * length < kMinElements) return std::nullopt;
  // Outermost in memory first: the partials then read contiguous stretches.
  std::vector<int64_t> order;
  for (int64_t d : reduced)
    if (x.shape[d] > 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x.strides[a] > x.strides[b]; });
  const int64_t target = partial_target(x, mask);
  Split s;
  int64_t kept_extent = 1;
  auto more = [&] {
    return (few_rows && rows * kept_extent < target) || (too_long && length / kept_extent > fusion::kLongestColumn);
  };
  for (size_t i = 0; i + 1 < order.size() && more(); ++i) {
    if (length / (kept_extent * x.shape[order[i]]) < kMinChunk) break;
    kept_extent *= x.shape[order[i]];
    s.keep.push_back(order[i]);
  }
  if (s.keep.empty()) return std::nullopt;
  for (int64_t d : reduced)
    if (std::find(s.keep.begin(), s.keep.end(), d) == s.keep.end()) s.reduce.push_back(d);
  return s;
}

// A contiguous input's one long reduced dim `d` viewed as [A, B], B a power of
// two (kMinChunk..4096) dividing it, as large as leaves the partials' target
// rows.
std::optional<Shape> two_dim_view(const TensorType& x, const std::vector<bool>& mask, int64_t d) {
  if (!x.is_contiguous()) return std::nullopt;
  const int64_t rows = kept_rows(x.shape, mask);
  const int64_t extent = x.shape[d], target = partial_target(x, mask);
  for (int64_t b = 4096; b >= kMinChunk; b /= 2)
    if (extent % b == 0 && extent / b >= 2 && (rows * (extent / b) >= target || b == kMinChunk)) {
      Shape s = x.shape;
      s[d] = b;
      s.insert(s.begin() + d, extent / b);
      return s;
    }
  return std::nullopt;
}

// A reduction's split: its partials' dims, over its input or (`view`) over a
// view of it that makes its one long reduced dim two.
struct NodeSplit {
  Split split;
  std::vector<bool> mask;  // the reduced dims, of the view if any
  std::optional<Shape> view;
};

std::optional<NodeSplit> plan_reduction(const TensorType& x, std::vector<bool> mask) {
  NodeSplit ns{{}, std::move(mask), std::nullopt};
  if (auto s = plan_split(x, ns.mask)) {
    ns.split = *s;
    return ns;
  }
  std::vector<int64_t> long_dims;
  for (size_t d = 0; d < ns.mask.size(); ++d)
    if (ns.mask[d] && x.shape[d] > 1) long_dims.push_back(static_cast<int64_t>(d));
  if (long_dims.size() != 1) return std::nullopt;
  // Viewing the input separates the partial reduction from the pointwise
  // work before it (a kernel of its own, its result written out): worth it
  // where few rows leave the GPU idle, not for long columns alone.
  if (kept_rows(x.shape, ns.mask) >= kFewRows) return std::nullopt;
  const int64_t d = long_dims[0];
  ns.view = two_dim_view(x, ns.mask, d);
  if (!ns.view) return std::nullopt;
  ns.mask.insert(ns.mask.begin() + d, true);
  auto s = plan_split(TensorType::contiguous(x.dtype, *ns.view), ns.mask);
  if (!s) return std::nullopt;
  ns.split = *s;
  return ns;
}

std::optional<NodeSplit> plan_node(const Node& n) { return plan_reduction(n.input(0)->type, fusion::reduced_mask(n)); }

bool eligible(const Node& n) {
  if (!splittable_op(n.op) || n.results.size() != 1 || !n.operands[0].is_value()) return false;
  const DType in = n.input(0)->type.dtype;
  return reassociates(in) && n.result()->type.dtype == in && numel(n.input(0)->type.shape) > 0;
}

class SplitLongReduction : public Pass {
 public:
  std::string_view name() const override { return "split_long_reduction"; }

  bool run(Graph& g) override {
    std::vector<Node*> candidates;
    for (auto& n : g.nodes())
      if (eligible(*n)) candidates.push_back(n.get());
    std::vector<Node*> replaced;
    partials_.clear();
    for (Node* n : candidates)
      if (rewrite(g, n)) replaced.push_back(n);
    if (replaced.empty()) return false;
    g.erase_nodes(replaced);
    return true;
  }

 private:
  // Partials made so far, by (op, input, attributes): a batch norm's mean and
  // var of one value share their partial means.
  std::map<std::tuple<Op, const Value*, Attrs>, Value*> partials_;

  bool rewrite(Graph& g, Node* n) {
    const std::optional<NodeSplit> plan = plan_node(*n);
    if (!plan) return false;
    const Split& s = plan->split;
    const std::vector<bool>& mask = plan->mask;
    const bool keepdim = n->attr_bool_or("keepdim", false);
    const bool viewed = plan->view.has_value();
    const int64_t length = numel(n->input(0)->type.shape) / numel(n->result()->type.shape);
    const int64_t correction = n->attr_int_or("correction", 1);
    if (n->op == Op::Var && length - correction <= 0) return false;  // eager's inf or nan: left to the op
    Value* x = n->input(0);
    if (viewed)
      x = g.insert_before(n, Op::View, {Operand::of(x)}, {TensorType::contiguous(x->type.dtype, *plan->view)})
              ->result();
    std::vector<int64_t> all;  // every reduced dim of x: the final reductions take them all
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) all.push_back(static_cast<int64_t>(d));
    // With a view, keepdim goes back to the original shape through a view.
    const bool final_keepdim = keepdim && !viewed;
    auto final = [&](Op op, Value* p, Attrs extra = {}) {
      Attrs attrs = std::move(extra);
      attrs["dims"] = all;
      attrs["keepdim"] = final_keepdim;
      return reduce(g, n, op, p, std::move(attrs));
    };
    Value* result = nullptr;
    if (n->op == Op::Var) {
      Value* means = partial(g, n, Op::Mean, x, s.reduce, {});
      Value* vars = partial(g, n, Op::Var, x, s.reduce, {{"correction", int64_t{0}}});
      Value* within = final(Op::Mean, vars);
      Value* between = final(Op::Var, means, {{"correction", int64_t{0}}});
      result = binary(g, n, Op::Add, within, Operand::of(between));
      if (correction != 0)
        result = binary(
            g, n, Op::Mul, result,
            Operand::of(Scalar::of_float(static_cast<double>(length) / static_cast<double>(length - correction))));
    } else {
      Attrs extra = n->attrs;
      extra.erase("dims");
      extra.erase("keepdim");
      result = final(n->op, partial(g, n, n->op, x, s.reduce, extra), extra);
    }
    if (result->type.shape != n->result()->type.shape)
      result = g.insert_before(n, Op::View, {Operand::of(result)}, {n->result()->type})->result();
    g.replace_all_uses(n->result(), result);
    return true;
  }

  Value* partial(Graph& g, Node* before, Op op, Value* x, const std::vector<int64_t>& dims, Attrs attrs) {
    attrs["dims"] = dims;
    attrs["keepdim"] = true;
    Value*& p = partials_[std::make_tuple(op, static_cast<const Value*>(x), attrs)];
    if (p == nullptr) p = reduce(g, before, op, x, std::move(attrs));
    return p;
  }

  // A reduction node before `before`, its result type by the op's shape rule.
  static Value* reduce(Graph& g, Node* before, Op op, Value* x, Attrs attrs) {
    Node* r = g.insert_before(before, op, {Operand::of(x)}, {x->type}, std::move(attrs));
    r->result()->type = infer_result_types(*r).at(0);
    return r->result();
  }

  static Value* binary(Graph& g, Node* before, Op op, Value* a, Operand b) {
    return g.insert_before(before, op, {Operand::of(a), std::move(b)}, {a->type})->result();
  }
};

}  // namespace

bool splits_into_partials(const Node& n) { return eligible(n) && plan_node(n).has_value(); }

bool splits_into_partials(const TensorType& x, const std::vector<bool>& reduced) {
  return reassociates(x.dtype) && numel(x.shape) > 0 && plan_reduction(x, reduced).has_value();
}

std::unique_ptr<Pass> make_split_long_reduction() { return std::make_unique<SplitLongReduction>(); }

}  // namespace ff::passes
