// The plan's text form (plan.h); parser.cc reads exactly what this writes:
//
//   plan @NAME {
//     buffers:
//       %x: f32[16,32] input [donated]       one line per buffer but interior
//       %0: f32[32,24]{1,32} alias %w         ones (those a library form writes
//       %2: f32[8,16,30,30] interior          are listed): role, an alias's memory
//     kernel @NAME KIND grid=[..] block=[..] shared=N vector=N [cutlass] [sm90a] [align=N] [variants=N]
//            [constants=[..]]
//       graph @NAME(...) { ... }              the kernel's nodes (plan names)
//       library:                              a conv kernel's library form:
//         call %2 = convolution(%x, %w) ...   its conv,
//         launch @NAME (%5) <- (%2 relayout)  the epilogue's kernel,
//         free %2                             the conv's result freed
//     prepare (%w) -> (%3):                 the weights it reads -> the values run keeps
//       call %3 = sum(%w) {..} : f32[24]      an IR node line
//     run:
//       view %5 = permute(%x) {..} : ...
//       launch @NAME (%7) <- (%5, %1 relayout) scalars (%s)
//       launch @NAME (%8 over %7) <- (%7)   an output written over an input
//       free %5, %6
//     return %7
//     mutate %bn.running_mean = %9
//   }
#include <sstream>
#include <unordered_set>

#include "plan/plan.h"

namespace ff::plan {

namespace {

std::string dims(const std::array<int64_t, 3>& d) {
  return "[" + std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]) + "]";
}

class Printer {
 public:
  explicit Printer(const Plan& p) : p_(p) {}

  std::string plan() {
    os_ << "plan @" << p_.name << " {\n  buffers:\n";
    std::unordered_set<int> library_results;  // interior buffers a library form writes: listed
    for (const Kernel& k : p_.kernels)
      for (const Step& s : k.library_steps)
        if (s.kind == Step::Kind::Call) library_results.insert(s.results.begin(), s.results.end());
    for (const Buffer& b : p_.buffers) {
      if (b.role == Buffer::Role::Interior && !library_results.count(static_cast<int>(&b - p_.buffers.data())))
        continue;
      os_ << "    " << ref(&b - p_.buffers.data()) << ": " << format_type(b.type) << " " << role_name(b.role);
      if (b.role == Buffer::Role::Alias) os_ << " " << ref(b.alias_of);
      if (b.donated) os_ << " donated";
      os_ << "\n";
    }
    for (const Kernel& k : p_.kernels) kernel(k);
    os_ << "  prepare";
    if (!p_.prepare.empty()) os_ << " (" << refs(p_.prepare_reads) << ") -> (" << refs(p_.prepare_keeps) << ")";
    os_ << ":\n";
    steps(p_.prepare);
    os_ << "  run:\n";
    steps(p_.run);
    os_ << "  return";
    for (size_t i = 0; i < p_.outputs.size(); ++i) os_ << (i ? ", " : " ") << ref(p_.outputs[i]);
    os_ << "\n";
    for (const auto& m : p_.mutations) os_ << "  mutate " << ref(m.buffer) << " = " << ref(m.value) << "\n";
    os_ << "}\n";
    return os_.str();
  }

  std::string step(const Step& s) const {
    std::string out(step_kind_name(s.kind));
    switch (s.kind) {
      case Step::Kind::Call:
      case Step::Kind::View:
        return out + " " + print_node(*s.node);
      case Step::Kind::Free:
        return out + " " + refs(s.results);
      case Step::Kind::Launch:
        break;
    }
    const Kernel& k = p_.kernels[s.kernel];
    out += " @" + k.name + " (";
    for (size_t i = 0; i < k.outputs.size(); ++i) {
      out += (i ? ", " : "") + ref(k.outputs[i]);
      if (!k.over.empty() && k.over[i] >= 0) out += " over " + ref(k.inputs[k.over[i]].buffer);
    }
    out += ") <- (";
    for (size_t i = 0; i < k.inputs.size(); ++i)
      out += (i ? ", " : "") + ref(k.inputs[i].buffer) + (k.inputs[i].relayout ? " relayout" : "");
    out += ")";
    if (!k.scalars.empty()) out += " scalars (" + refs(k.scalars) + ")";
    return out;
  }

 private:
  const Plan& p_;
  std::ostringstream os_;

  void steps(const std::vector<Step>& steps) {
    for (const Step& s : steps) os_ << "    " << step(s) << "\n";
  }

  std::string ref(size_t b) const { return "%" + p_.buffers[b].name; }

  std::string refs(const std::vector<int>& bs) const {
    std::string s;
    for (size_t i = 0; i < bs.size(); ++i) s += (i ? ", " : "") + ref(bs[i]);
    return s;
  }

  void kernel(const Kernel& k) {
    os_ << "  kernel @" << k.name << " " << fusion::group_kind_name(k.kind) << " grid=" << dims(k.grid)
        << " block=" << dims(k.block) << " shared=" << k.shared_bytes << " vector=" << k.vector_width;
    if (k.cutlass) os_ << " cutlass";
    if (k.sm90a) os_ << " sm90a";
    if (k.align_bytes) os_ << " align=" << k.align_bytes;
    if (!k.variants.empty()) os_ << " variants=" << k.variants.size();
    if (!k.constants.empty()) {
      os_ << " constants=[";
      for (size_t i = 0; i < k.constants.size(); ++i) os_ << (i ? "," : "") << k.constants[i];
      os_ << "]";
    }
    os_ << "\n";
    std::istringstream lines(k.graph);
    for (std::string line; std::getline(lines, line);) os_ << "    " << line << "\n";
    if (k.library_steps.empty()) return;
    os_ << "    library:\n";
    for (const Step& s : k.library_steps) os_ << "      " << step(s) << "\n";
  }
};

}  // namespace

std::string print(const Plan& p) { return Printer(p).plan(); }
std::string print_step(const Plan& p, const Step& s) { return Printer(p).step(s); }

}  // namespace ff::plan
