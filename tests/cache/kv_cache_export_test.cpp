// Incremental page-table export (KvCacheManager::prepare_* with a table serial): a buffer that
// still holds a sequence's last export gets only what changed since. Over a randomized
// workload (admissions, chunked prefills with selection, decode growth, preemption by
// recompute with the same sequence id, aborts, live profile changes with shrinking, dropped
// steps, buffers that change hands between sequences or get lost), every incremental export
// must equal a from-scratch export of the same preparation, field by field.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {

constexpr int kLayers = 5;

void expect_same_rule(const LayerRule& a, const LayerRule& b, const std::string& where) {
  EXPECT_EQ(a.policy, b.policy) << where;
  EXPECT_EQ(a.capacity, b.capacity) << where;
  EXPECT_EQ(a.ring, b.ring) << where;
  EXPECT_EQ(a.sinks, b.sinks) << where;
  EXPECT_EQ(a.window, b.window) << where;
  EXPECT_EQ(a.pool, b.pool) << where;
  EXPECT_EQ(a.pool_kernel, b.pool_kernel) << where;
}

// Every field of every layer.
void expect_same_tables(const std::vector<LayerSlots>& got, const std::vector<LayerSlots>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t l = 0; l < got.size(); ++l) {
    const std::string where = what + " layer " + std::to_string(l);
    expect_same_rule(got[l].rule, want[l].rule, where);
    EXPECT_EQ(got[l].valid, want[l].valid) << where;
    EXPECT_EQ(got[l].ring_pos, want[l].ring_pos) << where;
    EXPECT_EQ(got[l].pages, want[l].pages) << where;
    EXPECT_EQ(got[l].temp_pages, want[l].temp_pages) << where;
    EXPECT_EQ(got[l].action, want[l].action) << where;
    EXPECT_EQ(got[l].shrink_to, want[l].shrink_to) << where;
  }
}

struct Buffer {
  std::vector<LayerSlots> layers;
  std::uint64_t serial = 0;
};

struct Req {
  std::uint64_t id = 0;
  int prompt = 0, max_tokens = 0, generated = 0, base = 0;
  bool chunked = true;
};

struct Counters {
  long prepared = 0, preempted = 0, shrinks = 0, selects = 0, profiles = 0, own_buffer = 0,
       foreign_buffer = 0, stale_own = 0, kept_pages = 0, shrunk_tables = 0;
};

class ExportWorkload {
 public:
  explicit ExportWorkload(std::uint64_t seed)
      : rng_(seed), m_(kLayers, KvLayout{2, 16, 4}, 420, profile(Policy::kSnapKv, 40)) {}

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  SparsityProfile profile(Policy pol, int capacity) {
    return test::sparse_profile(pol, 2, capacity, 4, 2);
  }

  void run(int steps) {
    for (int step = 0; step < steps && !::testing::Test::HasFatalFailure(); ++step) {
      if (chance(0.04)) {  // live profile change; same policy shrinks running sequences
        const Policy pols[] = {Policy::kSnapKv, Policy::kScored, Policy::kWindow};
        const Policy pol = chance(0.7) ? m_.profile().policy : pols[pick(0, 2)];
        m_.set_profile(profile(pol, pick(8, 60)), chance(0.8));
        ++c.profiles;
      }
      for (int i = pick(0, 2); i > 0; --i) {
        Req r;
        r.id = next_id_++;
        r.prompt = chance(0.5) ? pick(1, 30) : pick(31, 140);
        r.max_tokens = pick(1, 90);
        r.chunked = !chance(0.2);
        waiting_.push_back(r);
      }
      admit();
      if (!running_.empty() && chance(0.05)) {  // abort
        auto it = running_.begin();
        std::advance(it, pick(0, static_cast<int>(running_.size()) - 1));
        m_.free(it->first);
        running_.erase(it);
      }
      run_step();
      m_.check_invariants();
    }
  }

  Counters c;
  KvCacheManager& manager() { return m_; }

 private:
  void admit() {
    while (!waiting_.empty() && chance(0.8)) {
      Req r = waiting_.front();
      const SeqSpec spec{r.prompt + r.generated, r.max_tokens - r.generated, r.chunked, {}};
      const auto ar = m_.can_admit(spec);
      if (ar.never_fits) {
        waiting_.pop_front();
        continue;
      }
      if (!m_.admit(r.id, spec)) return;
      waiting_.pop_front();
      r.base = r.generated;
      running_[r.id] = r;
    }
  }

  void preempt(std::uint64_t id) {
    m_.preempt(id);
    waiting_.push_front(running_[id]);  // readmitted later with the same id
    running_.erase(id);
    ++c.preempted;
  }

  // The buffer a sequence is prepared into: usually the one that held its last export (as
  // the scheduler hands them out), sometimes one another sequence left (mostly one that is
  // not running any more, sometimes one a running sequence still expects) or a fresh one.
  Buffer take(std::uint64_t id) {
    auto own =
        std::find_if(spares_.begin(), spares_.end(), [&](const auto& b) { return b.first == id; });
    if (own != spares_.end() && !chance(0.05)) {
      ++c.own_buffer;
      return take_at(own);
    }
    if (spares_.empty() || chance(0.1)) return Buffer{};
    ++c.foreign_buffer;
    if (chance(0.9)) {
      const auto dead = std::find_if(spares_.begin(), spares_.end(), [&](const auto& b) {
        return b.first != id && !running_.count(b.first);
      });
      if (dead != spares_.end()) return take_at(dead);
    }
    return take_at(spares_.begin() + pick(0, static_cast<int>(spares_.size()) - 1));
  }

  template <class It>
  Buffer take_at(It it) {
    Buffer b = std::move(it->second);
    spares_.erase(it);
    return b;
  }

  // Prepares `id` into a recycled buffer and into a fresh vector (from scratch; preparing
  // again is allowed and allocates nothing more): both exports must be equal.
  bool prepare(std::uint64_t id, Buffer& b) {
    const bool decode = m_.prefill_done(id);
    int n = 0;
    if (!decode) {
      n = m_.next_chunk_len(id, pick(1, 100));
      if (n == 0) return false;
    }
    const std::uint64_t base = m_.export_serial(id);
    const bool ok = decode ? m_.prepare_decode(id, &b.layers, &b.serial)
                           : m_.prepare_chunk(id, n, &b.layers, &b.serial);
    if (!ok) {
      EXPECT_EQ(m_.export_serial(id), base) << "a failed preparation changed the serial";
      return false;
    }
    expect_kept_since(id, base, b);
    std::vector<LayerSlots> scratch;
    EXPECT_TRUE(decode ? m_.prepare_decode(id, &scratch) : m_.prepare_chunk(id, n, &scratch));
    expect_same_tables(b.layers, scratch, "sequence " + std::to_string(id));
    for (const auto& l : scratch) {
      c.shrinks += l.action == LayerAction::kShrink;
      c.selects += l.action == LayerAction::kSelect;
    }
    ++c.prepared;
    return true;
  }

  // pages_kept (what a backend with resident tables trusts): the leading entries of each layer's
  // pages equal those of the sequence's previous tracked export, whichever buffer held it.
  void expect_kept_since(std::uint64_t id, std::uint64_t base, const Buffer& b) {
    EXPECT_EQ(m_.export_serial(id), b.serial);
    auto& last = exports_[id];
    const bool known = base != 0 && last.first == base;
    EXPECT_TRUE(base == 0 || known) << "base " << base << " is not the last export seen";
    for (std::size_t l = 0; l < b.layers.size(); ++l) {
      const LayerSlots& ls = b.layers[l];
      const auto kept = static_cast<std::size_t>(ls.pages_kept);
      ASSERT_LE(kept, ls.pages.size()) << "sequence " << id << " layer " << l;
      if (!known) {
        EXPECT_EQ(kept, 0u) << "sequence " << id << " layer " << l;
        continue;
      }
      const std::vector<std::int32_t>& was = last.second[l];
      ASSERT_LE(kept, was.size()) << "sequence " << id << " layer " << l;
      EXPECT_TRUE(
          std::equal(ls.pages.begin(), ls.pages.begin() + static_cast<long>(kept), was.begin()))
          << "sequence " << id << " layer " << l;
      c.kept_pages += static_cast<long>(kept);
      c.shrunk_tables += ls.pages.size() < was.size();
    }
    last.first = b.serial;
    last.second.clear();
    for (const LayerSlots& ls : b.layers) last.second.push_back(ls.pages);
  }

  void run_step() {
    std::vector<std::uint64_t> order;
    for (auto& [id, r] : running_) order.push_back(id);
    std::map<std::uint64_t, Buffer> planned;
    std::vector<std::pair<std::uint64_t, Buffer>> next;  // spares of the next step
    for (auto id : order) {
      if (!running_.count(id)) continue;
      Buffer b = take(id);
      bool ok = prepare(id, b);
      while (!ok && running_.count(id) && m_.prefill_done(id)) {
        std::uint64_t victim = id;  // the newest not yet planned (or this one)
        for (auto& [oid, o] : running_)
          if (oid != id && !planned.count(oid)) victim = oid;
        preempt(victim);
        if (victim != id) ok = prepare(id, b);
      }
      if (ok) {
        planned[id] = std::move(b);
      } else {
        next.emplace_back(id, std::move(b));  // unused, unchanged: for the next step
      }
    }
    // Buffers nobody took this step are dropped (as the scheduler does), a few kept (a
    // stale buffer of a sequence that has a newer one elsewhere).
    for (auto& e : spares_)
      if (chance(0.1)) next.push_back(std::move(e));
    (void)m_.take_released();
    for (auto& [id, b] : planned) {
      const bool dropped = chance(0.03);  // prepared, not run: prepared again next step
      if (!chance(0.03)) next.emplace_back(id, std::move(b));  // (else lost: not recycled)
      if (dropped) continue;
      Req& r = running_[id];
      const bool was_prefill = !m_.prefill_done(id);
      m_.commit_step(id);
      if (!was_prefill || (m_.prefill_done(id) && r.max_tokens > r.base)) ++r.generated;
      if (m_.prefill_done(id) && r.generated >= r.max_tokens) {
        m_.free(id);
        running_.erase(id);
      }
    }
    spares_ = std::move(next);
    std::shuffle(spares_.begin(), spares_.end(), rng_);
  }

  std::mt19937_64 rng_;
  KvCacheManager m_;
  std::deque<Req> waiting_;
  std::map<std::uint64_t, Req> running_;
  std::vector<std::pair<std::uint64_t, Buffer>> spares_;  // (sequence it was last prepared for)
  std::uint64_t next_id_ = 1;
  // Per sequence id: its last tracked export (serial, pages per layer).
  std::map<std::uint64_t, std::pair<std::uint64_t, std::vector<std::vector<std::int32_t>>>>
      exports_;
};

TEST(KvCacheExport, IncrementalExportEqualsFromScratchExport) {
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ExportWorkload w(seed);
    w.run(2500);
    if (HasFailure()) return;
    const auto& c = w.c;
    // The workload reached every case that can leave a stale table.
    EXPECT_GT(c.prepared, 5000);
    EXPECT_GT(c.preempted, 20);
    EXPECT_GT(c.shrinks, 20);
    EXPECT_GT(c.selects, 100);
    EXPECT_GT(c.profiles, 40);
    EXPECT_GT(c.own_buffer, 3000);
    EXPECT_GT(c.foreign_buffer, 200);
    EXPECT_GT(c.kept_pages, 10000);  // pages_kept was checked, and said something
    EXPECT_GT(c.shrunk_tables, 20);  // including tables that lost their tail
    // Most exports reused their buffer, and copied a small part of the tables.
    const auto e = w.manager().export_counters();
    EXPECT_GT(e.incremental, e.exports / 2);
    EXPECT_LT(e.pages_copied * 4, e.pages_exported);
    std::printf(
        "seed %llu: prepared %ld preempted %ld shrinks %ld selects %ld profiles %ld own %ld "
        "foreign %ld; exports %ld incremental %ld, pages %ld of which copied %ld\n",
        static_cast<unsigned long long>(seed), c.prepared, c.preempted, c.shrinks, c.selects,
        c.profiles, c.own_buffer, c.foreign_buffer, e.exports, e.incremental, e.pages_exported,
        e.pages_copied);
  }
}

// The direct cases, one by one: growth by a page, a snapkv shrink followed by growth (the
// table loses its tail and gets new pages at the same indices), preemption and readmission
// under the same id, and a buffer that held another sequence's export.
TEST(KvCacheExport, BufferOfTheLastExportGetsOnlyTheChanges) {
  const SparsityProfile p = test::sparse_profile(Policy::kSnapKv, 1, 48, 4, 2);
  KvCacheManager m(2, KvLayout{2, 16, 4}, 64, p);
  ASSERT_TRUE(m.admit(1, SeqSpec{40, 100, true, {}}));
  Buffer b;
  ASSERT_TRUE(m.prepare_chunk(1, 40, &b.layers, &b.serial));
  m.commit_step(1);
  auto full = [&](std::uint64_t id) { return m.layers(id); };
  for (int i = 0; i < 30; ++i) {  // decodes across page boundaries
    ASSERT_TRUE(m.prepare_decode(1, &b.layers, &b.serial));
    const auto want = full(1);
    for (int l = 0; l < 2; ++l) EXPECT_EQ(b.layers[l].pages, want[l].pages);
    m.commit_step(1);
  }
  // Live shrink of the snapkv layer to 32 slots (two pages): the commit frees the pages past
  // the second, sequence 2 takes some of them, and sequence 1's next decode (slot 32) appends
  // a page at index 2 again, another one: between two exports the table lost its tail and
  // regrew at the same indices.
  const std::vector<std::int32_t> before_shrink = b.layers[1].pages;
  m.set_profile(
      [&] {
        auto q = p;
        q.capacity = 32;
        return q;
      }(),
      true);
  ASSERT_TRUE(m.prepare_decode(1, &b.layers, &b.serial));
  EXPECT_EQ(b.layers[1].action, LayerAction::kShrink);
  m.commit_step(1);
  ASSERT_TRUE(m.admit(2, SeqSpec{30, 2, true, {}}));
  Buffer b2;
  ASSERT_TRUE(m.prepare_chunk(2, 30, &b2.layers, &b2.serial));
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(m.prepare_decode(1, &b.layers, &b.serial));
    if (i == 0) {
      ASSERT_EQ(b.layers[1].pages.size(), 3u);
      EXPECT_NE(b.layers[1].pages[2], before_shrink[2]);
    }
    std::vector<LayerSlots> scratch;
    ASSERT_TRUE(m.prepare_decode(1, &scratch));
    expect_same_tables(b.layers, scratch, "after shrink, decode " + std::to_string(i));
    m.commit_step(1);
  }
  // Preempted and readmitted under the same id: the old buffer's serial no longer matches.
  const std::uint64_t old_serial = b.serial;
  m.commit_step(2);
  m.free(2);
  m.preempt(1);
  ASSERT_TRUE(m.admit(1, SeqSpec{75, 20, true, {}}));
  ASSERT_TRUE(m.prepare_chunk(1, 75, &b.layers, &b.serial));
  EXPECT_NE(b.serial, old_serial);
  std::vector<LayerSlots> scratch;
  ASSERT_TRUE(m.prepare_chunk(1, 75, &scratch));
  expect_same_tables(b.layers, scratch, "readmitted");
  // A buffer that held sequence 2's export, handed to sequence 1.
  m.commit_step(1);
  ASSERT_TRUE(m.prepare_decode(1, &b2.layers, &b2.serial));
  scratch.clear();
  ASSERT_TRUE(m.prepare_decode(1, &scratch));
  expect_same_tables(b2.layers, scratch, "foreign buffer");
  // The old buffer (its serial is not the last export's any more) is copied in full.
  const auto before = m.export_counters();
  ASSERT_TRUE(m.prepare_decode(1, &b.layers, &b.serial));
  const auto after = m.export_counters();
  EXPECT_EQ(after.incremental, before.incremental);
  EXPECT_EQ(after.pages_copied - before.pages_copied, after.pages_exported - before.pages_exported);
  expect_same_tables(b.layers, scratch, "stale buffer");
  m.check_invariants();
}

}  // namespace
}  // namespace strata
