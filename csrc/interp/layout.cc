// Layout evaluation: each layout op is a strided view of its (row-major)
// input, gathered into a row-major result; cat fills blocks of its result.
#include "interp/eval.h"

namespace ff::interp {

HostTensor eval_layout(const Node& n, const Env& env) {
  HostTensor out = result_tensor(n);
  if (n.op == Op::Cat) {  // each operand fills a block of the result along `dim`
    int64_t rank = static_cast<int64_t>(out.shape.size());
    int64_t d = normalize_dim(n.attr_int("dim"), rank);
    Shape out_strides = contiguous_strides(out.shape);
    int64_t pos = 0;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const HostTensor& t = value_of(env, n, i);
      Shape expect = out.shape;
      expect[d] = t.shape.size() == out.shape.size() ? t.shape[d] : -1;
      if (t.shape != expect || pos + t.shape[d] > out.shape[d])
        fail(n, "operand " + std::to_string(i) + " shape " + shape_str(t.shape) + " does not fit the result " +
                    shape_str(out.shape));
      Offsets dst = strided_offsets(t.shape, out_strides, pos * out_strides[d]);
      for (size_t k = 0; k < dst.size(); ++k) out.data[static_cast<size_t>(dst[k])] = t.data[k];
      pos += t.shape[d];
    }
    if (pos != out.shape[d])
      fail(n, "operands fill " + std::to_string(pos) + " of " + std::to_string(out.shape[d]) + " rows");
    return out;
  }
  const HostTensor& x = value_of(env, n, 0);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  Shape cs = contiguous_strides(x.shape);
  Shape shape, strides;  // the view of x that the result reads, in the result's row-major order
  int64_t base = 0;
  switch (n.op) {
    case Op::View:
    case Op::Unsqueeze:
    case Op::Squeeze:  // row-major order is unchanged
      if (numel(out.shape) != numel(x.shape))
        fail(n, "cannot reshape " + shape_str(x.shape) + " to " + shape_str(out.shape));
      out.data = x.data;
      return out;
    case Op::Permute: {
      auto dims = n.attr_ints("dims");
      if (static_cast<int64_t>(dims.size()) != rank) fail(n, "dims does not match the rank");
      for (int64_t dim : dims) {
        int64_t nd = normalize_dim(dim, rank);
        shape.push_back(x.shape[nd]);
        strides.push_back(cs[nd]);
      }
      break;
    }
    case Op::Expand:
      if (!broadcasts_to(x.shape, out.shape))
        fail(n, "cannot expand " + shape_str(x.shape) + " to " + shape_str(out.shape));
      shape = out.shape;
      strides = broadcast_strides(x.shape, out.shape);
      break;
    case Op::Slice: {
      SliceBounds b = slice_bounds(n, x.shape);
      shape = x.shape;
      strides = cs;
      shape[b.dim] = b.size;
      strides[b.dim] *= b.step;
      base = b.start * cs[b.dim];
      break;
    }
    case Op::Select: {
      int64_t d = normalize_dim(n.attr_int("dim"), rank), idx = n.attr_int("index");
      if (idx < -x.shape[d] || idx >= x.shape[d])
        fail(n, "index " + std::to_string(idx) + " out of range for size " + std::to_string(x.shape[d]));
      if (idx < 0) idx += x.shape[d];
      shape = x.shape;
      strides = cs;
      shape.erase(shape.begin() + d);
      strides.erase(strides.begin() + d);
      base = idx * cs[d];
      break;
    }
    case Op::Flip:  // negative strides from the far end of each flipped dim
      shape = x.shape;
      strides = cs;
      for (int64_t dim : n.attr_ints("dims")) {
        const int64_t d = normalize_dim(dim, rank);
        base += (x.shape[d] - 1) * cs[d];
        strides[d] = -cs[d];
      }
      break;
    default:
      fail(n, "not a layout op");
  }
  if (shape != out.shape) fail(n, "result shape " + shape_str(out.shape) + " != " + shape_str(shape));
  out.data = gather(x.data, strided_offsets(shape, strides, base));
  return out;
}

}  // namespace ff::interp
