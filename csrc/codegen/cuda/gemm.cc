#include "codegen/cuda/gemm.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace ff::codegen {

namespace {

std::string cutlass_element(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f16: return "cutlass::half_t";
    case DType::bf16: return "cutlass::bfloat16_t";
    default: throw IRError("gemm codegen: unsupported dtype " + std::string(dtype_name(t)));
  }
}

std::string layout(bool row_major) { return row_major ? "cutlass::layout::RowMajor" : "cutlass::layout::ColumnMajor"; }

std::string float_literal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", static_cast<float>(v));
  std::string r = buf;
  if (r.find_first_of(".e") == std::string::npos) r.insert(r.size() - 1, ".0");
  return r;
}

// Share of peak a tile reaches per multiprocessor (measured CUTLASS behaviour:
// smaller tiles reload operands more often).
double tile_efficiency(const GemmTile& t) { return t.m * t.n >= 128 * 128 ? 1.0 : t.m * t.n >= 128 * 64 ? 0.85 : 0.65; }

}  // namespace

int GemmTile::shared_bytes(DType t) const { return stages * (m * k + k * n) * dtype_size(t); }

std::vector<GemmTile> gemm_tiles(DType t) {
  const int k = t == DType::f32 ? 16 : 32;
  return {{128, 128, k, 64, 64, 4}, {128, 64, k, 64, 32, 4}, {64, 64, k, 32, 32, 5}};
}

GemmTile choose_gemm_tile(const fusion::GemmSpec& s, int sm_count) {
  const std::vector<GemmTile> tiles = gemm_tiles(s.dtype);
  GemmTile best = tiles.front();
  double best_cost = INFINITY;
  for (const GemmTile& t : tiles) {
    // Two resident blocks per multiprocessor (register-bound for every candidate).
    const int64_t blocks = ((s.m + t.m - 1) / t.m) * ((s.n + t.n - 1) / t.n) * s.batch;
    const int64_t waves = (blocks + 2 * sm_count - 1) / (2 * sm_count);
    const double cost = static_cast<double>(waves) * t.m * t.n / tile_efficiency(t);
    if (cost < best_cost) {
      best_cost = cost;
      best = t;
    }
  }
  return best;
}

KernelSource generate_gemm(const fusion::PointwiseGroup& group, const fusion::GemmSpec& s, int id) {
  if (group.nodes.size() != 1) throw IRError("gemm codegen: expected one matmul node");
  const Node& node = *group.nodes.front();
  const GemmTile t = choose_gemm_tile(s);
  const std::string el = cutlass_element(s.dtype);
  const bool f32 = s.dtype == DType::f32;
  const std::string precision = f32 ? "3xtf32" : std::string(dtype_name(s.dtype));

  KernelSource ks;
  ks.name = "ff_gemm_" + std::string(op_name(node.op)) + "_" + precision + "_" + std::to_string(id);
  ks.outputs = {node.result()->name};
  ks.inputs = {node.input(node.op == Op::Addmm ? 1 : 0)->name, node.input(node.op == Op::Addmm ? 2 : 1)->name};
  const bool addmm = node.op == Op::Addmm;
  if (addmm) ks.inputs.push_back(node.input(0)->name);  // passed even when beta = 0 (the ATen fallback reads it)
  ks.cutlass = true;
  ks.block = 128;  // four warps: every candidate tile is 2x2 warp tiles
  ks.unroll = 1;
  ks.grid[0] = (s.m + t.m - 1) / t.m;
  ks.grid[1] = (s.n + t.n - 1) / t.n;
  ks.grid[2] = s.batch;
  ks.items = ks.grid[0] * ks.grid[1] * ks.grid[2];
  ks.shared_bytes = t.shared_bytes(s.dtype);
  ks.align_bytes = s.alignment * dtype_size(s.dtype);
  ks.vector_width = s.alignment;

  std::ostringstream os;
  os << "// " << ks.name << ": " << print_node(node) << "\n"
     << "// batch " << s.batch << ", M " << s.m << ", N " << s.n << ", K " << s.k << "; tile " << t.m << "x" << t.n
     << "x" << t.k << ", warp " << t.warp_m << "x" << t.warp_n << ", " << t.stages << " stages, "
     << (f32 ? "3xTF32 (fp32 accuracy)" : "f32 accumulate") << "\n";
  os << "#include <cutlass/cutlass.h>\n"
        "#include <cutlass/numeric_types.h>\n"
        "#include <cutlass/gemm/kernel/default_gemm.h>\n"
        "#include <cutlass/gemm/kernel/gemm_batched.h>\n"
        "#include <cutlass/epilogue/thread/linear_combination.h>\n"
        "#include <cutlass/gemm/threadblock/threadblock_swizzle.h>\n\n";
  os << "namespace {\n"
     << "using Element = " << el << ";\n"
     << "using Swizzle = cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle;\n"
     << "using Epilogue = cutlass::epilogue::thread::LinearCombination<Element, " << s.alignment << ", float, float>;\n"
     << "using Default = cutlass::gemm::kernel::DefaultGemm<\n"
     << "    Element, " << layout(s.a.row_major) << ", " << s.alignment << ",\n"
     << "    Element, " << layout(s.b.row_major) << ", " << s.alignment << ",\n"
     << "    Element, cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,\n"
     << "    cutlass::gemm::GemmShape<" << t.m << ", " << t.n << ", " << t.k << ">, cutlass::gemm::GemmShape<"
     << t.warp_m << ", " << t.warp_n << ", " << t.k << ">, cutlass::gemm::GemmShape<16, 8, " << (f32 ? 8 : 16)
     << ">,\n"
     << "    Epilogue, Swizzle, " << t.stages << ", false, "
     << (f32 ? "cutlass::arch::OpMultiplyAddFastF32" : "cutlass::arch::OpMultiplyAdd") << ">;\n"
     << "using Gemm = cutlass::gemm::kernel::GemmBatched<Default::Mma, Default::Epilogue, Swizzle>;\n"
     << "static_assert(sizeof(Gemm::SharedStorage) <= " << ks.shared_bytes << ", \"shared memory size\");\n"
     << "static_assert(Gemm::kThreadCount == " << ks.block << ", \"block size\");\n"
     << "}  // namespace\n\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << ks.block << ") " << ks.name
     << "(Element* out, const Element* a, const Element* b" << (addmm ? ", const Element* c" : "") << ") {\n"
     << "  extern __shared__ __align__(16) unsigned char smem[];\n"
     << "  const cutlass::gemm::GemmCoord problem(" << s.m << ", " << s.n << ", " << s.k << ");\n"
     << "  const Gemm::Params params(problem, cutlass::gemm::GemmCoord(" << ks.grid[0] << ", " << ks.grid[1]
     << ", 1),\n"
     << "      {const_cast<Element*>(a), " << s.a.ld << "}, " << s.a.batch_stride << "LL,\n"
     << "      {const_cast<Element*>(b), " << s.b.ld << "}, " << s.b.batch_stride << "LL,\n"
     << "      {" << (s.has_source ? "const_cast<Element*>(c)" : "out") << ", " << (s.has_source ? s.ldc : s.n)
     << "}, " << (s.has_source ? 0 : s.m * s.n) << "LL,\n"
     << "      {out, " << s.n << "}, " << s.m * s.n << "LL,\n"
     << "      {" << float_literal(s.alpha) << ", " << float_literal(s.has_source ? s.beta : 0.0) << "}, " << s.batch
     << ");\n"
     << "  Gemm op;\n"
     << "  op(params, *reinterpret_cast<Gemm::SharedStorage*>(smem));\n"
     << "}\n";
  ks.source = os.str();
  return ks;
}

}  // namespace ff::codegen
