// ScanScheduler: each floating-point scan (cumsum, cumprod, either direction)
// becomes a kernel with the pointwise group that makes its input (the
// prologue: `x * mask` is computed as the scan loads x and mask, and never
// written) and the one that reads its result per element (the epilogue:
// `cumsum(x) - x` is computed as the scan stores, so the scan's result is not
// read back, nor written unless returned or read elsewhere too), when a row
// fits the threads that share it (ScanStrategy). Longer rows stay library
// calls. Scans along the same rows that read the same tensor share a kernel
// (an exclusive cumsum and a reverse cumprod of x: one pass over x).
#include <algorithm>
#include <optional>
#include <unordered_set>

#include "codegen/cuda/scan.h"
#include "fusion/scheduler.h"

namespace ff::fusion {

namespace {

int pow2_ceil(int64_t x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// Threads hold 16 elements each; a block takes up to 512 threads, and a
// longer row a cluster of up to 8 blocks on sm_90; past that each thread
// takes more elements. (A 1024x32768 f32 cumsum on an H200, warp-contiguous
// chunks: 0.10-0.12 ms with 4 blocks of 512 threads x 16, 0.10 with 2 x 32,
// 0.11 with one block of 1024 x 32; the copy bandwidth gives 0.098.)
// A thread holds its elements of every input and of its results (the scan's
// running values, or each epilogue output's) at once: within kMaxWords
// registers, which a 512-thread block's 128 leave room for (64 elements of
// two inputs spilled 76 bytes for sm_80, 32 none).
constexpr int kItems = 16, kThreads = 512, kMaxCluster = 8, kMaxWords = 96;

// `arrays`: the tensors of which a thread holds its elements; `words`:
// registers an element takes (2 for f64 sums).
std::optional<codegen::ScanStrategy> choose_scan_strategy(int64_t length, size_t arrays, int words, int arch) {
  codegen::ScanStrategy s;
  const int64_t max_items = kMaxWords / words / static_cast<int64_t>(arrays) / 8 * 8;  // whole 16-byte vectors of f16
  if (max_items < kItems) return std::nullopt;
  if (length <= int64_t{kItems} * kThreads) {
    s.threads = std::clamp(pow2_ceil((length + kItems - 1) / kItems), 32, kThreads);
    return s;
  }
  s.threads = kThreads;
  const int64_t blocks = (length + int64_t{kItems} * kThreads - 1) / (int64_t{kItems} * kThreads);
  s.cluster = static_cast<int>(std::min<int64_t>(blocks, arch >= 90 ? kMaxCluster : 1));
  const int64_t per_thread = (length + int64_t{s.cluster} * kThreads - 1) / (int64_t{s.cluster} * kThreads);
  s.items = static_cast<int>((per_thread + 7) / 8 * 8);
  if (s.items > max_items) return std::nullopt;
  return s;
}

// Registers an element of a scan takes (2 for f64 sums), and the most of a group's scans.
int element_words(const Node& scan) { return scan.result()->type.dtype == DType::f64 ? 2 : 1; }
int element_words(const std::vector<Node*>& nodes) {
  int words = 1;
  for (const Node* n : nodes)
    if (op_kind(n->op) == OpKind::Scan) words = std::max(words, element_words(*n));
  return words;
}

// Tensors a group's kernel reads (scalars aside) and writes.
size_t held_arrays(const Group& g) {
  size_t n = g.outputs.size();
  for (const Value* v : g.inputs) n += !(v->is_input() && v->input_kind == InputKind::Scalar);
  return n;
}

size_t scan_dim(const Node& n) {
  return static_cast<size_t>(normalize_dim(n.attr_int("dim"), static_cast<int64_t>(n.result()->type.shape.size())));
}

int64_t scan_length(const Node& n) { return n.result()->type.shape[scan_dim(n)]; }

// Whether a scan kernel computes `n`: a floating-point scan of its own dtype
// along rows a strategy covers.
bool kernel_scan(const PartitionBuilder& p, const Node& n, int arch) {
  if (op_kind(n.op) != OpKind::Scan || p.group_of(&n) || n.result()->type.shape.empty()) return false;
  if (!is_floating(n.result()->type.dtype) || n.result()->type.dtype != n.input(0)->type.dtype) return false;
  return choose_scan_strategy(scan_length(n), 2, element_words(n), arch).has_value();
}

class ScanScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Scan; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (!options.reductions) return;
    const auto& nodes = p.graph().nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node* n = nodes[i].get();
      if (!kernel_scan(p, *n, options.arch)) continue;
      Part first = part(p, n, {}, options);
      std::vector<Node*> members = take(p, first);
      // Later scans along the same rows that read a tensor this one reads
      // join its kernel: one pass over what they share instead of one each
      // (each scan in turn; its loads of the shared rows hit the cache).
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        Node* m = nodes[j].get();
        if (!kernel_scan(p, *m, options.arch) || m->result()->type.shape != n->result()->type.shape ||
            scan_dim(*m) != scan_dim(*n))
          continue;
        const Part next = part(p, m, members, options);
        if (!next.joins) continue;
        std::vector<Node*> more = take(p, next);
        members.insert(members.end(), more.begin(), more.end());
      }
      p.add_group(Group::Kind::Scan, std::move(members));
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    const Node& scan = codegen::scan_node(g);
    return codegen::generate_scan(
        g, *choose_scan_strategy(scan_length(scan), held_arrays(g), element_words(g.nodes), options.arch), id);
  }

 private:
  // A scan with the pointwise groups its kernel takes in: the prologue's and
  // the epilogue's inputs too, each if a thread's registers hold them with
  // the rest (with `with`, the nodes of a kernel it would join). No cycle can
  // form: nothing outside reads the prologue's result, and no other reader of
  // the scan's leads into the epilogue (pointwise_epilogue's shared form).
  struct Part {
    Node* scan;
    std::optional<int> prologue, epilogue;
    bool joins = true;  // with `with`: it shares a tensor input with it, and neither reaches the other
  };

  static Part part(const PartitionBuilder& p, Node* n, const std::vector<Node*>& with, const FusionOptions& options) {
    Part out{n, std::nullopt, std::nullopt};
    auto fits = [&](std::vector<Node*> nodes) {
      nodes.insert(nodes.begin(), with.begin(), with.end());
      return choose_scan_strategy(scan_length(*n), held_arrays(p.describe_nodes(Group::Kind::Scan, nodes)),
                                  element_words(nodes), options.arch)
          .has_value();
    };
    std::vector<Node*> nodes{n};
    if (const auto pro = p.pointwise_prologue(n)) {
      std::vector<Node*> before = p.describe(*pro).nodes;
      before.push_back(n);
      if (fits(before)) {
        out.prologue = pro;
        nodes = before;
      }
    }
    if (const auto epi = p.pointwise_epilogue(n, true)) {
      std::vector<Node*> after = nodes, epilogue = p.describe(*epi).nodes;
      after.insert(after.end(), epilogue.begin(), epilogue.end());
      if (fits(after)) {
        out.epilogue = epi;
        nodes = after;
      }
    }
    if (with.empty()) return out;
    const Group mine = p.describe_nodes(Group::Kind::Scan, nodes), theirs = p.describe_nodes(Group::Kind::Scan, with);
    out.joins = fits(nodes) && std::any_of(mine.inputs.begin(), mine.inputs.end(), [&](const Value* v) {
                  return !(v->is_input() && v->input_kind == InputKind::Scalar) &&
                         std::find(theirs.inputs.begin(), theirs.inputs.end(), v) != theirs.inputs.end();
                });
    const std::unordered_set<const Node*> mine_set(nodes.begin(), nodes.end()), theirs_set(with.begin(), with.end());
    out.joins = out.joins && !p.reaches(std::vector<const Node*>(nodes.begin(), nodes.end()), theirs_set) &&
                !p.reaches(std::vector<const Node*>(with.begin(), with.end()), mine_set);
    return out;
  }

  // The part's nodes in the order its kernel computes them, taken from their groups.
  static std::vector<Node*> take(PartitionBuilder& p, const Part& part) {
    std::vector<Node*> nodes;
    if (part.prologue) nodes = p.release(*part.prologue);
    nodes.push_back(part.scan);
    if (part.epilogue) {
      std::vector<Node*> after = p.release(*part.epilogue);
      nodes.insert(nodes.end(), after.begin(), after.end());
    }
    return nodes;
  }
};

}  // namespace

const Scheduler& scan_scheduler() {
  static const ScanScheduler s;
  return s;
}

}  // namespace ff::fusion
