// Which rows of a step report their kept positions (SeqStep::report_kept) on a census step: at
// most `max_rows`, those whose sequences were asked longest ago (turn 0: never), ties by row
// order. A census on the CUDA backend gathers and counts every kept slot of every layer of the
// rows asked, so asking every row of a large batch costs more than the census interval (seen on
// the H200: 200 rows made every step a census step, 2 steps/s); turns keep the cost bounded and
// still count every running sequence within ceil(n / max_rows) censuses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata::actors {

// `turns[i]`: the census turn that last asked row i's sequence, or nullopt-like kNotServed for
// rows that take no part (replays). Sets pick[i] = 1 for the rows asked; `order` is scratch.
inline constexpr std::uint64_t kNotServed = ~std::uint64_t{0};

inline void pick_census_rows(const std::vector<std::uint64_t>& turns, std::size_t max_rows,
                             std::vector<std::pair<std::uint64_t, std::size_t>>& order,
                             std::vector<char>& pick) {
  pick.assign(turns.size(), 0);
  order.clear();
  for (std::size_t i = 0; i < turns.size(); ++i)
    if (turns[i] != kNotServed) order.emplace_back(turns[i], i);
  const std::size_t n = std::min(order.size(), max_rows);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end());
  for (std::size_t k = 0; k < n; ++k) pick[order[k].second] = 1;
}

}  // namespace strata::actors
