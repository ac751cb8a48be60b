// The interpreter's index helpers and operand access (see eval.h).
//
// Layout ops, broadcasting and reductions all reduce to one index helper,
// strided_offsets(): the row-major offsets of a strided view of a row-major
// tensor. A broadcast operand is a view with stride 0 in broadcast dims, a
// permute a view with permuted strides, a slice a view with a base and a
// scaled stride, and the rows of a reduction a view that puts the kept dims
// first and the reduced dims last.
#include "interp/eval.h"

namespace ff::interp {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::string type_str(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + shape_str(shape); }

void fail(const Node& n, const std::string& msg) {
  std::string label =
      n.results.empty() ? std::string(op_name(n.op)) : "%" + n.result()->name + " = " + std::string(op_name(n.op));
  throw IRError("interp: " + label + ": " + msg);
}

// ---------------------------------------------------------------- index helpers

Offsets strided_offsets(const Shape& shape, const Shape& strides, int64_t base) {
  Offsets out(static_cast<size_t>(numel(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = base;
  for (int64_t& o : out) {
    o = off;
    for (size_t d = shape.size(); d-- > 0;) {  // increment the multi-index, last dim fastest
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape cs = contiguous_strides(in), st(out.size(), 0);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[lead + i] = in[i] == 1 ? 0 : cs[i];
  return st;
}

std::vector<double> gather(const std::vector<double>& data, const Offsets& offsets) {
  std::vector<double> out(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) out[i] = data[static_cast<size_t>(offsets[i])];
  return out;
}

Rows rows_over(const Shape& shape, const std::vector<bool>& reduced) {
  Shape cs = contiguous_strides(shape), order_shape, order_strides;
  Rows rows;
  rows.count = rows.length = 1;
  for (int pass = 0; pass < 2; ++pass)  // kept dims first, then the reduced ones
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced[d] == (pass == 1)) {
        order_shape.push_back(shape[d]);
        order_strides.push_back(cs[d]);
        (pass == 1 ? rows.length : rows.count) *= shape[d];
      }
  rows.offsets = strided_offsets(order_shape, order_strides);
  return rows;
}

std::vector<bool> dim_mask(const Node& n, int64_t rank, std::vector<int64_t> dims) {
  std::vector<bool> mask(static_cast<size_t>(rank), dims.empty());  // no dims: all of them
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, rank);
    if (nd < rank) mask[static_cast<size_t>(nd)] = true;  // dim 0 of a 0-d tensor is the tensor itself
  }
  return mask;
}

// ---------------------------------------------------------------- operand access

const HostTensor& value_of(const Env& env, const Node& n, size_t i) {
  if (i >= n.operands.size() || !n.operands[i].is_value())
    fail(n, "operand " + std::to_string(i) + " must be a tensor value");
  auto it = env.find(n.operands[i].value);
  if (it == env.end())
    fail(n, "operand '%" + n.operands[i].value->name + "' has no value (used before it is defined?)");
  return it->second;
}

HostTensor result_tensor(const Node& n) {
  HostTensor t;
  t.dtype = n.result()->type.dtype;
  t.shape = n.result()->type.shape;
  t.data.assign(static_cast<size_t>(numel(t.shape)), 0.0);
  return t;
}

}  // namespace ff::interp
