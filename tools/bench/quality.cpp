// Scoring of `strata eval` (tools/bench/quality.h): teacher-forced logits of each case under
// the full cache and every profile, paired verdicts, per-profile sums. The cases themselves
// are built in quality_set.cpp.
#include "tools/bench/quality.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"
#include "runtime/teacher_forcing.h"

namespace strata::bench {

namespace {

// Per-profile sums over the cases seen so far.
struct Acc {
  double nll = 0, comp = 0;
  long scored = 0;
  int sequences = 0;
  int win_ok = 0, win_n = 0, fu_ok = 0, fu_n = 0;
  std::vector<std::uint8_t> win, fu;              // per case, in set order
  std::vector<std::vector<std::int32_t>> argmax;  // per document
};

// Logits rows [first_row, ...) of one run.
struct Rows {
  const float* data = nullptr;
  int first_row = 0;
  std::size_t vocab = 0;
  const float* row(int r) const {
    STRATA_CHECK(r >= first_row, "eval: row " + std::to_string(r) +
                                     " before the first logits row " + std::to_string(first_row));
    return data + static_cast<std::size_t>(r - first_row) * vocab;
  }
};

std::int32_t argmax_of(const float* row, std::size_t vocab) {
  return static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
}

void add_document(Acc& acc, const EvalCase& c, const Rows& rows) {
  std::vector<std::int32_t> am;
  for (int row = c.score_from; row + 1 < static_cast<int>(c.ids.size()); ++row) {
    const float* x = rows.row(row);
    const double mx = *std::max_element(x, x + rows.vocab);
    double sum = 0;
    for (std::size_t v = 0; v < rows.vocab; ++v) sum += std::exp(static_cast<double>(x[v]) - mx);
    acc.nll += -(x[c.ids[static_cast<std::size_t>(row) + 1]] - mx - std::log(sum));
    ++acc.scored;
    am.push_back(argmax_of(x, rows.vocab));
  }
  acc.argmax.push_back(std::move(am));
}

void add_retrieval(Acc& acc, const EvalCase& c, const Rows& rows, bool window_mode) {
  bool ok = true;
  for (int row : c.answer)
    ok = ok && argmax_of(rows.row(row), rows.vocab) == c.ids[static_cast<std::size_t>(row) + 1];
  (window_mode ? acc.win_ok : acc.fu_ok) += ok;
  (window_mode ? acc.win : acc.fu).push_back(ok);
  ++(window_mode ? acc.win_n : acc.fu_n);
}

EvalScores finish(const Acc& acc, const EvalSet& set, const ModelConfig& model,
                  const SparsityProfile& profile,
                  const std::vector<std::vector<std::int32_t>>* reference) {
  EvalScores s;
  s.nll = acc.scored ? acc.nll / static_cast<double>(acc.scored) : 0;
  s.ppl = std::exp(s.nll);
  s.retrieval_window = acc.win_n ? static_cast<double>(acc.win_ok) / acc.win_n : 0.0;
  s.retrieval_followup = acc.fu_n ? static_cast<double>(acc.fu_ok) / acc.fu_n : 0.0;
  s.window_ok = acc.win;
  s.followup_ok = acc.fu;
  long agree = 0, agree_n = 0;
  if (reference) {
    for (std::size_t d = 0; d < acc.argmax.size(); ++d) {
      const auto& ref = reference->at(d);
      for (std::size_t i = 0; i < acc.argmax[d].size(); ++i, ++agree_n)
        agree += acc.argmax[d][i] == ref.at(i);
    }
  }
  s.agreement = agree_n ? static_cast<double>(agree) / static_cast<double>(agree_n) : 1.0;
  s.compression = acc.sequences ? acc.comp / acc.sequences : 1.0;
  double cap = 0;
  int n_sparse = 0;
  for (const auto& r : profile.resolve(model.num_hidden_layers))
    if (r.sparse()) cap += r.capacity, ++n_sparse;
  s.sparse_compression = n_sparse ? set.context_tokens / (cap / n_sparse) : 1.0;
  s.argmax = acc.argmax;
  return s;
}

// The set's cases grouped by token sequence: a document alone; a retrieval fact's two modes
// (same ids, different prefill lengths) together.
struct CaseRef {
  const EvalCase* c;
  int kind;  // 0 document, 1 retrieval in window, 2 retrieval follow-up
};
std::vector<std::vector<CaseRef>> case_groups(const EvalSet& set) {
  std::vector<std::vector<CaseRef>> g;
  for (const auto& c : set.documents) g.push_back({{&c, 0}});
  for (std::size_t r = 0; r < set.retrieval_window.size(); ++r) {
    g.push_back({{&set.retrieval_window[r], 1}});
    if (r < set.retrieval_followup.size()) {
      const auto& f = set.retrieval_followup[r];
      if (f.ids == set.retrieval_window[r].ids)
        g.back().push_back({&f, 2});
      else
        g.push_back({{&f, 2}});
    }
  }
  for (std::size_t r = set.retrieval_window.size(); r < set.retrieval_followup.size(); ++r)
    g.push_back({{&set.retrieval_followup[r], 2}});
  return g;
}

void add_case(Acc& acc, const CaseRef& c, const Rows& rows, const ModelConfig& model,
              const SparsityProfile& profile) {
  acc.comp +=
      cache_compression(model, profile, c.c->prefill_len, static_cast<int>(c.c->ids.size()));
  ++acc.sequences;
  if (c.kind == 0)
    add_document(acc, *c.c, rows);
  else
    add_retrieval(acc, *c.c, rows, c.kind == 1);
}

}  // namespace

std::vector<ForcedLogits> shared_teacher_forcing(Backend& backend,
                                                 const std::vector<std::int32_t>& ids,
                                                 const std::vector<SparsityProfile>& profiles,
                                                 const std::vector<ForcedRun>& runs,
                                                 int max_batch) {
  const ModelConfig& model = backend.model();
  const int L = model.num_hidden_layers;
  const int n = static_cast<int>(ids.size());
  if (n == 0) throw InvalidRequest("ids", "no token ids to run");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= model.vocab_size)
      throw InvalidRequest("ids", "id " + std::to_string(ids[i]) + " at index " +
                                      std::to_string(i) + " is outside the vocabulary");
  std::vector<std::vector<LayerRule>> rules;
  int wmax = 1;
  for (const auto& p : profiles) {
    rules.push_back(p.resolve(L));
    for (const auto& r : rules.back())
      if (r.sparse()) wmax = std::max(wmax, r.window);
  }
  for (const auto& r : runs) {
    if (r.profile < 0 || r.profile >= static_cast<int>(profiles.size()))
      throw InvalidRequest("runs", "profile index " + std::to_string(r.profile) + " out of range");
    if (r.prefill_len < 1 || r.prefill_len > n)
      throw InvalidRequest("runs", "prefill length " + std::to_string(r.prefill_len) +
                                       " outside [1, " + std::to_string(n) + "]");
  }
  const auto vocab = static_cast<std::size_t>(model.vocab_size);
  // S(P): the shared prefix, a whole number of pages, leaving every window in the last chunk.
  auto split = [&](int P) { return P > wmax ? (P - wmax) / kBlockSize * kBlockSize : 0; };

  std::vector<ForcedLogits> out(runs.size());
  // Runs that cannot share (a sparse layer holding its whole prompt) first: they use the pool
  // from page 0 on.
  std::vector<int> shared;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    bool eligible = true;
    for (const auto& r : rules[static_cast<std::size_t>(runs[i].profile)])
      if (r.sparse() && r.capacity >= runs[i].prefill_len) eligible = false;
    if (eligible) {
      shared.push_back(static_cast<int>(i));
    } else {
      out[i].first_row = 0;
      out[i].logits = teacher_forced_logits(
          backend, ids, profiles[static_cast<std::size_t>(runs[i].profile)], runs[i].prefill_len);
    }
  }
  if (shared.empty()) return out;
  std::stable_sort(shared.begin(), shared.end(),
                   [&](int a, int b) { return runs[a].prefill_len < runs[b].prefill_len; });

  // Shared pages: layer l's table of the prefix [0, S_max).
  int s_max = 0;
  for (int i : shared) s_max = std::max(s_max, split(runs[i].prefill_len));
  const int spl = s_max / kBlockSize;
  std::vector<std::vector<std::int32_t>> shared_pages(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l)
    for (int j = 0; j < spl; ++j) shared_pages[l].push_back(l * spl + j);
  const int first_private = L * spl;

  // Private pages of one run (prefill length P): what it writes from slot S on.
  auto private_pages = [&](int run) {
    const int P = runs[run].prefill_len, S = split(P);
    int pages = 0;
    for (const auto& r : rules[static_cast<std::size_t>(runs[run].profile)]) {
      if (!r.sparse()) {
        pages += pages_for_slots(n - S);
      } else {
        LayerSlots st;
        st.rule = r;
        st.valid = r.capacity;
        int slots = r.capacity;
        for (int t = P; t < n; ++t) {
          slots = std::max(slots, st.decode_slot() + 1);
          st.advance_decode();
        }
        pages += pages_for_slots(P - S) + pages_for_slots(slots);
      }
    }
    return pages;
  };
  const int pool = backend.info().num_pages;
  for (int i : shared)
    if (first_private + private_pages(i) > pool)
      throw ConfigError("cache.cpu_kv_bytes",
                        "shared teacher forcing of " + std::to_string(n) + " tokens needs " +
                            std::to_string(first_private + private_pages(i)) + " KV pages; the " +
                            backend.info().name + " backend has " + std::to_string(pool));

  std::uint64_t step_id = 0;
  auto run_step = [&](const StepPlan& plan) {
    auto res = backend.step(plan);
    STRATA_CHECK(res.seqs.size() == plan.seqs.size(), "shared teacher forcing: result count");
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      const std::size_t want = plan.seqs[i].return_logits ? plan.seqs[i].tokens.size() * vocab : 0;
      STRATA_CHECK(res.seqs[i].logits.size() == want,
                   "shared teacher forcing: step " + std::to_string(plan.step_id) + " returned " +
                       std::to_string(res.seqs[i].logits.size()) + " logits, expected " +
                       std::to_string(want));
    }
    return res;
  };

  int cur = 0;  // the shared pages hold the dense prefill of ids[0, cur)
  std::size_t next = 0;
  while (next < shared.size()) {
    const int P = runs[shared[next]].prefill_len, S = split(P);
    if (S > cur) {
      // Extend the shared prefix: a full-cache prefill chunk [cur, S), no logits.
      StepPlan plan;
      plan.step_id = step_id++;
      SeqStep seq;
      seq.seq_id = 0;
      seq.tokens.assign(ids.begin() + cur, ids.begin() + S);
      seq.start = cur;
      seq.prompt_len = S;
      seq.prefill = true;
      seq.layers.resize(static_cast<std::size_t>(L));
      for (int l = 0; l < L; ++l) {
        seq.layers[l].valid = cur;
        seq.layers[l].pages = shared_pages[l];
      }
      plan.seqs.push_back(std::move(seq));
      run_step(plan);
      cur = S;
    }
    // A batch: runs of this prefill length while the pool holds their private pages.
    std::vector<int> batch;
    int used = first_private;
    while (next < shared.size() && runs[shared[next]].prefill_len == P &&
           (max_batch <= 0 || static_cast<int>(batch.size()) < max_batch) &&
           used + private_pages(shared[next]) <= pool) {
      used += private_pages(shared[next]);
      batch.push_back(shared[next++]);
    }
    STRATA_CHECK(!batch.empty(), "shared teacher forcing: empty batch");
    std::int32_t page = first_private;
    auto take = [&](int count, std::vector<std::int32_t>& v) {
      for (int j = 0; j < count; ++j) v.push_back(page++);
    };
    StepPlan last;  // the final prefill chunk of every run of the batch
    last.step_id = step_id++;
    std::vector<std::int32_t> temp;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const auto& rl = rules[static_cast<std::size_t>(runs[batch[b]].profile)];
      SeqStep seq;
      seq.seq_id = b;
      seq.tokens.assign(ids.begin() + S, ids.begin() + P);
      seq.start = S;
      seq.prompt_len = P;
      seq.prefill = true;
      seq.return_logits = true;
      seq.layers.resize(static_cast<std::size_t>(L));
      for (int l = 0; l < L; ++l) {
        auto& ls = seq.layers[l];
        ls.rule = rl[l];
        const auto prefix = shared_pages[l].begin() + S / kBlockSize;
        if (!ls.rule.sparse()) {
          ls.valid = S;
          ls.pages.assign(shared_pages[l].begin(), prefix);
          take(pages_for_slots(n - S), ls.pages);
        } else {
          ls.valid = 0;
          ls.action = LayerAction::kSelect;
          ls.temp_pages.assign(shared_pages[l].begin(), prefix);
          const auto before = page;
          take(pages_for_slots(P - S), ls.temp_pages);
          for (auto p = before; p < page; ++p) temp.push_back(p);
          LayerSlots st;
          st.rule = ls.rule;
          st.valid = ls.rule.capacity;
          int slots = ls.rule.capacity;
          for (int t = P; t < n; ++t) {
            slots = std::max(slots, st.decode_slot() + 1);
            st.advance_decode();
          }
          take(pages_for_slots(slots), ls.pages);
        }
      }
      last.seqs.push_back(std::move(seq));
    }
    STRATA_CHECK(page <= pool, "shared teacher forcing: pool accounting");
    auto res = run_step(last);
    for (std::size_t b = 0; b < batch.size(); ++b) {
      auto& o = out[static_cast<std::size_t>(batch[b])];
      o.first_row = S;
      o.logits = std::move(res.seqs[b].logits);
      o.logits.reserve(static_cast<std::size_t>(n - S) * vocab);
      for (auto& ls : last.seqs[b].layers) {  // the state after the prefill
        ls.valid = ls.rule.sparse() ? ls.rule.capacity : P;
        ls.ring_pos = 0;
        ls.temp_pages.clear();
        ls.action = LayerAction::kNone;
      }
    }
    for (int t = P; t < n; ++t) {
      StepPlan plan;
      plan.step_id = step_id++;
      if (t == P) plan.released_pages = temp;
      for (std::size_t b = 0; b < batch.size(); ++b) {
        SeqStep seq;
        seq.seq_id = b;
        seq.tokens = {ids[static_cast<std::size_t>(t)]};
        seq.start = t;
        seq.prompt_len = P;
        seq.prefill = false;
        seq.return_logits = true;
        seq.layers = last.seqs[b].layers;
        plan.seqs.push_back(std::move(seq));
      }
      auto r = run_step(plan);
      for (std::size_t b = 0; b < batch.size(); ++b) {
        auto& o = out[static_cast<std::size_t>(batch[b])].logits;
        o.insert(o.end(), r.seqs[b].logits.begin(), r.seqs[b].logits.end());
        for (auto& ls : last.seqs[b].layers) ls.advance_decode();
      }
    }
  }
  return out;
}

std::vector<EvalScores> evaluate_profiles(Backend& backend, const EvalSet& set,
                                          const std::vector<SparsityProfile>& profiles,
                                          int reference, const EvalRunOptions& opts) {
  const auto& model = backend.model();
  const auto vocab = static_cast<std::size_t>(model.vocab_size);
  std::vector<Acc> acc(profiles.size());
  const auto groups = case_groups(set);
  int done = 0, total = 0;
  for (const auto& g : groups) total += static_cast<int>(g.size());
  for (const auto& g : groups) {
    const auto& ids = g.front().c->ids;
    if (opts.share_prefill) {
      std::vector<ForcedRun> runs;
      for (const auto& c : g)
        for (std::size_t p = 0; p < profiles.size(); ++p)
          runs.push_back({static_cast<int>(p), c.c->prefill_len});
      const auto logits = shared_teacher_forcing(backend, ids, profiles, runs, opts.max_batch);
      std::size_t k = 0;
      for (const auto& c : g)
        for (std::size_t p = 0; p < profiles.size(); ++p, ++k)
          add_case(acc[p], c, Rows{logits[k].logits.data(), logits[k].first_row, vocab}, model,
                   profiles[p]);
    } else {
      for (const auto& c : g)
        for (std::size_t p = 0; p < profiles.size(); ++p) {
          const auto logits =
              teacher_forced_logits(backend, c.c->ids, profiles[p], c.c->prefill_len);
          add_case(acc[p], c, Rows{logits.data(), 0, vocab}, model, profiles[p]);
        }
    }
    done += static_cast<int>(g.size());
    if (opts.progress) opts.progress(done, total);
  }
  std::vector<EvalScores> out;
  const auto* ref = reference >= 0 ? &acc.at(static_cast<std::size_t>(reference)).argmax : nullptr;
  for (std::size_t p = 0; p < profiles.size(); ++p)
    out.push_back(finish(acc[p], set, model, profiles[p], ref));
  return out;
}

EvalScores evaluate(Backend& backend, const EvalSet& set, const SparsityProfile& profile,
                    const EvalScores* reference) {
  const auto& model = backend.model();
  const auto vocab = static_cast<std::size_t>(model.vocab_size);
  Acc acc;
  for (const auto& g : case_groups(set))
    for (const auto& c : g) {
      const auto logits = teacher_forced_logits(backend, c.c->ids, profile, c.c->prefill_len);
      add_case(acc, c, Rows{logits.data(), 0, vocab}, model, profile);
    }
  return finish(acc, set, model, profile, reference ? &reference->argmax : nullptr);
}

}  // namespace strata::bench
