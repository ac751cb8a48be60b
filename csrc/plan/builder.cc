// Builds the plan of a partitioned graph (plan.h): buffers and their roles,
// kernels with launch geometry, steps, view aliasing, the prepare section and
// the free steps. Everything the walkers need is decided here.
#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "fusion/subgraph.h"
#include "plan/plan.h"

namespace ff::plan {

namespace {

using Role = Buffer::Role;

// Views whose result has the source's address (no storage offset), so a
// kernel can read the source's memory with the view's strides.
bool address_keeping_view(const Node& n) {
  switch (n.op) {
    case Op::Permute:
    case Op::Expand:
    case Op::Unsqueeze:
    case Op::Squeeze:
      return n.results.size() == 1;
    // A reshape is a view only when it needs no copy.
    case Op::View:
      return n.input(0) != nullptr && n.input(0)->type.is_contiguous() && n.result()->type.is_contiguous();
    default:
      return false;
  }
}

Role input_role(InputKind k) {
  switch (k) {
    case InputKind::User:
      return Role::Input;
    case InputKind::Param:
      return Role::Param;
    case InputKind::Buffer:
      return Role::State;
    case InputKind::Const:
      return Role::Const;
    case InputKind::Scalar:
      return Role::Scalar;
  }
  return Role::Input;
}

bool weight_role(Role r) { return r == Role::Param || r == Role::State || r == Role::Const || r == Role::Prepared; }

class Builder {
 public:
  Builder(std::unique_ptr<Graph> graph, const fusion::Partition& partition, bool release_inputs,
          const std::vector<std::string>& donated)
      : part_(partition), release_inputs_(release_inputs), donated_(donated.begin(), donated.end()) {
    p_.name = graph->name;
    p_.graph = std::move(graph);
  }

  Plan build(const std::vector<codegen::KernelSource>& sources,
             const std::vector<std::vector<codegen::KernelSource>>& variants) {
    const Graph& g = *p_.graph;
    for (Value* v : g.inputs()) {
      add_buffer(v, input_role(v->input_kind));
      p_.buffers.back().donated = release_inputs_ && p_.buffers.back().role == Role::Input && donated_.count(v->name);
    }
    for (auto& n : g.nodes())
      for (Value* r : n->results) add_buffer(r, Role::Temp);
    for (Value* v : g.inputs()) p_.inputs.push_back(id(v));
    for (Value* v : g.outputs()) p_.outputs.push_back(id(v));
    for (auto& m : g.mutations()) p_.mutations.push_back({id(m.buffer), id(m.value)});
    for (int o : p_.outputs) mark_output(o);
    for (auto& m : p_.mutations) mark_output(m.value);
    const size_t n_groups = part_.groups.size();
    for (size_t i = 0; i < n_groups; ++i) p_.kernels.push_back(kernel(part_.groups[i], sources.at(i), variants.at(i)));
    for (size_t j = 0; j < part_.library_epilogues.size(); ++j)
      p_.kernels.push_back(kernel(part_.library_epilogues[j], sources.at(n_groups + j), variants.at(n_groups + j)));
    for (size_t i = 0; i < n_groups; ++i)
      if (const int e = part_.groups[i].library_epilogue; e >= 0)
        p_.kernels[i].library_steps = library_form(part_.groups[i], static_cast<int>(n_groups) + e);
    std::vector<Step> steps;
    for (const fusion::Step& s : part_.steps) {
      if (s.kind == fusion::Step::Kind::Kernel) {
        Step st;
        st.kind = Step::Kind::Launch;
        st.kernel = s.group;
        steps.push_back(st);
      } else {
        steps.push_back(node_step(*s.node));
      }
    }
    steps = alias_views(std::move(steps));
    for (Kernel& k : p_.kernels)
      for (KernelInput& in : k.inputs) in.memory = p_.memory_of(in.buffer);
    mark_relayout(steps);
    split_prepare(std::move(steps));
    p_.prepare = with_frees(p_.prepare, /*prepare=*/true);
    p_.run = with_frees(p_.run, /*prepare=*/false);
    write_mutations_in_place();  // first: a buffer's new value goes into the buffer
    write_over_dying_inputs();
    std::set<int> prepare_reads, prepare_keeps;
    for (const Step& s : p_.prepare)
      for (int b : reads(s))
        if (p_.buffers[b].role != Role::Prepared) prepare_reads.insert(b);
    for (const Step& s : p_.run)
      for (int b : reads(s))
        if (p_.buffers[b].role == Role::Prepared) prepare_keeps.insert(b);
    p_.prepare_reads.assign(prepare_reads.begin(), prepare_reads.end());
    p_.prepare_keeps.assign(prepare_keeps.begin(), prepare_keeps.end());
    return std::move(p_);
  }

 private:
  const fusion::Partition& part_;
  const bool release_inputs_;
  const std::set<std::string> donated_;
  Plan p_;
  std::unordered_map<const Value*, int> id_;

  int id(const Value* v) const { return id_.at(v); }

  void add_buffer(const Value* v, Role role) {
    id_[v] = static_cast<int>(p_.buffers.size());
    Buffer b;
    b.name = v->name;
    b.type = v->type;
    b.role = role;
    p_.buffers.push_back(std::move(b));
  }

  void mark_output(int b) {
    if (p_.buffers[b].role == Role::Temp) p_.buffers[b].role = Role::Output;
  }

  Step node_step(const Node& n) const {
    Step st;
    st.kind = op_kind(n.op) == OpKind::Layout ? Step::Kind::View : Step::Kind::Call;
    st.node = &n;
    for (const Operand& o : n.operands) {
      Arg a;
      if (o.is_value())
        a.buffer = id(o.value);
      else
        a.literal = o.literal;
      st.operands.push_back(a);
    }
    for (const Value* r : n.results) st.results.push_back(id(r));
    return st;
  }

  Kernel kernel(const fusion::Group& group, const codegen::KernelSource& ks,
                const std::vector<codegen::KernelSource>& variants) {
    Kernel k;
    k.name = ks.name;
    k.includes = ks.includes;
    k.source = ks.source;
    k.kind = group.kind;
    k.block = {ks.block, ks.block_y, 1};
    if (ks.grid[0] > 0) {
      k.grid = {ks.grid[0], ks.grid[1], ks.grid[2]};
    } else {
      // Enough blocks for one pass of the kernel's grid-stride loop (it covers any excess).
      const int64_t per_block = int64_t{ks.block} * ks.unroll;
      k.grid = {std::min<int64_t>((ks.items + per_block - 1) / per_block, 0x7fffffff), 1, 1};
    }
    k.shared_bytes = ks.shared_bytes;
    k.vector_width = ks.vector_width;
    k.cutlass = ks.cutlass;
    k.sm90a = ks.sm90a;
    k.align_bytes = ks.align_bytes;
    auto buffer = [&](const std::string& name) { return id(p_.graph->find_value(name)); };
    for (const auto& n : ks.outputs) k.outputs.push_back(buffer(n));
    for (const auto& n : ks.inputs) k.inputs.push_back({buffer(n), -1, false});
    for (const auto& n : ks.scalars) k.scalars.push_back(buffer(n));
    k.constants = ks.constants;
    for (const auto& v : variants)
      k.variants.push_back({v.name,
                            v.translation_unit(),
                            {v.grid[0], v.grid[1], v.grid[2]},
                            {v.block, v.block_y, 1},
                            v.shared_bytes,
                            v.cutlass,
                            v.sm90a,
                            v.constants});
    k.graph = print(*fusion::extract_subgraph(group, ks.name), /*keep_names=*/true);
    for (const Value* v : group.inputs) k.graph_inputs.push_back(id(v));
    std::unordered_set<const Value*> outputs(group.outputs.begin(), group.outputs.end());
    for (const Node* n : group.nodes) {
      for (const Value* r : n->results)
        if (!outputs.count(r)) p_.buffers[id(r)].role = Role::Interior;
      k.nodes.push_back(node_step(*n));
    }
    return k;
  }

  // A conv kernel's library form: the conv (the group's first node) as a
  // library call into its result's buffer, the epilogue's own kernel reading
  // it, then its free.
  std::vector<Step> library_form(const fusion::Group& group, int epilogue_kernel) const {
    Step launch;
    launch.kind = Step::Kind::Launch;
    launch.kernel = epilogue_kernel;
    Step free;
    free.kind = Step::Kind::Free;
    free.results = {id(group.nodes.front()->result())};
    return {node_step(*group.nodes.front()), launch, free};
  }

  // Drops the view steps whose results only kernels read (directly or through
  // other such views): their buffers become aliases of the viewed memory.
  std::vector<Step> alias_views(std::vector<Step> steps) {
    std::unordered_map<int, std::vector<const Step*>> readers;
    for (const Step& s : steps) {
      if (s.kind == Step::Kind::Launch) {
        for (const KernelInput& in : p_.kernels[s.kernel].inputs) readers[in.buffer].push_back(&s);
      } else {
        for (const Arg& a : s.operands)
          if (a.is_buffer()) readers[a.buffer].push_back(&s);
      }
    }
    std::unordered_set<const Step*> aliased;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {  // readers are decided before what they read
      const Step& s = *it;
      if (s.kind != Step::Kind::View || !address_keeping_view(*s.node)) continue;
      const int r = s.results[0];
      if (p_.buffers[r].role != Role::Temp) continue;
      bool kernels_only = true;
      for (const Step* u : readers[r]) kernels_only &= u->kind == Step::Kind::Launch || aliased.count(u);
      if (kernels_only) aliased.insert(&s);
    }
    std::vector<Step> kept;
    for (Step& s : steps) {
      if (!aliased.count(&s)) {
        kept.push_back(std::move(s));
        continue;
      }
      Buffer& b = p_.buffers[s.results[0]];
      b.role = Role::Alias;
      b.alias_of = p_.memory_of(s.operands[0].buffer);  // views are aliased in order: the source is resolved
    }
    return kept;
  }

  // Memory that a library call or the caller produced may have other strides
  // than recorded; a kernel's own outputs have exactly the recorded ones.
  void mark_relayout(const std::vector<Step>& steps) {
    std::unordered_set<int> from_kernels;
    for (const Step& s : steps)
      if (s.kind == Step::Kind::Launch)
        for (int o : p_.kernels[s.kernel].outputs) from_kernels.insert(o);
    for (Kernel& k : p_.kernels)
      for (KernelInput& in : k.inputs) in.relayout = !from_kernels.count(in.memory);
  }

  std::vector<int> reads(const Step& s) const {
    std::vector<int> out;
    if (s.kind == Step::Kind::Launch) {
      const Kernel& k = p_.kernels[s.kernel];
      for (const KernelInput& in : k.inputs) out.push_back(in.memory);
      out.insert(out.end(), k.scalars.begin(), k.scalars.end());
    } else {
      for (const Arg& a : s.operands)
        if (a.is_buffer()) out.push_back(p_.memory_of(a.buffer));
    }
    return out;
  }
  std::vector<int> writes(const Step& s) const {
    return s.kind == Step::Kind::Launch ? p_.kernels[s.kernel].outputs : s.results;
  }

  // A step joins the prepare section when it reads only parameters, module
  // buffers the plan does not mutate (those change every call), constants
  // and prepared values, is not an opaque ATen op (which
  // may be random or have effects), and computes no output (the caller may
  // change an output in place; a kept value must stay as computed).
  void split_prepare(std::vector<Step> steps) {
    for (Step& s : steps) {
      bool prepared = !(s.node != nullptr && s.node->op == Op::Opaque);
      for (int b : reads(s)) prepared &= weight_role(p_.buffers[b].role) && !mutated(b);
      for (int b : writes(s)) prepared &= p_.buffers[b].role == Role::Temp;
      if (prepared)
        for (int b : writes(s)) p_.buffers[b].role = Role::Prepared;
      (prepared ? p_.prepare : p_.run).push_back(std::move(s));
    }
  }

  // Lets a kernel write an output into the memory of an input that is freed
  // right after it, instead of into memory of its own: a training step's
  // peak is a few full-size tensors live at once, and the gradient kernels
  // read one of them for the last time as they write the next; a forward's
  // fused epilogue holds a conv's result while it writes every value made
  // from it, where eager frees the result after its first reader. In a
  // backward (release_inputs_) pointwise and reduction kernels; elsewhere
  // pointwise ones only: a norm's streaming apply pass ran up to a fifth
  // slower written over its input on an H200. Only where every element of
  // the input is read before the same thread writes the output's element there:
  // - an output written after the kernel's last read of the elements
  //   (written_after_last_read);
  // - the input read only by pointwise and reduction nodes (no view or
  //   layout op reading it at another index), in the output's exact layout
  //   (itself or a contiguous reshape of it), by no other of its inputs;
  // - its memory the plan's own temporary, or an input the caller donates.
  void write_over_dying_inputs() {
    for (size_t i = 0; i + 1 < p_.run.size(); ++i) {
      const Step& s = p_.run[i];
      const Step& next = p_.run[i + 1];
      if (s.kind != Step::Kind::Launch || next.kind != Step::Kind::Free) continue;
      Kernel& k = p_.kernels[s.kernel];
      if (k.kind != fusion::Group::Kind::Pointwise && !(release_inputs_ && k.kind == fusion::Group::Kind::Reduction))
        continue;
      const std::set<int> freed(next.results.begin(), next.results.end());
      std::vector<bool> taken(k.inputs.size(), false);
      for (size_t o = 0; o < k.outputs.size(); ++o) {
        const Buffer& out = p_.buffers[k.outputs[o]];
        if ((out.role != Role::Temp && out.role != Role::Output) || !written_after_last_read(k, out.name) ||
            written_over(k, o))
          continue;
        for (size_t j = 0; j < k.inputs.size(); ++j) {
          const KernelInput& in = k.inputs[j];
          const Buffer& m = p_.buffers[in.memory];
          if (taken[j] || !freed.count(in.memory) || !(p_.buffers[in.buffer].type == out.type)) continue;
          if (!(m.role == Role::Temp || (m.role == Role::Input && m.donated))) continue;
          if (!same_elements(in) || !sole_read_of_memory(k, j) || !read_elementwise(k, p_.buffers[in.buffer].name))
            continue;
          if (k.over.empty()) k.over.assign(k.outputs.size(), -1);
          k.over[o] = static_cast<int>(j);
          taken[j] = true;
          break;
        }
      }
    }
  }

  // Lets the kernel that computes a buffer's new value (a mutation:
  // BatchNorm's running statistics) write it into the buffer itself, where
  // that kernel reads the old value for the last time: the caller's
  // write-back after the call then copies a tensor onto itself, which
  // ATen's copy_ skips. Per buffer and call, a launch fewer on the host
  // (three per train-mode BatchNorm), where a network's training step
  // spends its time. The runtime writes there even though the module holds
  // the buffer: the call replaces its value anyway. Where the old value is
  // read element for element as the output is laid out: by a pointwise
  // kernel or a one-pass reduction (written_after_last_read), or as a row
  // input of a reduction whose row result the new value is (a running
  // mean from a batch mean): reduction kernels load a row's inputs before
  // its reduction, which synchronizes the row's threads, and one thread
  // stores the row's results after it.
  void write_mutations_in_place() {
    for (const Plan::Mutation& m : p_.mutations) {
      const Buffer& buffer = p_.buffers[m.buffer];
      if (buffer.role != Role::Input && buffer.role != Role::State) continue;
      if (std::find(p_.outputs.begin(), p_.outputs.end(), m.buffer) != p_.outputs.end()) continue;
      for (size_t i = 0; i < p_.run.size(); ++i) {
        const Step& s = p_.run[i];
        if (s.kind != Step::Kind::Launch) continue;
        Kernel& k = p_.kernels[s.kernel];
        const auto o = std::find(k.outputs.begin(), k.outputs.end(), m.value) - k.outputs.begin();
        if (o == static_cast<long>(k.outputs.size())) continue;
        const std::string& value = p_.buffers[m.value].name;
        const bool read_first =
            (k.kind == fusion::Group::Kind::Pointwise || k.kind == fusion::Group::Kind::Reduction) &&
            (written_after_last_read(k, value) || row_result(k, value));
        if (read_after(i, m.buffer) || !(p_.buffers[m.value].type == buffer.type) || !read_first) break;
        for (size_t j = 0; j < k.inputs.size(); ++j) {
          const KernelInput& in = k.inputs[j];
          if (in.memory != m.buffer || !same_elements(in) || !sole_read_of_memory(k, j) ||
              !read_elementwise(k, p_.buffers[in.buffer].name) || written_over(k, o))
            continue;
          if (k.over.empty()) k.over.assign(k.outputs.size(), -1);
          k.over[o] = static_cast<int>(j);
          break;
        }
        break;
      }
    }
  }

  // Whether the reduction kernel's output `name` is a row result: computed
  // from its reductions, with as many elements as one of them gives.
  static bool row_result(const Kernel& k, const std::string& name) {
    const std::set<const Node*> behind = reductions_behind(k, name);
    int64_t elements = -1;
    for (const Step& st : k.nodes)
      for (const Value* r : st.node->results)
        if (r->name == name) elements = numel(r->type.shape);
    for (const Node* r : behind)
      if (numel(r->result()->type.shape) == elements) return true;
    return false;
  }

  // Whether kernel output `o` already goes into one of the kernel's inputs.
  static bool written_over(const Kernel& k, size_t o) { return !k.over.empty() && k.over[o] >= 0; }

  bool mutated(int buffer) const {
    for (const Plan::Mutation& m : p_.mutations)
      if (m.buffer == buffer) return true;
    return false;
  }

  // Whether a run step after step `i` reads `buffer`'s memory.
  bool read_after(size_t i, int buffer) const {
    for (size_t j = i + 1; j < p_.run.size(); ++j)
      for (int b : reads(p_.run[j]))
        if (b == buffer) return true;
    return false;
  }

  // Whether the kernel reads its input's memory element for element as laid
  // out: the buffer itself, or a reshape of it (both contiguous: the same
  // offsets in the same order).
  bool same_elements(const KernelInput& in) const {
    if (in.buffer == in.memory) return true;
    const TensorType &a = p_.buffers[in.buffer].type, &m = p_.buffers[in.memory].type;
    return a.is_contiguous() && m.is_contiguous() && a.dtype == m.dtype && numel(a.shape) == numel(m.shape);
  }

  // Whether no other input of the kernel reads input j's memory (through
  // another view, at other indices).
  static bool sole_read_of_memory(const Kernel& k, size_t j) {
    for (size_t i = 0; i < k.inputs.size(); ++i)
      if (i != j && k.inputs[i].memory == k.inputs[j].memory) return false;
    return true;
  }

  // The reduction nodes of the kernel's group that its value `name`
  // depends on (it among them).
  static std::set<const Node*> reductions_behind(const Kernel& k, const std::string& name) {
    std::set<const Node*> group, reached, out;
    for (const Step& st : k.nodes) group.insert(st.node);
    std::vector<const Node*> stack;
    for (const Node* n : group)
      for (const Value* r : n->results)
        if (r->name == name) stack.push_back(n);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!group.count(n) || !reached.insert(n).second) continue;
      if (op_kind(n->op) == OpKind::Reduction) out.insert(n);
      for (const Operand& op : n->operands)
        if (op.is_value() && op.value->producer) stack.push_back(op.value->producer);
    }
    return out;
  }

  // Whether the kernel writes its output `name` after its last read of the
  // inputs' elements: a pointwise kernel's; a reduction kernel's output
  // that needs every reduction of it (its last pass); any output of a
  // reduction kernel that reads its inputs once, in one pass (reductions
  // over the same dims, of what no reduction computes, and no output
  // applying them).
  static bool written_after_last_read(const Kernel& k, const std::string& name) {
    std::set<const Node*> all;
    for (const Step& st : k.nodes)
      if (op_kind(st.node->op) == OpKind::Reduction) all.insert(st.node);
    if (all.empty() || reductions_behind(k, name).size() == all.size()) return true;
    const std::vector<int64_t>* dims = nullptr;
    for (const Node* r : all) {
      static const std::set<Op> one_pass{Op::Sum, Op::Mean, Op::Amax, Op::Amin, Op::Prod, Op::Var, Op::Any};
      if (!one_pass.count(r->op) || reductions_behind(k, r->input(0)->name).size() > 0) return false;
      if (dims && *dims != r->attr_ints("dims")) return false;
      dims = &r->attr_ints("dims");
    }
    for (const Step& st : k.nodes)
      for (const Value* r : st.node->results)
        if (op_kind(st.node->op) != OpKind::Reduction && !reductions_behind(k, r->name).empty()) return false;
    return true;
  }

  // Whether only pointwise and reduction nodes of the kernel read `name`.
  static bool read_elementwise(const Kernel& k, const std::string& name) {
    for (const Step& st : k.nodes)
      for (const Operand& op : st.node->operands)
        if (op.is_value() && op.value->name == name && op_kind(st.node->op) != OpKind::Pointwise &&
            op_kind(st.node->op) != OpKind::Reduction)
          return false;
    return true;
  }

  // Adds free steps after each buffer's last read in `steps`: temporaries,
  // in the prepare section the prepared values that the run section does
  // not read, and in the run section inputs handed over (release_inputs_).
  std::vector<Step> with_frees(const std::vector<Step>& steps, bool prepare) {
    std::unordered_set<int> read_by_run, returned;  // returned: what the outputs and buffer updates hold
    if (prepare)
      for (const Step& s : p_.run)
        for (int b : reads(s)) read_by_run.insert(b);
    for (int o : p_.outputs) returned.insert({o, p_.memory_of(o)});
    for (const Plan::Mutation& m : p_.mutations) returned.insert({m.buffer, m.value, p_.memory_of(m.value)});
    auto freeable = [&](int b) {
      const Role r = p_.buffers[b].role;
      if (r == Role::Input) return release_inputs_ && !prepare && !returned.count(b);
      return r == Role::Temp || (prepare && r == Role::Prepared && !read_by_run.count(b));
    };
    std::unordered_map<int, size_t> last;  // buffer -> index of its last read (its definition if never read)
    for (size_t i = 0; i < steps.size(); ++i) {
      for (int b : writes(steps[i])) last[b] = i;
      for (int b : reads(steps[i])) last[b] = i;
    }
    std::vector<std::vector<int>> frees(steps.size());
    for (auto& [b, i] : last)
      if (freeable(b)) frees[i].push_back(b);
    std::vector<Step> out;
    Step unread;  // inputs handed over that no step reads: freed first
    unread.kind = Step::Kind::Free;
    for (int b : p_.inputs)
      if (!last.count(b) && freeable(b)) unread.results.push_back(b);
    if (!unread.results.empty()) out.push_back(std::move(unread));
    for (size_t i = 0; i < steps.size(); ++i) {
      out.push_back(steps[i]);
      if (frees[i].empty()) continue;
      std::sort(frees[i].begin(), frees[i].end());
      Step f;
      f.kind = Step::Kind::Free;
      f.results = frees[i];
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

std::string_view role_name(Buffer::Role r) {
  switch (r) {
    case Role::Input:
      return "input";
    case Role::Param:
      return "param";
    case Role::State:
      return "state";
    case Role::Const:
      return "const";
    case Role::Scalar:
      return "scalar";
    case Role::Temp:
      return "temp";
    case Role::Output:
      return "output";
    case Role::Prepared:
      return "prepared";
    case Role::Alias:
      return "alias";
    case Role::Interior:
      return "interior";
  }
  return "?";
}

std::string_view step_kind_name(Step::Kind k) {
  switch (k) {
    case Step::Kind::Launch:
      return "launch";
    case Step::Kind::Call:
      return "call";
    case Step::Kind::View:
      return "view";
    case Step::Kind::Free:
      return "free";
  }
  return "?";
}

int Plan::find(std::string_view name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name) return static_cast<int>(i);
  return -1;
}

Plan build(std::unique_ptr<Graph> graph, const fusion::Partition& partition,
           const std::vector<codegen::KernelSource>& kernels,
           const std::vector<std::vector<codegen::KernelSource>>& variants, bool release_inputs,
           const std::vector<std::string>& donated) {
  return Builder(std::move(graph), partition, release_inputs, donated).build(kernels, variants);
}

}  // namespace ff::plan
