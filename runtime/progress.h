// A progress line on stderr for long jobs (loading large checkpoints, benchmarks).
// Silent for small totals so tests and tiny models print nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

class Progress {
 public:
  // Prints only when total >= min_total (units are the caller's: bytes, requests...).
  Progress(std::string label, std::uint64_t total, std::uint64_t min_total = 256ull << 20,
           std::string unit = "bytes");
  ~Progress();
  void add(std::uint64_t n);
  void done();

 private:
  void print(bool final);
  std::string label_, unit_;
  std::uint64_t total_, done_ = 0;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace strata
