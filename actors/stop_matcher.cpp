#include "actors/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace strata::actors {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(const std::string& delta) {
  if (stopped_) return "";
  held_ += delta;
  if (stops_.empty()) return std::exchange(held_, std::string());
  // Earliest match wins (then the longest at that position).
  std::size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const auto p = held_.find(s);
    if (p != std::string::npos &&
        (best == std::string::npos || p < best || (p == best && s.size() > matched_.size()))) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Withhold the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const auto& s : stops_) {
    const std::size_t max_k = std::min(s.size() - 1, held_.size());
    for (std::size_t k = max_k; k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace strata::actors
