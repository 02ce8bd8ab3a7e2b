// `strata eval`: what sparsity costs in quality. The same inputs run through the full cache
// and through sparsity profiles; every measure is teacher-forced through the backend's real
// decode path (runtime/teacher_forcing.h): the context is prefilled (and compressed), the
// tokens after it are fed one decode step at a time, so they attend over the sparse KV.
//  - perplexity of the continuation of long documents (context compressed first);
//  - greedy agreement: share of continuation positions whose argmax equals the full cache's;
//  - retrieval exact match: a fact at a chosen depth of the context; the answer is "greedy
//    correct" when every answer token is the argmax given the previous ones (the same as
//    greedy decoding producing the answer). Two modes: the question inside the observation
//    window (prefilled with the context, as SnapKV assumes) and follow-up (the context is
//    compressed before the question arrives as decode steps).
// Compression is the cache's own accounting (KvCacheManager): full-cache KV bytes ÷ bytes of
// the slots held, over all layers, at the end of each sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sparsity_profile.h"
#include "runtime/text/tokenizer.h"

namespace strata::bench {

struct EvalCase {
  std::vector<std::int32_t> ids;
  int prefill_len = 0;      // positions [0, prefill_len) are prefilled
  int score_from = 0;       // rows >= score_from predict ids[row + 1] (perplexity, agreement)
  std::vector<int> answer;  // rows whose argmax must equal ids[row + 1] (retrieval)
};

struct EvalSet {
  int context_tokens = 0;
  std::vector<EvalCase> documents;         // perplexity + agreement
  std::vector<EvalCase> retrieval_window;  // question inside the observation window
  std::vector<EvalCase> retrieval_followup;
};

// What the evaluation cases are made of (tools/evalmodel/synth.py builds its training data and
// held-out check the same way).
struct EvalFormat {
  // Filler ids: held-out natural text (the evaluation model's eval_filler.txt, tokenized);
  // slices at random offsets fill the contexts and the documents. Empty: word sentences.
  std::vector<std::int32_t> filler;
  int facts = 4;  // facts per retrieval context (distinct held-out names, one asked); fewer
                  // when the context cannot hold them
};

// Full names the evaluation model never saw a fact about: FIRST LAST with FNV-1a-64 of
// "FIRST LAST" ≡ 0 (mod 7), over its first and last names (synth.py's rule and lists).
std::uint64_t fnv1a64(std::string_view s);
std::vector<std::string> heldout_names();

// Deterministic data: filler, `facts` "The secret number of FIRST LAST is NNNNN." facts about
// distinct held-out names (about a third share a first or last name with another), the asked
// one at depth (i + 0.5) / n of the context, the others at random depths; then the question
// (the training template for even i, the evaluation-only paraphrase for odd i) and the
// 5-digit answer.
EvalSet make_eval_set(const Tokenizer& tok, int context_tokens, int num_docs, int num_retrieval,
                      int scored_tokens, std::uint64_t seed, const EvalFormat& format = {});

struct EvalScores {
  double nll = 0;  // mean negative log-likelihood per scored token (nats)
  double ppl = 0;  // exp(nll)
  double retrieval_window = 0, retrieval_followup = 0;  // exact-match accuracy
  std::vector<std::uint8_t> window_ok, followup_ok;     // per retrieval case, in set order
  double agreement = 1;           // vs the reference argmaxes (1 for the reference itself)
  double compression = 1;         // full-cache KV bytes ÷ held, all layers, mean over sequences
  double sparse_compression = 1;  // context ÷ mean sparse-layer capacity (1 without sparsity)
  std::vector<std::vector<std::int32_t>> argmax;  // per document: continuation argmaxes
};

// Runs one profile over the set, every case from scratch (teacher_forced_logits: one prefill
// step, then one decode step per later token). `reference` (may be null) gives the argmaxes
// to agree with.
EvalScores evaluate(Backend& backend, const EvalSet& set, const SparsityProfile& profile,
                    const EvalScores* reference);

// Shared prefill. Every measure only reads rows >= prefill_len - 1, and a prefill is dense
// whatever the profile: up to the final chunk, where sparse layers select (kSelect), the K/V
// of every layer and every hidden state are the same for the full cache and every profile. So
// the prefill of ids[0, S) is run once with the full cache into shared pages, S = the largest
// multiple of 16 <= prefill_len - (largest window), and each run continues with its own
// final prefill chunk ids[S, prefill_len) (sparse layers: temp_pages = the shared pages of
// [0, S) + private pages for [S, prefill_len), kSelect; full layers: the shared pages + private
// pages from slot S on) and its decode steps — plain StepPlans through Backend::step, the runs
// of one prefill length batched as separate sequences of one step. Shared pages are never
// written by a run, so runs do not disturb one another. The CPU backend computes every row
// with the same arithmetic whatever the chunking and batching (row-wise matmul, attention
// over keys in slot order), so the logits are bit-identical to teacher_forced_logits
// (tests/tools/quality_test.cpp checks it). Runs with a sparse layer whose capacity is at least
// the prefill (no kSelect: the prefill itself updates scores) run from scratch.
struct ForcedRun {
  int profile = 0;      // index into the profiles
  int prefill_len = 0;  // 0 < prefill_len <= ids.size()
};
struct ForcedLogits {
  int first_row = 0;  // logits of rows [first_row, ids.size()); first_row <= prefill_len - 1
  std::vector<float> logits;  // [ids.size() - first_row][vocab]
};
// `max_batch` caps the sequences of one step (0: as many as the KV pool holds).
std::vector<ForcedLogits> shared_teacher_forcing(Backend& backend,
                                                 const std::vector<std::int32_t>& ids,
                                                 const std::vector<SparsityProfile>& profiles,
                                                 const std::vector<ForcedRun>& runs,
                                                 int max_batch = 0);

// Runs every profile over the set; result i belongs to profiles[i]. Agreement is measured
// against the argmaxes of profiles[reference] (reference < 0: agreement 1). share_prefill
// selects shared_teacher_forcing (the retrieval case's two modes share one prefill too: same
// ids) or the from-scratch path of evaluate(); both give the same scores. `progress` (may be
// null) is called after each case with (cases done, cases).
struct EvalRunOptions {
  bool share_prefill = true;
  int max_batch = 0;
  std::function<void(int, int)> progress;
};
std::vector<EvalScores> evaluate_profiles(Backend& backend, const EvalSet& set,
                                          const std::vector<SparsityProfile>& profiles,
                                          int reference, const EvalRunOptions& opts = {});

// Compression by the cache manager's accounting for a sequence of `n` tokens of which
// `prefill` are prefilled (KvCacheManager::usage().compression after the last step).
double cache_compression(const ModelConfig& model, const SparsityProfile& profile, int prefill,
                         int n);

}  // namespace strata::bench
