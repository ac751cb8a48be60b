#pragma once
// Golden-file cases shared by the pass and plan tests: tests/golden/<dir>/<case>.ir
//
//   // RUN: <what to run>              first line (its meaning is the test's)
//   // free-form comments
//   graph @g(...) { ... }             the input graph
//   // CHECK:
//   // ...                            the expected output, each line commented
//                                     out with "// " so that ff-opt reads the
//                                     file as is (uncommented lines are taken verbatim)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ff::testing {

struct GoldenCase {
  std::string id;    // <subdir>_<case>, a valid gtest name
  std::string path;
  std::string run;   // the RUN line's text
  std::string input;
  std::string expected;
};

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  return lines;
}

inline std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Parses a golden file; throws std::runtime_error naming what is malformed.
inline GoldenCase load_golden_case(const std::filesystem::path& path, const std::filesystem::path& root) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::stringstream buf;
  buf << in.rdbuf();
  std::vector<std::string> lines = split_lines(buf.str());
  GoldenCase c;
  c.path = path.string();
  std::string rel = std::filesystem::relative(path, root).replace_extension("").generic_string();
  for (char& ch : rel)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  c.id = rel;
  if (lines.empty() || lines[0].rfind("// RUN:", 0) != 0) throw std::runtime_error(c.path + ": first line must be '// RUN: ...'");
  c.run = trim(lines[0].substr(7));
  size_t check = 0;
  for (size_t i = 1; i < lines.size() && !check; ++i)
    if (trim(lines[i]) == "// CHECK:") check = i;
  if (!check) throw std::runtime_error(c.path + ": no '// CHECK:' line");
  for (size_t i = 1; i < check; ++i) c.input += lines[i] + "\n";
  std::vector<std::string> expected(lines.begin() + check + 1, lines.end());
  while (!expected.empty() && trim(expected.back()).empty()) expected.pop_back();
  bool commented = std::all_of(expected.begin(), expected.end(),
                               [](const std::string& l) { return trim(l).empty() || l.rfind("//", 0) == 0; });
  for (std::string l : expected) {
    if (commented && l.rfind("//", 0) == 0) l = l.substr(l.rfind("// ", 0) == 0 ? 3 : 2);
    c.expected += l + "\n";
  }
  return c;
}

// Every case under FF_GOLDEN_DIR/<subdir>, sorted; problems go to `error`.
inline std::vector<GoldenCase> load_golden(const std::string& subdir, std::string* error) {
  std::vector<GoldenCase> cases;
  std::filesystem::path root = std::filesystem::path(FF_GOLDEN_DIR) / subdir;
  if (!std::filesystem::exists(root)) {
    *error = root.string() + " does not exist";
    return cases;
  }
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".ir") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    try {
      cases.push_back(load_golden_case(f, root));
    } catch (const std::exception& e) {
      *error += std::string(e.what()) + "\n";
    }
  }
  return cases;
}

// A line diff (LCS) of expected vs actual: "-" lines only expected, "+" only actual.
inline std::string line_diff(const std::string& expected, const std::string& actual) {
  auto a = split_lines(expected), b = split_lines(actual);
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) out += "   " + a[i++] + "\n", j++;
    else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) out += "+  " + b[j++] + "\n";
    else out += "-  " + a[i++] + "\n";
  }
  return out;
}

// Registers one test `suite.<case id>` per case, running `check` on it (call
// before main runs, e.g. from a namespace-scope initializer).
inline void register_golden(const char* suite, const std::vector<GoldenCase>& cases,
                            std::function<void(const GoldenCase&)> check) {
  class Test : public ::testing::Test {
   public:
    Test(GoldenCase c, std::function<void(const GoldenCase&)> f) : c_(std::move(c)), f_(std::move(f)) {}
    void TestBody() override { f_(c_); }

   private:
    GoldenCase c_;
    std::function<void(const GoldenCase&)> f_;
  };
  for (const GoldenCase& c : cases)
    ::testing::RegisterTest(suite, c.id.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c, check]() -> ::testing::Test* { return new Test(c, check); });
}

}  // namespace ff::testing
