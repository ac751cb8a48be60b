#pragma once
// What the two forms of reduction kernel (reduction_rows.cc,
// reduction_columns.cc) share: the accumulators, which nodes each pass over
// the rows computes per element, the per-row values between passes, and the
// kernel's signature. A kernel makes one pass per reduction level (levels
// read the results of earlier ones, as the manual softmax's sum reads its
// max), then, if outputs are left, an apply pass that writes them.
#include <functional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/cuda/reduction.h"

namespace ff::codegen {

// One accumulator; reductions of one value that can share it do (mean and
// var: Welford's; amax and argmax; softmax, log_softmax and logsumexp).
struct Accumulator {
  enum class Kind { Sum, Prod, Max, Min, Any, Welford, ArgMax, ArgMin, MaxSumExp } kind;
  const Value* input = nullptr;
  int level = 1;
  std::string name;  // a0, a1, ...
  std::string type;  // its CUDA type, e.g. ff_welford<float>
  bool indexed() const { return kind == Kind::ArgMax || kind == Kind::ArgMin; }
};

using ExprMap = std::unordered_map<const Value*, std::string>;

class ReductionWriter {
 public:
  // `lanes`: rows a thread holds values of (Columns: the vector width; Rows: 1).
  ReductionWriter(const fusion::Group& g, const fusion::ReductionDomain& d, const ReductionLayout& l,
                  const ReductionStrategy& s, int id, int lanes);

  const fusion::Group& g;
  const fusion::ReductionDomain& d;
  const ReductionLayout& l;
  const ReductionStrategy& s;
  KernelSource ks;  // name and parameters filled in; geometry and source by the form
  std::vector<Accumulator> accs;

  // The passes: 1..levels reduce; levels + 1 (if passes() says so) writes
  // the outputs that are left.
  int passes() const { return passes_; }
  const std::vector<Node*>& element_nodes(int pass) const { return element_nodes_.at(pass); }
  // Inputs the pass reads per element, and outputs it writes per element.
  const std::vector<const ReductionAccess*>& element_inputs(int pass) const { return element_inputs_.at(pass); }
  const std::vector<const ReductionAccess*>& element_outputs(int pass) const { return element_outputs_.at(pass); }
  // Whether an input is read per element by more than one pass.
  bool read_again(const ReductionAccess* a) const;
  const std::vector<const ReductionAccess*>& row_inputs() const { return row_inputs_; }
  std::vector<const ReductionAccess*> row_outputs() const;

  // Comment (what the kernel computes and how), preludes and the signature up to '{'.
  void head(std::ostringstream& os, const std::string& form) const;
  std::string index_type() const;  // int unless an offset needs 64 bits
  // Scalar kernel parameters into `expr_of`.
  void bind_scalars(ExprMap& expr_of) const;

  // The pass's per-element nodes, then each of its accumulators pushed at
  // slot `slot` (an index expression; max-sum-exp and Welford ones at
  // `chunk_slot`, see chunked()) with element index `index`.
  void emit_element(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of, const std::string& slot,
                    const std::string& chunk_slot, const std::string& index);
  // Whether the pass pushes accumulators that take each chunk of elements (a
  // thread's items of a vector lane: chunk_slot) in two sweeps, after
  // emit_chunk_begin. Max-sum-exp: the chunk's max (emit_sees), a rebase of
  // the sum to it (emit_rebase), then exp(x - max) pushed. Welford: the
  // chunk's sum and count (emit_sees), its mean (emit_rebase), the squared
  // deviations from it (the pushes), and the chunk merged in (emit_chunk_end):
  // a division per chunk rather than per element, and the two-pass variance.
  bool chunked(int pass) const;
  void emit_chunk_begin(std::ostringstream& os, int pass, const std::string& ind, int slots) const;
  void emit_sees(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of,
                 const std::string& chunk_slot);
  void emit_rebase(std::ostringstream& os, int pass, const std::string& ind, const std::string& chunk_slot) const;
  void emit_chunk_end(std::ostringstream& os, int pass, const std::string& ind, const std::string& chunk_slot) const;
  void declare_accumulators(std::ostringstream& os, int pass, const std::string& ind, int slots) const;
  // Row values: finalized results of the level's reductions (`acc(a)`: the
  // expression of accumulator a's merged partial, may use lane k), then the
  // per-row nodes that became computable. With lanes > 1 they are arrays
  // indexed by k, filled in a loop over the lanes.
  void emit_row_values(std::ostringstream& os, int level, const std::string& ind, ExprMap& expr_of,
                       const std::function<std::string(const Accumulator&)>& acc);
  // Per-row inputs (`offset(a)`: the row's offset in a, may use lane k), then level-0 row values.
  void emit_row_inputs(std::ostringstream& os, const std::string& ind, ExprMap& expr_of,
                       const std::function<std::string(const ReductionAccess&)>& offset);
  // Elements per thread each accumulator keeps in flight, as register words.
  int accumulator_words() const;

 private:
  int lanes_;
  int passes_ = 0;
  int tmp_ = 0;
  std::unordered_set<const Value*> scalars_;
  std::unordered_set<const Node*> row_done_;
  std::unordered_map<const Node*, int> acc_of_;
  std::unordered_map<const Node*, std::vector<std::string>> stats_;  // normalizations: their row values
  std::unordered_map<int, std::vector<Node*>> element_nodes_;
  std::unordered_map<int, std::vector<const ReductionAccess*>> element_inputs_, element_outputs_;
  std::vector<const ReductionAccess*> row_inputs_;

  void plan_accumulators();
  // The pass's per-element nodes into `expr_of`.
  void emit_values(std::ostringstream& os, int pass, const std::string& ind, ExprMap& expr_of);
  void plan_passes();
  std::string normalization_expr(const Node& n, const ExprMap& expr_of) const;
  std::string finalize_expr(const Node& n, const std::string& a) const;
};

// The kernels of the two forms.
KernelSource generate_reduction_rows(ReductionWriter& w);
KernelSource generate_reduction_columns(ReductionWriter& w);

// A load of `a` at `offset` (an expression) as its compute type.
std::string load_expr(const ReductionAccess& a, const std::string& offset);
// The index math that turns `index` into coordinates over `sizes` (outermost
// first): one `const index_t name<d> = ...;` per dim.
void emit_unravel(std::ostringstream& os, const std::string& ind, const std::string& index, const Shape& sizes,
                  const std::string& name);
// sum of coordinate * stride (coordinates named name<d>), "0" when none.
std::string offset_expr(const std::string& name, const Shape& strides);

}  // namespace ff::codegen
