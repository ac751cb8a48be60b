// ScanScheduler: each floating-point scan (cumsum, cumprod, either direction)
// becomes a kernel with the pointwise group that makes its input (the
// prologue: `x * mask` is computed as the scan loads x and mask, and never
// written) and the one that reads its result per element (the epilogue:
// `cumsum(x) - x` is computed as the scan stores, so the scan's result is
// never written or read back), when a row fits the threads that share it
// (ScanStrategy). Longer rows stay library calls.
#include <algorithm>
#include <optional>

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

int element_words(const Node& scan) { return scan.result()->type.dtype == DType::f64 ? 2 : 1; }

// Tensors a group's kernel reads (scalars aside) and writes.
size_t held_arrays(const Group& g) {
  size_t n = g.outputs.size();
  for (const Value* v : g.inputs) n += !(v->is_input() && v->input_kind == InputKind::Scalar);
  return n;
}

int64_t scan_length(const Node& n) {
  const Shape& shape = n.result()->type.shape;
  return shape[static_cast<size_t>(normalize_dim(n.attr_int("dim"), static_cast<int64_t>(shape.size())))];
}

class ScanScheduler final : public Scheduler {
 public:
  Group::Kind kind() const override { return Group::Kind::Scan; }

  void claim(PartitionBuilder& p, const FusionOptions& options) const override {
    if (!options.reductions) return;
    for (auto& np : p.graph().nodes()) {
      Node* n = np.get();
      if (op_kind(n->op) != OpKind::Scan || p.group_of(n) || n->result()->type.shape.empty()) continue;
      if (!is_floating(n->result()->type.dtype) || n->result()->type.dtype != n->input(0)->type.dtype) continue;
      const int64_t length = scan_length(*n);
      const int words = element_words(*n);
      if (!choose_scan_strategy(length, 2, words, options.arch)) continue;
      // The prologue's and the epilogue's inputs too, each if a thread's
      // registers hold them with the rest. No cycle can form: nothing outside
      // reads the prologue's result or the scan's.
      std::vector<Node*> members{n};
      auto fits = [&](const std::vector<Node*>& nodes) {
        return choose_scan_strategy(length, held_arrays(p.describe_nodes(Group::Kind::Scan, nodes)), words,
                                    options.arch)
            .has_value();
      };
      if (const auto pro = p.pointwise_prologue(n)) {
        std::vector<Node*> with = p.describe(*pro).nodes;
        with.insert(with.end(), members.begin(), members.end());
        if (fits(with)) {
          members = p.release(*pro);
          members.push_back(n);
        }
      }
      if (const auto epi = p.pointwise_epilogue(n)) {
        std::vector<Node*> with = members, after = p.describe(*epi).nodes;
        with.insert(with.end(), after.begin(), after.end());
        if (fits(with)) {
          after = p.release(*epi);
          members.insert(members.end(), after.begin(), after.end());
        }
      }
      p.add_group(Group::Kind::Scan, std::move(members));
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    const Node& scan = codegen::scan_node(g);
    return codegen::generate_scan(
        g, *choose_scan_strategy(scan_length(scan), held_arrays(g), element_words(scan), options.arch), id);
  }
};

}  // namespace

const Scheduler& scan_scheduler() {
  static const ScanScheduler s;
  return s;
}

}  // namespace ff::fusion
