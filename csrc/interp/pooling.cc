// Reference semantics of max_pool and avg_pool: ATen's windows (ir/pool.h),
// each output a max (NaN wins) or a double sum over the in-range taps divided
// by ATen's divisor.
#include <cmath>
#include <functional>

#include "interp/eval.h"
#include "ir/pool.h"

namespace ff::interp {

HostTensor eval_pool(const Node& n, const Env& env) {
  const HostTensor& x = value_of(env, n, 0);
  const PoolSpec p = *pool_spec(n, x.shape);
  HostTensor out = result_tensor(n);
  const size_t dims = p.kernel.size(), lead = x.shape.size() - dims;
  int64_t planes = 1, in_plane = 1, out_plane = 1;
  for (size_t d = 0; d < lead; ++d) planes *= x.shape[d];
  for (size_t d = 0; d < dims; ++d) {
    in_plane *= p.input_size[d];
    out_plane *= p.output_size[d];
  }
  Shape o(dims), i(dims);
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t q = 0; q < out_plane; ++q) {
      for (int64_t r = q, d = static_cast<int64_t>(dims) - 1; d >= 0; --d) {  // q -> pooled coordinates
        o[d] = r % p.output_size[d];
        r /= p.output_size[d];
      }
      double acc = p.max ? -kInf : 0.0;
      // Every tap of the window inside the input, row-major over the pooled dims.
      std::function<void(size_t, int64_t)> visit = [&](size_t d, int64_t offset) {
        if (d == dims) {
          const double v = x.data[plane * in_plane + offset];
          if (p.max)
            acc = (v > acc || std::isnan(v)) ? v : acc;
          else
            acc += v;
          return;
        }
        for (i[d] = p.window_begin(d, o[d]); i[d] < p.window_end(d, o[d]); i[d] += p.dilation[d])
          visit(d + 1, offset * p.input_size[d] + i[d]);
      };
      visit(0, 0);
      out.data[plane * out_plane + q] = p.max ? acc : acc / static_cast<double>(p.avg_divisor(o));
    }
  return out;
}

}  // namespace ff::interp
