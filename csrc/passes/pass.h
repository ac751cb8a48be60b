#pragma once
// Graph-to-graph rewrites. Each pass lives in its own file and is registered
// by name in pass_registry.cc; PassManager runs a list of them, verifying the
// graph after each one.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/conv.h"
#include "ir/graph.h"
#include "ir/target.h"

namespace ff::passes {

// What some passes need to know of the compile beyond the graph; the defaults
// are those of a compile for no particular GPU (ff-opt, golden tests).
struct PassOptions {
  // The opt-in "tf32" precision policy: f32 convolutions may use TF32.
  bool tf32 = false;
  // Per convolution signature (conv_signature()): whether eager's own conv of
  // that shape computes in TF32 under the user's flags (probed on the GPU by
  // the front end). A convolution without an entry is taken not to.
  std::map<std::string, bool> eager_conv_tf32;
  // Per convolution signature: whether it ran faster channels-last than
  // contiguous when timed (autotuning); overrides the cost model.
  std::map<std::string, bool> conv_channels_last;
  // Per convolution signature: cuDNN's times in both layouts, measured on the
  // GPU (the front end's probe); conv_precision records them on the conv.
  std::map<std::string, CudnnTimes> conv_cudnn;
  // Per convolution signature: our direct kernel's time, measured likewise
  // where the model could not tell it from cuDNN's; recorded as direct_ms.
  std::map<std::string, double> conv_direct_ms;
  // Convolutions may run as generated implicit-GEMM kernels (channels-last),
  // which need CUTLASS's headers: where cuDNN was timed slower, or every conv
  // one covers (conv_always).
  bool conv_kernels = false;
  bool conv_always = false;
  // 2-D f32 convolutions may run as generated direct kernels (any layout).
  bool conv_direct = false;
  // The GPU the kernels are for: how many CTAs fill it (split_gemm_k).
  Target target;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Called before run() with the compile's options (most passes ignore them).
  virtual void configure(const PassOptions& options) {}
  // Rewrites `g` in place; returns whether anything changed.
  virtual bool run(Graph& g) = 0;
};

// Creates a registered pass; throws IRError listing the known names if unknown.
std::unique_ptr<Pass> create_pass(std::string_view name);
std::vector<std::string> pass_names();
// The passes fuseforge runs by default, in order.
std::vector<std::string> default_pipeline();

class PassManager {
 public:
  explicit PassManager(std::vector<std::string> names = default_pipeline(), PassOptions options = {});
  // Runs each pass once, in order, then repeats the list until nothing changes
  // (at most `max_rounds` times). Verifies after every pass; a verifier error
  // names the pass that broke the graph. `trace`, if set, receives
  // (pass name, IR after the pass) for every pass that changed the graph.
  void run(Graph& g, int max_rounds = 4, const std::function<void(std::string_view, const Graph&)>& trace = {}) const;

 private:
  std::vector<std::string> names_;
  PassOptions options_;
};

}  // namespace ff::passes
