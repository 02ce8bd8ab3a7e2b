// Page tables resident on the device (cuda/table_store.h, StepOptions::device_tables), without a
// GPU: a simulated device store receives only each step's delta ops (applied in a random order,
// as the kernel's blocks may), and every step what the kernels would read through it — the
// table row of each token (seq_of), each decode batch index and each prefill tile — must be
// exactly the whole table the full-upload planner stages for the same plan, with zeros past it.
// Plans come from the real cache manager (tests/cuda/table_workload.h). Steady decode uploads
// kilobytes where whole tables are megabytes.
#include "cuda/table_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/step_layout.h"
#include "runtime/error.h"
#include "runtime/kv_layout.h"
#include "tests/cuda/table_workload.h"

namespace strata::cuda {
namespace {

// One planner with its image.
struct Planned {
  explicit Planned(const StepLimits& lim)
      : planner(lim),
        at(StepImageLayout::for_limits(lim)),
        mem(at.bytes),
        image(std::span<std::byte>(mem.data(), mem.size()), at) {}
  StepPlanner planner;
  StepImageLayout at;
  std::vector<std::byte> mem;
  StepImage image;
  StepLayout layout;
};

// The device store, changed only by table ops.
class SimStore {
 public:
  SimStore(int rows, int layers, int pmax, std::uint64_t seed)
      : L_(layers), P_(pmax), v_(static_cast<std::size_t>(rows) * layers * pmax, 0), rng_(seed) {}

  // Applies the step's ops round by round, each round in a random order, after checking that
  // no two ops of the step write an entry and no copy reads an entry the step writes.
  void apply(const StepLayout& s, const StepImage& image) {
    const TableOp* ops = image.table_ops();
    std::vector<char> written(v_.size(), 0);
    for (int o = 0; o < s.table_ops; ++o) {
      ASSERT_GE(ops[o].count, 1);
      for (int e = 0; e < ops[o].count; ++e) {
        const auto at = static_cast<std::size_t>(ops[o].dst + e);
        ASSERT_LT(at, v_.size());
        ASSERT_FALSE(written[at]) << "entry " << at << " written twice";
        written[at] = 1;
      }
    }
    for (int o = 0; o < s.table_ops; ++o) {
      if (ops[o].kind != kTableCopy) continue;
      ++copies;
      for (int e = 0; e < ops[o].count; ++e) {
        ASSERT_FALSE(written[static_cast<std::size_t>(ops[o].arg + e)])
            << "copy of a written entry";
      }
    }
    int covered = 0, data = 0;
    for (const TableRound& r : s.table_rounds) {
      ASSERT_EQ(r.first_op, covered);
      ASSERT_EQ(r.first_data, data);
      std::vector<int> idx(static_cast<std::size_t>(r.num_ops));
      std::iota(idx.begin(), idx.end(), r.first_op);
      std::shuffle(idx.begin(), idx.end(), rng_);
      int used = 0;
      for (int o : idx) {
        const TableOp& op = ops[o];
        for (int e = 0; e < op.count; ++e) {
          std::int32_t v = op.arg;
          if (op.kind == kTableWrite) {
            ASSERT_GE(op.arg, r.first_data);
            ASSERT_LE(op.arg + op.count, r.first_data + r.num_data);
            v = image.tables()[op.arg + e];
          } else if (op.kind == kTableCopy) {
            v = v_[static_cast<std::size_t>(op.arg + e)];
          }
          v_[static_cast<std::size_t>(op.dst + e)] = v;
        }
        if (op.kind == kTableWrite) used += op.count;
      }
      ASSERT_EQ(used, r.num_data);
      covered += r.num_ops;
      data += r.num_data;
    }
    ASSERT_EQ(covered, s.table_ops);
    ASSERT_EQ(data, s.table_data);
  }
  // What a whole-table upload of that step writes (rows 0.., the step's pitch).
  void write_whole(const StepLayout& s, const StepImage& image) {
    for (int k = 0; k < s.num_seqs; ++k)
      for (int l = 0; l < L_; ++l)
        std::copy_n(image.tables() + (static_cast<std::size_t>(k) * L_ + l) * s.table_pages,
                    s.table_pages, v_.begin() + (static_cast<std::ptrdiff_t>(k) * L_ + l) * P_);
  }
  long copies = 0;  // copy ops seen (tables that moved on the device)
  std::span<const std::int32_t> row(int r, int l) const {
    return {v_.data() + (static_cast<std::size_t>(r) * L_ + l) * P_, static_cast<std::size_t>(P_)};
  }

 private:
  int L_, P_;
  std::vector<std::int32_t> v_;
  std::mt19937_64 rng_;
};

// The table the kernels must see for plan index i, layer l: what the full-upload planner staged
// (its image row, cut at the step's pitch) continued by the plan's own table up to pmax.
std::vector<std::int32_t> expected_table(const StepPlan& plan, int i, int l, const Planned& full,
                                         int pmax) {
  const StepLayout& f = full.layout;
  const int L = static_cast<int>(plan.seqs[0].layers.size());
  const int k = static_cast<int>(std::find(f.order.begin(), f.order.end(), i) - f.order.begin());
  const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
  const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
  const bool dec = f.decode_row[static_cast<std::size_t>(i)] != 0;
  const bool via_temp = !dec && ls.rule.sparse() && !ls.direct_prefill(s.prompt_len);
  const std::int32_t* staged =
      full.image.tables() + (static_cast<std::size_t>(k) * L + l) * f.table_pages;
  std::vector<std::int32_t> want;
  if (via_temp && ls.temp_pages.empty()) {  // backend scratch: as the full planner numbered it
    want.assign(staged, staged + pages_for_slots(static_cast<int>(s.tokens.size())));
  } else {
    want = via_temp ? ls.temp_pages : ls.pages;
    if (static_cast<int>(want.size()) > pmax) want.resize(static_cast<std::size_t>(pmax));
    const int cut = std::min<int>(static_cast<int>(want.size()), f.table_pages);
    EXPECT_TRUE(std::equal(want.begin(), want.begin() + cut, staged))
        << "the full planner staged another table";
  }
  return want;
}

void expect_row_is(const SimStore& dev, int r, int l, const std::vector<std::int32_t>& want,
                   const std::string& where) {
  const auto got = dev.row(r, l);
  for (std::size_t e = 0; e < got.size(); ++e) {
    const std::int32_t w = e < want.size() ? want[e] : 0;
    if (got[e] != w) {
      ADD_FAILURE() << where << " row " << r << " layer " << l << " entry " << e << ": " << got[e]
                    << ", want " << w;
      return;
    }
  }
}

// What the kernels read through the device layout equals the whole tables, per sequence.
void expect_kernel_view(const StepPlan& plan, const Planned& dev_p, const Planned& full,
                        const SimStore& dev, int pmax, const std::string& where) {
  const StepLayout& d = dev_p.layout;
  const StepLayout& f = full.layout;
  const StepImage& im = dev_p.image;
  const int S = static_cast<int>(plan.seqs.size());
  const int L = static_cast<int>(plan.seqs[0].layers.size());
  ASSERT_EQ(d.rows, f.rows) << where;
  ASSERT_EQ(d.decode_rows, f.decode_rows) << where;
  ASSERT_EQ(d.tiles, f.tiles) << where;
  EXPECT_EQ(d.graph.bucket, f.graph.bucket) << where;
  EXPECT_EQ(d.run_rows, f.run_rows) << where;
  std::vector<int> row_of_seq(static_cast<std::size_t>(S), -1);
  for (int k = 0; k < S; ++k) {
    const int i = d.order[static_cast<std::size_t>(k)];
    const int r = d.table_row[static_cast<std::size_t>(k)];
    row_of_seq[static_cast<std::size_t>(i)] = r;
    if (k < d.decode_rows)
      EXPECT_EQ(r, k) << where << ": a decode row's table row is its batch index";
    else
      EXPECT_GE(r, d.decode_rows) << where;
  }
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const std::string at = where + " seq " + std::to_string(s.seq_id);
    const int r = row_of_seq[static_cast<std::size_t>(i)];
    const int r0 = d.first_row[static_cast<std::size_t>(i)];
    const int rf = f.first_row[static_cast<std::size_t>(i)];
    for (int t = 0; t < static_cast<int>(s.tokens.size()); ++t) {
      EXPECT_EQ(im.seq_of()[r0 + t], r) << at;
      EXPECT_EQ(im.tokens()[r0 + t], full.image.tokens()[rf + t]) << at;
      EXPECT_EQ(im.pos()[r0 + t], full.image.pos()[rf + t]) << at;
    }
    for (int l = 0; l < L; ++l)
      expect_row_is(dev, r, l, expected_table(plan, i, l, full, pmax), at);
    if (d.decode_row[static_cast<std::size_t>(i)]) {
      EXPECT_EQ(im.q_row()[r], r0) << at;
      for (int l = 0; l < L; ++l) {
        const std::size_t e = static_cast<std::size_t>(l) * dev_p.planner.limits().max_seqs + r;
        if (s.layers[static_cast<std::size_t>(l)].rule.sparse()) {  // (full layers: no DecodeSeq)
          EXPECT_EQ(im.dec_seqs()[e].table, (r * L + l) * pmax) << at;
        }
        EXPECT_EQ(
            im.seq_len()[e],
            full.image.seq_len()[static_cast<std::size_t>(l) * dev_p.planner.limits().max_seqs +
                                 (rf < f.decode_rows ? rf : 0)])
            << at;
      }
    } else {
      EXPECT_EQ(im.row_start()[r], r0) << at;
      EXPECT_EQ(im.nq()[r], static_cast<int>(s.tokens.size())) << at;
      EXPECT_EQ(im.qpos0()[r], s.start) << at;
    }
  }
  for (int t = 0; t < d.tiles; ++t) {
    EXPECT_EQ(im.tile_q0()[t], full.image.tile_q0()[t]) << where;
    const int r = im.tile_seq()[t];
    const int rf = full.image.tile_seq()[t];  // the full planner's order index
    EXPECT_EQ(r, row_of_seq[static_cast<std::size_t>(f.order[static_cast<std::size_t>(rf)])])
        << where;
  }
}

struct Totals {
  std::int64_t dev = 0, full = 0;
  long steps = 0;
};

Totals run_workload(std::uint64_t seed, const testutil::WorkloadShape& sh, int steps,
                    StepOptions opt = {}) {
  testutil::TableWorkload w(seed, sh);
  const StepLimits lim = testutil::step_limits_for(sh);
  Planned dev_p(lim), full(lim);
  SimStore dev(lim.max_seqs, lim.num_layers, lim.max_table_pages, seed);
  Totals tot;
  std::mt19937_64 rng(seed * 31);
  for (int n = 0; n < steps && !::testing::Test::HasFailure(); ++n) {
    const StepPlan& plan = w.next();
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(n);
    StepOptions o = opt;
    o.device_tables = false;
    full.planner.build(plan, o, full.image, full.layout);
    o.device_tables = true;
    dev_p.planner.build(plan, o, dev_p.image, dev_p.layout);
    dev.apply(dev_p.layout, dev_p.image);
    expect_kernel_view(plan, dev_p, full, dev, lim.max_table_pages, where);
    tot.dev += dev_p.layout.table_bytes;
    tot.full += full.layout.table_bytes;
    ++tot.steps;
    w.ran();
  }
  const auto& c = w.c;
  std::printf(
      "seed %llu: %ld steps (%ld dropped), preempted %ld, aborted %ld, finished %ld, shrinks %ld, "
      "selects %ld, profiles %ld, untracked %ld, shuffled %ld; table bytes %lld delta vs %lld "
      "whole\n",
      static_cast<unsigned long long>(seed), c.steps, c.dropped, c.preempted, c.aborted, c.finished,
      c.shrinks, c.selects, c.profiles, c.untracked, c.shuffled, static_cast<long long>(tot.dev),
      static_cast<long long>(tot.full));
  if (::testing::Test::HasFailure()) return tot;
  EXPECT_GT(dev.copies, 0) << "no table moved on the device";
  EXPECT_GT(c.preempted, 0);
  EXPECT_GT(c.dropped, 0);
  EXPECT_GT(c.finished, 10);
  EXPECT_GT(c.shuffled, 10);
  if (sh.sparse) {
    EXPECT_GT(c.shrinks, 0);
    EXPECT_GT(c.selects, 0);
  }
  return tot;
}

// Randomized steps (admissions, appends, shrinks, selection, preemption under the same id,
// aborts, unseen serials, untracked exports, shuffled plan order, graph padding): the device
// store seen by the kernels equals the whole tables at every step.
TEST(TableStore, RandomizedDeltasGiveTheWholeTablesEveryStep) {
  testutil::WorkloadShape sh;
  sh.pages = 170;  // scarce: decode growth preempts
  sh.max_new = 150;
  sh.arrivals = 1.0;
  for (std::uint64_t seed : {1u, 2u, 3u}) run_workload(seed, sh, 1500);
  sh.sparse = false;
  sh.pages = 300;  // scarce: decode growth preempts
  run_workload(4, sh, 1500);
}

// Graphs off (no padding) and a delta buffer smaller than a step's page ids (several rounds).
TEST(TableStore, RoundsAndEagerSteps) {
  testutil::WorkloadShape sh;
  sh.max_seqs = 16;
  sh.max_tokens = 512;
  testutil::TableWorkload w(9, sh);
  StepLimits lim = testutil::step_limits_for(sh);
  lim.table_delta_entries = lim.max_table_pages;  // one table per round at most
  Planned dev_p(lim), full(lim);
  SimStore dev(lim.max_seqs, lim.num_layers, lim.max_table_pages, 9);
  long multi = 0;
  for (int n = 0; n < 600 && !HasFailure(); ++n) {
    const StepPlan& plan = w.next();
    full.planner.build(plan, StepOptions{.graphs = false}, full.image, full.layout);
    dev_p.planner.build(plan, StepOptions{.graphs = false, .device_tables = true}, dev_p.image,
                        dev_p.layout);
    for (const TableRound& r : dev_p.layout.table_rounds)
      EXPECT_LE(r.num_data, lim.max_table_pages);
    multi += dev_p.layout.table_rounds.size() > 1;
    dev.apply(dev_p.layout, dev_p.image);
    expect_kernel_view(plan, dev_p, full, dev, lim.max_table_pages, "step " + std::to_string(n));
    w.ran();
  }
  EXPECT_GT(multi, 50);
}

// A step that fails after the plan (forget_tables) or runs with whole tables: the next device
// step trusts nothing and rewrites whole rows (zero tails included).
TEST(TableStore, ForgetAndSwitchingModesRewriteWholeRows) {
  testutil::WorkloadShape sh;
  testutil::TableWorkload w(5, sh);
  const StepLimits lim = testutil::step_limits_for(sh);
  Planned dev_p(lim), full(lim);
  SimStore dev(lim.max_seqs, lim.num_layers, lim.max_table_pages, 5);
  std::mt19937_64 rng(5);
  for (int n = 0; n < 600 && !HasFailure(); ++n) {
    const StepPlan& plan = w.next();
    full.planner.build(plan, {}, full.image, full.layout);
    const int mode = static_cast<int>(rng() % 10);
    if (mode == 0) {  // this step uploads whole tables in plan order (rows 0..S-1, step pitch)
      dev_p.planner.build(plan, {}, dev_p.image, dev_p.layout);
      dev.write_whole(dev_p.layout, dev_p.image);
    } else {
      dev_p.planner.build(plan, StepOptions{.device_tables = true}, dev_p.image, dev_p.layout);
      dev.apply(dev_p.layout, dev_p.image);
      expect_kernel_view(plan, dev_p, full, dev, lim.max_table_pages, "step " + std::to_string(n));
      if (mode == 1) dev_p.planner.forget_tables();  // as if the run failed after the upload
    }
    w.ran();
  }
}

// Steady decode at batch 256 on the Llama-3-8B shape (32 layers, 288 pages per table: 4608
// positions), every sequence one token per step from ~4000: whole tables are ~9.4 MB a step;
// the delta is a few kilobytes (a page per 16 tokens per layer, one op each). A finished
// sequence's row is refilled by a move on the device, not an upload.
TEST(TableStore, SteadyDecodeUploadsKilobytes) {
  constexpr int kSeqs = 256, kLayers = 32, kPmax = 288;
  StepLimits lim;
  lim.num_layers = kLayers;
  lim.vocab = 1000;
  lim.num_pages = 4'000'000;  // (pages are never reused here)
  lim.scratch_pages = 0;
  lim.max_seqs = kSeqs;
  lim.max_tokens = 8192;
  lim.max_table_pages = kPmax;
  lim.max_tiles = 8192 / 64 + kSeqs + 1;
  lim.logit_rows = 256;
  lim.kv_heads = 8;
  lim.head_dim = 128;
  lim.num_sms = 132;
  lim.graph_buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  Planned dev_p(lim), full(lim);
  struct Live {
    std::uint64_t id = 0, serial = 0;
    int pos = 0;
    std::vector<std::vector<std::int32_t>> pages;
  };
  std::int32_t next_page = 0;
  std::uint64_t next_serial = 1, next_id = 1;
  auto fresh = [&](int pos) {
    Live s;
    s.id = next_id++;
    s.pos = pos;
    s.pages.resize(kLayers);
    for (auto& p : s.pages)
      for (int i = 0; i < pages_for_slots(pos + 1); ++i) p.push_back(next_page++);
    return s;
  };
  std::vector<Live> live;
  for (int i = 0; i < kSeqs; ++i) live.push_back(fresh(4000 + i));  // (4000/500 requests)
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<std::int32_t> no_output;
  StepPlan plan;
  std::int64_t dev_bytes = 0, full_bytes = 0, first_dev = 0, append_bytes = 0;
  int append_steps = 0;
  constexpr int kSteps = 160;
  for (int n = 0; n < kSteps; ++n) {
    plan.seqs.clear();
    for (Live& s : live) {
      SeqStep st;
      st.seq_id = s.id;
      st.tokens = {static_cast<std::int32_t>(s.pos % 1000)};
      st.start = s.pos;
      st.prompt_len = 3000;
      st.prefill = false;
      st.sample = true;
      st.params = &greedy;
      st.output = &no_output;
      st.table_base = s.serial;
      st.table_serial = s.serial = next_serial++;
      for (auto& p : s.pages) {
        const int before = static_cast<int>(p.size());
        if (before < pages_for_slots(s.pos + 1)) p.push_back(next_page++);
        LayerSlots ls;
        ls.valid = s.pos;
        ls.pages = p;
        ls.pages_kept = st.table_base ? before : 0;  // (tables only grow here)
        st.layers.push_back(std::move(ls));
      }
      plan.seqs.push_back(std::move(st));
    }
    dev_p.planner.build(plan, StepOptions{.device_tables = true}, dev_p.image, dev_p.layout);
    full.planner.build(plan, {}, full.image, full.layout);
    if (n == 0)
      first_dev = dev_p.layout.table_bytes;
    else
      dev_bytes += dev_p.layout.table_bytes;
    if (n > 0 && n % 2 == 0) append_bytes += dev_p.layout.table_bytes, ++append_steps;
    full_bytes += full.layout.table_bytes;
    for (Live& s : live) ++s.pos;
    if (n % 2 == 0) {  // one finishes, a new one (its prefill not modelled) comes at the back
      live.erase(live.begin() + (n * 37) % kSeqs);
      live.push_back(fresh(4000 + n));
    }
  }
  const double dev_avg = static_cast<double>(dev_bytes) / (kSteps - 1);
  const double full_avg = static_cast<double>(full_bytes) / kSteps;
  const double append_avg = static_cast<double>(append_bytes) / append_steps;
  std::printf(
      "batch %d x %d layers x %d pages: whole tables %.0f bytes/step, resident deltas "
      "%.0f bytes/step (%.0f on steps without a new sequence; first step %lld)\n",
      kSeqs, kLayers, kPmax, full_avg, dev_avg, append_avg, static_cast<long long>(first_dev));
  EXPECT_GT(full_avg, 8.5e6);
  // A new sequence every other step is a whole row (32 x ~252 pages, ~32 KB); the appends are
  // ~16 sequences crossing a page x 32 layers x one 16-byte op.
  EXPECT_LT(dev_avg, 32.0e3);
  EXPECT_LT(append_avg, 12.0e3);
  EXPECT_GT(first_dev, 8.0e6);  // the first step uploads every row once
}

}  // namespace
}  // namespace strata::cuda
