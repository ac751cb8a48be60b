#pragma once
// Internals shared by the interpreter's files: the value environment, the
// index helpers every evaluator is built on, and the evaluators of each op
// family that the reference-semantics table (ops.cc) picks from.
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "interp/interpreter.h"

namespace ff::interp {

using Offsets = std::vector<int64_t>;
using Env = std::unordered_map<const Value*, HostTensor>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- messages
std::string shape_str(const Shape& s);
std::string type_str(DType dtype, const Shape& shape);
[[noreturn]] void fail(const Node& n, const std::string& msg);  // IRError naming the node

// ---- index helpers (index.cc)
// Row-major offsets of every element of a view with `shape` and `strides`
// (in elements) that starts at `base`, listed in the view's row-major order.
Offsets strided_offsets(const Shape& shape, const Shape& strides, int64_t base = 0);
// Strides that read a row-major tensor of shape `in` broadcast (numpy rules) to `out`.
Shape broadcast_strides(const Shape& in, const Shape& out);
std::vector<double> gather(const std::vector<double>& data, const Offsets& offsets);

// The elements of a row-major tensor of `shape` grouped into rows: one row per
// index of the kept dims (in the row-major order of the reduced result), each
// listing the offsets of its elements in the row-major order of the reduced dims.
struct Rows {
  int64_t count = 0, length = 0;
  Offsets offsets;  // count * length entries
  const int64_t* row(int64_t r) const { return offsets.data() + r * length; }
};
Rows rows_over(const Shape& shape, const std::vector<bool>& reduced);
// The dims listed (none: all of them) as a mask over a tensor of `rank`.
std::vector<bool> dim_mask(const Node& n, int64_t rank, std::vector<int64_t> dims);

// ---- operand access
const HostTensor& value_of(const Env& env, const Node& n, size_t i);
HostTensor result_tensor(const Node& n);  // zeros of the node's declared result type

// ---- evaluators of op families; `f` is the op's own arithmetic
using Evaluator = HostTensor (*)(const Node&, const Env&);
// Pointwise (pointwise.cc): operands broadcast and cast as eager casts them.
HostTensor map_unary(const Node& n, const Env& env, double (*f)(double));
HostTensor map_binary(const Node& n, const Env& env, double (*f)(double, double));
HostTensor map_ternary(const Node& n, const Env& env, double (*f)(double, double, double));
HostTensor eval_full(const Node& n, const Env& env);
// Reductions and row maps (reductions.cc): `f` sees one row's elements in order.
HostTensor reduce_rows(const Node& n, const Env& env, double (*f)(const Node&, const std::vector<double>& row));
HostTensor arg_reduce(const Node& n, const Env& env, bool is_max);
HostTensor map_rows_along_dim(const Node& n, const Env& env,
                              void (*f)(const std::vector<double>& in, std::vector<double>& out));
HostTensor eval_layer_norm(const Node& n, const Env& env);
// cumsum, cumprod: the running value of ops.def's combining op along `dim`,
// from its end where `reverse` is set.
HostTensor eval_scan(const Node& n, const Env& env);
HostTensor eval_pool(const Node& n, const Env& env);    // pooling.cc
HostTensor eval_conv(const Node& n, const Env& env);    // convolution.cc
HostTensor eval_matmul(const Node& n, const Env& env);  // matmul.cc
HostTensor eval_layout(const Node& n, const Env& env);  // layout.cc

// The reference semantics of `op` (ops.cc), or null for an op the
// interpreter cannot run (opaque).
Evaluator reference_semantics(Op op);

}  // namespace ff::interp
