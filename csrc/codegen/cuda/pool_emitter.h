#pragma once
// The pieces of a Pool group's kernel text that its forms (pool.cc: a thread
// per output element, per output element of every softmax channel, or
// transposing tiles) share: the head and signature, the window's taps with
// the prologue computed at each, the pooled values, the epilogue and stores.
// A group may pool one input with several pools of the same windows (an
// average and a max): each tap is loaded once and folded into every pool's
// accumulator; their pooled values are `pooled<i>`, i the pool's place among
// them in the group's node order.
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/cuda/kernel_source.h"
#include "ir/pool.h"
#include "kernel/group.h"

namespace ff::codegen {

bool is_softmax(const Node& n);

class PoolEmitter {
 public:
  explicit PoolEmitter(const fusion::Group& g);

  // The prologue's softmax (log_softmax), if any, and the dim it normalizes.
  const Node* norm() const { return norm_; }
  size_t norm_dim() const { return norm_dim_; }

  const Shape& in_shape() const { return pool_->input(0)->type.shape; }   // the window's space
  const Shape& out_shape() const { return pool_->result()->type.shape; }  // the iteration space
  const PoolSpec& spec() const { return spec_; }  // the first pool's (the windows are every pool's)
  size_t pools() const { return pools_.size(); }
  // The compute type of the pooled value.
  std::string pooled_type() const;

  // The parameters' value names into `ks`; the head comment,
  // the prelude and the signature into `os`, up to the index type.
  void head(std::ostringstream& os, KernelSource& ks, const std::string& form, int id);

  // The pooled values of the output element at coordinates c<d> (defined by
  // the caller) as `const T pooled<i>`: the window's origin, the taps (each
  // loading the prologue's inputs and computing the prologue there), per pool
  // the max or the sum over ATen's divisor, rounded to the result's dtype.
  // With `lanes` > 1, the pooled values of `lanes` elements from c<lane_dim>
  // on (vectorizes(lane_dim): every window tensor unit-stride or broadcast
  // along it) as `pooled<i>[lanes]`, each tap one vector load a tensor.
  void window(std::ostringstream& os, std::string ind, int lanes = 1, size_t lane_dim = 0) const;

  // The normalized form's (one pool's) pooled values `pooled0[C]`, one a channel c<D> of
  // the softmax's dim D (the other coordinates c<d> defined by the caller).
  // Per tap: the values before the softmax at every channel (`v`, one load a
  // channel and tensor), their max and sum of exp, then per channel the
  // softmax, the rest of the prologue and the fold into its accumulator.
  // Adjacent taps' loads share sectors: the second finds them in L1.
  void normalized_window(std::ostringstream& os, std::string ind) const;

  // Whether window(lanes = 4, d) applies: d is a kept dim (adjacent outputs
  // read adjacent inputs) of a multiple of 4 elements, every tensor the
  // windows read is unit-stride or broadcast along it, and every other stride
  // of those tensors is a multiple of 4 (so a vector from an element whose
  // d-coordinate is a multiple of 4 is aligned where the tensor is).
  bool vectorizes(size_t d) const;
  // The bytes a vector of 4 of the window tensors' widest element takes.
  int vector_bytes() const;

  // The epilogue on the pooled values `pooled<i>` followed by `at` (an
  // element of window()'s arrays, or nothing), its inputs read at the output
  // element c<d>; then the stores.
  void epilogue(std::ostringstream& os, const std::string& ind, const std::string& at = "") const;

  // The dim along which the tensors the window reads are unit-stride, when
  // the first output is not unit-stride along it (a channels-last input
  // pooled into a contiguous output, or a contiguous one into a
  // channels-last output): reading in the output's order would touch one
  // element per 32-byte sector.
  std::optional<size_t> transposed_dim() const;

 private:
  struct Access {
    std::string param;
    const Value* value;
  };
  const fusion::Group& g_;
  const Node* pool_ = nullptr;      // the first pool
  std::vector<const Node*> pools_;  // all of them, in the group's order
  std::vector<PoolSpec> specs_;     // theirs
  PoolSpec spec_;
  std::vector<Node*> prologue_, epilogue_;
  Node* norm_ = nullptr;  // the prologue's softmax, if any
  size_t norm_dim_ = 0;
  std::vector<Node*> before_norm_, after_norm_;  // the prologue around it
  size_t rank_ = 0, lead_ = 0;
  std::unordered_set<const Value*> read_in_window_, read_at_output_, scalars_;
  std::vector<Access> outs_, ins_;
  std::unordered_map<const Value*, std::string> expr_of_;  // scalar inputs

  // The windows' origins w<j>, each window tensor's offset b_<param> over
  // the kept dims (but `except`), and each pool's accumulators at its fold's
  // identity: `acc<i>[count]`, or `acc<i>` where count is 0.
  void window_head(std::ostringstream& os, const std::string& ind, int count, size_t except = SIZE_MAX) const;
  // Opens the loops over the taps (i<j>: the tap's input coordinate,
  // bounds-checked where windows overhang); returns the body's indentation.
  std::string open_taps(std::ostringstream& os, std::string ind) const;
  // Window tensor `a`'s element at the tap: b_<param> plus the tap's
  // coordinates (and c<with> where `with` is a dim).
  std::string tap_offset(const Access& a, size_t with = SIZE_MAX) const;
  // `acc` of pool `pool` folded with the tap's value `v`, a line: the max
  // (NaN wins, as ATen's) or the sum.
  std::string fold(size_t pool, const std::string& acc, const std::string& v) const;
  // Closes the taps' loops from `ind` back to `outer`, then each pool's pooled
  // values (`pooled<i>[count]`, or `pooled<i>` where count is 0): its
  // accumulators, over ATen's divisor for an average, rounded to the result's dtype.
  void window_tail(std::ostringstream& os, const std::string& outer, std::string ind, int count) const;
  // An offset over the coordinates c<d> (the pooled dims left out when
  // `window`, and dim `except`).
  std::string offset(const Shape& strides, bool window, size_t except = SIZE_MAX) const;
  // Average pool `pool`'s divisor: an override, the window's size, or (where
  // windows overhang) ATen's count, `divisor<pool>`: the window clipped to the
  // padded input, or to the input without count_include_pad.
  std::string divisor(std::ostringstream& os, const std::string& ind, size_t pool) const;
};

}  // namespace ff::codegen
