#include "codegen/cuda/conv.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_map>

#include "codegen/cuda/gemm_sm80_reduce.h"
#include "codegen/cuda/pointwise.h"
#include "codegen/cuda/prelude.h"

namespace ff::codegen {

namespace {

std::string cutlass_element(DType t) {
  return t == DType::f16 ? "cutlass::half_t" : t == DType::bf16 ? "cutlass::bfloat16_t" : "float";
}

// An element's offset in the epilogue's index names (n, col, then z/p/q).
std::string offset(const Shape& strides, const std::vector<std::string>& index) {
  std::string off;
  for (size_t d = 0; d < strides.size(); ++d)
    if (strides[d] != 0)
      off += (off.empty() ? "" : " + ") + index[d] + (strides[d] == 1 ? "" : " * " + std::to_string(strides[d]));
  return off.empty() ? "0" : off;
}

// Whether some offset into a tensor of `shape` with `strides` reaches 2^31.
bool needs_64bit(const Shape& shape, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return last >= (int64_t{1} << 31);
}

// "ff_conv2d_add_minimum_mul": the conv's rank and (up to four) fused ops.
std::string kernel_name(const fusion::Group& group, const fusion::ConvKernelSpec& s) {
  std::string name = "ff_conv" + std::to_string(s.conv.dims) + "d";
  std::set<std::string> seen;
  for (auto it = group.nodes.begin() + 1; it != group.nodes.end(); ++it) {
    if (seen.size() == 4) return name + "_etc";
    if (seen.insert(std::string(op_name((*it)->op))).second) name += "_" + std::string(op_name((*it)->op));
  }
  return name;
}

}  // namespace

fusion::GemmSpec conv_as_gemm(const fusion::ConvKernelSpec& s) {
  fusion::GemmSpec g;
  g.dtype = s.conv.dtype;
  g.m = s.gemm_m();
  g.n = s.gemm_n();
  g.k = s.gemm_k();
  g.alignment = s.alignment;
  g.tf32 = s.conv.dtype == DType::f32 && s.conv.tf32;
  return g;
}

std::vector<GemmTile> conv_tiles(const fusion::ConvKernelSpec& s) {
  std::vector<GemmTile> tiles = gemm_tiles(conv_as_gemm(s));
  // Loads narrower than 16 bytes multiply the iterators' per-thread state:
  // with 4- or 8-byte f32 loads, 128x64 (3xTF32) and 128x128 (TF32) tiles
  // spill registers (ptxas, sm_90); the smallest tile never did. Such convs
  // have few input channels (a first layer) and are bandwidth-bound anyway.
  if (s.alignment * dtype_size(s.conv.dtype) < 16) tiles.erase(tiles.begin(), tiles.end() - 1);
  return tiles;
}

GemmTile choose_conv_tile(const fusion::ConvKernelSpec& s) {
  const std::vector<GemmTile> tiles = conv_tiles(s);
  return tiles.size() == 1 ? tiles[0] : choose_gemm_tile(conv_as_gemm(s));
}

std::vector<KernelSource> conv_variants(const fusion::Group& group, const fusion::ConvKernelSpec& s, int id) {
  const GemmTile chosen = choose_conv_tile(s);
  std::vector<KernelSource> out;
  for (const GemmTile& t : conv_tiles(s))
    if (t.m != chosen.m || t.n != chosen.n) out.push_back(generate_conv(group, s, id, &t));
  return out;
}

KernelSource generate_conv(const fusion::Group& group, const fusion::ConvKernelSpec& s, int id,
                           const GemmTile* tile) {
  const fusion::GemmSpec gemm = conv_as_gemm(s);
  const GemmTile t = tile ? *tile : choose_conv_tile(s);
  const ConvSpec& c = s.conv;
  const bool f32 = c.dtype == DType::f32, split = f32 && !gemm.tf32, three_d = c.dims == 3;
  const std::string math = split ? "3xtf32" : f32 ? "tf32" : std::string(dtype_name(c.dtype));
  if (group.nodes.empty() || group.outputs.size() != 1) throw IRError("conv codegen: expected a conv and one output");
  const Node& conv = *group.nodes.front();
  const Value* out = group.outputs[0];
  const Shape& shape = conv.result()->type.shape;  // [N, K, (Z,) P, Q]

  KernelSource ks;
  ks.name = kernel_name(group, s) + "_" + math + "_" + std::to_string(t.m) + "x" + std::to_string(t.n) + "_" +
            std::to_string(id);
  ks.outputs = {out->name};
  ks.inputs = {conv.input(0)->name, conv.input(1)->name};
  if (c.has_bias) ks.inputs.push_back(conv.input(2)->name);
  std::vector<const Value*> extra;  // tensors the epilogue reads besides the conv's result
  for (const Value* v : group.inputs)
    if (v != conv.input(0) && v != conv.input(1) && !(c.has_bias && v == conv.input(2))) extra.push_back(v);
  for (const Value* v : extra) ks.inputs.push_back(v->name);
  ks.cutlass = true;
  ks.block = t.threads();
  ks.unroll = 1;
  ks.grid[0] = (s.gemm_m() + t.m - 1) / t.m;
  ks.grid[1] = (s.gemm_n() + t.n - 1) / t.n;
  ks.items = ks.grid[0] * ks.grid[1];
  ks.shared_bytes = sm80_reduce_shared_bytes(t);  // the mainloop's stages, then the exchange and the value tile
  ks.align_bytes = s.alignment * dtype_size(c.dtype);
  ks.vector_width = s.alignment;

  // Index names of an output element: n, col (the channel), then the spatial ones.
  std::vector<std::string> index{"n", "col"};
  for (const char* d : {"z", "p", "q"}) index.push_back(d);
  if (!three_d) index.erase(index.begin() + 2);
  bool wide = needs_64bit(out->type.shape, out->type.strides);
  for (const Value* v : extra) wide |= needs_64bit(v->type.shape, v->type.strides);
  std::unordered_map<const Value*, std::string> expr_of{{conv.result(), "v"}};
  for (size_t i = 0; i < extra.size(); ++i)
    expr_of[extra[i]] =
        "ff_load(in" + std::to_string(i) + "[" + offset(broadcast_strides(extra[i]->type, shape), index) + "])";
  std::ostringstream body;
  const std::vector<Node*> epilogue(group.nodes.begin() + 1, group.nodes.end());
  emit_pointwise_body(body, epilogue, "    ", expr_of);
  const std::string round = c.dtype == DType::f16 ? "ff_round_f16" : c.dtype == DType::bf16 ? "ff_round_bf16" : "";

  const int64_t P = shape[shape.size() - 2], Q = shape.back(), Z = three_d ? shape[2] : 1;
  std::ostringstream os;
  os << "// Generated by fuseforge: " << ks.name << "\n";
  for (const Node* n : group.nodes) os << "//   " << print_node(*n) << "\n";
  os << "// implicit GEMM M " << s.gemm_m() << " (pixels), N " << s.gemm_n() << " (channels), K " << s.gemm_k()
     << "; tile " << t.m << "x" << t.n << "x" << t.k << ", warp " << t.warp_m << "x" << t.warp_n << ", " << t.stages
     << " stages, "
     << (split ? "3xTF32 (fp32 accuracy)" : f32 ? "TF32 (fp32_precision=tf32), f32 accumulate" : "f32 accumulate")
     << "\n";
  ks.includes = {"#include <cutlass/cutlass.h>", "#include <cutlass/numeric_types.h>",
                 "#include <cutlass/conv/kernel/default_conv" + std::to_string(c.dims) + "d_fprop.h>",
                 "#include <cutlass/epilogue/thread/linear_combination.h>",
                 "#include <cutlass/epilogue/threadblock/epilogue_with_visitor.h>",
                 "#include <cutlass/gemm/threadblock/threadblock_swizzle.h>"};
  os << cuda_prelude() << cuda_half_prelude();
  const std::string layout = three_d ? "cutlass::layout::TensorNDHWC" : "cutlass::layout::TensorNHWC";
  os << "\nnamespace {\n"
     << "using Element = " << cutlass_element(c.dtype) << ";\n"
     << "using Default = cutlass::conv::kernel::DefaultConv" << c.dims << "dFprop<\n"
     << "    Element, " << layout << ", Element, " << layout << ", Element, " << layout << ",\n"
     << "    float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,\n"
     << "    cutlass::gemm::GemmShape<" << t.m << ", " << t.n << ", " << t.k << ">, cutlass::gemm::GemmShape<"
     << t.warp_m << ", " << t.warp_n << ", " << t.k << ">, cutlass::gemm::GemmShape<16, 8, " << (f32 ? 8 : 16)
     << ">,\n"
     << "    cutlass::epilogue::thread::LinearCombination<Element, " << s.alignment << ", float, float>,\n"
     << "    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, " << t.stages << ",\n"
     << "    " << (split ? "cutlass::arch::OpMultiplyAddFastF32" : "cutlass::arch::OpMultiplyAdd")
     << ", cutlass::conv::IteratorAlgorithm::kOptimized,\n"
     << "    cutlass::conv::StrideSupport::kStrided"
     << (three_d ? "" : ", " + std::to_string(s.alignment) + ", " + std::to_string(s.alignment))  // 3-D: 16 bytes
     << ">::Kernel;\n"
     << "using Mma = Default::Mma;\n"
     << "// The epilogue hands accumulators over as a GEMM epilogue does: a row-major\n"
     << "// iterator over its thread map gives each value's coordinates.\n"
     << "using Coordinates = cutlass::epilogue::threadblock::PredicatedTileIterator<\n"
     << "    Default::Epilogue::OutputTileIterator::ThreadMap, Element>;\n"
     << "constexpr int M = " << s.gemm_m() << ", N = " << s.gemm_n() << ";  // pixels, output channels\n"
     << "constexpr int BM = " << t.m << ", BN = " << t.n << ", THREADS = " << ks.block << ";\n"
     << "constexpr int TILE_LD = BN + 1;  // odd: threads walking rows or columns of the tile hit distinct banks\n"
     << "// Writes each accumulator into the CTA's BM x BN tile in shared memory.\n"
     << "struct TileVisitor {\n"
     << "  static int const kIterations = Coordinates::kIterations;\n"
     << "  static int const kElementsPerAccess = Coordinates::kElementsPerAccess;\n"
     << "  using AccumulatorFragment = cutlass::Array<float, kElementsPerAccess>;\n"
     << "  struct SharedStorage {};\n"
     << "  Coordinates where;  // never loads or stores\n"
     << "  float* tile;\n"
     << "  cutlass::MatrixCoord origin;\n"
     << "  CUTLASS_DEVICE TileVisitor(float* tile_, int thread, cutlass::MatrixCoord origin_)\n"
     << "      : where(Coordinates::Params(cutlass::layout::RowMajor(N)), nullptr, cutlass::MatrixCoord(M, N), thread,\n"
     << "              origin_),\n"
     << "        tile(tile_), origin(origin_) {}\n"
     << tile_visitor_noop_hooks()
     << "  CUTLASS_DEVICE void visit(int, int, int, int frag, AccumulatorFragment const& acc) {\n"
     << "    const cutlass::MatrixCoord at = where.thread_start() + Coordinates::ThreadMap::iteration_offset(frag);\n"
     << "    CUTLASS_PRAGMA_UNROLL\n"
     << "    for (int j = 0; j < kElementsPerAccess; ++j)\n"
     << "      tile[(at.row() - origin.row()) * TILE_LD + at.column() + j - origin.column()] = acc[j];\n"
     << "  }\n"
     << "  CUTLASS_DEVICE void end_step(int) { ++where; }  // the next step's rows\n"
     << "};\n"
     << tile_shared_storage(ks.shared_bytes);

  const std::string el = cuda_storage_type(c.dtype);
  os << "FF_EXTERN_C __global__ void __launch_bounds__(" << ks.block << ") " << ks.name << "("
     << cuda_storage_type(out->type.dtype) << "* __restrict__ out, const Element* x, const Element* w";
  if (c.has_bias) os << ", const " << el << "* __restrict__ bias";
  for (size_t i = 0; i < extra.size(); ++i)
    os << ", const " << cuda_storage_type(extra[i]->type.dtype) << "* __restrict__ in" << i;
  os << ") {\n"
     << "  extern __shared__ __align__(16) unsigned char smem[];\n"
     << "  SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);\n"
     << "  const int thread = threadIdx.x, warp = cutlass::canonical_warp_idx_sync(), lane = threadIdx.x % 32;\n"
     << "  const cutlass::MatrixCoord origin(static_cast<int>(blockIdx.x) * BM, static_cast<int>(blockIdx.y) * BN);\n";
  auto at = [](const Shape& v, int i) { return std::to_string(v[i]); };
  if (three_d) {
    os << "  const cutlass::conv::Conv3dProblemSize problem(" << c.batch << ", " << at(c.input_size, 0) << ", "
       << at(c.input_size, 1) << ", " << at(c.input_size, 2) << ", " << c.in_channels << ", " << c.out_channels
       << ", " << at(c.kernel, 0) << ", " << at(c.kernel, 1) << ", " << at(c.kernel, 2) << ", " << Z << ", " << P
       << ", " << Q << ",\n      " << at(c.padding, 0) << ", " << at(c.padding, 1) << ", " << at(c.padding, 2)
       << ", " << at(c.stride, 0) << ", " << at(c.stride, 1) << ", " << at(c.stride, 2) << ", "
       << at(c.dilation, 0) << ", " << at(c.dilation, 1) << ", " << at(c.dilation, 2)
       << ", cutlass::conv::Mode::kCrossCorrelation);\n"
       << "  const auto x_layout = " << layout << "::packed({" << c.batch << ", " << at(c.input_size, 0) << ", "
       << at(c.input_size, 1) << ", " << at(c.input_size, 2) << ", " << c.in_channels << "});\n"
       << "  const auto w_layout = " << layout << "::packed({" << c.out_channels << ", " << at(c.kernel, 0) << ", "
       << at(c.kernel, 1) << ", " << at(c.kernel, 2) << ", " << c.in_channels << "});\n";
  } else {
    os << "  const cutlass::conv::Conv2dProblemSize problem(" << c.batch << ", " << at(c.input_size, 0) << ", "
       << at(c.input_size, 1) << ", " << c.in_channels << ", " << c.out_channels << ", " << at(c.kernel, 0) << ", "
       << at(c.kernel, 1) << ", " << P << ", " << Q << ",\n      " << at(c.padding, 0) << ", " << at(c.padding, 1)
       << ", " << at(c.stride, 0) << ", " << at(c.stride, 1) << ", " << at(c.dilation, 0) << ", "
       << at(c.dilation, 1) << ", cutlass::conv::Mode::kCrossCorrelation);\n"
       << "  const auto x_layout = " << layout << "::packed({" << c.batch << ", " << at(c.input_size, 0) << ", "
       << at(c.input_size, 1) << ", " << c.in_channels << "});\n"
       << "  const auto w_layout = " << layout << "::packed({" << c.out_channels << ", " << at(c.kernel, 0) << ", "
       << at(c.kernel, 1) << ", " << c.in_channels << "});\n";
  }
  os << "  Mma::IteratorA iterator_x(Mma::IteratorA::getParams(problem, x_layout), problem, const_cast<Element*>(x),\n"
     << "                            thread, {origin.row(), 0});\n"
     << "  Mma::IteratorB iterator_w(Mma::IteratorB::Params(problem, w_layout), problem, const_cast<Element*>(w),\n"
     << "                            thread, {0, origin.column()});\n"
     << "  Mma mma(shared.main_loop, thread, warp, lane);\n"
     << "  Mma::FragmentC acc;\n  acc.clear();\n"
     << "  // The k-loop as CUTLASS's ImplicitGemmConvolution kernel runs it.\n"
     << "  const int iterations = cutlass::conv::implicit_gemm_k_iterations(cutlass::conv::Operator::kFprop,\n"
     << "      Mma::Shape::kK, problem, cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::GroupMode::kNone,\n"
     << "      Mma::Shape::kN);\n"
     << "  const int per_channel = cutlass::conv::implicit_gemm_k_iterations_per_channel(\n"
     << "      cutlass::conv::Operator::kFprop, problem, cutlass::conv::IteratorAlgorithm::kOptimized);\n"
     << "  mma(iterations, acc, iterator_x, iterator_w, acc, per_channel);\n"
     << "  TileVisitor visitor(shared.epilogue.tile, thread, origin);\n"
     << "  Epilogue epilogue(shared.epilogue.exchange, thread, warp, lane);\n"
     << "  epilogue(visitor, acc);\n"
     << "  __syncthreads();\n";
  // Threads walk the output's unit-stride dim: channels (channels-last) or pixels.
  const Shape out_strides = broadcast_strides(out->type, shape);
  const bool channels_inner = out_strides[1] == 1;
  const std::string idx = wide ? "long long" : "int";
  os << "  // The epilogue per element, threads walking " << (channels_inner ? "channels" : "pixels")
     << " (the output's unit stride).\n"
     << "  for (int task = thread; task < BM * BN; task += THREADS) {\n"
     << (channels_inner ? "    const int r = task / BN, c = task % BN;\n" : "    const int r = task % BM, c = task / BM;\n")
     << "    const int row = origin.row() + r, col = origin.column() + c;\n"
     << "    if (row >= M || col >= N) continue;\n"
     << "    const " << idx << " q = row % " << Q << ", p = row / " << Q << " % " << P;
  if (three_d) os << ", z = row / " << P * Q << " % " << Z;
  os << ", n = row / " << P * Q * Z << ";\n";
  // As eager: the conv's result rounded to its dtype, then the bias added (and rounded).
  const auto rounded = [&](const std::string& e) { return round.empty() ? e : round + "(" + e + ")"; };
  std::string value = rounded("shared.epilogue.tile[r * TILE_LD + c]");
  if (c.has_bias) value = rounded(value + " + ff_load(bias[col])");
  os << "    // v: the conv's value" << (c.has_bias ? " plus its bias" : "") << "; then " << epilogue.size()
     << " fused pointwise op(s).\n"
     << "    const float v = " << value << ";\n"
     << body.str()
     << "    out[" << offset(out_strides, index) << "] = ff_store<" << cuda_storage_type(out->type.dtype) << ">("
     << expr_of.at(out) << ");\n"
     << "  }\n}\n";
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
