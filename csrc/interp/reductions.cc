// Reductions and row-wise maps: the input's elements grouped into rows
// (rows_over), each row gathered and handed to the op's row function (ops.cc).
#include <cmath>

#include "interp/eval.h"

namespace ff::interp {

HostTensor reduce_rows(const Node& n, const Env& env, double (*f)(const Node&, const std::vector<double>& row)) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> dims = n.has_attr("dims") ? n.attr_ints("dims") : std::vector<int64_t>{};
  Rows rows = rows_over(x.shape, dim_mask(n, rank, dims));
  if (rows.count != static_cast<int64_t>(out.data.size())) fail(n, "result has the wrong number of elements");
  std::vector<double> row(static_cast<size_t>(rows.length));
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    for (int64_t k = 0; k < rows.length; ++k) row[k] = x.data[offs[k]];
    out.data[r] = f(n, row);
  }
  return out;
}

// argmax/argmin over `dim` (or the flattened tensor): the first index of the
// extreme value, where a NaN beats everything (ATen's NaN-propagating compare).
HostTensor arg_reduce(const Node& n, const Env& env, bool is_max) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> mask(static_cast<size_t>(rank), true);
  if (n.has_attr("dim")) mask = dim_mask(n, rank, {n.attr_int("dim")});
  Rows rows = rows_over(x.shape, mask);
  if (rows.count != static_cast<int64_t>(out.data.size())) fail(n, "result has the wrong number of elements");
  for (int64_t r = 0; r < rows.count; ++r) {
    if (rows.length == 0) fail(n, "reduction over an empty dimension");
    const int64_t* offs = rows.row(r);
    int64_t best = 0;
    double bv = x.data[offs[0]];
    for (int64_t k = 1; k < rows.length && !std::isnan(bv); ++k) {
      double v = x.data[offs[k]];
      if (std::isnan(v) || (is_max ? v > bv : v < bv)) best = k, bv = v;
    }
    out.data[r] = static_cast<double>(best);
  }
  return out;
}

// Row-wise maps along `dim` whose output has the input's shape (softmax,
// log_softmax), so a row's offsets address both.
HostTensor map_rows_along_dim(const Node& n, const Env& env,
                              void (*f)(const std::vector<double>& in, std::vector<double>& out)) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  if (out.shape != x.shape)
    fail(n, "result shape " + shape_str(out.shape) + " differs from the input's " + shape_str(x.shape));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  Rows rows = rows_over(x.shape, dim_mask(n, rank, {n.attr_int("dim")}));
  std::vector<double> in(static_cast<size_t>(rows.length)), res(in.size());
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    for (int64_t k = 0; k < rows.length; ++k) in[k] = x.data[offs[k]];
    f(in, res);
    for (int64_t k = 0; k < rows.length; ++k) out.data[offs[k]] = res[k];
  }
  return out;
}

HostTensor eval_scan(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  if (out.shape != x.shape)
    fail(n, "result shape " + shape_str(out.shape) + " differs from the input's " + shape_str(x.shape));
  const Op combine = *scan_combine(n.op);
  if (combine != Op::Add && combine != Op::Mul) fail(n, "scan combines with " + std::string(op_name(combine)));
  const bool reverse = n.attr_bool_or("reverse", false);
  Rows rows = rows_over(x.shape, dim_mask(n, static_cast<int64_t>(x.shape.size()), {n.attr_int("dim")}));
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    double acc = combine == Op::Add ? 0.0 : 1.0;  // the running value is kept in double; each output rounds
    for (int64_t i = 0; i < rows.length; ++i) {
      const int64_t k = reverse ? rows.length - 1 - i : i;
      acc = combine == Op::Add ? acc + x.data[offs[k]] : acc * x.data[offs[k]];
      out.data[offs[k]] = acc;
    }
  }
  return out;
}

// layer_norm(x, weight, bias) over the trailing `ndims` dims: population
// variance, (x - mean) / sqrt(var + eps) * weight + bias.
HostTensor eval_layer_norm(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  HostTensor out = result_tensor(n);
  int64_t rank = static_cast<int64_t>(x.shape.size()), nd = n.attr_int("ndims");
  if (nd < 1 || nd > rank) fail(n, "ndims " + std::to_string(nd) + " out of range for rank " + std::to_string(rank));
  double eps = n.attr_float("eps");
  Shape norm(x.shape.end() - nd, x.shape.end());
  // weight and bias, indexed by the position within a row (row-major over the normalized dims)
  auto affine = [&](size_t i) {
    if (!n.operands.at(i).is_value())
      return std::vector<double>(static_cast<size_t>(numel(norm)), n.operands[i].literal.as_double());
    const HostTensor& t = value_of(env, n, i);
    if (t.shape != norm) fail(n, "weight/bias shape " + shape_str(t.shape) + " != normalized shape " + shape_str(norm));
    return t.data;
  };
  std::vector<double> w = affine(1), b = affine(2);
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  std::fill(mask.end() - nd, mask.end(), true);
  Rows rows = rows_over(x.shape, mask);
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t* offs = rows.row(r);
    double mean = 0.0, var = 0.0;
    for (int64_t k = 0; k < rows.length; ++k) mean += x.data[offs[k]];
    mean /= static_cast<double>(rows.length);
    for (int64_t k = 0; k < rows.length; ++k) var += (x.data[offs[k]] - mean) * (x.data[offs[k]] - mean);
    var /= static_cast<double>(rows.length);
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < rows.length; ++k) out.data[offs[k]] = (x.data[offs[k]] - mean) * rstd * w[k] + b[k];
  }
  return out;
}

}  // namespace ff::interp
