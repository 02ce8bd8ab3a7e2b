#include "cache/layer_census.h"

#include <algorithm>
#include <string>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"

namespace strata {

SlotDistribution slot_distribution(std::vector<int>& v) {
  SlotDistribution d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(n - 1))]; };
  d.sequences = static_cast<int>(n);
  for (int x : v) d.total += x;
  d.mean = static_cast<double>(d.total) / static_cast<double>(n);
  d.min = v.front();
  d.p25 = at(0.25);
  d.p50 = at(0.5);
  d.p75 = at(0.75);
  d.max = v.back();
  return d;
}

void KvCacheManager::record_kept(std::uint64_t seq_id, std::vector<KeptPositions> kept) {
  if (kept.empty()) return;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  if (kept.size() != it->second.layers.size())
    throw InternalError("KvCacheManager::record_kept: " + std::to_string(kept.size()) +
                        " layers in the census of sequence " + std::to_string(seq_id) + ", " +
                        std::to_string(it->second.layers.size()) + " in the model");
  it->second.kept = std::move(kept);
}

std::vector<LayerUsage> KvCacheManager::layer_census() const {
  const auto L = static_cast<std::size_t>(num_layers_);
  std::vector<LayerUsage> out(L);
  std::vector<std::vector<int>> slots(L);
  for (auto& v : slots) v.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) {
    const bool prefilling = s.tokens < s.spec.prompt_len;
    for (std::size_t l = 0; l < L; ++l) {
      const Layer& layer = s.layers[l];
      int held = layer.slots.valid;
      if (prefilling && selects(s, layer)) held += s.tokens;  // (as held() counts)
      slots[l].push_back(held);
      if (s.kept.empty()) continue;
      ++out[l].kept_sequences;
      out[l].kept += s.kept[l];
    }
  }
  for (std::size_t l = 0; l < L; ++l) {
    out[l].rule = rules_[l];
    out[l].pages = layer_pages_[l];
    out[l].bytes = static_cast<std::size_t>(layer_pages_[l]) * pool_.page_bytes();
    out[l].slots = slot_distribution(slots[l]);
  }
  return out;
}

}  // namespace strata
