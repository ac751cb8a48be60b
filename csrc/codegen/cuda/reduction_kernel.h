#pragma once
// The passes of a reduction kernel, shared by its two forms
// (reduction_rows.cc, reduction_columns.cc). Each pass takes `items` element
// positions per thread (all of a row's share when the inputs stay in
// registers, else `unroll` at a time in a loop): first every load, so their
// latencies overlap, then per element and vector lane the pass's nodes, the
// pushes into its accumulators and the outputs it writes (max-sum-exp and
// Welford accumulators take a sweep over the chunk before, for its max or its
// mean: ReductionWriter::chunked); a reduction pass ends with the form's
// merge and the row values.
#include <set>
#include <sstream>
#include <string>

#include "codegen/cuda/reduction_emit.h"

namespace ff::codegen {

class ReductionKernel {
 public:
  explicit ReductionKernel(ReductionWriter& w) : w_(w), l_(w.l), s_(w.s) {}
  virtual ~ReductionKernel() = default;

 protected:
  ReductionWriter& w_;
  const ReductionLayout& l_;
  const ReductionStrategy& s_;
  std::ostringstream os_;
  int items_ = 1, slots_ = 1;
  int accumulators_ = 1;  // slots of each accumulator a thread keeps (all its lanes')
  std::set<const ReductionAccess*> cached_, loaded_;

  // One pass: its accumulators, loads, per-element work and (reducing) merge.
  void pass(int p, ExprMap& expr_of);
  // Registers for the inputs read by several passes, when they stay in
  // registers; with ReductionStrategy::shared_items (Rows form, a block per
  // row), each thread's last items of them in shared memory instead.
  void declare_caches();
  bool in_shared(const ReductionAccess& a) const {
    return s_.shared_items > 0 && cached_.count(&a) != 0 && !item_invariant(a);
  }
  // Item u of `a` (u >= kRegItems) copied to its shared-memory slot.
  void shared_load(const ReductionAccess& a, const std::string& in);
  static std::string storage_vector(const ReductionAccess& a);  // ff_vec<storage type, kVec>
  static std::string shared_slot(const ReductionAccess& a);     // item u's slot, for lane `lane`
  // Lane k of a cached input's item u, in registers or shared memory.
  std::string cached_value(const ReductionAccess& a) const;
  // Whether every item of a thread reads the same elements of `a`
  // (ReductionLayout::repeats_within): then it takes one item's registers
  // and loads, not `items`.
  bool item_invariant(const ReductionAccess& a) const;
  std::string item(const ReductionAccess& a) const { return item_invariant(a) ? "[0]" : "[u]"; }
  int items_of(const ReductionAccess& a) const { return item_invariant(a) ? 1 : items_; }
  // `const bool aligned`: every pointer that vector loads or stores use is aligned to the vector.
  void emit_aligned();
  // a's offset at the element whose coordinates over the reduced dims are e0, e1, ...
  std::string elem_offset(const ReductionAccess& a) const;
  void vector_load(const ReductionAccess& a, const std::string& dst, const std::string& in);
  void vector_store(const ReductionAccess& a, const std::string& in);

  // ---- what the forms differ in
  // Elements between a thread's consecutive items (0: no fixed step).
  virtual int64_t item_step() const { return 0; }
  virtual std::string stream_loop() const = 0;                  // header of the streaming loop over `start`
  virtual std::string element(const std::string& u) const = 0;  // item u's element index
  virtual bool tail() const = 0;                                // whether items can run past the row's end
  virtual bool per_lane(const ReductionAccess& a) const = 0;    // a's registers hold kVec values per item
  virtual bool vectorized(const ReductionAccess& a) const = 0;  // a takes vector loads or stores
  virtual void load(const ReductionAccess& a, const std::string& dst, const std::string& in) = 0;
  virtual void store(const ReductionAccess& a, const std::string& in) = 0;
  virtual std::string slot() const = 0;        // an accumulator's slot for item u, lane k
  virtual std::string chunk_slot() const = 0;  // the slot of lane k's chunk (every item u of it)
  virtual std::string index() const = 0;       // the element index argmax/argmin push
  // Whether the thread's row (column) is the tensor's, not the last one
  // again for a thread past the end that takes part in the merges.
  virtual std::string valid() const = 0;
  virtual void merge(int p, ExprMap& expr_of) = 0;
  // After a chunk's sweep, before the accumulators rebase on it: where the
  // chunk is a thread's whole share of a row, the form may settle the chunk's
  // max or mean over the row (RowsKernel).
  virtual void before_rebase(int /*p*/) {}
};

}  // namespace ff::codegen
