// ff-opt: parses IR text and runs passes over it, or compiles it to a kernel
// plan, and prints the result (like mlir-opt); the driver of the golden tests.
//   ff-opt [--passes=canonicalize,cse,dce] [FILE]            IR after the passes
//   ff-opt --plan [--arch=N] [--precision=P] [--gemm=POLICY] [--conv=POLICY] [--autotune] [--release-inputs] [FILE]
//                                                           the plan (default pipeline)
// FILE defaults to stdin.
#include <fstream>
#include <iostream>
#include <sstream>

#include "ir/graph.h"
#include "passes/pass.h"
#include "pipeline/compile.h"

int main(int argc, char** argv) {
  std::vector<std::string> passes;
  bool use_default = true, plan = false;
  std::string file, flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--passes=", 0) == 0) {
      use_default = false;
      std::stringstream ss(a.substr(9));
      for (std::string p; std::getline(ss, p, ',');)
        if (!p.empty()) passes.push_back(p);
    } else if (a == "--plan") {
      plan = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: ff-opt [--passes=p1,p2,...] [FILE]\n"
                   "       ff-opt --plan [--arch=N] [--precision=fp32|tf32] [--gemm=auto|all|off] "
                   "[--conv=direct|auto|always|off] [--autotune] [--release-inputs] [FILE]\n"
                   "passes:";
      for (auto& p : ff::passes::pass_names()) std::cout << " " << p;
      std::cout << "\n";
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      flags += " " + a;
    } else {
      file = a;
    }
  }
  std::stringstream text;
  if (file.empty()) {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "ff-opt: cannot open " << file << "\n";
      return 2;
    }
    text << in.rdbuf();
  }
  try {
    if (plan) {
      std::cout << ff::plan::print(ff::compile_graph(text.str(), ff::parse_compile_flags(flags)).plan);
      return 0;
    }
    if (!flags.empty()) throw std::invalid_argument("flags" + flags + " need --plan");
    auto g = ff::parse(text.str());
    ff::verify(*g);
    ff::passes::PassManager pm(use_default ? ff::passes::default_pipeline() : passes);
    pm.run(*g);
    std::cout << ff::print(*g);
  } catch (const std::exception& e) {
    std::cerr << "ff-opt: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
