#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <string>

#include "runtime/error.h"
#include "runtime/step_plan_check.h"

namespace strata {

namespace {
std::string seq_name(std::uint64_t id) {
  return "sequence " + std::to_string(id);
}

void validate_spec(const SeqSpec& spec) {
  if (spec.prompt_len < 1)
    throw InvalidRequest(
        "prompt", "prompt must hold at least one token, got " + std::to_string(spec.prompt_len));
  if (spec.max_tokens < 0)
    throw InvalidRequest("max_tokens", "must be >= 0, got " + std::to_string(spec.max_tokens));
}
}  // namespace

KvCacheManager::KvCacheManager(int num_layers, KvLayout layout, int num_pages,
                               const SparsityProfile& profile, PrefixCacheOptions prefix_cache)
    : num_layers_(num_layers),
      pool_(num_pages, layout),
      profile_(profile),
      prefix_opts_(prefix_cache),
      prefix_(num_layers) {
  if (num_layers < 1)
    throw ConfigError("model.num_hidden_layers", "must be >= 1, got " + std::to_string(num_layers));
  rules_ = profile_.resolve(num_layers_);
  if (profile_.version == 0) profile_.version = 1;
  layer_pages_.assign(static_cast<std::size_t>(num_layers_), 0);
  if (prefix_opts_.enabled) page_block_.assign(static_cast<std::size_t>(num_pages), -1);
}

// ---- profiles ---------------------------------------------------------------------------

std::uint64_t KvCacheManager::set_profile(const SparsityProfile& profile, bool shrink_running) {
  auto rules = profile.resolve(num_layers_);  // throws ConfigError, nothing changed
  SparsityProfile p = profile;
  p.version = profile_.version + 1;
  profile_ = std::move(p);
  rules_ = std::move(rules);
  if (shrink_running) {
    for (auto& [id, s] : seqs_) {
      if (s.version == 0) continue;  // per-request override: the client chose its budget
      for (int l = 0; l < num_layers_; ++l) {
        auto& layer = s.layers[static_cast<std::size_t>(l)];
        const LayerRule& cur = layer.shrink_to ? *layer.shrink_to : layer.slots.rule;
        const LayerRule& nw = rules_[static_cast<std::size_t>(l)];
        // Only a smaller capacity of the same policy and slot layout (sinks, window) can be
        // applied in place; anything else would need scores or pages the layer never had.
        if (!cur.sparse() || !nw.sparse() || cur.policy != nw.policy || cur.sinks != nw.sinks ||
            cur.window != nw.window || nw.capacity >= cur.capacity)
          continue;
        layer.shrink_to = nw;
      }
    }
  }
  return profile_.version;
}

std::vector<LayerRule> KvCacheManager::rules_for(
    const std::optional<SparsityProfile>& sparsity) const {
  if (!sparsity) return rules_;
  return sparsity->resolve(num_layers_);
}

// ---- admission and lifetime -------------------------------------------------------------

AdmitResult KvCacheManager::can_admit(const SeqSpec& spec) const {
  validate_spec(spec);
  const auto rules = rules_for(spec.sparsity);
  const bool cache = cacheable(spec, rules);
  const auto plan = pages_needed(spec.prompt_len, spec.max_tokens, rules, spec.chunked || cache);
  AdmitResult r;
  r.need_pages = plan.admission;
  r.available_pages = pages_available();
  if (cache) {
    // A hit brings its pages (one per layer per block): they are not reserved, but the hit's
    // table-only pages (all of an unused block's, the sparse-layer pages of a block whose users
    // have selected) stop being evictable once this sequence holds them too.
    std::vector<int> ids;
    const int hit = hit_blocks(spec, rules, &ids);
    r.need_pages += hit_charge(ids, hit);
    r.cached_tokens = hit * kBlockSize;
  }
  r.ok = r.need_pages <= r.available_pages;
  r.never_fits = std::max(plan.admission, plan.peak) > pool_.total();
  return r;
}

bool KvCacheManager::admit(std::uint64_t seq_id, const SeqSpec& spec) {
  if (contains(seq_id))
    throw InternalError("KvCacheManager::admit: " + seq_name(seq_id) + " is already admitted");
  validate_spec(spec);
  const auto rules = rules_for(spec.sparsity);
  Seq s;
  s.spec = spec;
  s.spec.sparsity.reset();
  s.version = spec.sparsity ? 0 : profile_.version;
  s.cacheable = cacheable(spec, rules);
  s.layers.resize(rules.size());
  int need = 0;
  for (std::size_t l = 0; l < rules.size(); ++l) {
    const auto lp =
        plan_layer(rules[l], spec.prompt_len, spec.max_tokens, spec.chunked || s.cacheable);
    auto& layer = s.layers[l];
    layer.slots.rule = rules[l];
    layer.ceiling = lp.reserve - lp.temp;
    layer.temp_ceiling = lp.temp;
    need += lp.reserve;
  }
  int hit = 0;
  if (s.cacheable) hit = hit_blocks(spec, rules, &hit_ids_);
  if (need + (hit > 0 ? hit_charge(hit_ids_, hit) : 0) > pages_available()) return false;
  if (s.cacheable) {
    prefix_queries_ += static_cast<std::uint64_t>(spec.prompt_len);
    prefix_hits_ += static_cast<std::uint64_t>(hit) * kBlockSize;
  }
  // The hit's pages head the tables: positions [0, hit * 16) of every layer are computed.
  for (int i = 0; i < hit; ++i) {
    const int id = hit_ids_[static_cast<std::size_t>(i)];
    prefix_.acquire(id);
    s.blocks.push_back(id);
    const auto& pages = prefix_.pages(id);
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      auto& slots = s.layers[l].slots;
      if (pool_.ref_count(pages[l]) == 1) prefix_.add_table_only(id, -1);  // (charged above)
      pool_.retain(pages[l]);
      ++layer_pages_[l];
      (slots.direct_prefill(spec.prompt_len) ? slots.pages : slots.temp_pages).push_back(pages[l]);
    }
  }
  s.first = s.tokens = hit * kBlockSize;
  s.cached_blocks = hit;
  for (auto& layer : s.layers)
    if (layer.slots.direct_prefill(spec.prompt_len)) layer.slots.valid = s.first;
  reserved_total_ += outstanding(s);
  STRATA_CHECK(pool_.free() + prefix_.pages_evictable() >= reserved_total_,
               "reservations exceed available pages after admission");
  seqs_.emplace(seq_id, std::move(s));
  return true;
}

bool KvCacheManager::free(std::uint64_t seq_id, const std::vector<BlockHash>* names) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return false;
  Seq& s = it->second;
  if (names && s.cacheable && s.tokens >= s.spec.prompt_len &&
      std::none_of(s.layers.begin(), s.layers.end(),
                   [](const Layer& l) { return l.slots.rule.sparse(); }))
    insert_blocks(s, s.tokens, names);  // decode K/V of full layers = a dense prefill's
  reserved_total_ -= outstanding(s);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    auto& slots = s.layers[l].slots;
    for (auto id : slots.pages) release_page(static_cast<int>(l), id);
    for (auto id : slots.temp_pages) release_page(static_cast<int>(l), id);
  }
  // Tail blocks first: they join the LRU ahead of the head, so they are evicted first.
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) prefix_.release(*b);
  seqs_.erase(it);
  return true;
}

// ---- internals --------------------------------------------------------------------------

KvCacheManager::Seq& KvCacheManager::get(std::uint64_t seq_id, const char* what) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end())
    throw InternalError(std::string("KvCacheManager::") + what + ": unknown " + seq_name(seq_id));
  return it->second;
}

const KvCacheManager::Seq& KvCacheManager::get(std::uint64_t seq_id, const char* what) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end())
    throw InternalError(std::string("KvCacheManager::") + what + ": unknown " + seq_name(seq_id));
  return it->second;
}

int KvCacheManager::outstanding(const Layer& l) {
  return std::max(0, l.ceiling - static_cast<int>(l.slots.pages.size())) +
         std::max(0, l.temp_ceiling - static_cast<int>(l.slots.temp_pages.size()));
}

int KvCacheManager::outstanding(const Seq& s) {
  int n = 0;
  for (const auto& l : s.layers) n += outstanding(l);
  return n;
}

bool KvCacheManager::selects(const Seq& s, const Layer& l) {
  return !l.slots.direct_prefill(s.spec.prompt_len);
}

int KvCacheManager::remaining_writes(const Seq& s) {
  return std::max(0, decode_writes(s.spec.max_tokens) - s.decodes);
}

void KvCacheManager::lower_ceiling(Layer& l, int target_pages, int old_outstanding) {
  const int size = static_cast<int>(l.slots.pages.size());
  const int want = std::max(0, target_pages - size);
  l.ceiling = size + std::min(want, std::max(0, old_outstanding));
}

int KvCacheManager::target_pages(const Seq& s, const Layer& l) {
  const auto& r = l.slots.rule;
  const int rem = remaining_writes(s);
  if (!r.sparse()) return pages_for_slots(l.slots.valid + rem);
  if (r.policy == Policy::kSnapKv) return pages_for_slots(l.slots.valid + rem);
  return pages_for_slots(std::min(r.capacity, l.slots.valid + rem));
}

bool KvCacheManager::grow(Seq& s, const std::vector<int>& want_pages,
                          const std::vector<int>& want_temp) {
  int extra = 0;  // pages beyond the sequence's reservation
  bool any = false;
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const auto& layer = s.layers[l];
    const int np = static_cast<int>(layer.slots.pages.size());
    const int nt = static_cast<int>(layer.slots.temp_pages.size());
    const int add_p = std::max(0, want_pages[l] - np);
    const int add_t = std::max(0, want_temp[l] - nt);
    any = any || add_p > 0 || add_t > 0;
    extra += add_p - std::min(add_p, std::max(0, layer.ceiling - np));
    extra += add_t - std::min(add_t, std::max(0, layer.temp_ceiling - nt));
  }
  if (!any) return true;  // (most decode steps: no layer starts a page)
  if (extra > pages_available()) return false;
  const int before = outstanding(s);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    auto& slots = s.layers[l].slots;
    while (static_cast<int>(slots.pages.size()) < want_pages[l]) {
      slots.pages.push_back(alloc_page());
      ++layer_pages_[l];
    }
    while (static_cast<int>(slots.temp_pages.size()) < want_temp[l]) {
      slots.temp_pages.push_back(alloc_page());
      ++layer_pages_[l];
    }
  }
  reserved_total_ += outstanding(s) - before;
  STRATA_CHECK(pool_.free() + prefix_.pages_evictable() >= reserved_total_,
               "reservations exceed available pages after growth");
  return true;
}

// ---- prefix cache -----------------------------------------------------------------------

bool KvCacheManager::cacheable(const SeqSpec& spec, const std::vector<LayerRule>& rules) const {
  if (!prefix_opts_.enabled || !spec.block_hashes || spec.block_hashes->empty()) return false;
  for (const auto& r : rules)
    if (r.sparse() && spec.prompt_len <= r.capacity) return false;
  return true;
}

int KvCacheManager::hit_blocks(const SeqSpec& spec, const std::vector<LayerRule>& rules,
                               std::vector<int>* ids) const {
  // The chunk after the hit must hold what the final chunk needs: the observation window of
  // every selecting layer (here every sparse layer), and at least the last token (sampled).
  int m = 1;
  for (const auto& r : rules)
    if (r.sparse()) m = std::max(m, r.window);
  const int max_blocks = std::max(0, spec.prompt_len - m) / kBlockSize;
  return prefix_.match(*spec.block_hashes, max_blocks, ids);
}

int KvCacheManager::hit_charge(const std::vector<int>& ids, int hit) const {
  int table_only = 0;
  for (int i = 0; i < hit; ++i) table_only += prefix_.table_only(ids[static_cast<std::size_t>(i)]);
  return table_only - hit * num_layers_;
}

void KvCacheManager::drop_table_refs(const std::vector<std::int32_t>& pages) {
  for (auto id : pages) {
    if (!pool_.release(id)) continue;  // (a user's: it stays mapped to the husk)
    page_block_[static_cast<std::size_t>(id)] = -1;
    released_.push_back(id);
  }
  ++blocks_evicted_;
}

bool KvCacheManager::evict_unused() {
  evict_scratch_.clear();
  if (!prefix_.evict_unused(&evict_scratch_)) return false;
  drop_table_refs(evict_scratch_);
  return true;
}

bool KvCacheManager::evict_in_use() {
  evict_scratch_.clear();
  const int id = prefix_.evict_in_use(&evict_scratch_);
  if (id < 0) return false;
  drop_table_refs(evict_scratch_);  // frees the table-only pages
  std::vector<std::int32_t> kept;   // (the users' references keep theirs: the full layers')
  for (auto p : evict_scratch_)
    if (page_block_[static_cast<std::size_t>(p)] >= 0) kept.push_back(p);
  prefix_.set_husk_pages(id, std::move(kept));
  ++blocks_evicted_in_use_;
  return true;
}

std::int32_t KvCacheManager::alloc_page() {
  std::int32_t id = pool_.alloc();
  while (id < 0 && (evict_unused() || evict_in_use())) id = pool_.alloc();
  STRATA_CHECK(id >= 0, "no free page although the reservation promised one");
  return id;
}

void KvCacheManager::insert_blocks(Seq& s, int end, const std::vector<BlockHash>* names) {
  const auto& hashes = names ? *names : *s.spec.block_hashes;
  const int last = std::min(end / kBlockSize, static_cast<int>(hashes.size()));
  for (int b = s.cached_blocks; b < last; ++b) {
    const auto& h = hashes[static_cast<std::size_t>(b)];
    // Computed twice (two sequences missed at once): the first copy is the cached one, this
    // sequence keeps its own pages private; its later blocks chain on after the first copy.
    if (prefix_.find(h) >= 0) continue;
    if (prefix_opts_.max_pages >= 0)
      while (prefix_.pages_held() + num_layers_ > prefix_opts_.max_pages && evict_unused()) {
      }
    if (prefix_opts_.max_pages >= 0 &&
        prefix_.pages_held() + num_layers_ > prefix_opts_.max_pages) {
      s.cached_blocks = std::numeric_limits<int>::max();  // budget full of blocks in use: stop
      return;
    }
    std::vector<std::int32_t> pages(s.layers.size());
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      const auto& slots = s.layers[l].slots;
      pages[l] = slots.direct_prefill(s.spec.prompt_len)
                     ? slots.pages[static_cast<std::size_t>(b)]
                     : slots.temp_pages[static_cast<std::size_t>(b)];
      pool_.retain(pages[l]);  // (held by this sequence too: not table-only)
    }
    const int id = prefix_.insert(h, pages);
    for (auto p : pages) page_block_[static_cast<std::size_t>(p)] = id;
    s.blocks.push_back(id);
  }
  s.cached_blocks = std::max(s.cached_blocks, last);
}

void KvCacheManager::drop_unused_cache() {
  while (evict_unused()) {
  }
}

int KvCacheManager::cached_tokens(std::uint64_t seq_id) const {
  return get(seq_id, "cached_tokens").first;
}

void KvCacheManager::release_page(int layer, std::int32_t id) {
  --layer_pages_[static_cast<std::size_t>(layer)];
  const int block = page_block_.empty() ? -1 : page_block_[static_cast<std::size_t>(id)];
  if (pool_.release(id)) {
    released_.push_back(id);
    if (block >= 0) {  // the last user of an evicted block's page (a cached one keeps a ref)
      prefix_.drop_husk_page(block, id);
      page_block_[static_cast<std::size_t>(id)] = -1;
    }
    return;
  }
  // A cached block's page that no sequence holds any more is the table's alone: evictable.
  if (block >= 0 && pool_.ref_count(id) == 1 && !prefix_.detached(block))
    prefix_.add_table_only(block, +1);
}

void KvCacheManager::export_layers(const Seq& s, std::vector<LayerSlots>* out) {
  out->resize(s.layers.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) (*out)[l] = s.layers[l].slots;
}

void KvCacheManager::export_tracked(Seq& s, std::vector<LayerSlots>* out, std::uint64_t* serial) {
  if (!serial) {
    export_layers(s, out);
    return;
  }
  // The buffer holds this sequence's last tracked export: its first `synced` entries of each
  // table are still current (a serial is never handed out twice, so a buffer of another
  // sequence, or of an earlier admission of this id, never matches).
  const bool same = *serial != 0 && *serial == s.export_serial && out->size() == s.layers.size();
  out->resize(s.layers.size());
  long held = 0, copied = 0;
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    Layer& layer = s.layers[l];
    const LayerSlots& src = layer.slots;
    LayerSlots& dst = (*out)[l];
    dst.rule = src.rule;
    dst.valid = src.valid;
    dst.ring_pos = src.ring_pos;
    dst.temp_pages = src.temp_pages;  // (empty outside a selecting prefill)
    dst.action = src.action;
    dst.shrink_to = src.shrink_to;
    const std::size_t n = src.pages.size();
    const std::size_t keep = same ? std::min({layer.synced, n, dst.pages.size()}) : 0;
    // Unchanged since the last tracked export, whatever buffer holds this one.
    dst.pages_kept = static_cast<std::int32_t>(std::min(layer.synced, n));
    dst.pages.resize(n);
    std::copy(src.pages.begin() + static_cast<std::ptrdiff_t>(keep), src.pages.end(),
              dst.pages.begin() + static_cast<std::ptrdiff_t>(keep));
    layer.synced = n;
    held += static_cast<long>(n + src.temp_pages.size());
    copied += static_cast<long>(n - keep + src.temp_pages.size());
  }
  s.export_serial = *serial = ++last_serial_;
  ++export_counters_.exports;
  export_counters_.incremental += same;
  export_counters_.pages_exported += held;
  export_counters_.pages_copied += copied;
}

// ---- chunked prefill --------------------------------------------------------------------

int KvCacheManager::min_final_chunk(std::uint64_t seq_id) const {
  const Seq& s = get(seq_id, "min_final_chunk");
  if (!s.spec.chunked) return s.spec.prompt_len - s.first;
  int m = 1;
  for (const auto& l : s.layers)
    if (selects(s, l)) m = std::max(m, l.slots.rule.window);
  return m;
}

int KvCacheManager::next_chunk_len(std::uint64_t seq_id, int budget) const {
  const Seq& s = get(seq_id, "next_chunk_len");
  const int rest = s.spec.prompt_len - s.tokens;
  if (rest <= 0 || budget <= 0) return 0;
  if (budget >= rest) return rest;
  if (!s.spec.chunked) return 0;
  return std::max(0, std::min(budget, rest - min_final_chunk(seq_id)));
}

bool KvCacheManager::prepare_chunk(std::uint64_t seq_id, int n_tokens,
                                   std::vector<LayerSlots>* layers) {
  return prepare_chunk(seq_id, n_tokens, layers, nullptr);
}

bool KvCacheManager::prepare_chunk(std::uint64_t seq_id, int n_tokens,
                                   std::vector<LayerSlots>* layers, std::uint64_t* serial) {
  Seq& s = get(seq_id, "prepare_chunk");
  const int P = s.spec.prompt_len;
  const int start = s.tokens;
  if (start >= P)
    throw InternalError("KvCacheManager::prepare_chunk: " + seq_name(seq_id) +
                        " has finished its prefill");
  if (n_tokens < 1 || start + n_tokens > P)
    throw InternalError("KvCacheManager::prepare_chunk: " + seq_name(seq_id) + " chunk [" +
                        std::to_string(start) + ", " + std::to_string(start + n_tokens) +
                        ") is outside the prompt of " + std::to_string(P) + " tokens");
  const int end = start + n_tokens;
  const bool final = end == P;
  const bool whole = start == s.first && final;  // (after a prefix-cache hit: the rest)
  if (!s.spec.chunked && !whole)
    throw InternalError("KvCacheManager::prepare_chunk: " + seq_name(seq_id) +
                        " was admitted unchunked but gets a chunk of " + std::to_string(n_tokens) +
                        " of " + std::to_string(P) + " tokens");
  const int min_final = min_final_chunk(seq_id);
  if (!final && P - end < min_final)
    throw InternalError("KvCacheManager::prepare_chunk: " + seq_name(seq_id) + " chunk [" +
                        std::to_string(start) + ", " + std::to_string(end) +
                        ") leaves the final chunk fewer than " + std::to_string(min_final) +
                        " positions (the observation window)");
  if (final && n_tokens < min_final)
    throw InternalError("KvCacheManager::prepare_chunk: final chunk of " + seq_name(seq_id) +
                        " holds " + std::to_string(n_tokens) + " positions, needs " +
                        std::to_string(min_final));

  std::vector<int>& want = want_pages_;
  std::vector<int>& want_temp = want_temp_;
  want.resize(s.layers.size());
  want_temp.resize(s.layers.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const auto& layer = s.layers[l];
    want[l] = static_cast<int>(layer.slots.pages.size());
    want_temp[l] = static_cast<int>(layer.slots.temp_pages.size());
    if (!selects(s, layer)) {
      want[l] = std::max(want[l], pages_for_slots(end));
    } else {
      // Cacheable: the prompt's K/V go to pool pages even for a whole prompt (shareable).
      if (!whole || s.cacheable) want_temp[l] = std::max(want_temp[l], pages_for_slots(end));
      if (final) want[l] = std::max(want[l], pages_for_slots(layer.slots.rule.capacity));
    }
  }
  if (!grow(s, want, want_temp)) return false;
  export_tracked(s, layers, serial);
  if (final)
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      if (!selects(s, s.layers[l])) continue;
      (*layers)[l].action = LayerAction::kSelect;
      // Whole prompt in this step: the backend's scratch holds it. Temp pages left by a
      // dropped earlier preparation are not shown (they are freed at commit).
      if (whole && !s.cacheable) (*layers)[l].temp_pages.clear();
    }
  s.pending = Pending{true, false, n_tokens};
  for (auto& layer : s.layers) layer.shrinking.reset();
  return true;
}

// ---- decode -----------------------------------------------------------------------------

bool KvCacheManager::prepare_decode(std::uint64_t seq_id, std::vector<LayerSlots>* layers) {
  return prepare_decode(seq_id, layers, nullptr);
}

bool KvCacheManager::prepare_decode(std::uint64_t seq_id, std::vector<LayerSlots>* layers,
                                    std::uint64_t* serial) {
  Seq& s = get(seq_id, "prepare_decode");
  if (s.tokens < s.spec.prompt_len)
    throw InternalError("KvCacheManager::prepare_decode: " + seq_name(seq_id) + " has " +
                        std::to_string(s.spec.prompt_len - s.tokens) + " prompt tokens left");
  std::vector<int>& want = want_pages_;
  std::vector<int>& want_temp = want_temp_;
  want.resize(s.layers.size());
  want_temp.assign(s.layers.size(), 0);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    auto& layer = s.layers[l];
    layer.shrinking.reset();
    if (layer.shrink_to) {
      if (layer.slots.valid < layer.shrink_to->capacity) {
        // Fewer tokens than the new capacity: slots are in position order, the new rule
        // describes them as they are; nothing to compact. (Rule switches only lower
        // reservations.)
        const int old_out = outstanding(layer);
        layer.slots.rule = *layer.shrink_to;
        layer.shrink_to.reset();
        lower_ceiling(layer, target_pages(s, layer), old_out);
        reserved_total_ += outstanding(layer) - old_out;
      } else {
        layer.shrinking = layer.shrink_to;
      }
    }
    want[l] = std::max(static_cast<int>(layer.slots.pages.size()),
                       pages_for_slots(layer.slots.decode_slot() + 1));
  }
  if (!grow(s, want, want_temp)) {
    for (auto& layer : s.layers) layer.shrinking.reset();
    return false;
  }
  export_tracked(s, layers, serial);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const auto& layer = s.layers[l];
    if (!layer.shrinking) continue;
    (*layers)[l].action = LayerAction::kShrink;
    (*layers)[l].shrink_to = layer.shrinking->capacity;
  }
  s.pending = Pending{true, true, 1};
  return true;
}

void KvCacheManager::commit_step(std::uint64_t seq_id) {
  Seq& s = get(seq_id, "commit_step");
  if (!s.pending.active)
    throw InternalError("KvCacheManager::commit_step: nothing prepared for " + seq_name(seq_id));
  if (s.pending.decode) {
    // Only a shrink changes the reservation (advancing changes no page count or ceiling).
    int change = 0;
    ++s.tokens;
    ++s.decodes;
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      auto& layer = s.layers[l];
      if (!layer.shrinking) {
        advance_layer(layer.slots, LayerStep{1, false, s.spec.prompt_len, false, 0});
        continue;
      }
      // kShrink ran after the decode write: sinks, ring and the best selected slots are
      // compacted into the first pages_for_slots(C_new) pages, ring in order (ring_pos 0).
      const LayerRule nw = *layer.shrinking;
      layer.shrinking.reset();
      if (layer.shrink_to && layer.shrink_to->capacity == nw.capacity) layer.shrink_to.reset();
      const int old_out = outstanding(layer);
      advance_layer(layer.slots, LayerStep{1, false, s.spec.prompt_len, false, nw.capacity});
      STRATA_CHECK(layer.slots.rule.ring == nw.ring,
                   "the shrunk rule of " + seq_name(seq_id) + " disagrees with the new profile");
      layer.slots.rule = nw;  // (the same slot layout; pooling as the new profile says)
      const int keep = pages_for_slots(layer.slots.valid);
      while (static_cast<int>(layer.slots.pages.size()) > keep) {
        release_page(static_cast<int>(l), layer.slots.pages.back());
        layer.slots.pages.pop_back();
      }
      layer.synced = std::min(layer.synced, layer.slots.pages.size());
      lower_ceiling(layer, target_pages(s, layer), old_out);
      change += outstanding(layer) - old_out;
    }
    s.pending = Pending{};
    reserved_total_ += change;
    STRATA_CHECK(change <= 0, "a step raised the reservation of " + seq_name(seq_id));
    return;
  }
  const int before = outstanding(s);
  {
    const int end = s.tokens + s.pending.n_tokens;
    const bool final = end == s.spec.prompt_len;
    if (s.cacheable) insert_blocks(s, end);  // (before the selection drops the temp pages)
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      auto& layer = s.layers[l];
      const bool select = final && selects(s, layer);
      advance_layer(layer.slots, LayerStep{s.pending.n_tokens, true, s.spec.prompt_len, select, 0});
      if (!select) continue;
      // Tail first: cached blocks whose pages become table-only join the in-use eviction
      // order tail first, so evicting them leaves the prompt's head reachable longest.
      for (auto it = layer.slots.temp_pages.rbegin(); it != layer.slots.temp_pages.rend(); ++it)
        release_page(static_cast<int>(l), *it);
      layer.slots.temp_pages.clear();
      layer.temp_ceiling = 0;
    }
    s.tokens = end;
  }
  s.pending = Pending{};
  reserved_total_ += outstanding(s) - before;
  STRATA_CHECK(outstanding(s) <= before, "a step raised the reservation of " + seq_name(seq_id));
}

std::vector<std::int32_t> KvCacheManager::take_released() {
  // A page freed and handed out again since the last call belongs to its new owner now.
  std::sort(released_.begin(), released_.end());
  released_.erase(std::unique(released_.begin(), released_.end()), released_.end());
  std::vector<std::int32_t> out;
  out.reserve(released_.size());
  for (auto id : released_)
    if (pool_.is_free(id)) out.push_back(id);
  released_.clear();
  return out;
}

// ---- accounting -------------------------------------------------------------------------

std::uint64_t KvCacheManager::export_serial(std::uint64_t seq_id) const {
  return get(seq_id, "export_serial").export_serial;
}
int KvCacheManager::tokens(std::uint64_t seq_id) const {
  return get(seq_id, "tokens").tokens;
}
int KvCacheManager::prompt_len(std::uint64_t seq_id) const {
  return get(seq_id, "prompt_len").spec.prompt_len;
}
bool KvCacheManager::prefill_done(std::uint64_t seq_id) const {
  const Seq& s = get(seq_id, "prefill_done");
  return s.tokens >= s.spec.prompt_len;
}
std::uint64_t KvCacheManager::seq_profile_version(std::uint64_t seq_id) const {
  return get(seq_id, "seq_profile_version").version;
}

std::vector<LayerSlots> KvCacheManager::layers(std::uint64_t seq_id) const {
  std::vector<LayerSlots> out;
  export_layers(get(seq_id, "layers"), &out);
  return out;
}

KvCacheManager::Held KvCacheManager::held(const Seq& s) const {
  Held h;
  const bool prefilling = s.tokens < s.spec.prompt_len;
  for (const auto& l : s.layers) {
    h.pages += static_cast<long>(l.slots.pages.size() + l.slots.temp_pages.size());
    h.temp += static_cast<long>(l.slots.temp_pages.size());
    h.slots += l.slots.valid;
    if (prefilling && selects(s, l)) h.slots += s.tokens;  // prompt so far, in temp pages
  }
  h.full_slots = static_cast<long>(s.layers.size()) * s.tokens;
  h.full_pages = static_cast<long>(s.layers.size()) * pages_for_slots(s.tokens);
  return h;
}

SeqUsage KvCacheManager::usage(std::uint64_t seq_id) const {
  const Seq& s = get(seq_id, "usage");
  const Held h = held(s);
  SeqUsage u;
  u.tokens = s.tokens;
  u.pages = static_cast<int>(h.pages);
  u.temp_pages = static_cast<int>(h.temp);
  u.reserved_pages = outstanding(s);
  u.cached_tokens = s.first;
  u.slots_held = h.slots;
  u.full_slots = h.full_slots;
  if (h.slots > 0) u.compression = static_cast<double>(h.full_slots) / static_cast<double>(h.slots);
  if (h.pages > 0)
    u.page_compression = static_cast<double>(h.full_pages) / static_cast<double>(h.pages);
  return u;
}

CacheStats KvCacheManager::stats() const {
  CacheStats st;
  st.pages_total = pool_.total();
  st.pages_used = pool_.used();
  st.pages_free = pool_.free();
  st.pages_reserved = reserved_total_;
  st.page_bytes = pool_.page_bytes();
  st.bytes_used = pool_.used_bytes();
  st.bytes_total = pool_.total_bytes();
  st.pages_per_layer = layer_pages_;
  st.sequences = static_cast<int>(seqs_.size());
  long pages = 0, full_pages = 0;
  for (const auto& [id, s] : seqs_) {
    const Held h = held(s);
    st.slots_held += h.slots;
    st.full_slots += h.full_slots;
    pages += h.pages;
    full_pages += h.full_pages;
  }
  if (st.slots_held > 0)
    st.compression = static_cast<double>(st.full_slots) / static_cast<double>(st.slots_held);
  if (pages > 0) st.page_compression = static_cast<double>(full_pages) / static_cast<double>(pages);
  st.profile_version = profile_.version;
  st.prefix_cache = prefix_opts_.enabled;
  st.pages_cached = prefix_.pages_held();
  st.pages_evictable = prefix_.pages_evictable();
  st.blocks_cached = prefix_.blocks();
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.blocks_evicted = blocks_evicted_;
  st.blocks_evicted_in_use = blocks_evicted_in_use_;
  st.husks = prefix_.husks();
  return st;
}

void KvCacheManager::check_invariants() const {
  pool_.check();
  std::vector<int> owners(static_cast<std::size_t>(pool_.total()), 0);
  std::vector<std::uint64_t> last_owner(owners.size(), 0);  // seq id + 1 of the last owner
  std::vector<int> per_layer(static_cast<std::size_t>(num_layers_), 0);
  long reserved = 0;
  auto own = [&](std::int32_t id, std::uint64_t seq, std::size_t l) {
    if (id < 0 || id >= pool_.total())
      throw InternalError("KvCacheManager: " + seq_name(seq) + " layer " + std::to_string(l) +
                          " holds bad page id " + std::to_string(id));
    // A page is in one table of one sequence, or shared through the prefix cache (checked
    // below): never twice in one sequence.
    auto& last = last_owner[static_cast<std::size_t>(id)];
    if (last == seq + 1)
      throw InternalError("KvCacheManager: page " + std::to_string(id) + " listed twice by " +
                          seq_name(seq) + " (layer " + std::to_string(l) + ")");
    last = seq + 1;
    if (++owners[static_cast<std::size_t>(id)] > pool_.ref_count(id))
      throw InternalError("KvCacheManager: page " + std::to_string(id) + " owned " +
                          std::to_string(owners[static_cast<std::size_t>(id)]) + " times, " +
                          std::to_string(pool_.ref_count(id)) + " references (" + seq_name(seq) +
                          " layer " + std::to_string(l) + ")");
    ++per_layer[l];
  };
  for (const auto& [id, s] : seqs_) {
    if (s.layers.size() != static_cast<std::size_t>(num_layers_))
      throw InternalError("KvCacheManager: " + seq_name(id) + " has the wrong layer count");
    const bool prefilling = s.tokens < s.spec.prompt_len;
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      const auto& layer = s.layers[l];
      const auto& sl = layer.slots;
      const std::string where = seq_name(id) + " layer " + std::to_string(l);
      for (auto p : sl.pages) own(p, id, l);
      for (auto p : sl.temp_pages) own(p, id, l);
      reserved += outstanding(layer);
      if (static_cast<int>(sl.pages.size()) < pages_for_slots(sl.valid))
        throw InternalError("KvCacheManager: " + where + " table does not cover its " +
                            std::to_string(sl.valid) + " valid slots");
      if (sl.valid < 0 || sl.valid > s.tokens)
        throw InternalError("KvCacheManager: " + where + " holds " + std::to_string(sl.valid) +
                            " slots for " + std::to_string(s.tokens) + " tokens");
      if (!sl.rule.sparse() && sl.valid != s.tokens)
        throw InternalError("KvCacheManager: full " + where + " holds " + std::to_string(sl.valid) +
                            " of " + std::to_string(s.tokens) + " tokens");
      if (sl.rule.sparse() && sl.rule.ring > 0 && sl.valid > sl.rule.capacity)
        throw InternalError("KvCacheManager: " + where + " holds more than its capacity");
      if (sl.ring_pos < 0 || (sl.rule.ring > 0 && sl.ring_pos >= sl.rule.ring) ||
          (sl.rule.ring == 0 && sl.ring_pos != 0))
        throw InternalError("KvCacheManager: " + where + " ring_pos out of range");
      if (!sl.temp_pages.empty() && (!prefilling || !selects(s, layer)))
        throw InternalError("KvCacheManager: " + where +
                            " holds temp pages outside a selecting prefill");
      if (static_cast<int>(sl.temp_pages.size()) > pages_for_slots(s.spec.prompt_len))
        throw InternalError("KvCacheManager: " + where + " holds more temp pages than its prompt");
    }
  }
  // The prefix cache: one reference per page of each cached block, users = the sequences
  // listing the block (cached or a husk), an unused block's pages held by nothing else, the
  // table-only counts and the page -> block map equal to a recount.
  prefix_.check();
  std::vector<int> users(0);
  for (const auto& [id, s] : seqs_)
    for (int b : s.blocks) {
      if (b >= static_cast<int>(users.size())) users.resize(static_cast<std::size_t>(b) + 1, 0);
      ++users[static_cast<std::size_t>(b)];
    }
  std::vector<int> cache_owned(owners.size(), 0);
  for (int b : prefix_.live_blocks()) {
    int table_only = 0;
    const int n = b < static_cast<int>(users.size()) ? users[static_cast<std::size_t>(b)] : 0;
    if (n != prefix_.users(b))
      throw InternalError("KvCacheManager: cached block " + std::to_string(b) + " counts " +
                          std::to_string(prefix_.users(b)) + " users, " + std::to_string(n) +
                          " sequences use it");
    for (auto p : prefix_.pages(b)) {
      if (p < 0 || p >= pool_.total() || ++cache_owned[static_cast<std::size_t>(p)] > 1)
        throw InternalError("KvCacheManager: page " + std::to_string(p) +
                            " is cached twice or out of range (block " + std::to_string(b) + ")");
      if (n == 0 && pool_.ref_count(p) != 1)
        throw InternalError("KvCacheManager: unused cached block " + std::to_string(b) + " page " +
                            std::to_string(p) + " has " + std::to_string(pool_.ref_count(p)) +
                            " references");
      if (page_block_.empty() || page_block_[static_cast<std::size_t>(p)] != b)
        throw InternalError("KvCacheManager: page " + std::to_string(p) + " of cached block " +
                            std::to_string(b) + " is not mapped to it");
      table_only += pool_.ref_count(p) == 1;
    }
    if (table_only != prefix_.table_only(b))
      throw InternalError("KvCacheManager: cached block " + std::to_string(b) + " counts " +
                          std::to_string(prefix_.table_only(b)) + " table-only pages, recount " +
                          std::to_string(table_only));
  }
  // Evicted blocks still in use: their users share the pages they held (no table reference).
  std::vector<char> husk_page(owners.size(), 0);
  for (int b : prefix_.husk_blocks()) {
    const int n = b < static_cast<int>(users.size()) ? users[static_cast<std::size_t>(b)] : 0;
    if (n != prefix_.users(b))
      throw InternalError("KvCacheManager: evicted block " + std::to_string(b) + " counts " +
                          std::to_string(prefix_.users(b)) + " users, " + std::to_string(n) +
                          " sequences use it");
    for (auto p : prefix_.pages(b)) {
      if (pool_.ref_count(p) == 0 || page_block_[static_cast<std::size_t>(p)] != b)
        throw InternalError("KvCacheManager: evicted block " + std::to_string(b) + " lists page " +
                            std::to_string(p) + ", free or not mapped to it");
      husk_page[static_cast<std::size_t>(p)] = 1;
    }
  }
  for (std::size_t b = 0; b < users.size(); ++b) {
    if (users[b] == 0) continue;
    if (!prefix_.named(static_cast<int>(b)))
      throw InternalError("KvCacheManager: a sequence lists block " + std::to_string(b) +
                          ", which is neither cached nor an evicted block in use");
  }
  for (std::size_t i = 0; i < page_block_.size(); ++i) {
    const int b = page_block_[i];
    if (b >= 0 && cache_owned[i] == 0 && !husk_page[i])
      throw InternalError("KvCacheManager: page " + std::to_string(i) + " is mapped to block " +
                          std::to_string(b) + ", which does not hold it");
  }
  long used = 0;
  for (std::size_t i = 0; i < owners.size(); ++i) {
    const int refs = pool_.ref_count(static_cast<std::int32_t>(i));
    if (owners[i] + cache_owned[i] != refs)
      throw InternalError("KvCacheManager: page " + std::to_string(i) + " has " +
                          std::to_string(refs) + " references but " + std::to_string(owners[i]) +
                          " owners and " + std::to_string(cache_owned[i]) +
                          " cache references (leaked)");
    if (owners[i] > 1 && cache_owned[i] == 0 && !husk_page[i])
      throw InternalError("KvCacheManager: page " + std::to_string(i) + " is owned by " +
                          std::to_string(owners[i]) + " sequences outside the prefix cache");
    used += refs > 0;
  }
  if (used != pool_.used())
    throw InternalError("KvCacheManager: pool counts " + std::to_string(pool_.used()) +
                        " used pages, recount " + std::to_string(used));
  if (per_layer != layer_pages_)
    throw InternalError("KvCacheManager: per-layer page counters differ from a recount");
  if (reserved != reserved_total_)
    throw InternalError("KvCacheManager: reserved pages " + std::to_string(reserved_total_) +
                        ", recount " + std::to_string(reserved));
  if (pool_.free() + prefix_.pages_evictable() < reserved_total_)
    throw InternalError("KvCacheManager: " + std::to_string(reserved_total_) +
                        " reserved pages but only " + std::to_string(pool_.free()) + " free and " +
                        std::to_string(prefix_.pages_evictable()) + " evictable");
}

}  // namespace strata
