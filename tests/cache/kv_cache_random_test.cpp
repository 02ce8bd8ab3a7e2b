// Randomized workload against the KV cache manager: thousands of admissions, chunked
// prefills (sparse layers with temp pages and selection), decodes, preemptions (recompute),
// aborts, live profile changes with shrinking, and completions. After every step: no page
// leaked, none owned twice, accounting equal to an independent recount.
// With the prefix cache on, requests share a few long prefixes: hits, insertions, LRU
// eviction under pressure and a budget; pages are shared only through the cache and only where
// no step writes them, and a fake KV memory (each slot holds the name of the prefix it was
// computed for) checks that every page a chunk reads holds its own prefix's K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "cache/block_hash.h"
#include "cache/kv_cache_manager.h"
#include "runtime/error.h"

namespace strata {
namespace {

constexpr int kLayers = 6;

struct Req {
  std::uint64_t id = 0;
  int prompt = 0;      // original prompt
  int max_tokens = 0;  // original max_tokens
  int generated = 0;   // tokens sampled so far (survive preemption)
  bool chunked = true;
  std::optional<SparsityProfile> sparsity;
  // while running
  int base = 0;  // generated when admitted: prompt_len = prompt + base
  std::vector<LayerRule> admitted_rules;
  // Prefix cache: the token stream (prompt then the tokens it will generate) and the name of
  // each prefix tokens[0, p] (what the fake memory holds for position p).
  std::vector<std::int32_t> tokens;
  std::vector<std::uint64_t> names;
};

struct Counters {
  long admitted = 0, completed = 0, preempted = 0, aborted = 0, selects = 0, shrinks = 0,
       chunks = 0, decodes = 0, profiles = 0, bad_profiles = 0, dropped_steps = 0, refused = 0,
       hits = 0, hit_tokens = 0, reads_checked = 0;
};

constexpr int kPages = 700;

class Workload {
 public:
  // budget: the prefix cache's (-1: none, the cache may fill the pool).
  explicit Workload(std::uint64_t seed, bool prefix = false, int budget = 360)
      : rng_(seed),
        prefix_(prefix),
        budget_(budget),
        m_(kLayers, KvLayout{2, 16, 4}, kPages, random_profile(false),
           PrefixCacheOptions{prefix, prefix ? budget : -1}),
        mem_(kPages) {
    for (int i = 0; i < 5; ++i) {
      std::vector<std::int32_t> t(static_cast<std::size_t>(pick(40, 240)));
      for (auto& x : t) x = pick(0, 30);
      shared_.push_back(std::move(t));
    }
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  SparsityProfile random_profile(bool allow_bad) {
    SparsityProfile p;
    const bool keep_family = m_ready_ && chance(0.7);
    if (keep_family) {
      p = m_.profile();
      if (!p.enabled) p.enabled = true;
    } else {
      p.enabled = !chance(0.15);
      p.full_layers = pick(0, 2);
      const Policy pol[] = {Policy::kWindow, Policy::kSnapKv, Policy::kScored};
      p.policy = pol[pick(0, 2)];
      p.window = pick(2, 12);
      p.sinks = pick(0, 4);
      p.schedule = chance(0.3) ? Schedule::kPyramid : Schedule::kUniform;
      p.pyramid_beta = pick(1, 20);
    }
    p.capacity = p.sinks + p.window + 1 + pick(0, 90);
    if (allow_bad && chance(0.2)) p.capacity = p.sinks + p.window;  // invalid: rejected whole
    return p;
  }

  void run(int steps) {
    m_ready_ = true;
    for (int step = 0; step < steps; ++step) {
      maybe_change_profile();
      for (int i = pick(0, 1); i > 0; --i) new_request();
      admit();
      maybe_abort();
      run_step();
      check();
    }
    for (auto& [id, r] : running_) EXPECT_TRUE(m_.free(id));
    running_.clear();
    check();
    EXPECT_EQ(m_.pool().used(), m_.prefix_cache().pages_held());  // only the cache holds pages
    EXPECT_EQ(m_.prefix_cache().husks(), 0);  // evicted blocks in use: gone with their users
    m_.drop_unused_cache();
    check();
    EXPECT_EQ(m_.pool().used(), 0);
    EXPECT_EQ(m_.pages_reserved(), 0);
  }

  Counters c;
  CacheStats stats() const { return m_.stats(); }

 private:
  void new_request() {
    Req r;
    r.id = next_id_++;
    r.prompt = chance(0.5) ? pick(1, 40) : pick(41, 260);
    r.max_tokens = chance(0.1) ? 0 : pick(1, 70);
    r.chunked = !chance(0.2);
    if (prefix_) {
      // Most requests start with one of the shared prefixes (a part of it or all of it).
      const int total = r.prompt + r.max_tokens;
      if (chance(0.8)) {
        const auto& sh = shared_[static_cast<std::size_t>(pick(0, 4))];
        const int take = std::min<int>(total, static_cast<int>(sh.size()) - pick(0, 20));
        r.tokens.assign(sh.begin(), sh.begin() + std::max(0, take));
      }
      while (static_cast<int>(r.tokens.size()) < total) r.tokens.push_back(pick(0, 30));
      std::uint64_t h = 0x1234;
      for (auto t : r.tokens) {
        h = (h ^ static_cast<std::uint64_t>(t + 1)) * 0x100000001B3ull;
        h ^= h >> 29;
        r.names.push_back(h);
      }
    }
    if (chance(0.2)) {
      auto p = random_profile(true);
      try {
        (void)m_.rules_for(p);
        r.sparsity = p;
      } catch (const ConfigError&) {
      }
    }
    waiting_.push_back(r);
  }

  void maybe_change_profile() {
    if (!chance(0.03)) return;
    const auto v = m_.profile_version();
    const auto p = random_profile(true);
    try {
      EXPECT_EQ(m_.set_profile(p, chance(0.7)), v + 1);
      ++c.profiles;
    } catch (const ConfigError& e) {
      ++c.bad_profiles;
      EXPECT_EQ(m_.profile_version(), v);  // a bad profile changes nothing
      EXPECT_FALSE(e.key().empty());
    }
  }

  void admit() {
    while (!waiting_.empty() && chance(0.8)) {
      Req r = waiting_.front();
      SeqSpec spec{r.prompt + r.generated, r.max_tokens - r.generated, r.chunked, r.sparsity};
      if (prefix_)
        spec.block_hashes = std::make_shared<const std::vector<BlockHash>>(block_hashes(
            prefix_root("model", ""), r.tokens.data(), static_cast<std::size_t>(spec.prompt_len)));
      const auto ar = m_.can_admit(spec);
      if (ar.never_fits) {
        ++c.refused;
        waiting_.pop_front();
        continue;
      }
      const bool ok = m_.admit(r.id, spec);
      EXPECT_EQ(ok, ar.ok);
      if (!ok) return;
      waiting_.pop_front();
      const int hit = m_.cached_tokens(r.id);
      EXPECT_EQ(hit, ar.cached_tokens);
      EXPECT_EQ(m_.tokens(r.id), hit);  // the prefill starts at the hit
      EXPECT_EQ(hit % kBlockSize, 0);
      if (hit > 0) {
        ++c.hits;
        c.hit_tokens += hit;
        EXPECT_GE(spec.prompt_len - hit, m_.min_final_chunk(r.id));
      }
      r.base = r.generated;
      r.admitted_rules.clear();
      for (const auto& ls : m_.layers(r.id)) r.admitted_rules.push_back(ls.rule);
      running_[r.id] = r;
      ++c.admitted;
    }
  }

  void preempt(std::uint64_t id) {
    auto it = running_.find(id);
    ASSERT_NE(it, running_.end());
    EXPECT_TRUE(m_.preempt(id));
    waiting_.push_front(it->second);  // recompute: prompt + output so far
    running_.erase(it);
    ++c.preempted;
  }

  void maybe_abort() {
    if (running_.empty() || !chance(0.04)) return;
    auto it = running_.begin();
    std::advance(it, pick(0, static_cast<int>(running_.size()) - 1));
    EXPECT_TRUE(free(it->second));
    running_.erase(it);
    ++c.aborted;
  }

  bool shrunk(const Req& r) const {
    const auto ls = m_.layers(r.id);
    for (std::size_t l = 0; l < ls.size(); ++l)
      if (ls[l].rule.capacity != r.admitted_rules[l].capacity) return true;
    return false;
  }

  // Checks the exported state of a prepared step against the contract.
  void check_chunk(const Req& r, int start, int n, const std::vector<LayerSlots>& ls) {
    ASSERT_EQ(ls.size(), static_cast<std::size_t>(kLayers));
    const int P = r.prompt + r.base;
    const bool final = start + n == P, whole = start == m_.cached_tokens(r.id) && final;
    for (std::size_t li = 0; li < ls.size(); ++li) {
      const auto& l = ls[li];
      // Every position before the chunk is in the tables and holds this prefix's K/V (a hit's
      // cached pages included).
      const auto& table = l.direct_prefill(P) ? l.pages : l.temp_pages;
      if (prefix_ && !table.empty())
        for (int p = 0; p < start; ++p) {
          ASSERT_EQ(read(table, p), name(r, p, li))
              << "seq " << r.id << " layer " << li << " position " << p;
          ++c.reads_checked;
        }
      if (l.direct_prefill(P)) {
        EXPECT_GE(static_cast<int>(l.pages.size()), pages_for_slots(start + n));
        EXPECT_EQ(l.action, LayerAction::kNone);
        EXPECT_TRUE(l.temp_pages.empty());
      } else {
        if (whole) {
          if (!prefix_) {
            EXPECT_TRUE(l.temp_pages.empty());
          }
        } else {
          EXPECT_GE(static_cast<int>(l.temp_pages.size()), pages_for_slots(start + n));
        }
        EXPECT_EQ(l.action, final ? LayerAction::kSelect : LayerAction::kNone);
        if (final) {
          EXPECT_GE(static_cast<int>(l.pages.size()), pages_for_slots(l.rule.capacity));
          EXPECT_GE(n, l.rule.window);  // the final chunk holds the observation window
          ++c.selects;
        }
      }
    }
  }

  void check_decode(const std::vector<LayerSlots>& ls) {
    ASSERT_EQ(ls.size(), static_cast<std::size_t>(kLayers));
    for (const auto& l : ls) {
      EXPECT_GT(static_cast<int>(l.pages.size()), l.decode_slot() / kBlockSize);
      EXPECT_TRUE(l.temp_pages.empty());
      if (l.action == LayerAction::kShrink) {
        ++c.shrinks;
        EXPECT_LT(l.shrink_to, l.rule.capacity);
      }
    }
  }

  void run_step() {
    std::vector<std::uint64_t> order;
    for (auto& [id, r] : running_) order.push_back(id);
    std::shuffle(order.begin(), order.end(), rng_);
    std::map<std::uint64_t, std::vector<LayerSlots>> planned;
    std::map<std::uint64_t, int> planned_n;  // input tokens of each prepared step
    for (auto id : order) {
      if (!running_.count(id)) continue;  // preempted as a victim this step
      Req& r = running_[id];
      std::vector<LayerSlots> ls;
      if (!m_.prefill_done(id)) {
        const int start = m_.tokens(id);
        const int n = m_.next_chunk_len(id, pick(1, 160));
        if (n == 0) continue;
        // Reservation promise: an admitted prefill never runs out of pages.
        ASSERT_TRUE(m_.prepare_chunk(id, n, &ls)) << "prefill of seq " << id << " starved";
        check_chunk(r, start, n, ls);
        planned_n[id] = n;
        ++c.chunks;
      } else {
        bool ok = m_.prepare_decode(id, &ls);
        if (!ok) {
          bool promised =
              !shrunk(r) && m_.tokens(id) - (r.prompt + r.base) < r.max_tokens - r.base - 1;
          for (const auto& rule : r.admitted_rules) promised = promised && rule.sparse();
          EXPECT_FALSE(promised) << "reserved decode of seq " << id << " starved";
          // Preempt the newest other running sequence (or this one) and retry once.
          std::uint64_t victim = id;
          for (auto& [oid, o] : running_)  // ascending ids: the last match is the newest
            if (oid != id && !planned.count(oid)) victim = oid;
          preempt(victim);
          if (victim == id) continue;
          ok = m_.prepare_decode(id, &ls);
          if (!ok) {
            preempt(id);
            continue;
          }
        }
        check_decode(ls);
        planned_n[id] = 1;
        ++c.decodes;
      }
      planned[id] = std::move(ls);
    }
    // Backend precondition: no two sequences share a page, except cached pages (and those of
    // blocks evicted while in use, which their users still share), which a step only reads
    // (full-layer and temp tables below the computed prefix; never a sparse layer's own table,
    // which every step may rewrite).
    const auto cached = cached_pages(/*husks=*/true);
    std::set<std::int32_t> seen;
    for (auto& [id, ls] : planned) {
      const int below = m_.tokens(id) / kBlockSize;
      for (const auto& l : ls) {
        const bool own_rewritten = l.rule.sparse() && !l.direct_prefill(m_.prompt_len(id));
        for (std::size_t j = 0; j < l.pages.size(); ++j) {
          const auto p = l.pages[j];
          if (cached.count(p)) {
            EXPECT_TRUE(!own_rewritten && static_cast<int>(j) < below)
                << "cached page " << p << " written by seq " << id;
            continue;
          }
          EXPECT_TRUE(seen.insert(p).second) << "page " << p << " shared";
        }
        for (std::size_t j = 0; j < l.temp_pages.size(); ++j) {
          const auto p = l.temp_pages[j];
          if (cached.count(p)) {
            EXPECT_LT(static_cast<int>(j), below) << "cached page " << p << " written by " << id;
            continue;
          }
          EXPECT_TRUE(seen.insert(p).second) << "page " << p << " shared";
        }
      }
    }
    for (auto p : m_.take_released())
      EXPECT_TRUE(m_.pool().is_free(p))
          << "released page " << p << " refs " << m_.pool().ref_count(p);
    // "Run" the step and commit (a few prepared steps are dropped and re-planned later).
    for (auto& [id, ls] : planned) {
      if (chance(0.03)) {
        ++c.dropped_steps;
        continue;
      }
      Req& r = running_[id];
      const bool was_prefill = !m_.prefill_done(id);
      if (prefix_) write_step(r, ls, planned_n[id]);
      m_.commit_step(id);
      const int remaining = r.max_tokens - r.base;
      if (was_prefill && m_.prefill_done(id) && remaining > 0) ++r.generated;
      if (!was_prefill) ++r.generated;
      if (m_.prefill_done(id) && r.generated == r.max_tokens) {
        EXPECT_TRUE(free(r));
        running_.erase(id);
        ++c.completed;
      }
    }
  }

  void check() {
    m_.check_invariants();
    // Independent recount from the exported tables.
    std::set<std::int32_t> owned;
    std::vector<int> per_layer(kLayers, 0);
    long usage_pages = 0, reserved = 0;
    const auto cached = cached_pages(/*husks=*/true);
    for (auto& [id, r] : running_) {
      const auto ls = m_.layers(id);
      for (int l = 0; l < kLayers; ++l) {
        for (const auto* table : {&ls[l].pages, &ls[l].temp_pages})
          for (auto p : *table)
            ASSERT_TRUE(owned.insert(p).second || cached.count(p)) << "page " << p << " twice";
        per_layer[l] += static_cast<int>(ls[l].pages.size() + ls[l].temp_pages.size());
      }
      const auto u = m_.usage(id);
      usage_pages += u.pages;
      reserved += u.reserved_pages;
      // The manager's slot counts agree with the planner's formula (unless shrunk live).
      const int P = r.prompt + r.base, T = m_.tokens(id);
      if (m_.prefill_done(id) && !shrunk(r)) {
        for (int l = 0; l < kLayers; ++l)
          EXPECT_EQ(ls[l].valid, kept_slots(ls[l].rule, P, T)) << "seq " << id << " layer " << l;
      }
    }
    for (auto p : owned) EXPECT_FALSE(m_.pool().is_free(p));
    const auto st = m_.stats();
    std::set<std::int32_t> held = owned;
    held.insert(cached.begin(), cached.end());
    EXPECT_EQ(static_cast<int>(held.size()), m_.pool().used());  // nothing leaked
    EXPECT_EQ(st.pages_used, m_.pool().used());
    EXPECT_EQ(st.pages_per_layer, per_layer);
    long entries = 0;
    for (int n : per_layer) entries += n;
    EXPECT_EQ(usage_pages, entries);
    EXPECT_EQ(reserved, st.pages_reserved);
    EXPECT_LE(st.pages_reserved, st.pages_free + st.pages_evictable);
    EXPECT_EQ(st.pages_cached, static_cast<int>(cached_pages().size()));
    if (budget_ >= 0) {
      EXPECT_LE(st.pages_cached, budget_);
    }
    // Evictable = the cached pages no sequence holds (every one of an unused block, the
    // sparse-layer copies of a block whose users have selected), recounted.
    int table_only = 0;
    for (auto p : cached_pages()) table_only += !owned.count(p);
    EXPECT_EQ(st.pages_evictable, table_only);
    EXPECT_EQ(m_.pages_available(), st.pages_free + st.pages_evictable - st.pages_reserved);
    EXPECT_EQ(st.sequences, static_cast<int>(running_.size()));
  }

  // Frees a sequence; with the prefix cache, names its prompt + generated tokens (an all-full
  // sequence's computed blocks past the prompt are then cached: later reads check them).
  bool free(const Req& r) {
    if (!prefix_) return m_.free(r.id);
    const auto names = block_hashes(prefix_root("model", ""), r.tokens.data(),
                                    static_cast<std::size_t>(r.prompt + r.generated));
    return m_.free(r.id, &names);
  }

  std::set<std::int32_t> cached_pages(bool husks = false) const {
    std::set<std::int32_t> out;
    const auto& pc = m_.prefix_cache();
    for (int b : pc.live_blocks())
      for (auto p : pc.pages(b)) out.insert(p);
    if (husks)
      for (int b : pc.husk_blocks())
        for (auto p : pc.pages(b)) out.insert(p);
    return out;
  }
  static std::uint64_t name(const Req& r, int pos, std::size_t layer) {
    return r.names[static_cast<std::size_t>(pos)] ^ (0x9E3779B97F4A7C15ull * (layer + 1));
  }
  std::uint64_t read(const std::vector<std::int32_t>& table, int pos) const {
    return mem_[static_cast<std::size_t>(table[static_cast<std::size_t>(pos / kBlockSize)])]
               [static_cast<std::size_t>(pos % kBlockSize)];
  }
  void write(const std::vector<std::int32_t>& table, int pos, std::uint64_t v) {
    mem_[static_cast<std::size_t>(table[static_cast<std::size_t>(pos / kBlockSize)])]
        [static_cast<std::size_t>(pos % kBlockSize)] = v;
  }
  // What the backend writes in this prepared step: positions' names into full-layer and temp
  // tables, garbage into every slot of a sparse layer's own table it may rewrite.
  void write_step(const Req& r, const std::vector<LayerSlots>& ls, int n) {
    const int start = m_.tokens(r.id);
    const int P = m_.prompt_len(r.id);
    const bool prefill = !m_.prefill_done(r.id);
    for (std::size_t li = 0; li < ls.size(); ++li) {
      const auto& l = ls[li];
      const bool direct = l.direct_prefill(P);
      if (!prefill || !direct) {
        if (l.rule.sparse())
          for (std::size_t j = 0; j < l.pages.size() * kBlockSize; ++j)
            write(l.pages, static_cast<int>(j), 0xDEAD);
      }
      const auto& table = direct ? l.pages : l.temp_pages;
      if (table.empty() || (!prefill && l.rule.sparse())) continue;
      for (int p = start; p < start + n; ++p) write(table, p, name(r, p, li));
    }
  }

  std::mt19937_64 rng_;
  bool prefix_ = false;
  int budget_ = -1;
  bool m_ready_ = false;
  KvCacheManager m_;
  std::vector<std::array<std::uint64_t, kBlockSize>> mem_;  // fake KV: a name per slot
  std::vector<std::vector<std::int32_t>> shared_;           // the shared prefixes
  std::deque<Req> waiting_;
  std::map<std::uint64_t, Req> running_;
  std::uint64_t next_id_ = 1;
};

TEST(KvCacheRandom, ThousandsOfOperationsKeepExactAccounting) {
  for (std::uint64_t seed : {1u, 2u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Workload w(seed);
    w.run(3000);
    if (HasFailure()) return;
    const auto& c = w.c;
    // The workload exercised every path it claims to.
    EXPECT_GT(c.admitted, 1000);
    EXPECT_GT(c.completed, 500);
    EXPECT_GT(c.preempted, 10);
    EXPECT_GT(c.aborted, 20);
    EXPECT_GT(c.selects, 100);
    EXPECT_GT(c.shrinks, 5);
    EXPECT_GT(c.profiles, 20);
    EXPECT_GT(c.bad_profiles, 2);
    EXPECT_GT(c.dropped_steps, 10);
    std::printf(
        "seed %llu: admitted %ld completed %ld preempted %ld aborted %ld chunks %ld "
        "selects %ld decodes %ld shrinks %ld profiles %ld bad %ld dropped %ld refused %ld\n",
        static_cast<unsigned long long>(seed), c.admitted, c.completed, c.preempted, c.aborted,
        c.chunks, c.selects, c.decodes, c.shrinks, c.profiles, c.bad_profiles, c.dropped_steps,
        c.refused);
  }
}

TEST(KvCacheRandom, PrefixCacheSharingEvictionAndHitsKeepExactAccounting) {
  for (std::uint64_t seed : {3u, 5u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Workload w(seed, /*prefix=*/true);
    w.run(3000);
    if (HasFailure()) return;
    const auto& c = w.c;
    const auto st = w.stats();
    EXPECT_GT(c.admitted, 800);
    EXPECT_GT(c.completed, 500);
    EXPECT_GT(c.preempted, 10);
    EXPECT_GT(c.aborted, 20);
    EXPECT_GT(c.hits, 200);
    EXPECT_GT(c.reads_checked, 100000);
    EXPECT_GT(st.blocks_evicted, 100u);  // the budget and page pressure evicted
    EXPECT_GT(st.prefix_hits, 0u);
    EXPECT_EQ(st.prefix_hits, static_cast<std::uint64_t>(c.hit_tokens));
    std::printf(
        "seed %llu: admitted %ld completed %ld preempted %ld aborted %ld hits %ld (%ld tokens, "
        "%.1f %% of %llu queried) evicted %llu reads checked %ld\n",
        static_cast<unsigned long long>(seed), c.admitted, c.completed, c.preempted, c.aborted,
        c.hits, c.hit_tokens, 100.0 * static_cast<double>(st.prefix_hits) / st.prefix_queries,
        static_cast<unsigned long long>(st.prefix_queries),
        static_cast<unsigned long long>(st.blocks_evicted), c.reads_checked);
  }
}

TEST(KvCacheRandom, PrefixCacheWithoutBudgetEvictsBlocksInUseAndKeepsExactAccounting) {
  // No budget: the cache may fill the pool, so page pressure also evicts blocks that decoding
  // sparse sequences still use (their table-only sparse-layer pages), which then live on as
  // husks until their users are freed; reads of every hit are still checked.
  for (std::uint64_t seed : {7u, 11u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Workload w(seed, /*prefix=*/true, /*budget=*/-1);
    w.run(3000);
    if (HasFailure()) return;
    const auto& c = w.c;
    const auto st = w.stats();
    EXPECT_GT(c.admitted, 800);
    EXPECT_GT(c.completed, 500);
    EXPECT_GT(c.hits, 200);
    EXPECT_GT(c.reads_checked, 100000);
    EXPECT_GT(st.blocks_evicted_in_use, 20u);
    EXPECT_GT(st.blocks_evicted, st.blocks_evicted_in_use);  // unused ones went first, too
    std::printf(
        "seed %llu: admitted %ld completed %ld preempted %ld hits %ld evicted %llu (in use "
        "%llu) reads checked %ld\n",
        static_cast<unsigned long long>(seed), c.admitted, c.completed, c.preempted, c.hits,
        static_cast<unsigned long long>(st.blocks_evicted),
        static_cast<unsigned long long>(st.blocks_evicted_in_use), c.reads_checked);
  }
}

}  // namespace
}  // namespace strata
