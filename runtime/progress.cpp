#include "runtime/progress.h"

#include <cstdio>

namespace strata {

Progress::Progress(std::string label, std::uint64_t total, std::uint64_t min_total,
                   std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(total >= min_total && total > 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { done(); }

void Progress::add(std::uint64_t n) {
  done_ += n;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ > std::chrono::milliseconds(200)) {
    last_ = now;
    print(false);
  }
}

void Progress::done() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) print(true);
}

void Progress::print(bool final) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100;
  if (unit_ == "bytes") {
    std::fprintf(stderr, "\r%s %5.1f%% (%.2f / %.2f GB, %.1fs)%s", label_.c_str(), pct,
                 static_cast<double>(done_) / 1e9, static_cast<double>(total_) / 1e9, secs,
                 final ? "\n" : "");
  } else {
    std::fprintf(stderr, "\r%s %5.1f%% (%llu / %llu %s, %.1fs)%s", label_.c_str(), pct,
                 static_cast<unsigned long long>(done_), static_cast<unsigned long long>(total_),
                 unit_.c_str(), secs, final ? "\n" : "");
  }
  std::fflush(stderr);
}

}  // namespace strata
