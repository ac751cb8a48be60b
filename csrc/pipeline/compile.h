#pragma once
// The compiler driver: IR text in, optimized graph + partition + kernel
// sources out. Runs passes, partitions into fused groups (a scheduler per
// group kind picks each kernel) and generates CUDA.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "ir/conv.h"
#include "ir/graph.h"
#include "ir/target.h"
#include "kernel/group.h"
#include "plan/plan.h"

namespace ff {

// Numerics policies. fp32 (the default) keeps fp32 accuracy: f32 matmuls as
// 3xTF32 GEMM kernels. tf32 (opt-in, faster, about 1e-3 relative error)
// computes f32 matmuls in plain TF32.
enum class Precision { fp32, tf32 };
// Every policy's name, in order: the one list the CLI and the API offer.
const std::vector<std::string>& precision_names();
std::string_view precision_name(Precision p);
// Throws std::invalid_argument naming the available policies if `name` has none.
Precision parse_precision(std::string_view name);

// Which matmuls become generated GEMM kernels (they need CUTLASS's headers).
// Auto: f32 ones at the fp32 precision (3xTF32 measured 1.1-1.4x eager's SIMT
// fp32 on an H100, and more accurate), none under tf32 (cuBLAS's TF32 wgmma
// kernels beat our mma.sync ones); All: f32, f16 and bf16; Off: none.
enum class GemmPolicy { Auto, All, Off };
// "auto" (also "f32" and ""), "all" (also "1"), "off" (also "0"); throws
// std::invalid_argument otherwise.
GemmPolicy parse_gemm_policy(std::string_view name);
std::vector<DType> gemm_dtypes(GemmPolicy policy, Precision precision);

struct CompileOptions {
  std::vector<std::string> passes;  // empty: passes::default_pipeline()
  bool trace_passes = false;        // record the IR after every pass that changed it
  Precision precision = Precision::fp32;
  std::vector<DType> gemm_dtypes;  // matmuls of these dtypes as generated GEMM kernels (gemm_dtypes())
  // Convolutions of these dtypes may run as generated implicit-GEMM kernels
  // (where the cost model prefers them to cuDNN); empty: none.
  std::vector<DType> conv_dtypes;
  bool conv_always = false;  // every conv a kernel covers, not only where the cost model prefers it
  // 2-D f32 convs may run as generated direct kernels (IEEE f32, any layout;
  // codegen/cuda/conv_direct.h) where the cost model prefers them to cuDNN.
  bool conv_direct = true;
  bool autotune = false;  // also every other candidate kernel of each group (timed at first run)
  int arch = 0;           // the target GPU's compute capability (90: Hopper GEMM kernels); 0: unknown
  // The target GPU's facts, as the front end read them from the device;
  // unset: those of arch's usual part (compile_target()).
  std::optional<Target> target;
  bool reductions = true;  // reductions, norms, softmax, pools and scans as generated kernels (else library calls)
  // The caller hands its input tensors over: the plan frees each after its
  // last read (plan::build's release_inputs).
  bool release_inputs = false;
  // The inputs (by name) handed over to be written over after their last
  // read as well (plan::build's donated); only with release_inputs.
  std::vector<std::string> donated;
  // Per convolution signature (ir/conv.h): whether eager's conv of it uses TF32
  // under the user's flags, as probed on the GPU (conv_precision.cc), and
  // whether it timed faster channels-last (autotuning; conv_engine.cc).
  std::map<std::string, bool> eager_conv_tf32;
  std::map<std::string, bool> conv_channels_last;
  // Per convolution signature: cuDNN's times in both layouts on the target
  // GPU (probed where implicit-GEMM conv kernels may replace it).
  std::map<std::string, CudnnTimes> conv_cudnn;
  // Per convolution signature: our direct kernel's time on the target GPU
  // (probed where the cost model cannot tell it from cuDNN's).
  std::map<std::string, double> conv_direct_ms;
};

// Which convolutions run as generated conv kernels: "direct" (the C++
// default, also ""): direct kernels where the cost model prefers them to
// cuDNN; "auto" (also "1"; the front end's default): also implicit-GEMM
// kernels where the model puts them ahead of cuDNN as timed (conv_cudnn; an
// untimed conv stays cuDNN's); "always": every conv an implicit-GEMM kernel
// covers, direct kernels where preferred (tests and probes); "off" (also
// "0"): none. Throws std::invalid_argument naming an unknown policy.
void set_conv_policy(CompileOptions& o, std::string_view policy);

// Each stage's output: the pipeline's diagnostics and the plan that runs.
struct CompiledGraph {
  std::string ir_before;                                            // as captured (verified)
  std::string ir_after;                                             // after passes
  std::vector<std::pair<std::string, std::string>> pass_trace;      // (pass, IR after it)
  fusion::Partition partition;                                      // its nodes are the plan's graph's
  std::vector<codegen::KernelSource> kernels;                       // per partition group, then library epilogue
  std::vector<std::vector<codegen::KernelSource>> kernel_variants;  // per kernel: alternatives (autotune)
  plan::Plan plan;
  // Wall seconds of each stage, in order: parse (and verify), passes, fusion
  // (partitioning), codegen, plan. Where a whole network's compile time goes.
  std::vector<std::pair<std::string, double>> phase_seconds;
};

// The facts a compile with `options` is for: options.target, else
// target_for_arch(options.arch).
Target compile_target(const CompileOptions& options);

CompiledGraph compile_graph(const std::string& ir_text, const CompileOptions& options = {});

// Options from command-line style flags, space-separated (ff-opt --plan and
// the plan golden tests): --arch=N --precision=P --gemm=POLICY --conv=POLICY --autotune --release-inputs.
// Throws std::invalid_argument naming an unknown or malformed flag.
CompileOptions parse_compile_flags(std::string_view flags);

}  // namespace ff
