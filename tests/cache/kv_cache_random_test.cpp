// Randomized workload against the KV cache manager: thousands of admissions, chunked
// prefills (sparse layers with temp pages and selection), decodes, preemptions (recompute),
// aborts, live profile changes with shrinking, and completions. After every step: no page
// leaked, none owned twice, accounting equal to an independent recount.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

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
};

struct Counters {
  long admitted = 0, completed = 0, preempted = 0, aborted = 0, selects = 0, shrinks = 0,
       chunks = 0, decodes = 0, profiles = 0, bad_profiles = 0, dropped_steps = 0, refused = 0;
};

class Workload {
 public:
  explicit Workload(std::uint64_t seed)
      : rng_(seed), m_(kLayers, KvLayout{2, 16, 4}, 700, random_profile(false)) {}

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
    EXPECT_EQ(m_.pool().used(), 0);
    EXPECT_EQ(m_.pages_reserved(), 0);
  }

  Counters c;

 private:
  void new_request() {
    Req r;
    r.id = next_id_++;
    r.prompt = chance(0.5) ? pick(1, 40) : pick(41, 260);
    r.max_tokens = chance(0.1) ? 0 : pick(1, 70);
    r.chunked = !chance(0.2);
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
      const SeqSpec spec{r.prompt + r.generated, r.max_tokens - r.generated, r.chunked, r.sparsity};
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
    EXPECT_TRUE(m_.free(it->first));
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
    const bool final = start + n == P, whole = start == 0 && final;
    for (const auto& l : ls) {
      if (l.direct_prefill(P)) {
        EXPECT_GE(static_cast<int>(l.pages.size()), pages_for_slots(start + n));
        EXPECT_EQ(l.action, LayerAction::kNone);
        EXPECT_TRUE(l.temp_pages.empty());
      } else {
        if (whole) {
          EXPECT_TRUE(l.temp_pages.empty());
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
        ++c.decodes;
      }
      planned[id] = std::move(ls);
    }
    // Backend precondition: no two sequences share a page.
    std::set<std::int32_t> seen;
    for (auto& [id, ls] : planned)
      for (const auto& l : ls) {
        for (auto p : l.pages) EXPECT_TRUE(seen.insert(p).second) << "page " << p << " shared";
        for (auto p : l.temp_pages) EXPECT_TRUE(seen.insert(p).second) << "page " << p << " shared";
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
      m_.commit_step(id);
      const int remaining = r.max_tokens - r.base;
      if (was_prefill && m_.prefill_done(id) && remaining > 0) ++r.generated;
      if (!was_prefill) ++r.generated;
      if (m_.prefill_done(id) && r.generated == r.max_tokens) {
        EXPECT_TRUE(m_.free(id));
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
    for (auto& [id, r] : running_) {
      const auto ls = m_.layers(id);
      for (int l = 0; l < kLayers; ++l) {
        for (auto p : ls[l].pages) ASSERT_TRUE(owned.insert(p).second) << "page " << p << " twice";
        for (auto p : ls[l].temp_pages)
          ASSERT_TRUE(owned.insert(p).second) << "page " << p << " twice";
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
    EXPECT_EQ(static_cast<int>(owned.size()), m_.pool().used());  // nothing leaked
    EXPECT_EQ(st.pages_used, m_.pool().used());
    EXPECT_EQ(st.pages_per_layer, per_layer);
    EXPECT_EQ(usage_pages, st.pages_used);
    EXPECT_EQ(reserved, st.pages_reserved);
    EXPECT_LE(st.pages_reserved, st.pages_free);
    EXPECT_EQ(st.sequences, static_cast<int>(running_.size()));
  }

  std::mt19937_64 rng_;
  bool m_ready_ = false;
  KvCacheManager m_;
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

}  // namespace
}  // namespace strata
