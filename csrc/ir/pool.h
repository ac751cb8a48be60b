#pragma once
// A pooling node's parameters (max_pool, avg_pool), read once from its
// attributes for the shape rule, the interpreter and the kernel generator,
// with ATen's window arithmetic written once.
#include <optional>

#include "ir/graph.h"

namespace ff {

struct PoolSpec {
  bool max = true;                          // max_pool, else avg_pool
  int dims = 2;                             // pooled (trailing) dims: 1, 2 or 3
  Shape kernel, stride, padding, dilation;  // one per pooled dim (dilation 1 for avg_pool)
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool
  int64_t divisor_override = 0;   // avg_pool; 0: none
  Shape input_size, output_size;  // extents of the pooled dims

  // The input positions output `o` of pooled dim `d` reads, clipped to the
  // input: [begin, end) stepping by dilation (max_pool: the first in-range
  // tap; avg_pool: step 1).
  int64_t window_begin(size_t d, int64_t o) const;
  int64_t window_end(size_t d, int64_t o) const;
  // avg_pool's divisor for an output whose windows span `begin`/`end` per
  // dim, as ATen computes it (the padded extent when count_include_pad).
  int64_t avg_divisor(const Shape& out_index) const;
  // Whether some window reaches outside the input (padding or ceil_mode).
  bool windows_overhang() const;
  // Whether `o` pools the same windows: the same taps for every output (an
  // average and a max pool may; ceil_mode counts through the output extents,
  // the divisor not at all).
  bool same_windows(const PoolSpec& o) const;
};

// Pooled extent of one dim, as ATen's pooling_output_shape.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

// The parameters of a max_pool/avg_pool node, checked as ATen checks them
// (positive kernel and stride, padding at most half the kernel, a positive
// output); `input` is the pooled operand's shape. Throws IRError naming the
// problem; nullopt for any other op.
std::optional<PoolSpec> pool_spec(const Node& n, const Shape& input);
inline std::optional<PoolSpec> pool_spec(const Node& n) { return pool_spec(n, n.input(0)->type.shape); }

}  // namespace ff
