// Result types of IR ops from their operands and attributes.
#include <algorithm>
#include <optional>

#include "ir/graph.h"
#include "ir/pool.h"
#include "ir/type_rules.h"

namespace ff {

namespace {

[[noreturn]] void fail(const Node& n, const std::string& msg) {
  throw IRError(std::string(op_name(n.op)) + ": " + msg);
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

const TensorType& operand_type(const Node& n, size_t i) {
  if (i >= n.operands.size() || !n.operands[i].is_value())
    fail(n, "operand " + std::to_string(i) + " must be a tensor value");
  return n.operands[i].value->type;
}

std::vector<int64_t> reduced_dims(const Node& n, int64_t rank) {
  std::vector<int64_t> dims;
  if (n.has_attr("dims")) dims = n.attr_ints("dims");
  if (dims.empty())  // no dims: reduce over everything (PyTorch's sum(x), mean(x))
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  for (auto& d : dims) d = normalize_dim(d, rank);
  return dims;
}

Shape reduce_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// Pointwise results broadcast their operands; the dtype is the op's rule's
// (infer_result_types).
std::vector<TensorType> pointwise(const Node& n) {
  const TensorType& declared = n.results.at(0)->type;
  if (n.op == Op::Full) {
    if (n.operands.size() != 1) fail(n, "takes one scalar operand");
    if (n.operands[0].is_value() && !n.operands[0].value->type.shape.empty())
      fail(n, "operand must be a scalar (a literal or a 0-d value)");
    return {declared};
  }
  Shape shape;
  for (const Operand& o : n.operands)
    if (o.is_value()) shape = broadcast_shapes(shape, o.value->type.shape);
  TensorType t = declared;  // pointwise results may take any layout; keep the declared strides
  if (t.shape != shape) {
    t.shape = shape;
    t.strides = contiguous_strides(shape);
  }
  return {t};
}

std::vector<TensorType> reduction(const Node& n) {
  const TensorType& in = operand_type(n, 0);
  int64_t rank = static_cast<int64_t>(in.shape.size());
  const DType dt = n.results[0]->type.dtype;  // infer_result_types applies the op's dtype rule
  switch (n.op) {
    case Op::Softmax:
    case Op::LogSoftmax:
      normalize_dim(n.attr_int("dim"), rank);
      return {TensorType::contiguous(dt, in.shape)};
    case Op::LayerNorm: {
      int64_t nd = n.attr_int("ndims");
      if (nd < 1 || nd > rank)
        fail(n, "ndims " + std::to_string(nd) + " out of range for rank " + std::to_string(rank));
      Shape norm(in.shape.end() - nd, in.shape.end());
      for (size_t i = 1; i < 3 && i < n.operands.size(); ++i)
        if (operand_type(n, i).shape != norm)
          fail(n,
               "weight/bias shape " + shape_str(operand_type(n, i).shape) + " != normalized shape " + shape_str(norm));
      n.attr_float("eps");
      return {TensorType::contiguous(dt, in.shape)};
    }
    case Op::Argmax:
    case Op::Argmin: {
      bool keepdim = n.attr_bool_or("keepdim", false);
      Shape out;
      if (n.has_attr("dim"))
        out = reduce_shape(in.shape, {normalize_dim(n.attr_int("dim"), rank)}, keepdim);
      else if (keepdim)
        out = Shape(in.shape.size(), 1);
      return {TensorType::contiguous(dt, out)};
    }
    default: {
      auto dims = reduced_dims(n, rank);
      Shape out = reduce_shape(in.shape, dims, n.attr_bool_or("keepdim", false));
      return {TensorType::contiguous(dt, out)};
    }
  }
}

std::vector<TensorType> matmul(const Node& n) {
  bool addmm = n.op == Op::Addmm;
  const TensorType& a = operand_type(n, addmm ? 1 : 0);
  const TensorType& b = operand_type(n, addmm ? 2 : 1);
  size_t rank = n.op == Op::Bmm ? 3 : 2;
  if (a.shape.size() != rank || b.shape.size() != rank)
    fail(n, "expects rank-" + std::to_string(rank) + " operands, got " + shape_str(a.shape) + " and " +
                shape_str(b.shape));
  if (a.shape[rank - 1] != b.shape[rank - 2])
    fail(n, "inner dimensions differ: " + shape_str(a.shape) + " @ " + shape_str(b.shape));
  if (rank == 3 && a.shape[0] != b.shape[0])
    fail(n, "batch sizes differ: " + shape_str(a.shape) + " @ " + shape_str(b.shape));
  if (a.dtype != b.dtype) fail(n, "operand dtypes differ");
  Shape out = rank == 3 ? Shape{a.shape[0], a.shape[1], b.shape[2]} : Shape{a.shape[0], b.shape[1]};
  if (addmm && broadcast_shapes(operand_type(n, 0).shape, out) != out)
    fail(n, "bias " + shape_str(operand_type(n, 0).shape) + " does not broadcast to " + shape_str(out));
  return {TensorType::contiguous(a.dtype, out)};
}

std::vector<TensorType> convolution(const Node& n) {
  const TensorType& x = operand_type(n, 0);
  const TensorType& w = operand_type(n, 1);
  if (x.shape.size() < 3 || w.shape.size() != x.shape.size())
    fail(n, "input " + shape_str(x.shape) + " and weight " + shape_str(w.shape) + " ranks do not fit");
  const size_t sp = x.shape.size() - 2;
  // One value for every spatial dim, or one per spatial dim, each >= `least`.
  auto per_dim = [&](const char* key, std::vector<int64_t> v, int64_t least) {
    if (v.size() != 1 && v.size() != sp)
      fail(n, std::string(key) + " has " + std::to_string(v.size()) + " entries for " + std::to_string(sp) +
                  " spatial dims");
    for (int64_t e : v)
      if (e < least) fail(n, std::string(key) + " entries must be >= " + std::to_string(least));
    if (v.size() == 1) v.assign(sp, v[0]);
    return v;
  };
  auto stride = per_dim("stride", n.attr_ints("stride"), 1);
  auto padding = per_dim("padding", n.attr_ints("padding"), 0);
  auto dilation = per_dim("dilation", n.attr_ints("dilation"), 1);
  bool transposed = n.attr_bool_or("transposed", false);
  int64_t groups = n.attr_int_or("groups", 1);
  if (groups < 1) fail(n, "groups must be >= 1");
  auto out_pad = per_dim("output_padding",
                         n.has_attr("output_padding") ? n.attr_ints("output_padding") : std::vector<int64_t>{0}, 0);
  Shape out{x.shape[0], transposed ? checked_mul(w.shape[1], groups) : w.shape[0]};
  for (size_t i = 0; i < sp; ++i) {
    int64_t k = w.shape[2 + i], in = x.shape[2 + i];
    // The receptive field of one output: dilation * (k - 1) + 1.
    int64_t field = checked_add(checked_mul(dilation[i], std::max<int64_t>(k - 1, 0)), 1);
    int64_t padded = checked_add(in, checked_mul(2, padding[i]));
    if (k <= 0 || (!transposed && padded < field))
      fail(n, "kernel " + shape_str(w.shape) + " does not fit input " + shape_str(x.shape));
    int64_t o = transposed ? checked_add(checked_add(checked_mul(in - 1, stride[i]), -checked_mul(2, padding[i])),
                                         checked_add(field, out_pad[i]))
                           : (padded - field) / stride[i] + 1;
    if (o <= 0) fail(n, "output size is not positive for input " + shape_str(x.shape));
    out.push_back(o);
  }
  return {TensorType::contiguous(x.dtype, out)};
}

std::vector<TensorType> layout(const Node& n) {
  const TensorType& declared = n.results.at(0)->type;
  if (n.op == Op::Cat) {
    const TensorType& first = operand_type(n, 0);
    if (first.shape.empty()) fail(n, "cannot concatenate 0-d tensors");
    const size_t d = static_cast<size_t>(normalize_dim(n.attr_int("dim"), static_cast<int64_t>(first.shape.size())));
    Shape out = first.shape;
    out[d] = 0;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Shape& s = operand_type(n, i).shape;
      bool fits = s.size() == out.size();
      for (size_t j = 0; fits && j < s.size(); ++j) fits = j == d || s[j] == out[j];
      if (!fits)
        fail(n, "operand " + shape_str(s) + " does not fit " + shape_str(first.shape) + " outside dim " +
                    std::to_string(d));
      out[d] = checked_add(out[d], s[d]);
    }
    return {TensorType::contiguous(first.dtype, out)};
  }
  const TensorType& in = operand_type(n, 0);
  TensorType t;
  t.dtype = in.dtype;
  int64_t rank = static_cast<int64_t>(in.shape.size());
  switch (n.op) {
    case Op::Permute: {
      auto dims = n.attr_ints("dims");
      if (static_cast<int64_t>(dims.size()) != rank)
        fail(n, "dims has " + std::to_string(dims.size()) + " entries for rank " + std::to_string(rank));
      std::vector<bool> seen(rank, false);
      for (int64_t d : dims) {
        int64_t nd = normalize_dim(d, rank);
        if (seen[nd]) fail(n, "dims is not a permutation");
        seen[nd] = true;
        t.shape.push_back(in.shape[nd]);
        t.strides.push_back(in.strides[nd]);
      }
      return {t};
    }
    case Op::Unsqueeze: {
      int64_t d = normalize_dim(n.attr_int("dim"), rank + 1);
      t.shape = in.shape;
      t.strides = in.strides;
      int64_t st = d < rank ? checked_mul(in.shape[d], in.strides[d]) : 1;
      t.shape.insert(t.shape.begin() + d, 1);
      t.strides.insert(t.strides.begin() + d, st);
      return {t};
    }
    case Op::Squeeze: {
      std::vector<int64_t> dims;
      if (n.has_attr("dims"))
        dims = n.attr_ints("dims");
      else
        for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
      for (auto& d : dims) d = normalize_dim(d, rank);
      for (int64_t d = 0; d < rank; ++d) {
        bool drop = in.shape[d] == 1 && std::find(dims.begin(), dims.end(), d) != dims.end();
        if (!drop) t.shape.push_back(in.shape[d]), t.strides.push_back(in.strides[d]);
      }
      return {t};
    }
    case Op::Slice: {
      SliceBounds b = slice_bounds(n, in.shape);
      t.shape = in.shape;
      t.strides = in.strides;
      t.shape[b.dim] = b.size;
      t.strides[b.dim] = checked_mul(t.strides[b.dim], b.step);
      return {t};
    }
    case Op::Select: {
      if (rank == 0) fail(n, "cannot select from a 0-d tensor");
      int64_t d = normalize_dim(n.attr_int("dim"), rank);
      int64_t idx = n.attr_int("index");
      if (idx < -in.shape[d] || idx >= in.shape[d])
        fail(n, "index " + std::to_string(idx) + " out of range for dim of size " + std::to_string(in.shape[d]));
      t.shape = in.shape;
      t.strides = in.strides;
      t.shape.erase(t.shape.begin() + d);
      t.strides.erase(t.strides.begin() + d);
      return {t};
    }
    case Op::Expand: {
      const Shape& s = declared.shape;
      if (s.size() < in.shape.size()) fail(n, "cannot expand " + shape_str(in.shape) + " to " + shape_str(s));
      size_t off = s.size() - in.shape.size();
      t.shape = s;
      t.strides.assign(s.size(), 0);
      for (size_t i = 0; i < in.shape.size(); ++i) {
        if (in.shape[i] == s[off + i])
          t.strides[off + i] = in.strides[i];
        else if (in.shape[i] != 1)
          fail(n, "cannot expand " + shape_str(in.shape) + " to " + shape_str(s));
      }
      return {t};
    }
    case Op::Flip: {  // a copy (contiguous, as ATen's of a contiguous tensor), not a view
      std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 1)), false);  // a 0-d tensor has dim 0
      for (int64_t d : n.attr_ints("dims")) {
        const int64_t nd = normalize_dim(d, rank);
        if (seen[nd]) fail(n, "dims lists dim " + std::to_string(nd) + " twice");
        seen[nd] = true;
      }
      return {TensorType::contiguous(in.dtype, in.shape)};
    }
    case Op::View: {
      const Shape& s = declared.shape;
      if (numel(s) != numel(in.shape)) fail(n, "cannot view " + shape_str(in.shape) + " as " + shape_str(s));
      t.shape = s;
      auto st = view_strides(in.shape, in.strides, s);
      t.strides = st ? *st : contiguous_strides(s);  // not viewable: reshape copies
      return {t};
    }
    default:
      fail(n, "not a layout op");
  }
}

}  // namespace

// Strides of `shape` viewed from a tensor with (old_shape, old_strides), or
// nullopt when the memory layout does not allow a view (then view copies).
// This is ATen's computeStride: chunks of old dims that are contiguous with
// each other can be split or merged freely.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape) {
  if (old_shape.empty()) return Shape(shape.size(), 1);
  if (numel(old_shape) == 0) return contiguous_strides(shape);
  Shape new_strides(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    // A chunk ends where the next (outer) dim is not contiguous with this one.
    // An overflowing product equals no stride, so it ends the chunk too.
    int64_t contiguous_stride = 0;
    bool overflows = __builtin_mul_overflow(tensor_numel, chunk_base_stride, &contiguous_stride);
    if (d == 0 || (old_shape[d - 1] != 1 && (overflows || old_strides[d - 1] != contiguous_stride))) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        new_strides[view_d] = checked_mul(view_numel, chunk_base_stride);
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

SliceBounds slice_bounds(const Node& n, const Shape& shape) {
  if (shape.empty()) fail(n, "cannot slice a 0-d tensor");
  int64_t d = normalize_dim(n.attr_int("dim"), static_cast<int64_t>(shape.size()));
  int64_t size = shape[d];
  int64_t start = n.attr_int_or("start", 0), end = n.attr_int_or("end", size), step = n.attr_int_or("step", 1);
  if (step <= 0) fail(n, "step must be positive");
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return {d, start, step, end == start ? 0 : (end - start - 1) / step + 1};
}

int64_t normalize_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);  // 0-d tensors accept dim 0 and -1
  if (dim < -r || dim >= r)
    throw IRError("dim " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      throw IRError("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i]) return false;
  return true;
}

namespace {
std::vector<TensorType> infer_shapes(const Node& n) {
  switch (op_kind(n.op)) {
    case OpKind::Pointwise:
      return pointwise(n);
    case OpKind::Reduction:
      return reduction(n);
    case OpKind::Window: {
      const TensorType& x = operand_type(n, 0);
      const PoolSpec p = *pool_spec(n, x.shape);
      Shape out = x.shape;
      std::copy(p.output_size.begin(), p.output_size.end(), out.end() - p.dims);
      return {TensorType::contiguous(x.dtype, out)};
    }
    case OpKind::Scan:
      if (!scan_combine(n.op)) fail(n, "is a scan without an FF_SCAN row in ops.def (internal error)");
      normalize_dim(n.attr_int("dim"), static_cast<int64_t>(operand_type(n, 0).shape.size()));
      n.attr_bool_or("reverse", false);  // a bool when present
      return {TensorType::contiguous(n.results[0]->type.dtype, operand_type(n, 0).shape)};
    case OpKind::Matmul:
      return matmul(n);
    case OpKind::Conv:
      return convolution(n);
    case OpKind::Layout:
      return layout(n);
    case OpKind::Opaque: {
      std::vector<TensorType> declared;
      for (Value* r : n.results) declared.push_back(r->type);
      return declared;
    }
  }
  fail(n, "unknown op kind");
}
}  // namespace

std::vector<TensorType> infer_result_types(const Node& n) {
  if (n.results.empty()) fail(n, "has no results");
  std::vector<TensorType> types = infer_shapes(n);
  if (op_info(n.op).result_dtype != ResultDType::Declared)
    if (auto d = result_dtype(n.op, promotion_operands(n))) types.at(0).dtype = *d;
  return types;
}

}  // namespace ff
