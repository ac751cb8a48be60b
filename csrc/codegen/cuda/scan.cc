#include "codegen/cuda/scan.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "codegen/cuda/kernel_text.h"
#include "codegen/cuda/prelude.h"

namespace ff::codegen {

namespace {

constexpr int kVectorBytes = 16;

struct Access {
  std::string param;
  const Value* value;
  Shape strides;     // broadcast to the scanned shape
  int64_t step = 0;  // stride along the scanned dim
  int vector = 1;    // elements per 16-byte load or store; 1: scalar accesses only
};

// The fold of ops.def's FF_SCAN op as a lambda over the accumulator type, and
// its identity (what elements past a row's end and lane 0's prefix hold).
struct Fold {
  std::string lambda, identity;
};

Fold fold_of(const Node& scan, const std::string& type) {
  switch (*scan_combine(scan.op)) {
    case Op::Add:
      return {"[](" + type + " a, " + type + " b) { return a + b; }", "static_cast<" + type + ">(0)"};
    case Op::Mul:
      return {"[](" + type + " a, " + type + " b) { return a * b; }", "static_cast<" + type + ">(1)"};
    default:
      throw IRError(std::string(op_name(scan.op)) + " folds with " + std::string(op_name(*scan_combine(scan.op))) +
                    ", which the scan kernel does not (internal error)");
  }
}

// One scan of the group with the pointwise nodes that make its input (the
// prologue, computed as elements load) and that read its result (the
// epilogue, computed as they store).
struct Section {
  const Node* scan;
  std::vector<Node*> prologue, epilogue;
};

// The group's scans in order, each with its nodes: a prologue node leads to
// its scan's input; an epilogue node reads its scan's result or another of
// its epilogue nodes, or else (reading only group inputs) is read by one.
std::vector<Section> sections_of(const fusion::Group& g) {
  std::vector<Section> out;
  std::unordered_map<const Node*, size_t> section;
  std::unordered_set<const Node*> before;
  for (Node* n : g.nodes)
    if (op_kind(n->op) == OpKind::Scan) {
      section[n] = out.size();
      out.push_back({n, {}, {}});
    }
  for (size_t i = 0; i < out.size(); ++i) {
    std::unordered_set<const Value*> needed{out[i].scan->input(0)};
    for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it)
      if (needed.count((*it)->result()) && !section.count(*it)) {
        section[*it] = i;
        before.insert(*it);
        for (const Operand& o : (*it)->operands)
          if (o.is_value()) needed.insert(o.value);
      }
  }
  std::vector<Node*> after;
  for (Node* n : g.nodes) {
    if (section.count(n)) continue;
    after.push_back(n);
    for (const Operand& o : n->operands) {
      const Node* p = o.is_value() ? o.value->producer : nullptr;
      if (!p || !section.count(p)) continue;
      if (before.count(p))
        throw IRError("scan epilogue reads the prologue's '%" + o.value->name + "' (internal error)");
      if (section.count(n) && section[n] != section[p])
        throw IRError("scan epilogue node '%" + n->result()->name + "' reads two scans (internal error)");
      section[n] = section[p];
    }
  }
  for (auto it = after.rbegin(); it != after.rend(); ++it)
    if (!section.count(*it)) {
      section[*it] = 0;
      for (const Node* u : after)
        if (section.count(u) && std::any_of(u->operands.begin(), u->operands.end(), [&](const Operand& o) {
              return o.is_value() && o.value == (*it)->result();
            })) {
          section[*it] = section[u];
          break;
        }
    }
  for (Node* n : g.nodes) {
    if (before.count(n))
      out[section[n]].prologue.push_back(n);
    else if (op_kind(n->op) != OpKind::Scan)
      out[section[n]].epilogue.push_back(n);
  }
  return out;
}

// Writes a Scan group's kernel: the parts every scan shares (the row's
// coordinates, each access's base), then each scan's section.
class ScanEmitter {
 public:
  ScanEmitter(const fusion::Group& g, const ScanStrategy& s, int id) : g_(g), s_(s), id_(id) {}

  KernelSource emit() {
    sections_ = sections_of(g_);
    const Node& first = *sections_.front().scan;
    shape_ = first.result()->type.shape;
    rank_ = shape_.size();
    dim_ = static_cast<size_t>(normalize_dim(first.attr_int("dim"), static_cast<int64_t>(rank_)));
    length_ = shape_[dim_];
    for (const Section& sec : sections_) {
      const Node& scan = *sec.scan;
      if (scan.result()->type.shape != shape_ ||
          static_cast<size_t>(normalize_dim(scan.attr_int("dim"), static_cast<int64_t>(rank_))) != dim_)
        throw IRError("scan group's scans run along different rows (internal error)");
      any_reverse_ |= scan.attr_bool_or("reverse", false);
    }
    if (static_cast<int64_t>(s_.threads) * s_.items * s_.cluster < length_)
      throw IRError("scan strategy covers " + std::to_string(int64_t{s_.threads} * s_.items * s_.cluster) +
                    " elements of a " + std::to_string(length_) + "-element row (internal error)");
    accesses();
    KernelSource ks;
    ks.name = fused_kernel_name("ff_scan", g_.nodes, id_);
    ks.block = s_.threads;
    ks.grid[0] = (length_ ? numel(shape_) / length_ : 0) * s_.cluster;
    ks.unroll = 1;
    ks.items = numel(shape_);
    for (const Access& a : outs_) ks.outputs.push_back(a.value->name);
    for (const Access& a : ins_) ks.inputs.push_back(a.value->name);
    for (const Value* v : scalar_order_) ks.scalars.push_back(v->name);
    head(ks.name);
    for (size_t i = 0; i < sections_.size(); ++i) {
      if (sections_.size() == 1) {
        section(os_, sections_[i]);
        continue;
      }
      // Each scan in a scope of its own; its loads of an input another scan
      // read are of the same row, which the cache still holds.
      std::ostringstream body;
      section(body, sections_[i]);
      os_ << "  {  // " << op_name(sections_[i].scan->op) << " %" << sections_[i].scan->result()->name << "\n";
      std::istringstream lines(body.str());
      for (std::string l; std::getline(lines, l);) os_ << (l.empty() || l[0] == '#' ? "" : "  ") << l << "\n";
      os_ << "  }\n";
    }
    os_ << "}\n";
    ks.source = os_.str();
    return ks;
  }

 private:
  const fusion::Group& g_;
  const ScanStrategy& s_;
  const int id_;
  std::vector<Section> sections_;
  Shape shape_;
  size_t rank_ = 0, dim_ = 0;
  int64_t length_ = 0;
  bool any_reverse_ = false;
  int chunk_ = 1;
  std::vector<Access> outs_, ins_;
  std::vector<const Value*> scalar_order_;
  std::unordered_set<const Value*> scalars_;
  std::unordered_map<const Value*, std::string> scalar_expr_;
  std::ostringstream os_;

  Access access(const std::string& param, const Value* v) const {
    Access a{param, v, broadcast_strides(v->type, shape_)};
    a.step = a.strides[dim_];
    if (a.step == 1) {
      a.vector = std::max(1, kVectorBytes / static_cast<int>(dtype_size(v->type.dtype)));
      for (size_t d = 0; d < rank_; ++d)
        if (d != dim_ && a.strides[d] % a.vector) a.vector = 1;
      if (s_.items % a.vector) a.vector = 1;
    }
    return a;
  }

  // The kernel's parameters and the lane's chunk: kChunk consecutive
  // elements per round, the smallest vector of the unit-stride accesses (each
  // access then moves a chunk per vector). A reverse scan's chunks start
  // kChunk before a position counted from the row's end: vectors where kChunk
  // divides the row.
  void accesses() {
    for (const Value* v : g_.outputs) outs_.push_back(access("out" + std::to_string(outs_.size()), v));
    for (const Value* v : g_.inputs) {
      if (v->is_input() && v->input_kind == InputKind::Scalar) {
        scalar_expr_[v] = "s" + std::to_string(scalar_order_.size());
        scalars_.insert(v);
        scalar_order_.push_back(v);
      } else {
        ins_.push_back(access("in" + std::to_string(ins_.size()), v));
      }
    }
    int chunk = 0;
    for (const auto* list : {&outs_, &ins_})
      for (const Access& a : *list)
        if (a.step == 1) chunk = chunk ? std::min(chunk, a.vector) : a.vector;
    chunk_ = std::max(chunk, 1);
    while (any_reverse_ && length_ % chunk_) chunk_ /= 2;
    for (auto* list : {&outs_, &ins_})
      for (Access& a : *list) a.vector = a.step == 1 && chunk_ > 1 ? chunk_ : 1;
  }

  // The kernel's signature and what every scan shares.
  void head(const std::string& name) {
    std::string scans;
    for (const Section& sec : sections_)
      scans += (scans.empty() ? "" : ", ") + std::string(op_name(sec.scan->op)) +
               (sec.scan->attr_bool_or("reverse", false) ? " from the end" : "");
    const int64_t rows = length_ ? numel(shape_) / length_ : 0;
    std::vector<const Value*> accessed;
    for (const auto* list : {&outs_, &ins_})
      for (const Access& a : *list) accessed.push_back(a.value);
    const auto [reach, half] = kernel_reach(numel(shape_), accessed, g_.nodes);
    std::ostream& os = os_;
    os << "// Generated by fuseforge: scan group " << id_ << "; " << scans << " along dim " << dim_ << " of "
       << dims_text(shape_) << " (" << rows << " rows of " << length_ << "), " << s_.describe() << "\n";
    for (const Node* n : g_.nodes) os << "//   " << print_node(*n) << "\n";
    os << cuda_prelude();
    if (half) os << cuda_half_prelude();
    if (s_.cluster > 1) os << cuda_cluster_prelude();
    os << "\nFF_EXTERN_C __global__ void ";
    if (s_.cluster > 1) os << "__cluster_dims__(" << s_.cluster << ", 1, 1) ";
    std::vector<KernelParam> out_params, in_params;
    for (const Access& a : outs_) out_params.push_back({a.value->type.dtype, a.param});
    for (const Access& a : ins_) in_params.push_back({a.value->type.dtype, a.param});
    os << "__launch_bounds__(" << s_.threads << ") " << name << "("
       << kernel_parameters(out_params, in_params, scalar_order_.size()) << ") {\n";
    os << "  typedef "
       << (reach + int64_t{s_.threads} * s_.items * s_.cluster >= (int64_t{1} << 31) ? "long long" : "int")
       << " index_t;\n";
    os << "  constexpr index_t kLength = " << length_ << ";  // elements per row\n";
    os << "  constexpr int kThreads = " << s_.threads << ", kItems = " << s_.items
       << ";  // threads per block, elements per thread\n";
    os << "  constexpr int kChunk = " << chunk_
       << ", kRounds = kItems / kChunk;  // a lane's consecutive elements per round\n";
    os << "  const unsigned rank = " << (s_.cluster > 1 ? "ff_cluster_rank()" : "0")
       << ";  // the block's part of the row\n";
    os << "  const index_t row = blockIdx.x" << (s_.cluster > 1 ? " / " + std::to_string(s_.cluster) : "") << ";\n";
    os << "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n";
    os << "  // A warp takes 32 * kItems consecutive elements of the row (a reverse scan's\n";
    os << "  // counted from its end) in kRounds rounds of 32 * kChunk: lane l holds the\n";
    os << "  // round's chunk l, so each load and store of a warp is one contiguous span.\n";
    os << "  // Element j of the thread (round j / kChunk) is at position\n";
    os << "  // first + (j / kChunk) * 32 * kChunk + j % kChunk (index kLength - 1 - position\n";
    os << "  // in a reverse scan).\n";
    os << "  const index_t first = ((static_cast<index_t>(rank) * kThreads + (threadIdx.x & ~31)) * kItems) + lane * "
          "kChunk;\n";
    os << "  const bool full = first + (kRounds - 1) * 32 * kChunk + kChunk <= kLength;\n";
    // The row's coordinates over the kept dims, innermost first.
    os << "  index_t rest = row;\n";
    std::vector<size_t> kept;
    for (size_t d = 0; d < rank_; ++d)
      if (d != dim_) kept.push_back(d);
    for (size_t k = kept.size(); k-- > 0;) {
      const size_t d = kept[k];
      if (k == 0)
        os << "  const index_t c" << d << " = rest;\n";
      else
        os << "  const index_t c" << d << " = rest % " << shape_[d] << "; rest /= " << shape_[d] << ";\n";
    }
    if (kept.empty()) os << "  (void)rest;\n";
    std::string aligned;
    for (const auto* list : {&outs_, &ins_})
      for (const Access& a : *list) {
        std::string base;
        for (size_t d : kept)
          if (a.strides[d] != 0)
            base += (base.empty() ? "" : " + ") + ("c" + std::to_string(d)) +
                    (a.strides[d] == 1 ? "" : " * " + std::to_string(a.strides[d]));
        os << "  const index_t base_" << a.param << " = " << (base.empty() ? "0" : base) << ";\n";
        if (a.vector > 1)
          aligned += std::string(aligned.empty() ? "" : " && ") + "reinterpret_cast<unsigned long long>(" + a.param +
                     ") % " + std::to_string(a.vector * dtype_size(a.value->type.dtype)) + " == 0";
      }
    if (!aligned.empty()) {
      os << "  // Vector accesses where the pointers allow them (views may start anywhere) and every chunk is "
            "whole.\n";
      os << "  const bool vector = full && " << aligned << ";\n";
    }
  }

  // One scan: its inputs' loads and prologue, the scan, its epilogue and stores.
  void section(std::ostringstream& os, const Section& sec) const {
    const Node& scan = *sec.scan;
    const bool reverse = scan.attr_bool_or("reverse", false);
    const DType acc = compute_dtype(scan.result()->type.dtype);
    const std::string type = cuda_compute_type(scan.result()->type.dtype);
    const Fold fold = fold_of(scan, type);
    std::unordered_map<const Value*, std::string> expr_of = scalar_expr_;
    // Element position e of the row in memory, and the vector access of chunk q
    // (its kChunk elements in memory order: reversed in a reverse scan).
    auto index = [&](const std::string& e) { return reverse ? "(kLength - 1 - " + e + ")" : e; };
    auto at = [&](const Access& a, const std::string& e) {
      return "base_" + a.param +
             (a.step == 0 ? "" : " + " + (a.step == 1 ? index(e) : index(e) + " * " + std::to_string(a.step)));
    };
    const std::string element = "(first + (j / kChunk) * 32 * kChunk + j % kChunk)";  // thread's element j
    const std::string chunk_start = reverse ? "kLength - kChunk - (first + q * 32)" : "first + q * 32";
    const std::string in_chunk = reverse ? "kChunk - 1 - k" : "k";
    // A load or store of a's elements: `vector_body` per chunk q (where
    // `vector` holds), else `scalar_body` per element j.
    auto vector_or_scalar = [&](const Access& a, const std::string& vector_body, const std::string& scalar_body) {
      std::string ind = "  ";
      if (a.vector > 1) {
        os << "  if (vector) {\n#pragma unroll\n    for (int q = 0; q < kItems; q += kChunk) {\n      " << vector_body
           << "\n    }\n  } else {\n";
        ind = "    ";
      }
      os << "#pragma unroll\n" << ind << "for (int j = 0; j < kItems; ++j)\n" << ind << "  " << scalar_body << "\n";
      if (a.vector > 1) os << "  }\n";
    };
    // Loads: a value per element, or one per row where the scanned dim is broadcast.
    auto load = [&](const Access& a) {
      const std::string ct = cuda_compute_type(a.value->type.dtype), st = cuda_storage_type(a.value->type.dtype);
      const std::string x = "x_" + a.param;
      if (a.step == 0) {
        os << "  const " << ct << " " << x << " = ff_load(" << a.param << "[base_" << a.param << "]);\n";
        expr_of[a.value] = x;
        return;
      }
      os << "  " << ct << " " << x << "[kItems];\n";
      const std::string vec = "ff_vec<" + st + ", " + std::to_string(a.vector) + ">";
      vector_or_scalar(a,
                       "const " + vec + " v = *reinterpret_cast<const " + vec + "*>(" + a.param + " + base_" + a.param +
                           " + " + chunk_start + ");\n#pragma unroll\n      for (int k = 0; k < kChunk; ++k) " + x +
                           "[q + k] = ff_load(v.v[" + in_chunk + "]);",
                       x + "[j] = " + element + " < kLength ? ff_load(" + a.param + "[" + at(a, element) +
                           "]) : static_cast<" + ct + ">(0);");
      expr_of[a.value] = x + "[j]";
    };
    // Inputs the prologue or the scan reads load first; the epilogue's own as it stores.
    std::unordered_set<const Value*> early{scan.input(0)}, late;
    for (const Node* n : sec.prologue)
      for (const Operand& o : n->operands)
        if (o.is_value()) early.insert(o.value);
    for (const Node* n : sec.epilogue)
      for (const Operand& o : n->operands)
        if (o.is_value()) late.insert(o.value);
    os << "  const auto combine = " << fold.lambda << ";  // " << op_name(scan.op) << "'s fold\n";
    os << "  const " << type << " kIdentity = " << fold.identity << ";\n";
    os << "  // ---- loads and the prologue, element by element\n";
    for (const Access& a : ins_)
      if (early.count(a.value)) load(a);
    // The prologue per element, then each thread's inclusive scan of its run.
    os << "  " << type << " v[kItems];\n#pragma unroll\n  for (int j = 0; j < kItems; ++j) {\n";
    int temp = 0;
    emit_pointwise_nodes(os, sec.prologue, "    ", scalars_, expr_of, temp, "p");
    std::string x = expr_of.at(scan.input(0));
    if (compute_dtype(scan.input(0)->type.dtype) != acc) x = "static_cast<" + type + ">(" + x + ")";
    os << "    v[j] = " << element << " < kLength ? " << x
       << " : kIdentity;  // past the row's end: nothing to fold in\n";
    os << "  }\n";
    fold_text(os, type);
    os << "  // ---- the epilogue, element by element, and stores\n";
    for (const Access& a : ins_)
      if (late.count(a.value) && !early.count(a.value)) load(a);
    const DType rd = scan.result()->type.dtype;
    std::string scanned = "combine(prefix, v[j])";
    if (rd == DType::f16)
      scanned = "ff_round_f16(" + scanned + ")";  // as eager stores it, before the epilogue reads it
    if (rd == DType::bf16) scanned = "ff_round_bf16(" + scanned + ")";
    std::vector<const Access*> outs;
    for (const Access& a : outs_)
      if (a.value == scan.result() ||
          std::find(sec.epilogue.begin(), sec.epilogue.end(), a.value->producer) != sec.epilogue.end())
        outs.push_back(&a);
    for (const Access* a : outs)
      os << "  " << cuda_compute_type(a->value->type.dtype) << " y_" << a->param << "[kItems];\n";
    os << "#pragma unroll\n  for (int j = 0; j < kItems; ++j) {\n";
    os << "    const " << type << " s = " << scanned << ";\n";
    expr_of[scan.result()] = "s";
    emit_pointwise_nodes(os, sec.epilogue, "    ", scalars_, expr_of, temp, "e");
    for (const Access* a : outs) os << "    y_" << a->param << "[j] = " << expr_of.at(a->value) << ";\n";
    os << "  }\n";
    for (const Access* a : outs) {
      const std::string st = cuda_storage_type(a->value->type.dtype), y = "y_" + a->param;
      const std::string vec = "ff_vec<" + st + ", " + std::to_string(a->vector) + ">";
      vector_or_scalar(*a,
                       vec + " v_out;\n#pragma unroll\n      for (int k = 0; k < kChunk; ++k) v_out.v[" + in_chunk +
                           "] = ff_store<" + st + ">(" + y + "[q + k]);\n      *reinterpret_cast<" + vec + "*>(" +
                           a->param + " + base_" + a->param + " + " + chunk_start + ") = v_out;",
                       "if (" + element + " < kLength) " + a->param + "[" + at(*a, element) + "] = ff_store<" + st +
                           ">(" + y + "[j]);");
    }
  }

  // The scan of v[] in the fold `combine`, leaving each element's inclusive
  // fold within the block in v[] and the fold of the row's earlier part in
  // `prefix`.
  void fold_text(std::ostringstream& os, const std::string& type) const {
    os << "  // ---- the scan, round by round: each lane's chunk in order, then the chunks of the\n"
          "  // lanes below (shuffles) and the warp's earlier rounds (carry)\n";
    os << "  " << type << " carry = kIdentity;  // the warp's fold of its earlier rounds\n";
    os << "#pragma unroll\n  for (int r = 0; r < kRounds; ++r) {\n";
    os << "#pragma unroll\n    for (int k = 1; k < kChunk; ++k) v[r * kChunk + k] = combine(v[r * kChunk + k - 1], "
          "v[r * kChunk + k]);\n";
    os << "    " << type
       << " t = v[r * kChunk + kChunk - 1];  // becomes the inclusive fold of the round's chunks up to this lane's\n";
    os << "#pragma unroll\n    for (int o = 1; o < 32; o <<= 1) {\n      const " << type
       << " n = __shfl_up_sync(0xffffffffu, t, o);\n      if (lane >= o) t = combine(n, t);\n    }\n";
    os << "    // The exclusive prefix: the lane below's inclusive fold (not t less this chunk's, which would "
          "round).\n";
    os << "    " << type << " below = __shfl_up_sync(0xffffffffu, t, 1);\n    if (lane == 0) below = kIdentity;\n";
    os << "    below = combine(carry, below);\n";
    os << "#pragma unroll\n    for (int k = 0; k < kChunk; ++k) v[r * kChunk + k] = combine(below, v[r * kChunk + "
          "k]);\n";
    os << "    carry = combine(carry, __shfl_sync(0xffffffffu, t, 31));\n  }\n";
    os << "  __shared__ " << type << " warp_totals[kThreads / 32];\n  __shared__ " << type << " block_total;\n";
    os << "  if (lane == 0) warp_totals[warp] = carry;\n  __syncthreads();\n";
    os << "  if (warp == 0) {  // the warps' totals, scanned by the first warp\n";
    os << "    " << type << " w = lane < kThreads / 32 ? warp_totals[lane] : kIdentity;\n";
    os << "#pragma unroll\n    for (int o = 1; o < 32; o <<= 1) {\n      const " << type
       << " n = __shfl_up_sync(0xffffffffu, w, o);\n      if (lane >= o) w = combine(n, w);\n    }\n";
    // The shuffles order the lanes' steps, not their shared-memory accesses:
    // __syncwarp does, so that no lane overwrites a total another still reads.
    os << "    __syncwarp();  // every lane has read its total before any is overwritten\n"
       << "    if (lane < kThreads / 32) warp_totals[lane] = w;\n    if (lane == kThreads / 32 - 1) block_total = "
          "w;\n  }\n";
    os << "  __syncthreads();\n";
    os << "  " << type << " prefix = warp > 0 ? warp_totals[warp - 1] : kIdentity;  // the block's earlier warps\n";
    if (s_.cluster > 1)
      os << "  prefix = combine(ff_cluster_exclusive_scan(block_total, kIdentity, combine), prefix);  // the "
            "cluster's earlier blocks\n";
  }
};

}  // namespace

std::string ScanStrategy::describe() const {
  return (cluster > 1 ? "a cluster of " + std::to_string(cluster) + " blocks" : std::string("a block")) + " per row, " +
         std::to_string(threads) + " threads of " + std::to_string(items) + " elements each";
}

const Node& scan_node(const fusion::Group& g) {
  for (const Node* n : g.nodes)
    if (op_kind(n->op) == OpKind::Scan) return *n;
  throw IRError("scan group without a scan node (internal error)");
}

KernelSource generate_scan(const fusion::Group& g, const ScanStrategy& s, int id) {
  return ScanEmitter(g, s, id).emit();
}

}  // namespace ff::codegen
