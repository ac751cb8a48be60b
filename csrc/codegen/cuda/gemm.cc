#include "codegen/cuda/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <unordered_map>

#include "codegen/cuda/gemm_sm80_reduce.h"
#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/prelude.h"

namespace ff::codegen {

namespace {

std::string cutlass_element(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::f16:
      return "cutlass::half_t";
    case DType::bf16:
      return "cutlass::bfloat16_t";
    default:
      throw IRError("gemm codegen: unsupported dtype " + std::string(dtype_name(t)));
  }
}

std::string layout(bool row_major) { return row_major ? "cutlass::layout::RowMajor" : "cutlass::layout::ColumnMajor"; }

// Assumed share of peak a tile reaches per multiprocessor: smaller tiles reload
// operands more often. On short sums (K <= 128) a 128x128 CTA is mostly its
// pipeline's fill and its epilogue, and fewer fit per multiprocessor to hide
// them: measured on an H100, attention's q @ k.T (256 x 1024x1024x64, 3xTF32)
// took 0.96 ms with 128x128 tiles, 0.77 with 128x64, 0.79 with 64x64.
double tile_efficiency(const GemmTile& t, int64_t k) {
  if (t.m * t.n >= 128 * 128) return k <= 128 ? 0.8 : 1.0;
  return t.m * t.n >= 128 * 64 ? 0.85 : 0.65;
}

}  // namespace

std::string f32_literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", static_cast<float>(v));
  std::string r = buf;
  if (r.find_first_of(".e") == std::string::npos) r.insert(r.size() - 1, ".0");
  return r;
}

int GemmTile::shared_bytes(DType t) const { return stages * (m * k + k * n) * dtype_size(t); }

std::vector<GemmTile> gemm_tiles(const fusion::GemmSpec& s) {
  // 3xTF32 keeps two operand fragments per value: a 64x64 warp tile spills
  // registers (ptxas, sm_90), so its tiles use 32x64 / 64x32 warp tiles.
  if (s.dtype == DType::f32 && !s.tf32)
    return {{128, 128, 16, 32, 64, 4}, {128, 64, 16, 64, 32, 4}, {64, 64, 16, 32, 32, 5}};
  return {{128, 128, 32, 64, 64, 4}, {128, 64, 32, 64, 32, 4}, {64, 64, 32, 32, 32, 5}};
}

GemmTile choose_gemm_tile(const fusion::GemmSpec& s, int sm_count) {
  const std::vector<GemmTile> tiles = gemm_tiles(s);
  // With a block reduction, only tiles whose value tile fits in the
  // mainloop's shared memory (3xTF32: 64x64), where the smallest's does.
  // Measured on an H100 at 8192 x 4096 x 512 (row sum, column mean): fused,
  // 128x128 ran 0.69 ms (0.65 ms writing the whole result), and autotuning
  // picked 64x64 over 128x64 and 128x128 in both cases, at 0.62 ms.
  auto fits = [&](const GemmTile& t) { return sm80_reduce_shared_bytes(t) <= t.shared_bytes(s.dtype); };
  const bool only_fitting = s.reduce != fusion::GemmSpec::Reduce::None && fits(tiles.back());
  GemmTile best = tiles.front();
  double best_cost = INFINITY;
  for (const GemmTile& t : tiles) {
    if (only_fitting && !fits(t)) continue;
    const int64_t blocks = ((s.m + t.m - 1) / t.m) * ((s.n + t.n - 1) / t.n) * s.batch;
    const int64_t per_sm = (blocks + sm_count - 1) / sm_count;
    const double cost = static_cast<double>(per_sm) * t.m * t.n / tile_efficiency(t, s.k);
    if (cost < best_cost) {
      best_cost = cost;
      best = t;
    }
  }
  return best;
}

std::vector<KernelSource> gemm_variants(const fusion::Group& group, const fusion::GemmSpec& s, int id,
                                        const Target& target) {
  const GemmTile chosen = choose_gemm_tile(s, target.sm_count);
  std::vector<KernelSource> out;
  for (const GemmTile& t : gemm_tiles(s))
    if (t.m != chosen.m || t.n != chosen.n) out.push_back(generate_gemm(group, s, id, target, &t));
  return out;
}

const Value* gemm_signature(KernelSource& ks, const fusion::Group& group, const fusion::GemmSpec& s,
                            const std::string& tag, int id) {
  if (group.nodes.empty() || group.outputs.size() != 1) throw IRError("gemm codegen: expected a matmul and one output");
  const Node& node = *group.nodes.front();
  const bool addmm = node.op == Op::Addmm;
  ks.name = "ff_gemm_" + std::string(op_name(node.op));
  std::set<std::string> seen;
  for (auto it = group.nodes.begin() + 1; it != group.nodes.end(); ++it) {
    if (op_kind((*it)->op) == OpKind::Layout) continue;
    if (seen.size() == 4) {
      ks.name += "_etc";
      break;
    }
    if (seen.insert(std::string(op_name((*it)->op))).second) ks.name += "_" + std::string(op_name((*it)->op));
  }
  ks.name += "_" + tag + "_" + std::to_string(id);
  ks.outputs = {group.outputs[0]->name};
  ks.inputs = {node.input(addmm ? 1 : 0)->name, node.input(addmm ? 2 : 1)->name};
  if (addmm) ks.inputs.push_back(node.input(0)->name);  // passed even when beta = 0 (the ATen fallback reads it)
  if (s.source != fusion::GemmSpec::Source::EpilogueInput) return nullptr;
  const Value* source_input = nullptr;
  for (auto it = group.nodes.begin() + 1; it != group.nodes.end(); ++it)
    for (const Operand& o : (*it)->operands)
      if (o.is_value() && o.value != node.result() &&
          std::find(group.nodes.begin(), group.nodes.end(), o.value->producer) == group.nodes.end())
        source_input = o.value;
  if (source_input == nullptr) throw IRError("gemm codegen: the epilogue reads no source tensor");
  ks.inputs.push_back(source_input->name);
  return source_input;
}

std::vector<Node*> gemm_pointwise_nodes(const fusion::Group& group, const fusion::GemmSpec& s) {
  const size_t trailing = s.reduce == fusion::GemmSpec::Reduce::None ? 0 : 2;  // the block reduction's view and op
  return {group.nodes.begin() + 1, group.nodes.end() - static_cast<std::ptrdiff_t>(trailing)};
}

std::string gemm_epilogue_apply(const fusion::Group& group, const fusion::GemmSpec& s, const Value* source_input) {
  const Node& node = *group.nodes.front();
  const std::vector<Node*> epilogue = gemm_pointwise_nodes(group, s);
  // The value per element: the group's output, or what the block reduction's view reads.
  const Value* value =
      s.reduce == fusion::GemmSpec::Reduce::None ? group.outputs[0] : group.nodes.back()->input(0)->producer->input(0);
  std::unordered_map<const Value*, std::string> expr_of{{node.result(), "v"}};
  if (source_input) expr_of[source_input] = "s";
  std::ostringstream body;
  emit_pointwise_body(body, epilogue, "    ", expr_of);
  const std::string round = s.dtype == DType::f16    ? "ff_round_f16(v)"
                            : s.dtype == DType::bf16 ? "ff_round_bf16(v)"
                                                     : "v";
  std::ostringstream os;
  os << "  // v: the matmul's value (alpha * acc, + beta * bias for addmm) rounded to its dtype as eager\n"
     << "  // stores it; s: the source tensor's element. Then the " << epilogue.size() << " fused pointwise op(s).\n"
     << "  __device__ __forceinline__ static float apply(float v, float s) {\n"
     << "    v = " << round << ";\n"
     << body.str() << "    return " << expr_of.at(value) << ";\n  }\n";
  return os.str();
}

std::string gemm_epilogue_value(const fusion::GemmSpec& s, const std::string& apply) {
  using Source = fusion::GemmSpec::Source;
  const std::string src = "src[static_cast<long long>(row) * " + std::to_string(s.ldc) + " + col]";
  const std::string alpha = f32_literal(s.alpha);
  std::ostringstream os;
  os << "  __device__ __forceinline__ float value(int row, int col, float acc) const {\n    return "
     << (s.source == Source::Bias
             ? apply + "(fmaf(" + alpha + ", acc, " + f32_literal(s.beta) + " * " + src + "), 0.0f)"
         : s.source == Source::EpilogueInput ? apply + "(" + alpha + " * acc, " + src + ")"
                                             : apply + "(" + alpha + " * acc, 0.0f)")
     << ";\n  }\n";
  return os.str();
}

std::string gemm_reduction_members(const fusion::GemmSpec& s) {
  using Reduce = fusion::GemmSpec::Reduce;
  const char* combine = s.reduce == Reduce::Max   ? "ff_maximum(a, b)"
                        : s.reduce == Reduce::Min ? "ff_minimum(a, b)"
                                                  : "a + b";
  const char* identity = s.reduce == Reduce::Max   ? "__uint_as_float(0xff800000u)"  // -inf
                         : s.reduce == Reduce::Min ? "__uint_as_float(0x7f800000u)"  // +inf
                                                   : "0.0f";
  std::ostringstream os;
  os << "  // The block reduction ("
     << (s.reduce == Reduce::Max    ? "amax"
         : s.reduce == Reduce::Min  ? "amin"
         : s.reduce == Reduce::Mean ? "mean"
                                    : "sum")
     << " over blocks of " << s.reduce_block << (s.reduce_rows ? " columns" : " rows")
     << "): its identity and how two values combine, NaN-propagating as ATen's.\n"
     << "  __device__ __forceinline__ static float identity() { return " << identity << "; }\n"
     << "  __device__ __forceinline__ static float combine(float a, float b) { return " << combine << "; }\n";
  return os.str();
}

std::string gemm_reduction_scale(const fusion::GemmSpec& s) {
  return s.reduce == fusion::GemmSpec::Reduce::Mean ? f32_literal(1.0 / s.reduce_block) : "1.0f";
}

KernelSource generate_gemm(const fusion::Group& group, const fusion::GemmSpec& s, int id, const Target& target,
                           const GemmTile* tile) {
  const GemmTile t = tile ? *tile : choose_gemm_tile(s, target.sm_count);
  const std::string el = cutlass_element(s.dtype);
  const bool f32 = s.dtype == DType::f32;
  const bool split = f32 && !s.tf32;  // 3xTF32
  const std::string math = split ? "3xtf32" : f32 ? "tf32" : std::string(dtype_name(s.dtype));
  KernelSource ks;
  const Value* source_input =
      gemm_signature(ks, group, s, math + "_" + std::to_string(t.m) + "x" + std::to_string(t.n), id);
  using Source = fusion::GemmSpec::Source;
  const Node& node = *group.nodes.front();
  const bool addmm = node.op == Op::Addmm;
  const size_t n_epilogue = group.nodes.size() - 1;
  ks.cutlass = true;
  ks.block = t.threads();
  ks.unroll = 1;
  ks.grid[0] = (s.m + t.m - 1) / t.m;
  ks.grid[1] = (s.n + t.n - 1) / t.n;
  ks.grid[2] = s.batch;
  ks.items = ks.grid[0] * ks.grid[1] * ks.grid[2];
  const bool reduce = s.reduce != fusion::GemmSpec::Reduce::None;
  if (reduce && s.dtype != DType::f32) throw IRError("gemm codegen: block reductions are f32 only");
  ks.shared_bytes = reduce ? sm80_reduce_shared_bytes(t) : t.shared_bytes(s.dtype);
  ks.align_bytes = s.alignment * dtype_size(s.dtype);
  ks.vector_width = s.alignment;

  std::ostringstream os;
  os << "// Generated by fuseforge: " << ks.name << "\n";
  for (const Node* n : group.nodes) os << "//   " << print_node(*n) << "\n";
  os << "// batch " << s.batch << ", M " << s.m << ", N " << s.n << ", K " << s.k << "; tile " << t.m << "x" << t.n
     << "x" << t.k << ", warp " << t.warp_m << "x" << t.warp_n << ", " << t.stages << " stages, "
     << (split ? "3xTF32 (fp32 accuracy)"
         : f32 ? "TF32 (opt-in precision), f32 accumulate"
               : "f32 accumulate")
     << "\n";
  ks.includes = {"#include <cutlass/cutlass.h>",
                 "#include <cutlass/numeric_types.h>",
                 "#include <cutlass/gemm/kernel/default_gemm.h>",
                 "#include <cutlass/gemm/kernel/gemm_batched.h>",
                 "#include <cutlass/epilogue/thread/linear_combination.h>",
                 "#include <cutlass/gemm/threadblock/threadblock_swizzle.h>"};
  if (reduce) ks.includes.push_back("#include <cutlass/epilogue/threadblock/epilogue_with_visitor.h>");
  os << cuda_prelude();
  if (!f32) os << cuda_half_prelude();

  os << "\nnamespace {\n"
     << "using Element = " << el << ";\n"
     << "// Per element: the matmul's value, then " << n_epilogue << " fused pointwise op(s).\n"
     << "struct EpilogueOp {\n"
     << "  using ElementOutput = Element;\n  using ElementSource = Element;\n  using ElementAccumulator = float;\n"
     << "  using ElementCompute = float;\n  using ElementScalar = float;\n  using ElementC = Element;\n"
     << "  using ElementD = Element;\n"
     << "  static int const kCount = " << s.alignment << ";\n"
     << "  static const cutlass::epilogue::thread::ScaleType::Kind kScale = "
        "cutlass::epilogue::thread::ScaleType::Default;\n"
     << "  using FragmentOutput = cutlass::Array<Element, kCount>;\n  using FragmentSource = FragmentOutput;\n"
     << "  using FragmentAccumulator = cutlass::Array<float, kCount>;\n"
     << "  using FragmentCompute = cutlass::Array<float, kCount>;\n"
     << "  static cutlass::FloatRoundStyle const kRound = cutlass::FloatRoundStyle::round_to_nearest;\n"
     << "  struct Params {\n    float alpha, beta;\n"
     << "    CUTLASS_HOST_DEVICE Params() : alpha(1.0f), beta(0.0f) {}\n"
     << "    CUTLASS_HOST_DEVICE Params(float a, float b) : alpha(a), beta(b) {}\n  };\n"
     << "  float alpha_, beta_;\n"
     << "  CUTLASS_HOST_DEVICE explicit EpilogueOp(Params const& p) : alpha_(p.alpha), beta_(p.beta) {}\n"
     << "  CUTLASS_HOST_DEVICE bool is_source_needed() const { return beta_ != 0.0f; }\n"
     << "  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {}\n"
     << gemm_epilogue_apply(group, s, source_input)
     << "  CUTLASS_DEVICE FragmentOutput operator()(FragmentAccumulator const& acc, FragmentSource const& src) const "
        "{\n"
     << "    FragmentOutput out;\n    CUTLASS_PRAGMA_UNROLL\n"
     << "    for (int i = 0; i < kCount; ++i) out[i] = Element("
     << (s.source == Source::EpilogueInput ? "apply(alpha_ * acc[i], float(src[i]))"
                                           : "apply(fmaf(alpha_, acc[i], beta_ * float(src[i])), 0.0f)")
     << ");\n"
     << "    return out;\n  }\n"
     << "  CUTLASS_DEVICE FragmentOutput operator()(FragmentAccumulator const& acc) const {\n"
     << "    FragmentOutput out;\n    CUTLASS_PRAGMA_UNROLL\n"
     << "    for (int i = 0; i < kCount; ++i) out[i] = Element(apply(alpha_ * acc[i], 0.0f));\n"
     << "    return out;\n  }\n};\n"
     << "using Swizzle = cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle;\n"
     << "using Default = cutlass::gemm::kernel::DefaultGemm<\n"
     << "    Element, " << layout(s.a.row_major) << ", " << s.alignment << ",\n"
     << "    Element, " << layout(s.b.row_major) << ", " << s.alignment << ",\n"
     << "    Element, cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,\n"
     << "    cutlass::gemm::GemmShape<" << t.m << ", " << t.n << ", " << t.k << ">, cutlass::gemm::GemmShape<"
     << t.warp_m << ", " << t.warp_n << ", " << t.k << ">, cutlass::gemm::GemmShape<16, 8, " << (f32 ? 8 : 16) << ">,\n"
     << "    EpilogueOp, Swizzle, " << t.stages << ", false, "
     << (split ? "cutlass::arch::OpMultiplyAddFastF32" : "cutlass::arch::OpMultiplyAdd") << ">;\n";
  if (reduce) {
    os << sm80_reduce_kernel(ks, s, t, addmm, source_input != nullptr);
    ks.source = os.str();
    return ks;
  }
  os << "using Gemm = cutlass::gemm::kernel::GemmBatched<Default::Mma, Default::Epilogue, Swizzle>;\n"
     << "static_assert(sizeof(Gemm::SharedStorage) <= " << ks.shared_bytes << ", \"shared memory size\");\n"
     << "static_assert(Gemm::kThreadCount == " << ks.block << ", \"block size\");\n"
     << "}  // namespace\n\n";
  // The sizes and strides are launch arguments (KernelSource::constants), as
  // CUTLASS's own Params come from the host: every GEMM of this template, tile
  // and epilogue shares the code, and one compile, whatever its shape (a
  // network's stages, its attention's batches). The grid's tile counts are
  // the launch's own.
  const bool own_source = s.source == Source::None;
  ks.constants = {s.m,
                  s.n,
                  s.k,
                  s.a.ld,
                  s.a.batch_stride,
                  s.b.ld,
                  s.b.batch_stride,
                  own_source ? s.n : s.ldc,
                  own_source ? s.m * s.n : s.batch_stride_c,
                  s.batch};
  os << "FF_EXTERN_C __global__ void __launch_bounds__(" << ks.block << ") " << ks.name
     << "(Element* out, const Element* a, const Element* b" << (addmm ? ", const Element* bias" : "")
     << (source_input ? ", const Element* source" : "")
     << ",\n    long long m, long long n, long long k, long long lda, long long batch_stride_a, long long ldb,\n"
     << "    long long batch_stride_b, long long ldc, long long batch_stride_c, long long batch) {\n"
     << "  extern __shared__ __align__(16) unsigned char smem[];\n"
     << "  const cutlass::gemm::GemmCoord problem(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k));\n"
     << "  const Gemm::Params params(problem,\n"
     << "      cutlass::gemm::GemmCoord(static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), 1),\n"
     << "      {const_cast<Element*>(a), lda}, batch_stride_a,\n"
     << "      {const_cast<Element*>(b), ldb}, batch_stride_b,\n"
     << "      {"
     << (s.source == Source::Bias            ? "const_cast<Element*>(bias)"
         : s.source == Source::EpilogueInput ? "const_cast<Element*>(source)"
                                             : "out")
     << ", ldc}, batch_stride_c,\n"
     << "      {out, n}, m * n,\n"
     << "      {" << f32_literal(s.alpha) << ", "
     << f32_literal(s.source == Source::Bias            ? s.beta
                    : s.source == Source::EpilogueInput ? 1.0
                                                        : 0.0)
     << "}, static_cast<int>(batch));\n"
     << "  Gemm op;\n"
     << "  op(params, *reinterpret_cast<Gemm::SharedStorage*>(smem));\n"
     << "}\n";
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
