// ScanScheduler: each floating-point cumsum becomes a kernel with the
// pointwise group that makes its input (the prologue: `x * mask` is computed
// as the scan loads x and mask, and never written), when a row fits the
// threads that share it (ScanStrategy). Longer rows stay library calls.
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

// Threads hold 16 elements each (a 4096x32768 f32 cumsum on the H100: 0.17
// ms at 16, 0.24 at 32, where more registers per thread leave fewer threads
// to overlap loads with the scan); a block takes up to 512 threads, and a
// longer row a cluster of up to 8 blocks on sm_90 (0.17 ms with 4 blocks of
// 512 threads, against 0.25 for one block of 1024); past that each thread
// takes more elements, up to 64.
constexpr int kItems = 16, kMaxItems = 64, kThreads = 512, kMaxCluster = 8;

std::optional<codegen::ScanStrategy> choose_scan_strategy(int64_t length, int arch) {
  codegen::ScanStrategy s;
  if (length <= int64_t{kItems} * kThreads) {
    s.threads = std::clamp(pow2_ceil((length + kItems - 1) / kItems), 32, kThreads);
    return s;
  }
  s.threads = kThreads;
  const int64_t blocks = (length + int64_t{kItems} * kThreads - 1) / (int64_t{kItems} * kThreads);
  s.cluster = static_cast<int>(std::min<int64_t>(blocks, arch >= 90 ? kMaxCluster : 1));
  const int64_t per_thread = (length + int64_t{s.cluster} * kThreads - 1) / (int64_t{s.cluster} * kThreads);
  s.items = static_cast<int>((per_thread + 7) / 8 * 8);  // whole 16-byte vectors of f16
  if (s.items > kMaxItems) return std::nullopt;
  return s;
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
      if (!choose_scan_strategy(scan_length(*n), options.arch)) continue;
      std::vector<Node*> members;
      if (const auto pro = p.pointwise_prologue(n)) members = p.release(*pro);
      members.push_back(n);
      p.add_group(Group::Kind::Scan, std::move(members));
    }
  }

  codegen::KernelSource generate(const Group& g, int id, const FusionOptions& options) const override {
    const Node& scan = codegen::scan_node(g);
    return codegen::generate_scan(g, *choose_scan_strategy(scan_length(scan), options.arch), id);
  }

};

}  // namespace

const Scheduler& scan_scheduler() {
  static const ScanScheduler s;
  return s;
}

}  // namespace ff::fusion
