// A deterministic driver for the IR fuzz target (any LLVMFuzzerTestOneInput
// over IR text), so that CI runs it with any compiler (CTest: a few seconds, thousands of inputs):
//
//   fuzz_ir_parser_plain [--runs N] [--seed S] [--dict FILE] [--crash-file PATH] SEEDS...
//
// SEEDS are files or directories (searched recursively). Every seed runs
// once, then N mutants: each one a seed or an earlier accepted mutant with 1 to
// 4 stacked edits (bit flips, byte edits, dictionary tokens, op names,
// boundary integers, replaced shapes, range deletes and copies, splices with
// another seed, swapped lines).
// The same arguments always give the same inputs. Unlike libFuzzer there is no
// coverage feedback; mutants the target got through are kept as new bases,
// which reaches past the parser into the verifier and the round trip.
//
// On a failure (an exception escaping the target, a crash signal, an abort,
// an input running past 10 s) the input is written to the crash file
// (default ./fuzz-crash.ir) and the process exits non-zero.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ir/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
constexpr bool kSanitized = false;
#endif

constexpr unsigned kInputTimeLimitSeconds = 10;
constexpr size_t kMaxPoolSize = 4096;  // accepted mutants kept as bases

// The input being run and where to write it; read by the signal handler.
std::string g_current;
std::string g_crash_file = "fuzz-crash.ir";

void write_crash_file() {
  // Only async-signal-safe calls: this also runs inside the signal handler.
  int fd = ::open(g_crash_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < g_current.size()) {
    ssize_t n = ::write(fd, g_current.data() + done, g_current.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

void on_fatal_signal(int sig) {
  write_crash_file();
  const char* msg = sig == SIGALRM ? "fuzz: an input ran too long; it is in the crash file\n"
                                   : "fuzz: fatal signal; the input is in the crash file\n";
  ssize_t ignored = ::write(2, msg, std::strlen(msg));
  (void)ignored;
  ::signal(sig == SIGALRM ? SIGABRT : sig, SIG_DFL);
  ::raise(sig == SIGALRM ? SIGABRT : sig);
}

class Rng {  // xorshift64*: small, fast and the same on every platform
 public:
  explicit Rng(uint64_t seed) : s_(seed ? seed : 1) {}
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545f4914f6cdd1dull;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

 private:
  uint64_t s_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// libFuzzer dictionary lines: `"token"` or `name="token"`, with \\ \" \xNN escapes.
std::vector<std::string> read_dict(const std::string& path) {
  std::vector<std::string> tokens;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    size_t open = line.find('"');
    size_t close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    std::string token;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 1 < close) {
        char e = line[++i];
        if (e == 'x' && i + 2 < close) {
          token += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          token += e;
        }
      } else {
        token += line[i];
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

const std::vector<std::string>& boundary_numbers() {
  static const std::vector<std::string> v = {
      "0", "1", "-1", "2", "-2", "65536", "2147483648", "3037000500", "4611686018427387904",
      "9223372036854775807", "-9223372036854775808", "99999999999999999999", "1e308", "-0.0",
      "nan", "inf", "-inf", "1e-320"};
  return v;
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> tokens) : rng_(seed), tokens_(std::move(tokens)) {
    for (size_t i = 0; i < ff::kNumOps; ++i) tokens_.emplace_back(ff::op_info(static_cast<ff::Op>(i)).name);
  }

  std::string mutate(std::string s, const std::vector<std::string>& others) {
    const size_t edits = 1 + rng_.below(4);
    for (size_t e = 0; e < edits; ++e) edit(s, others);
    return s;
  }

 private:
  Rng rng_;
  std::vector<std::string> tokens_;

  size_t pos(const std::string& s) { return rng_.below(s.size() + 1); }

  void edit(std::string& s, const std::vector<std::string>& others) {
    switch (rng_.below(9)) {
      case 0:  // flip one bit
        if (!s.empty()) s[rng_.below(s.size())] ^= static_cast<char>(1u << rng_.below(8));
        break;
      case 1: {  // overwrite a byte with a syntax character
        static const char kSyntax[] = "%@(){}[]:,=-+.e0123456789 \n\"\\/";
        if (!s.empty()) s[rng_.below(s.size())] = kSyntax[rng_.below(sizeof kSyntax - 1)];
        break;
      }
      case 2:  // insert a dictionary token or an op name
        if (!tokens_.empty()) s.insert(pos(s), tokens_[rng_.below(tokens_.size())]);
        break;
      case 3: {  // erase a short range
        size_t at = pos(s);
        s.erase(at, 1 + rng_.below(16));
        break;
      }
      case 4: {  // copy a range elsewhere (duplicates nodes, operands, dims)
        if (s.empty()) break;
        size_t from = rng_.below(s.size());
        std::string piece = s.substr(from, 1 + rng_.below(64));
        s.insert(pos(s), piece);
        break;
      }
      case 5: {  // replace a run of digits with a boundary number
        size_t at = s.find_first_of("0123456789", pos(s));
        if (at == std::string::npos) at = s.find_first_of("0123456789");
        if (at == std::string::npos) break;
        size_t end = s.find_first_not_of("0123456789", at);
        s.replace(at, (end == std::string::npos ? s.size() : end) - at,
                  boundary_numbers()[rng_.below(boundary_numbers().size())]);
        break;
      }
      case 6: {  // splice: this input's head, another's tail
        if (others.empty()) break;
        const std::string& o = others[rng_.below(others.size())];
        s = s.substr(0, pos(s)) + o.substr(rng_.below(o.size() + 1));
        break;
      }
      case 7: {  // replace a [...] list (a shape or an int attribute) with another
        static const char* const kLists[] = {"[]", "[0]", "[1]", "[2,3]", "[1,1,1]", "[-1]", "[0, 1]", "[3,0,2]"};
        size_t open = s.find('[', pos(s));
        if (open == std::string::npos) open = s.find('[');
        size_t close = open == std::string::npos ? open : s.find(']', open);
        if (close != std::string::npos) s.replace(open, close + 1 - open, kLists[rng_.below(std::size(kLists))]);
        break;
      }
      default: {  // swap two lines (definitions after uses, returns mid-graph)
        std::vector<std::string> lines;
        std::istringstream in(s);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
        if (lines.size() < 2) break;
        std::swap(lines[rng_.below(lines.size())], lines[rng_.below(lines.size())]);
        s.clear();
        for (const std::string& l : lines) s += l + "\n";
        break;
      }
    }
  }
};

// Runs one input; false (after reporting) when it escaped with an exception.
bool run_one(const std::string& input, const std::string& origin) {
  g_current = input;
  ::alarm(kInputTimeLimitSeconds);
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  } catch (const std::exception& e) {
    write_crash_file();
    std::fprintf(stderr, "fuzz: %s: the target threw %s (not an ff::IRError); input in %s\n", origin.c_str(),
                 e.what(), g_crash_file.c_str());
    return false;
  } catch (...) {
    write_crash_file();
    std::fprintf(stderr, "fuzz: %s: the target threw a non-std exception; input in %s\n", origin.c_str(),
                 g_crash_file.c_str());
    return false;
  }
  ::alarm(0);
  return true;
}

// Whether parse and verify accept the input (the target returns 0 either way).
bool accepted(const std::string& input) {
  try {
    ff::verify(*ff::parse(input));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

int usage() {
  std::fprintf(stderr, "usage: fuzz [--runs N] [--seed S] [--dict FILE] [--crash-file PATH] SEED_FILE_OR_DIR...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 20000, seed = 1;
  std::string dict;
  std::vector<std::string> seed_paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--runs" && has_value) runs = std::stoull(argv[++i]);
    else if (a == "--seed" && has_value) seed = std::stoull(argv[++i]);
    else if (a == "--dict" && has_value) dict = argv[++i];
    else if (a == "--crash-file" && has_value) g_crash_file = argv[++i];
    else if (a.rfind("--", 0) == 0) return usage();
    else seed_paths.push_back(a);
  }
  std::vector<std::string> seeds;
  std::vector<std::string> names;
  for (const std::string& p : seed_paths) {
    std::vector<fs::path> files;
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());  // directory order differs between file systems
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz: no such seed file or directory: %s\n", p.c_str());
      return 2;
    }
    for (const fs::path& f : files) {
      seeds.push_back(read_file(f));
      names.push_back(f.string());
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "fuzz: no seed inputs\n");
    return 2;
  }
  // Under ASan its own SEGV report is more useful; it then aborts (abort_on_error=1).
  for (int sig : {SIGABRT, SIGALRM}) ::signal(sig, on_fatal_signal);
  if (!kSanitized)
    for (int sig : {SIGSEGV, SIGFPE, SIGBUS, SIGILL}) ::signal(sig, on_fatal_signal);

  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < seeds.size(); ++i)
    if (!run_one(seeds[i], names[i])) return 1;

  Mutator mutator(seed, dict.empty() ? std::vector<std::string>{} : read_dict(dict));
  std::vector<std::string> pool = seeds;  // bases: seeds, then accepted mutants
  uint64_t accepted_mutants = 0;
  Rng pick(seed * 0x9e3779b97f4a7c15ull);
  for (uint64_t r = 0; r < runs; ++r) {
    std::string input = mutator.mutate(pool[pick.below(pool.size())], seeds);
    if (!run_one(input, "mutant " + std::to_string(r))) return 1;
    if (accepted(input)) {
      ++accepted_mutants;
      if (pool.size() < kMaxPoolSize) pool.push_back(std::move(input));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %llu inputs (%zu seeds, %llu mutants, %llu of them accepted), 0 failures, %.1f s\n",
              static_cast<unsigned long long>(seeds.size() + runs), seeds.size(),
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(accepted_mutants),
              seconds);
  return 0;
}
