#include "codegen/cuda/pointwise.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "codegen/cuda/op_expr.h"
#include "codegen/cuda/prelude.h"
#include "ir/type_rules.h"

namespace ff::codegen {

namespace {

std::string storage_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::f16: return "ff_half";
    case DType::bf16: return "ff_bf16";
    case DType::i64: return "long long";
    case DType::i32: return "int";
    case DType::boolean: return "bool";
  }
  return "?";
}
std::string compute_type(DType t) { return storage_type(compute_dtype(t)); }

// The dtype a node computes in: its operands' common dtype for comparisons,
// bool for logical ops, its result's otherwise (type_rules.h), as opmath.
DType op_compute_dtype(const Node& n) { return compute_dtype(operand_dtype(n)); }

// A tensor operand of the kernel, described over the iteration dims.
struct Access {
  std::string param;      // kernel parameter name
  DType dtype;
  Shape strides;          // per iteration dim (0 where broadcast)
  bool is_output = false;
};

struct Layout {
  Shape sizes;                    // collapsed iteration sizes, outermost first
  std::vector<Shape> strides;     // per access, per collapsed dim
};

// Orders the iteration dims by the first output's strides (outermost first),
// drops size-1 dims and merges neighbours that are contiguous for every access.
Layout collapse(const Shape& shape, const std::vector<Access>& acc) {
  size_t rank = shape.size();
  std::vector<size_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  const Shape& ref = acc.front().strides;
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return ref[a] > ref[b]; });
  Layout l;
  l.strides.resize(acc.size());
  for (size_t d : perm) {
    if (shape[d] == 1) continue;
    bool merge = !l.sizes.empty();
    for (size_t t = 0; merge && t < acc.size(); ++t)
      merge = l.strides[t].back() == acc[t].strides[d] * shape[d];
    if (merge) {
      l.sizes.back() *= shape[d];
      for (size_t t = 0; t < acc.size(); ++t) l.strides[t].back() = acc[t].strides[d];
    } else {
      l.sizes.push_back(shape[d]);
      for (size_t t = 0; t < acc.size(); ++t) l.strides[t].push_back(acc[t].strides[d]);
    }
  }
  if (l.sizes.empty()) {  // a single element
    l.sizes.push_back(1);
    for (auto& s : l.strides) s.push_back(0);
  }
  return l;
}

// Emits the group's nodes as one `const` temporary each, in compute types,
// rounding to f16/bf16 where the result dtype is 16-bit (as eager stores it).
// `expr_of` maps the group's inputs to expressions and receives its results.
void emit_nodes(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& ind,
                const std::unordered_map<const Value*, std::string>& scalar_param,
                std::unordered_map<const Value*, std::string>& expr_of, int& tmp, const std::string& prefix) {
  for (Node* n : nodes) {
    DType c = op_compute_dtype(*n);
    std::vector<std::string> args;
    for (size_t i = 0; i < n->operands.size(); ++i) {
      const Operand& o = n->operands[i];
      // where's condition takes no part in promotion: it is a truth value
      DType want = promotes_operand(n->op, i) ? c : DType::boolean;
      if (!o.is_value()) {
        args.push_back(cuda_literal(o.literal, want));
        continue;
      }
      const std::string& e = expr_of.at(o.value);
      DType have = compute_dtype(o.value->type.dtype);
      if (scalar_param.count(o.value) != 0) have = DType::f64;
      args.push_back(have == want ? e : "static_cast<" + storage_type(want) + ">(" + e + ")");
    }
    DType r = n->result()->type.dtype;
    std::string e = op_expr(*n, args, c);
    if (compute_dtype(r) != c) e = "static_cast<" + compute_type(r) + ">(" + e + ")";
    if (r == DType::f16) e = "ff_round_f16(" + e + ")";
    if (r == DType::bf16) e = "ff_round_bf16(" + e + ")";
    std::string t = prefix + std::to_string(tmp++);
    os << ind << "const " << compute_type(r) << " " << t << " = " << e << ";  // " << op_name(n->op) << "\n";
    expr_of[n->result()] = t;
  }
}

void emit_body(std::ostringstream& os, const fusion::Group& g, const std::string& ind,
               const std::unordered_map<const Value*, std::string>& scalar_param,
               std::unordered_map<const Value*, std::string>& expr_of) {
  int tmp = 0;
  emit_nodes(os, g.nodes, ind, scalar_param, expr_of, tmp, "t");
}

// The index type for a kernel: 32-bit unless some access can reach an
// offset of 2^31 (the last element of a vector of `vec` included).
std::string index_type(const Layout& l, size_t num_access, int64_t n_elems, int vec) {
  int64_t max_offset = n_elems;
  for (size_t t = 0; t < num_access; ++t) {
    int64_t off = 0;
    for (size_t d = 0; d < l.sizes.size(); ++d) off += (l.sizes[d] - 1) * std::llabs(l.strides[t][d]);
    max_offset = std::max(max_offset, off + vec);
  }
  return max_offset >= (int64_t{1} << 31) ? "long long" : "int";
}

// The kernel's header comment (its IR), the prelude and the signature up to
// the opening brace: a pointer per access (outputs first), a double per scalar.
void emit_head(std::ostringstream& os, const KernelSource& ks, const fusion::Group& g,
               const std::vector<Access>& acc, bool half, const std::string& what) {
  os << "// Generated by fuseforge: " << what << "\n";
  for (Node* n : g.nodes) os << "//   " << print_node(*n) << "\n";
  os << cuda_prelude();
  if (half) os << cuda_half_prelude();
  os << "\nFF_EXTERN_C __global__ void __launch_bounds__(" << ks.block * ks.block_y << ") " << ks.name << "(";
  for (size_t t = 0; t < acc.size(); ++t)
    os << (t ? ", " : "") << (acc[t].is_output ? "" : "const ") << storage_type(acc[t].dtype) << "* __restrict__ "
       << acc[t].param;
  for (size_t i = 0; i < ks.scalars.size(); ++i) os << (acc.empty() && i == 0 ? "" : ", ") << "double s" << i;
  os << ") {\n";
}

// `const bool <name>`: whether each of `accesses`' pointers is aligned to
// vectors of `vec` elements (views may start anywhere); checked once per thread.
void emit_alignment_flag(std::ostringstream& os, const std::string& name, int vec,
                         const std::vector<const Access*>& accesses) {
  os << "  const bool " << name << " =";
  for (size_t k = 0; k < accesses.size(); ++k)
    os << (k ? " &&" : "") << " (reinterpret_cast<unsigned long long>(" << accesses[k]->param << ") % "
       << vec * dtype_size(accesses[k]->dtype) << " == 0)";
  os << ";\n";
}

// `vec` elements at pointer expression `at` into `dest` (an expression of
// the lane variable `lane`): one vector load where `aligned` holds, one
// element at a time otherwise.
void emit_vector_load(std::ostringstream& os, const std::string& ind, const std::string& aligned, DType dtype,
                      int vec, const std::string& at, const std::string& lane, const std::string& dest) {
  const std::string v = "ff_vec<" + storage_type(dtype) + ", " + std::to_string(vec) + ">";
  const std::string lanes = "for (int " + lane + " = 0; " + lane + " < " + std::to_string(vec) + "; ++" + lane + ") ";
  os << ind << "if (" << aligned << ") {\n" << ind << "  const " << v << " ff_v = *reinterpret_cast<const " << v
     << "*>(" << at << ");\n";
  os << "#pragma unroll\n" << ind << "  " << lanes << dest << " = ff_load(ff_v.v[" << lane << "]);\n";
  os << ind << "} else {\n#pragma unroll\n" << ind << "  " << lanes << dest << " = ff_load((" << at << ")[" << lane
     << "]);\n" << ind << "}\n";
}

// `value` (an expression of the lane variable `lane`) for `vec` elements at
// pointer expression `at`: one vector store where `aligned` holds, one
// element at a time otherwise.
void emit_vector_store(std::ostringstream& os, const std::string& ind, const std::string& aligned, DType dtype,
                       int vec, const std::string& at, const std::string& lane, const std::string& value) {
  const std::string st = storage_type(dtype), v = "ff_vec<" + st + ", " + std::to_string(vec) + ">";
  const std::string lanes = "for (int " + lane + " = 0; " + lane + " < " + std::to_string(vec) + "; ++" + lane + ") ";
  os << ind << "if (" << aligned << ") {\n" << ind << "  " << v << " ff_v;\n";
  os << "#pragma unroll\n" << ind << "  " << lanes << "ff_v.v[" << lane << "] = ff_store<" << st << ">(" << value
     << ");\n";
  os << ind << "  *reinterpret_cast<" << v << "*>(" << at << ") = ff_v;\n";
  os << ind << "} else {\n#pragma unroll\n" << ind << "  " << lanes << "(" << at << ")[" << lane << "] = ff_store<"
     << st << ">(" << value << ");\n" << ind << "}\n";
}

// A transposing group's tile of the (dt, inner) plane and its vector widths.
struct Tile {
  int dt = 32, inner = 32;     // extents along dt and along inner
  int vec_dt = 1, vec_inner = 1;  // elements per global access along each
};
constexpr int kTileThreads = 256;

// The largest of 4, 2, 1 that divides `size` and every stride (but `unit`'s)
// of the accesses `uses` selects: their vectors then start at multiples of
// it, so one alignment check of the base pointers covers them all.
template <typename Uses>
int vector_width(const Layout& l, size_t unit, Uses uses) {
  for (int v : {4, 2}) {
    bool ok = l.sizes[unit] % v == 0;
    for (size_t t = 0; t < l.strides.size() && ok; ++t)
      if (uses(t))
        for (size_t d = 0; d < l.sizes.size(); ++d)
          if (d != unit && l.strides[t][d] % v != 0) ok = false;
    if (ok) return v;
  }
  return 1;
}

// The dim along which a transposing group's inputs are unit-stride, when
// some input is unit-stride along a dim other than the innermost one (the
// output's). Reading such an input in output order touches one element per
// 32-byte sector; staging tiles through shared memory keeps reads and writes
// coalesced. nullopt when no input transposes or the tiling does not fit.
std::optional<size_t> transpose_dim(const Layout& l, const std::vector<Access>& acc) {
  const size_t inner = l.sizes.size() - 1;
  std::optional<size_t> dt;
  for (const Access& a : acc) {
    size_t t = &a - acc.data();
    int64_t s = l.strides[t][inner];
    if (a.is_output) {
      if (s != 1) return std::nullopt;
      continue;
    }
    if (s == 0 || s == 1) continue;
    std::optional<size_t> unit;
    for (size_t d = 0; d < inner; ++d)
      if (l.strides[t][d] == 1) unit = d;
    if (!unit || (dt && *dt != *unit)) return std::nullopt;
    dt = unit;
  }
  if (!dt) return std::nullopt;
  int64_t others = 1;
  for (size_t d = 0; d < inner; ++d)
    if (d != *dt) others *= l.sizes[d];
  if (others > 65535 || (l.sizes[*dt] + 31) / 32 > 65535) return std::nullopt;
  return dt;
}

// A transposing group's tile: about 4096 elements, as wide along inner as
// its extent allows up to 128 (each row of the output written in one run:
// where rows are not 32-byte aligned, as in the conv seed's 126x126 images,
// the partial sectors at a run's ends cost the more the shorter the runs),
// the rest along dt; within 48 KiB of shared memory. On an H200, a tile of
// 32 along dt and 128 along inner took 508 us on the conv seed's epilogue
// against 538 for 32x32 and 640 for 64x32; where inner is short (12
// channels, a channels-last copy) 128 along dt took 82 us against 136 for 32x32.
Tile choose_tile(const Layout& l, size_t dt, const std::vector<Access>& acc, const std::function<bool(size_t)>& transposed) {
  const size_t inner = l.sizes.size() - 1;
  auto pow2_at_least = [](int64_t n) {
    int p = 1;
    while (p < n && p < 128) p *= 2;
    return p;
  };
  Tile t;
  t.vec_dt = vector_width(l, dt, transposed);
  t.vec_inner = vector_width(l, inner, [&](size_t a) { return l.strides[a][inner] == 1; });
  t.inner = std::max(pow2_at_least(l.sizes[inner]), t.vec_inner);
  t.dt = std::max(std::min(pow2_at_least(l.sizes[dt]), std::max(32, 4096 / t.inner)), t.vec_dt);
  size_t staged = 0;  // bytes of shared memory per (padded) tile element
  for (size_t a = 0; a < acc.size(); ++a)
    if (transposed(a)) staged += dtype_size(compute_dtype(acc[a].dtype));
  while (static_cast<size_t>(t.inner) * (t.dt + 1) * staged > 48 * 1024 && t.dt > t.vec_dt) t.dt /= 2;
  while (static_cast<size_t>(t.inner) * (t.dt + 1) * staged > 48 * 1024 && t.inner > t.vec_inner) t.inner /= 2;
  return t;
}

// A transposing group: a block of 256 threads (32x8) takes a tile of the
// (dt, inner) plane; blockIdx.z enumerates the remaining dims. Transposed
// inputs are read along dt (their unit stride) in vectors of vec_dt into a
// shared-memory tile, then every thread takes vec_inner consecutive elements
// along inner (the output's unit stride): the other inputs in vectors there
// (or broadcast), the transposed ones from the tile's column, and stores a
// vector. Vectors need their base pointers aligned, checked once per thread;
// otherwise the same loops run element by element.
void generate_tiled(KernelSource& ks, const fusion::Group& g, const std::vector<Access>& acc,
                    const std::unordered_map<const Value*, size_t>& access_of,
                    const std::unordered_map<const Value*, std::string>& scalar_param, const Layout& l, size_t dt,
                    bool half, int id) {
  const size_t inner = l.sizes.size() - 1;
  std::vector<size_t> others;
  for (size_t d = 0; d < inner; ++d)
    if (d != dt) others.push_back(d);
  auto is_transposed = [&](size_t t) { return !acc[t].is_output && l.strides[t][inner] != 0 && l.strides[t][inner] != 1; };
  const Tile tile = choose_tile(l, dt, acc, is_transposed);
  const std::string index_t = index_type(l, acc.size(), numel(g.shape), std::max(tile.vec_dt, tile.vec_inner));
  ks.vector_width = 1;
  ks.items = numel(g.shape);
  ks.block = 32;
  ks.block_y = kTileThreads / 32;
  ks.grid[0] = (l.sizes[inner] + tile.inner - 1) / tile.inner;
  ks.grid[1] = (l.sizes[dt] + tile.dt - 1) / tile.dt;
  ks.grid[2] = 1;
  for (size_t d : others) ks.grid[2] *= l.sizes[d];

  std::ostringstream os;
  emit_head(os, ks, g, acc, half,
            "pointwise group " + std::to_string(id) + "; transposing " + std::to_string(tile.dt) + "x" +
                std::to_string(tile.inner) + " tiles of collapsed dims " + std::to_string(dt) + " and " +
                std::to_string(inner) + ", vectors of " + std::to_string(tile.vec_dt) + " and " +
                std::to_string(tile.vec_inner) + " along them");
  os << "  typedef " << index_t << " index_t;\n";
  // Rows along inner, columns along dt; a row is padded by one element so
  // that a column (phase 2) spreads over the banks.
  for (size_t t = 0; t < acc.size(); ++t)
    if (is_transposed(t))
      os << "  __shared__ " << compute_type(acc[t].dtype) << " tile_" << acc[t].param << "[" << tile.inner << "]["
         << tile.dt + 1 << "];\n";
  os << "  const int tid = threadIdx.y * 32 + threadIdx.x;\n";
  // Coordinates of the block's tile: the outer dims from blockIdx.z.
  os << "  index_t rest = blockIdx.z;\n";
  for (size_t k = others.size(); k-- > 0;) {
    size_t d = others[k];
    if (k == 0) os << "  const index_t i" << d << " = rest;\n";
    else os << "  const index_t i" << d << " = rest % " << l.sizes[d] << "; rest /= " << l.sizes[d] << ";\n";
  }
  // (Named origin_*: the body's temporaries are t0, t1, ...)
  os << "  const index_t origin_" << dt << " = static_cast<index_t>(blockIdx.y) * " << tile.dt << ", origin_" << inner
     << " = static_cast<index_t>(blockIdx.x) * " << tile.inner << ";\n";
  auto offset = [&](size_t t, const std::string& a, const std::string& b) {
    std::string e;
    for (size_t d = 0; d < l.sizes.size(); ++d) {
      int64_t s = l.strides[t][d];
      if (s == 0) continue;
      std::string c = d == dt ? a : d == inner ? b : "i" + std::to_string(d);
      e += (e.empty() ? "" : " + ") + ("(" + c + ")") + (s == 1 ? "" : " * " + std::to_string(s));
    }
    return e.empty() ? std::string("0") : e;
  };
  std::vector<const Access*> along_dt, along_inner;  // the accesses vectorized along each
  for (const Access& a : acc)
    (is_transposed(&a - acc.data()) ? along_dt : along_inner).push_back(&a);
  along_inner.erase(std::remove_if(along_inner.begin(), along_inner.end(),
                                   [&](const Access* a) { return l.strides[a - acc.data()][inner] != 1; }),
                    along_inner.end());
  if (tile.vec_dt > 1) emit_alignment_flag(os, "aligned_dt", tile.vec_dt, along_dt);
  if (tile.vec_inner > 1) emit_alignment_flag(os, "aligned_inner", tile.vec_inner, along_inner);
  // A loop over this thread's vectors of the tile: `per_row` vectors of `vec`
  // along one dim per row of the other; constant trip counts, so the loops
  // unroll and all of a thread's loads are in flight together.
  auto loop = [&](int rows, int per_row) {
    const int vectors = rows * per_row, trips = (vectors + kTileThreads - 1) / kTileThreads;
    os << "#pragma unroll\n  for (int k = 0; k < " << trips << "; ++k) {\n";
    os << "    const int v = tid + " << kTileThreads << " * k;\n";
    if (vectors % kTileThreads != 0) os << "    if (v >= " << vectors << ") break;\n";
    os << "    const int row = v / " << per_row << ", col = v % " << per_row << ";\n";
  };
  // Phase 1: the transposed inputs into their tiles, vectors along dt.
  const int vd = tile.vec_dt, vi = tile.vec_inner;
  loop(tile.inner, tile.dt / vd);
  os << "    const index_t a = origin_" << dt << " + col * " << vd << ", b = origin_" << inner << " + row;\n";
  os << "    if (a < " << l.sizes[dt] << " && b < " << l.sizes[inner] << ") {\n";
  for (size_t t = 0; t < acc.size(); ++t) {
    if (!is_transposed(t)) continue;
    const std::string p = acc[t].param;
    if (vd == 1)
      os << "      tile_" << p << "[row][col] = ff_load(" << p << "[" << offset(t, "a", "b") << "]);\n";
    else
      emit_vector_load(os, "      ", "aligned_dt", acc[t].dtype, vd, p + " + " + offset(t, "a", "b"), "j",
                       "tile_" + p + "[row][col * " + std::to_string(vd) + " + j]");
  }
  os << "    }\n  }\n  __syncthreads();\n";
  // Phase 2: vectors along inner; the fused body per element.
  loop(tile.dt, tile.inner / vi);
  os << "    const index_t a = origin_" << dt << " + row, b = origin_" << inner << " + col * " << vi << ";\n";
  os << "    if (a >= " << l.sizes[dt] << " || b >= " << l.sizes[inner] << ") continue;\n";
  std::unordered_map<const Value*, std::string> expr_of;
  for (const Value* v : g.inputs) {
    auto sp = scalar_param.find(v);
    if (sp != scalar_param.end()) {
      expr_of[v] = sp->second;
      continue;
    }
    size_t t = access_of.at(v);
    const std::string p = acc[t].param, x = "x_" + p, ct = compute_type(acc[t].dtype);
    if (l.strides[t][inner] == 0) {  // broadcast along inner: one load
      os << "    const " << ct << " " << x << " = ff_load(" << p << "[" << offset(t, "a", "b") << "]);\n";
      expr_of[v] = x;
      continue;
    }
    os << "    " << ct << " " << x << "[" << vi << "];\n";
    expr_of[v] = x + "[j]";
    if (is_transposed(t)) {
      os << "#pragma unroll\n    for (int j = 0; j < " << vi << "; ++j) " << x << "[j] = tile_" << p << "[col * " << vi
         << " + j][row];\n";
    } else if (vi == 1) {
      os << "    " << x << "[0] = ff_load(" << p << "[" << offset(t, "a", "b") << "]);\n";
    } else {
      emit_vector_load(os, "    ", "aligned_inner", acc[t].dtype, vi, p + " + " + offset(t, "a", "b"), "j", x + "[j]");
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    os << "    " << compute_type(acc[i].dtype) << " y_out" << i << "[" << vi << "];\n";
  os << "#pragma unroll\n    for (int j = 0; j < " << vi << "; ++j) {\n";
  emit_body(os, g, "      ", scalar_param, expr_of);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    os << "      y_out" << i << "[j] = " << expr_of.at(g.outputs[i]) << ";\n";
  os << "    }\n";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const std::string p = acc[i].param, y = "y_out" + std::to_string(i);
    if (vi == 1)
      os << "    " << p << "[" << offset(i, "a", "b") << "] = ff_store<" << storage_type(acc[i].dtype) << ">(" << y
         << "[0]);\n";
    else
      emit_vector_store(os, "    ", "aligned_inner", acc[i].dtype, vi, p + " + " + offset(i, "a", "b"), "j", y + "[j]");
  }
  os << "  }\n}\n";
  ks.source = os.str();
}

}  // namespace

KernelSource generate_pointwise(const fusion::Group& g, int id) {
  KernelSource ks;
  ks.name = fused_kernel_name("ff_pointwise", g.nodes, id);
  const Shape& shape = g.shape;

  // Kernel parameters and accesses: outputs first, then tensor inputs.
  std::vector<Access> acc;
  std::unordered_map<const Value*, size_t> access_of;
  std::unordered_map<const Value*, std::string> scalar_param;
  bool half = false;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Value* v = g.outputs[i];
    if (v->type.shape != shape) throw IRError("pointwise group output '%" + v->name + "' does not have the iteration shape");
    acc.push_back({"out" + std::to_string(i), v->type.dtype, v->type.strides, true});
    ks.outputs.push_back(v->name);
  }
  for (const Value* v : g.inputs) {
    if (v->is_input() && v->input_kind == InputKind::Scalar) {
      scalar_param[v] = "s" + std::to_string(ks.scalars.size());
      ks.scalars.push_back(v->name);
      continue;
    }
    access_of[v] = acc.size();
    acc.push_back({"in" + std::to_string(ks.inputs.size()), v->type.dtype, broadcast_strides(v->type, shape), false});
    ks.inputs.push_back(v->name);
  }
  for (auto& a : acc) half |= a.dtype == DType::f16 || a.dtype == DType::bf16;
  for (Node* n : g.nodes) half |= n->result()->type.dtype == DType::f16 || n->result()->type.dtype == DType::bf16;

  Layout l = collapse(shape, acc);
  const int64_t n_elems = numel(shape);
  const size_t inner = l.sizes.size() - 1;

  if (auto dt = transpose_dim(l, acc)) {
    generate_tiled(ks, g, acc, access_of, scalar_param, l, *dt, half, id);
    return ks;
  }

  // Vectorize when each access is unit-stride (a vector load) or 0-stride (one
  // scalar load per item) along the innermost dim, and every unit-stride access
  // keeps 4-element alignment across items (its outer strides are multiples of 4).
  int vec = 4;
  if (l.sizes[inner] % vec != 0) vec = 1;
  for (size_t t = 0; t < acc.size() && vec > 1; ++t) {
    int64_t s = l.strides[t][inner];
    if (s != 0 && s != 1) vec = 1;
    if (s == 1)
      for (size_t d = 0; d < inner; ++d)
        if (l.strides[t][d] % vec != 0) vec = 1;
  }
  ks.vector_width = vec;
  ks.items = n_elems / vec;

  const std::string index_t = index_type(l, acc.size(), n_elems, vec);
  std::ostringstream os;
  std::string what = "pointwise group " + std::to_string(id) + "; iteration space [";
  for (size_t d = 0; d < l.sizes.size(); ++d) what += (d ? "," : "") + std::to_string(l.sizes[d]);
  what += "] (the dims in out0's memory order, contiguous runs merged), " + std::to_string(vec) + " element(s) per item";
  emit_head(os, ks, g, acc, half, what);
  os << "  typedef " << index_t << " index_t;\n";
  os << "  constexpr index_t kItems = " << ks.items << ";\n";

  // Unit-stride accesses use vector loads/stores only where their pointers are aligned.
  std::vector<const Access*> vector_acc;
  if (vec > 1)
    for (size_t t = 0; t < acc.size(); ++t)
      if (l.strides[t][inner] == 1) vector_acc.push_back(&acc[t]);
  if (!vector_acc.empty()) emit_alignment_flag(os, "aligned", vec, vector_acc);
  // Each thread takes kUnroll items, blockDim.x apart (so every warp access
  // stays contiguous), and issues all their loads before any arithmetic: the
  // memory latencies overlap, which a memory-bound kernel needs for bandwidth.
  const int U = ks.unroll;
  os << "  constexpr int kUnroll = " << U << ";\n";
  os << "  for (index_t base = blockIdx.x * (blockDim.x * kUnroll) + threadIdx.x; base < kItems;\n"
     << "       base += static_cast<index_t>(gridDim.x) * blockDim.x * kUnroll) {\n";
  auto offset_expr = [&](size_t t) {
    std::string e;
    for (size_t d = 0; d < l.sizes.size(); ++d) {
      int64_t s = l.strides[t][d];
      if (s == 0) continue;
      e += (e.empty() ? "" : " + ") + std::string("i") + std::to_string(d) + (s == 1 ? "" : " * " + std::to_string(s));
    }
    return e.empty() ? std::string("0") : e;
  };
  for (size_t t = 0; t < acc.size(); ++t) os << "    index_t o_" << acc[t].param << "[kUnroll];\n";
  // Per-item input registers.
  std::unordered_map<const Value*, std::string> expr_of;  // value -> expression ([u], [k] where per item / lane)
  for (const Value* v : g.inputs) {
    if (scalar_param.count(v)) {
      expr_of[v] = scalar_param[v];
      continue;
    }
    size_t t = access_of.at(v);
    std::string x = "x_" + acc[t].param;
    bool lanes = l.strides[t][inner] != 0 && vec > 1;
    os << "    " << compute_type(acc[t].dtype) << " " << x << "[kUnroll]" << (lanes ? "[" + std::to_string(vec) + "]" : "")
       << ";\n";
    expr_of[v] = x + (lanes ? "[u][k]" : "[u]");
  }

  // Phase 1: unravel each item's first element over the collapsed dims, then load.
  os << "#pragma unroll\n    for (int u = 0; u < kUnroll; ++u) {\n";
  os << "      const index_t item = base + u * blockDim.x;\n      if (item >= kItems) break;\n";
  os << "      index_t rest = item * " << vec << ";\n";
  for (size_t d = l.sizes.size(); d-- > 0;) {
    if (d == 0) os << "      const index_t i0 = rest;\n";
    else os << "      const index_t i" << d << " = rest % " << l.sizes[d] << "; rest /= " << l.sizes[d] << ";\n";
  }
  for (size_t t = 0; t < acc.size(); ++t)
    os << "      o_" << acc[t].param << "[u] = " << offset_expr(t) << ";\n";
  for (const Value* v : g.inputs) {
    if (scalar_param.count(v)) continue;
    size_t t = access_of.at(v);
    const Access& a = acc[t];
    const std::string x = "x_" + a.param, o = "o_" + a.param + "[u]";
    if (l.strides[t][inner] == 0 || vec == 1)
      os << "      " << x << "[u] = ff_load(" << a.param << "[" << o << "]);\n";
    else
      emit_vector_load(os, "      ", "aligned", a.dtype, vec, a.param + " + " + o, "k", x + "[u][k]");
  }
  os << "    }\n";

  // Phase 2: the fused body per element, then the stores.
  os << "#pragma unroll\n    for (int u = 0; u < kUnroll; ++u) {\n";
  os << "      if (base + u * blockDim.x >= kItems) break;\n";
  for (size_t i = 0; i < g.outputs.size(); ++i)
    os << "      " << compute_type(acc[i].dtype) << " y_out" << i << (vec > 1 ? "[" + std::to_string(vec) + "]" : "")
       << ";\n";
  std::string ind = "      ";
  if (vec > 1) {
    os << "#pragma unroll\n      for (int k = 0; k < " << vec << "; ++k) {\n";
    ind = "        ";
  }
  emit_body(os, g, ind, scalar_param, expr_of);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    os << ind << "y_out" << i << (vec > 1 ? "[k]" : "") << " = " << expr_of.at(g.outputs[i]) << ";\n";
  if (vec > 1) os << "      }\n";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Access& a = acc[i];
    const std::string o = "o_" + a.param + "[u]";
    if (vec == 1)
      os << "      " << a.param << "[" << o << "] = ff_store<" << storage_type(a.dtype) << ">(y_out" << i << ");\n";
    else
      emit_vector_store(os, "      ", "aligned", a.dtype, vec, a.param + " + " + o, "k",
                        "y_out" + std::to_string(i) + "[k]");
  }
  os << "    }\n";
  os << "  }\n}\n";
  ks.source = os.str();
  return ks;
}

void emit_pointwise_body(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                         std::unordered_map<const Value*, std::string>& expr_of) {
  fusion::Group g;
  g.nodes = nodes;
  emit_body(os, g, indent, {}, expr_of);
}

void emit_pointwise_nodes(std::ostringstream& os, const std::vector<Node*>& nodes, const std::string& indent,
                          const std::unordered_set<const Value*>& scalars,
                          std::unordered_map<const Value*, std::string>& expr_of, int& next_temp,
                          const std::string& prefix) {
  std::unordered_map<const Value*, std::string> scalar_param;
  for (const Value* v : scalars) scalar_param[v] = expr_of.at(v);
  emit_nodes(os, nodes, indent, scalar_param, expr_of, next_temp, prefix);
}

Shape broadcast_strides(const TensorType& t, const Shape& shape) {
  Shape s(shape.size(), 0);
  const size_t off = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i)
    if (t.shape[i] != 1) s[off + i] = t.strides[i];
  return s;
}

std::string fused_kernel_name(const std::string& prefix, const std::vector<Node*>& nodes, int id) {
  std::string name = prefix;
  std::set<std::string> seen;
  int listed = 0;
  for (const Node* n : nodes) {
    const std::string op(op_name(n->op));
    if (!seen.insert(op).second) continue;
    if (++listed > 4) {
      name += "_etc";
      break;
    }
    name += "_" + op;
  }
  return name + "_" + std::to_string(id);
}

std::string cuda_storage_type(DType t) { return storage_type(t); }
std::string cuda_compute_type(DType t) { return compute_type(t); }

int64_t max_offset(const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off += (shape[d] - 1) * std::llabs(strides[d]);
  return off;
}

std::string dims_text(const Shape& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

std::string kernel_parameters(const std::vector<KernelParam>& outputs, const std::vector<KernelParam>& inputs,
                              size_t scalars) {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : ", ") + p; };
  for (const KernelParam& p : outputs) add(cuda_storage_type(p.dtype) + "* __restrict__ " + p.name);
  for (const KernelParam& p : inputs) add("const " + cuda_storage_type(p.dtype) + "* __restrict__ " + p.name);
  for (size_t i = 0; i < scalars; ++i) add("double s" + std::to_string(i));
  return out;
}

}  // namespace ff::codegen
