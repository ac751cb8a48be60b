#include "codegen/cuda/pool.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/pool_emitter.h"
#include "ir/pool.h"

namespace ff::codegen {

namespace {

// Side of the square tiles a transposing pool stages through shared memory.
constexpr int kTile = 32;

// A thread per output element in the first output's memory order.
KernelSource generate_flat(PoolEmitter& e, const fusion::Group& g, KernelSource ks, int id) {
  const Shape& shape = e.out_shape();
  const size_t rank = shape.size();
  ks.unroll = 1;
  ks.items = numel(shape);
  std::ostringstream os;
  e.head(os, ks, "a thread per output element", id);
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  const Shape& ref = g.outputs.front()->type.strides;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ref[a] > ref[b]; });
  os << "  for (index_t item = blockIdx.x * blockDim.x + threadIdx.x; item < " << ks.items
     << "; item += static_cast<index_t>(gridDim.x) * blockDim.x) {\n";
  os << "    index_t rest = item;\n";  // the coordinates c<d>, innermost memory dim first
  for (size_t k = rank; k-- > 0;) {
    const size_t d = order[k];
    if (shape[d] == 1)
      os << "    const index_t c" << d << " = 0;\n";
    else if (k == 0)
      os << "    const index_t c" << d << " = rest;\n";
    else
      os << "    const index_t c" << d << " = rest % " << shape[d] << "; rest /= " << shape[d] << ";\n";
  }
  e.window(os, "    ");
  e.epilogue(os, "    ");
  os << "  }\n}\n";
  ks.source = os.str();
  return ks;
}

// A thread per output element of every channel of the softmax's dim, in the
// first output's memory order over the other dims.
KernelSource generate_normalized(PoolEmitter& e, const fusion::Group& g, KernelSource ks, int id) {
  const Shape& shape = e.out_shape();
  const size_t rank = shape.size(), dn = e.norm_dim();
  ks.unroll = 1;
  ks.items = numel(shape) / shape[dn];
  std::ostringstream os;
  e.head(os, ks,
         "a thread per output element of all " + std::to_string(shape[dn]) + " channels of dim " + std::to_string(dn) +
             " (the softmax's)",
         id);
  std::vector<size_t> order;
  for (size_t d = 0; d < rank; ++d)
    if (d != dn) order.push_back(d);
  const Shape& ref = g.outputs.front()->type.strides;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ref[a] > ref[b]; });
  os << "  for (index_t item = blockIdx.x * blockDim.x + threadIdx.x; item < " << ks.items
     << "; item += static_cast<index_t>(gridDim.x) * blockDim.x) {\n";
  os << "    index_t rest = item;\n";
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = order[k];
    if (shape[d] == 1)
      os << "    const index_t c" << d << " = 0;\n";
    else if (k == 0)
      os << "    const index_t c" << d << " = rest;\n";
    else
      os << "    const index_t c" << d << " = rest % " << shape[d] << "; rest /= " << shape[d] << ";\n";
  }
  if (order.empty()) os << "    (void)rest;\n";
  e.normalized_window(os, "    ");
  os << "#pragma unroll\n    for (int c" << dn << " = 0; c" << dn << " < " << shape[dn] << "; ++c" << dn << ") {\n";
  e.epilogue(os, "      ", "[c" + std::to_string(dn) + "]");
  os << "    }\n  }\n}\n";
  ks.source = os.str();
  return ks;
}

// A transposing pool: blocks of 32x8 threads cover a kTile x kTile tile of
// (dt, the output's unit-stride dim); blockIdx.z enumerates the other dims.
// The windows are computed with threadIdx.x along dt (the input's unit
// stride: each tap's loads coalesce), the pooled values staged through shared
// memory (a tile per pool, rows padded by one word against bank conflicts),
// and the epilogue runs with threadIdx.x along the output's unit stride
// (coalesced stores).
KernelSource generate_tiled(PoolEmitter& e, KernelSource ks, size_t dt, size_t inner, int id) {
  const Shape& shape = e.out_shape();
  // Vector loads where the window tensors allow them (the executor runs the
  // kernel only on pointers aligned to the vector). H200, a 3x3 avg pool of a
  // channels-last 64x96x96x96 conv result written NCHW: 117 -> 88 us.
  const bool vector = e.vectorizes(dt);
  if (vector) ks.align_bytes = e.vector_bytes();
  std::vector<size_t> others;
  for (size_t d = 0; d < shape.size(); ++d)
    if (d != dt && d != inner) others.push_back(d);
  ks.block = 32;
  ks.block_y = 8;
  ks.unroll = 1;
  ks.items = numel(shape);
  ks.grid[0] = (shape[inner] + kTile - 1) / kTile;
  ks.grid[1] = (shape[dt] + kTile - 1) / kTile;
  ks.grid[2] = 1;
  for (size_t d : others) ks.grid[2] *= shape[d];
  std::ostringstream os;
  e.head(os, ks,
         std::to_string(kTile) + "x" + std::to_string(kTile) + " tiles of dims " + std::to_string(dt) + " and " +
             std::to_string(inner) + " transposed through shared memory" +
             (vector ? ", 4 elements of dim " + std::to_string(dt) + " a load" : ""),
         id);
  const std::string type = e.pooled_type();
  const size_t pools = e.pools();
  os << "  __shared__ " << type << " tile[" << pools << "][" << kTile << "][" << kTile + 1 << "];\n";
  os << "  index_t rest = blockIdx.z;\n";
  for (size_t k = others.size(); k-- > 0;) {
    const size_t d = others[k];
    if (k == 0)
      os << "  const index_t c" << d << " = rest;\n";
    else
      os << "  const index_t c" << d << " = rest % " << shape[d] << "; rest /= " << shape[d] << ";\n";
  }
  if (others.empty()) os << "  (void)rest;\n";
  os << "  const index_t t" << dt << " = static_cast<index_t>(blockIdx.y) * " << kTile << ", t" << inner
     << " = static_cast<index_t>(blockIdx.x) * " << kTile << ";\n";
  auto loop = [&](size_t a, size_t b) {  // dim a along threadIdx.x, dim b along threadIdx.y
    os << "#pragma unroll\n  for (int rk = 0; rk < " << kTile / 8
       << "; ++rk) {\n    const int r = threadIdx.y + 8 * rk;\n";
    os << "    const index_t c" << a << " = t" << a << " + threadIdx.x, c" << b << " = t" << b << " + r;\n";
    os << "    if (c" << a << " >= " << shape[a] << " || c" << b << " >= " << shape[b] << ") continue;\n";
  };
  if (vector) {
    // 4 adjacent elements of dt a thread, each tap one vector load a tensor:
    // 8 threads span the tile's dt, the block's 256 threads its 32 rows.
    os << "  {\n    const int g = threadIdx.x % 8, r = threadIdx.x / 8 + 4 * threadIdx.y;\n"
       << "    const index_t c" << dt << " = t" << dt << " + 4 * g, c" << inner << " = t" << inner << " + r;\n"
       << "    if (c" << dt << " < " << shape[dt] << " && c" << inner << " < " << shape[inner] << ") {\n";
    e.window(os, "      ", 4, dt);
    for (size_t i = 0; i < pools; ++i)
      os << "#pragma unroll\n      for (int k = 0; k < 4; ++k) tile[" << i << "][r][4 * g + k] = pooled" << i
         << "[k];\n";
    os << "    }\n  }\n";
  } else {
    loop(dt, inner);
    e.window(os, "    ");
    for (size_t i = 0; i < pools; ++i) os << "    tile[" << i << "][r][threadIdx.x] = pooled" << i << ";\n";
    os << "  }\n";
  }
  os << "  __syncthreads();\n";
  loop(inner, dt);
  for (size_t i = 0; i < pools; ++i)
    os << "    const " << type << " pooled" << i << " = tile[" << i << "][threadIdx.x][r];\n";
  e.epilogue(os, "    ");
  os << "  }\n}\n";
  ks.source = os.str();
  return ks;
}

}  // namespace

bool pool_normalizes(const Node& norm, const Node& pool) {
  const auto spec = pool_spec(pool);
  if (!spec || !is_softmax(norm) || !is_floating(norm.result()->type.dtype)) return false;
  const Shape& shape = pool.input(0)->type.shape;
  const int64_t dim = normalize_dim(norm.attr_int("dim"), static_cast<int64_t>(shape.size()));
  const size_t kept = shape.size() - spec->kernel.size();
  // Each element's softmax is computed once per window that covers it: only
  // where windows overlap little (a 3x3 stride-1 pool would take 9 softmaxes
  // an element, more exps than the pass over memory it saves).
  double taps_per_element = 1;
  for (size_t j = 0; j < spec->kernel.size(); ++j)
    taps_per_element *= static_cast<double>(spec->kernel[j]) / static_cast<double>(spec->stride[j]);
  return norm.result()->type.shape == shape && dim >= 0 && static_cast<size_t>(dim) < kept &&
         shape[dim] <= kPoolNormalizedExtent && shape[dim] > 0 && taps_per_element <= kPoolNormalizedOverlap;
}

KernelSource generate_pool(const fusion::Group& g, int id) {
  PoolEmitter e(g);
  KernelSource ks;
  ks.name = fused_kernel_name("ff_pool", g.nodes, id);
  if (e.norm()) return generate_normalized(e, g, ks, id);
  // The output's unit-stride dim: its smallest stride over dims of size > 1.
  const Shape& shape = e.out_shape();
  const Shape& ref = g.outputs.front()->type.strides;
  size_t inner = shape.size() - 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1 && (shape[inner] == 1 || ref[d] < ref[inner])) inner = d;
  const auto dt = e.transposed_dim();
  // The grid's z covers every dim but the two tiled ones.
  if (dt && *dt != inner && numel(shape) / (shape[*dt] * shape[inner]) <= 65535)
    return generate_tiled(e, ks, *dt, inner, id);
  return generate_flat(e, g, ks, id);
}

}  // namespace ff::codegen
