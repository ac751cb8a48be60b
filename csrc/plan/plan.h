#pragma once
// The kernel plan: what runs, in which order, on which memory. Built once in
// C++ from a compiled graph (builder.cc); the in-process executor and the
// emitted ModelNew file both walk it and decide nothing of their own.
//
// - Buffers: one per IR value (dtype, shape, strides), with its role: a graph
//   input (user input, parameter, module buffer, constant, scalar), a
//   temporary, an output, a value the prepare section computes, an alias (a
//   view only kernels read: it has another buffer's address and its own
//   strides, and no step computes it) or an interior value of a kernel (never
//   materialized, except when the kernel's group runs op by op or a conv
//   kernel's library form writes its conv's result).
// - Kernels: generated CUDA with launch geometry and parameters; the group's
//   nodes as steps over buffers, for running it op by op (no GPU, a pointer
//   misaligned for a GEMM kernel's vectors, a kernel that did not compile);
//   a conv kernel with an epilogue also has a library form: cuDNN's conv, then
//   the epilogue's own kernel (one more entry of `kernels`, which no section
//   launches), where cuDNN times faster or the conv kernel cannot run.
// - Steps: launch a kernel, call a library (ATen) op, make a view, free
//   buffers after their last use. A pointwise kernel (in a backward, a
//   reduction kernel too) may write an output over an input whose memory
//   dies with it (Kernel::over): a temporary, or an input its caller
//   donates; the kernel computing a buffer's new value may write it into
//   the buffer (a mutation, written in place).
// - prepare: the steps that depend only on parameters, module buffers and
//   constants. Their results are kept between calls and computed again only
//   when something they read changes; `run` is everything else, every call.
//
// The text form (printer.cc, parser.cc) round-trips exactly and is what the
// golden tests under tests/golden/plan/ compare (docs/ARCHITECTURE.md).
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "ir/graph.h"
#include "kernel/group.h"

namespace ff::plan {

struct Buffer {
  enum class Role : uint8_t { Input, Param, State, Const, Scalar, Temp, Output, Prepared, Alias, Interior };
  std::string name;  // the IR value's name
  TensorType type;
  Role role = Role::Temp;
  int alias_of = -1;  // Alias: the buffer whose memory this one views (itself never an alias)
  // Input: the caller hands it over to be written over after its last read
  // (a backward's saved value that AOTAutograd donates: no output or input
  // of the forward shares its memory).
  bool donated = false;
};
// A buffer's lifetime: from the step that writes it to the free step after
// its last read (temporaries; prepared values the run section does not read);
// graph inputs, outputs and kept prepared values outlive the plan's call.
std::string_view role_name(Buffer::Role r);

// A step operand: a buffer or a literal.
struct Arg {
  int buffer = -1;  // -1: `literal`
  Scalar literal;
  bool is_buffer() const { return buffer >= 0; }
};

// One tensor a kernel reads: the buffer named in its parameter list and the
// buffer whose memory it reads (the same, or an alias's target). `relayout`:
// the memory may come from a library call (or the caller) with other strides
// than recorded, while the kernel's index math is specialized to them: check,
// and copy into the recorded layout where they differ.
struct KernelInput {
  int buffer = -1;
  int memory = -1;
  bool relayout = false;
};

struct Step;

struct Kernel {
  struct Variant {  // another candidate of the same kernel (autotuning)
    std::string name, translation_unit;
    std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
    int shared_bytes = 0;
    bool cutlass = false, sm90a = false;  // as the kernel's own (a Hopper kernel's candidates are CUTLASS's)
    std::vector<int64_t> constants;       // its launch constants (KernelSource::constants)
  };
  std::string name;
  std::vector<std::string> includes;  // its #include lines (not in the text form)
  std::string source;                 // the CUDA code after them (not in the text form)
  fusion::Group::Kind kind = fusion::Group::Kind::Pointwise;
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  int shared_bytes = 0;
  int vector_width = 1;
  bool cutlass = false;      // compiled with CUTLASS's headers on the include path
  bool sm90a = false;        // built for sm_90a (wgmma): runs on sm_90 only
  int align_bytes = 0;       // every pointer must be aligned to it (else run op by op)
  std::vector<int> outputs;  // buffers, parameter order
  // Per output (empty: none): the input (index into `inputs`) whose memory
  // it is written into, or -1 for memory of its own. The input dies with
  // the kernel (or is the buffer a mutation gives this output's value), has
  // the output's layout, and each element is read before the same thread
  // writes it there (builder.cc: which kernels qualify).
  std::vector<int> over;
  std::vector<KernelInput> inputs;
  std::vector<int> scalars;  // scalar-input buffers (passed as doubles)
  // Passed after the scalars, a long long each (KernelSource::constants): a
  // GEMM's sizes and strides, which kernels of the same code take apart.
  std::vector<int64_t> constants;
  std::vector<Variant> variants;
  std::string graph;              // the group as a standalone graph (IR text, plan names)
  std::vector<int> graph_inputs;  // the buffers `graph` takes, in its parameter order
  std::vector<Step> nodes;        // the group's nodes as call steps over buffers
  // A conv kernel with an epilogue: the conv's library call into its result's
  // (interior) buffer, the launch of the epilogue's kernel, the free of the
  // result. Empty for any other kernel.
  std::vector<Step> library_steps;

  std::string translation_unit() const {  // what NVRTC compiles: includes, then source
    std::string tu;
    for (const auto& inc : includes) tu += inc + "\n";
    return tu + source;
  }
  // What the kernel compiles to, less its name: the translation unit without
  // its comments (which quote the group's IR, value names and all) and with
  // the name replaced, plus the compile flags. Kernels with equal keys (the
  // steps of an unrolled loop) compile once.
  std::string compile_key() const;
};

struct Step {
  enum class Kind : uint8_t { Launch, Call, View, Free };
  Kind kind = Kind::Call;
  int kernel = -1;             // Launch: index into Plan::kernels
  const Node* node = nullptr;  // Call, View: the IR node (owned by Plan::graph)
  std::vector<Arg> operands;   // Call, View: the node's operands
  std::vector<int> results;    // Call, View: result buffers; Free: the buffers freed
};
std::string_view step_kind_name(Step::Kind k);

struct Plan {
  std::string name;
  std::unique_ptr<Graph> graph;  // owns the nodes Call/View steps point at
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<int> inputs;   // the graph's inputs, in order
  std::vector<int> outputs;  // the graph's outputs, in order
  struct Mutation {
    int buffer, value;
  };
  std::vector<Mutation> mutations;  // module buffers written back after the outputs
  std::vector<Step> prepare;
  std::vector<int> prepare_reads;  // the parameters, module buffers and constants prepare reads
  std::vector<int> prepare_keeps;  // the prepared values run reads (kept between calls)
  std::vector<Step> run;

  int find(std::string_view name) const;  // buffer index by name; -1 if absent
  // The steps a kernel input's memory reads: the buffer itself or its alias target.
  int memory_of(int buffer) const {
    return buffers[buffer].role == Buffer::Role::Alias ? buffers[buffer].alias_of : buffer;
  }
};

// Builds the plan of a partitioned graph: `kernels[i]` (and its autotuning
// `variants[i]`) is the kernel of partition.groups[i], then of
// partition.library_epilogues[i - groups.size()]. The plan takes `graph`
// over; the partition's nodes must be its nodes.
// `release_inputs`: the caller hands its input tensors over (a backward's
// saved values, which AOTAutograd lets go of as it calls): the run section
// frees each input that is no output after its last read, as a temporary.
// `donated`: the inputs (by name) that may also be written over then.
Plan build(std::unique_ptr<Graph> graph, const fusion::Partition& partition,
           const std::vector<codegen::KernelSource>& kernels,
           const std::vector<std::vector<codegen::KernelSource>>& variants, bool release_inputs = false,
           const std::vector<std::string>& donated = {});

std::string print(const Plan& p);
std::string print_step(const Plan& p, const Step& s);  // one step's line, as print() writes it
// Throws IRError("line L: ...") for malformed text. Kernel sources are not
// part of the text: a parsed plan's kernels have none (it cannot run).
Plan parse(const std::string& text);

}  // namespace ff::plan
