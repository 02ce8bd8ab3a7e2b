#include "tools/bench/quality.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"
#include "runtime/teacher_forcing.h"

namespace strata::bench {

namespace {

const char* kWords[] = {"river",  "stone",  "garden", "morning", "quiet",  "market",
                        "lamp",   "window", "letter", "bridge",  "winter", "orange",
                        "music",  "paper",  "forest", "harbor",  "silver", "clock",
                        "engine", "valley", "story",  "candle",  "road",   "cloud"};
const char* kNames[] = {"Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana",
                        "Ivan",  "Jun",   "Kofi", "Lena",  "Mateo", "Nora",  "Omar",  "Priya"};

std::string sentence(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> w(0, static_cast<int>(std::size(kWords)) - 1), len(6, 12);
  std::string s = "The";
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    s.push_back(' ');
    s.append(kWords[w(rng)]);
  }
  s.append(". ");
  return s;
}

// Filler ids of exactly `n` tokens.
std::vector<std::int32_t> filler(const Tokenizer& tok, int n, std::mt19937_64& rng) {
  std::vector<std::int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    const auto ids = tok.encode(sentence(rng), false);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(static_cast<std::size_t>(n));
  return out;
}

void append(std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

}  // namespace

EvalSet make_eval_set(const Tokenizer& tok, int context_tokens, int num_docs, int num_retrieval,
                      int scored_tokens, std::uint64_t seed) {
  if (context_tokens < 32) throw InvalidRequest("context", "context must be >= 32 tokens");
  EvalSet set;
  set.context_tokens = context_tokens;
  std::mt19937_64 rng(seed);
  for (int d = 0; d < num_docs; ++d) {
    EvalCase c;
    c.ids = filler(tok, context_tokens + scored_tokens, rng);
    c.prefill_len = context_tokens;
    c.score_from = context_tokens - 1;  // row P-1 predicts the first continuation token
    set.documents.push_back(std::move(c));
  }
  std::uniform_int_distribution<int> digit(10000, 99999);
  for (int r = 0; r < num_retrieval; ++r) {
    const std::string name = kNames[static_cast<std::size_t>(r) % std::size(kNames)];
    const std::string number = std::to_string(digit(rng));
    auto join = [](std::initializer_list<std::string_view> parts) {
      std::string out;
      for (auto p : parts) out.append(p);
      return out;
    };
    const auto fact =
        tok.encode(join({"The secret number of ", name, " is ", number, ". "}), false);
    const auto question = tok.encode(join({"\nQuestion: what is the secret number of ", name,
                                           "?\nAnswer: The secret number of ", name, " is"}),
                                     false);
    const auto answer = tok.encode(join({" ", number}), false);
    const int budget = context_tokens - static_cast<int>(fact.size());
    if (budget < 16) throw InvalidRequest("context", "context too short for the retrieval fact");
    const int before = static_cast<int>((r + 0.5) / num_retrieval * budget);
    std::vector<std::int32_t> ctx = filler(tok, before, rng);
    append(ctx, fact);
    append(ctx, filler(tok, budget - before, rng));
    for (int mode = 0; mode < 2; ++mode) {
      EvalCase c;
      c.ids = ctx;
      append(c.ids, question);
      const int answer_start = static_cast<int>(c.ids.size());
      append(c.ids, answer);
      c.prefill_len = mode == 0 ? answer_start : context_tokens;
      c.score_from = c.prefill_len - 1;
      for (int i = 0; i < static_cast<int>(answer.size()); ++i)
        c.answer.push_back(answer_start - 1 + i);
      (mode == 0 ? set.retrieval_window : set.retrieval_followup).push_back(std::move(c));
    }
  }
  return set;
}

double cache_compression(const ModelConfig& model, const SparsityProfile& profile, int prefill,
                         int n) {
  KvLayout layout{model.num_key_value_heads, model.head_dim, 2};
  int pages = 0;
  for (const auto& r : profile.resolve(model.num_hidden_layers))
    pages += 2 * pages_for_slots((r.sparse() ? std::max(r.capacity, prefill) : n) + n) + 2;
  KvCacheManager m(model.num_hidden_layers, layout, pages, profile);
  SeqSpec spec;
  spec.prompt_len = prefill;
  spec.max_tokens = n - prefill + 1;
  spec.chunked = false;
  STRATA_CHECK(m.admit(1, spec), "cache_compression: pool too small");
  std::vector<LayerSlots> layers;
  STRATA_CHECK(m.prepare_chunk(1, prefill, &layers), "cache_compression: prefill pages");
  m.commit_step(1);
  for (int t = prefill; t < n; ++t) {
    STRATA_CHECK(m.prepare_decode(1, &layers), "cache_compression: decode pages");
    m.commit_step(1);
  }
  return m.usage(1).compression;
}

EvalScores evaluate(Backend& backend, const EvalSet& set, const SparsityProfile& profile,
                    const EvalScores* reference) {
  const auto& model = backend.model();
  const auto vocab = static_cast<std::size_t>(model.vocab_size);
  EvalScores s;
  double nll = 0, comp = 0;
  long scored = 0, agree = 0, agree_n = 0;
  int sequences = 0;
  auto argmax_of = [&](const float* row) {
    return static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
  };
  auto run = [&](const EvalCase& c) {
    comp += cache_compression(model, profile, c.prefill_len, static_cast<int>(c.ids.size()));
    ++sequences;
    return teacher_forced_logits(backend, c.ids, profile, c.prefill_len);
  };
  for (std::size_t d = 0; d < set.documents.size(); ++d) {
    const auto& c = set.documents[d];
    const auto logits = run(c);
    std::vector<std::int32_t> am;
    for (int row = c.score_from; row + 1 < static_cast<int>(c.ids.size()); ++row) {
      const float* x = logits.data() + static_cast<std::size_t>(row) * vocab;
      const double mx = *std::max_element(x, x + vocab);
      double sum = 0;
      for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(x[v]) - mx);
      nll += -(x[c.ids[static_cast<std::size_t>(row) + 1]] - mx - std::log(sum));
      ++scored;
      am.push_back(argmax_of(x));
    }
    if (reference) {
      const auto& ref = reference->argmax.at(d);
      for (std::size_t i = 0; i < am.size(); ++i, ++agree_n) agree += am[i] == ref.at(i);
    }
    s.argmax.push_back(std::move(am));
  }
  auto retrieval = [&](const std::vector<EvalCase>& cases) {
    if (cases.empty()) return 0.0;
    int correct = 0;
    for (const auto& c : cases) {
      const auto logits = run(c);
      bool ok = true;
      for (int row : c.answer)
        ok = ok && argmax_of(logits.data() + static_cast<std::size_t>(row) * vocab) ==
                       c.ids[static_cast<std::size_t>(row) + 1];
      correct += ok;
    }
    return static_cast<double>(correct) / static_cast<double>(cases.size());
  };
  s.retrieval_window = retrieval(set.retrieval_window);
  s.retrieval_followup = retrieval(set.retrieval_followup);
  s.nll = scored ? nll / static_cast<double>(scored) : 0;
  s.ppl = std::exp(s.nll);
  s.agreement =
      reference ? (agree_n ? static_cast<double>(agree) / static_cast<double>(agree_n) : 1.0) : 1.0;
  s.compression = sequences ? comp / sequences : 1.0;
  double cap = 0;
  int n_sparse = 0;
  for (const auto& r : profile.resolve(model.num_hidden_layers))
    if (r.sparse()) cap += r.capacity, ++n_sparse;
  s.sparse_compression = n_sparse ? set.context_tokens / (cap / n_sparse) : 1.0;
  return s;
}

}  // namespace strata::bench
