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
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sparsity_profile.h"
#include "runtime/tokenizer.h"

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

// Deterministic synthetic data: filler prose, a "secret number" fact at depth
// (i + 0.5) / n of the context, the question and its 5-digit answer.
EvalSet make_eval_set(const Tokenizer& tok, int context_tokens, int num_docs, int num_retrieval,
                      int scored_tokens, std::uint64_t seed);

struct EvalScores {
  double nll = 0;  // mean negative log-likelihood per scored token (nats)
  double ppl = 0;  // exp(nll)
  double retrieval_window = 0, retrieval_followup = 0;  // exact-match accuracy
  double agreement = 1;           // vs the reference argmaxes (1 for the reference itself)
  double compression = 1;         // full-cache KV bytes ÷ held, all layers, mean over sequences
  double sparse_compression = 1;  // context ÷ mean sparse-layer capacity (1 without sparsity)
  std::vector<std::vector<std::int32_t>> argmax;  // per document: continuation argmaxes
};

// Runs one profile over the set. `reference` (may be null) gives the argmaxes to agree with.
EvalScores evaluate(Backend& backend, const EvalSet& set, const SparsityProfile& profile,
                    const EvalScores* reference);

// Compression by the cache manager's accounting for a sequence of `n` tokens of which
// `prefill` are prefilled (KvCacheManager::usage().compression after the last step).
double cache_compression(const ModelConfig& model, const SparsityProfile& profile, int prefill,
                         int n);

}  // namespace strata::bench
