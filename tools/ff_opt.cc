// ff-opt: parses IR text, runs passes, prints the result (like mlir-opt).
//   ff-opt [--passes=canonicalize,cse,dce] [FILE]   (stdin when FILE is omitted)
#include <fstream>
#include <iostream>
#include <sstream>

#include "ir/graph.h"
#include "passes/pass.h"

int main(int argc, char** argv) {
  std::vector<std::string> passes;
  bool use_default = true;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--passes=", 0) == 0) {
      use_default = false;
      std::stringstream ss(a.substr(9));
      for (std::string p; std::getline(ss, p, ',');)
        if (!p.empty()) passes.push_back(p);
    } else if (a == "-h" || a == "--help") {
      std::cout << "usage: ff-opt [--passes=p1,p2,...] [FILE]\npasses:";
      for (auto& p : ff::passes::pass_names()) std::cout << " " << p;
      std::cout << "\n";
      return 0;
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
