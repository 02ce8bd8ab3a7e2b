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

const char* kWords[] = {"river",  "stone",  "garden", "morning", "quiet",  "market",
                        "lamp",   "window", "letter", "bridge",  "winter", "orange",
                        "music",  "paper",  "forest", "harbor",  "silver", "clock",
                        "engine", "valley", "story",  "candle",  "road",   "cloud"};
// synth.py's FIRST_NAMES and LAST_NAMES, in its order (the held-out rule reads the strings).
const char* kFirstNames[] = {
    "Alice",  "Bruno",  "Chen",   "Dalia",  "Emeka",   "Farah",  "Goran",  "Hana",   "Ivan",
    "Jun",    "Kofi",   "Lena",   "Mateo",  "Nora",    "Omar",   "Priya",  "Aaron",  "Abigail",
    "Adam",   "Adrian", "Agnes",  "Ahmed",  "Aisha",   "Akira",  "Alan",   "Alba",   "Alex",
    "Amara",  "Amir",   "Ana",    "Anders", "Andrea",  "Anika",  "Anton",  "Arjun",  "Arlo",
    "Astrid", "Aurora", "Ayla",   "Bao",    "Beatriz", "Bella",  "Ben",    "Bianca", "Boris",
    "Carla",  "Carlos", "Caspar", "Cecil",  "Celia",   "Chiara", "Chloe",  "Clara",  "Colin",
    "Dario",  "Daniel", "Daria",  "Dev",    "Diego",   "Dmitri", "Edgar",  "Elena",  "Elias",
    "Eliza",  "Emil",   "Emma",   "Enzo",   "Erik",    "Esme",   "Ezra",   "Fatima", "Felix",
    "Fiona",  "Flora",  "Frank",  "Frida",  "Gabriel", "Gemma",  "George", "Gia",    "Gloria",
    "Hamid",  "Hannah", "Hector", "Helga",  "Henry",   "Hugo",   "Ida",    "Ilya",   "Imani",
    "Ines",   "Iris",   "Isaac",  "Jack",   "Jamal",   "Jana",   "Jasper", "Javier", "Jonas",
    "Juan",   "Julia",  "Kai",    "Kamal",  "Karim",   "Kasia",  "Kenji",  "Kira",   "Klaus",
    "Lara",   "Lars",   "Leila",  "Leo",    "Liam",    "Lina",   "Luca",   "Lucia",  "Luis",
    "Maja",   "Malik",  "Marco",  "Maria",  "Marta",   "Max",    "Maya",   "Mei",    "Mila",
    "Milan",  "Mira",   "Musa",   "Nadia",  "Nana",    "Nico",   "Nina",   "Noah",   "Noel",
    "Olga",   "Oscar",  "Otto",   "Pablo",  "Paolo",   "Pedro",  "Petra",  "Pia",    "Quinn",
    "Rafael", "Rahul",  "Rana",   "Raul",   "Rosa",    "Ruth",   "Sami",   "Sara",   "Selma",
    "Sergei", "Sofia",  "Sven",   "Tara",   "Teo",     "Theo",   "Tomas",  "Uma",    "Vera",
    "Victor", "Viktor", "Vivian", "Wanda",  "Wei",     "Xavier", "Yara",   "Yuki",   "Yusuf",
    "Zara",   "Zoe",    "Zora"};
const char* kLastNames[] = {
    "Abbott",  "Adler",    "Alvarez",  "Baker",    "Barros",   "Becker",   "Bishop",   "Brandt",
    "Castro",  "Chang",    "Clarke",   "Costa",    "Dalton",   "Diaz",     "Duval",    "Eriksen",
    "Evans",   "Ferreira", "Fischer",  "Fontaine", "Garcia",   "Grant",    "Hansen",   "Harper",
    "Hoffman", "Ibarra",   "Ishikawa", "Jensen",   "Kaplan",   "Keller",   "Kowalski", "Lambert",
    "Larsen",  "Lopez",    "Marsh",    "Meyer",    "Moreau",   "Nakamura", "Novak",    "Okafor",
    "Olsen",   "Ortiz",    "Park",     "Petrov",   "Quiroga",  "Reyes",    "Richter",  "Romano",
    "Santos",  "Schmidt",  "Silva",    "Stone",    "Sullivan", "Tanaka",   "Torres",   "Vance",
    "Vargas",  "Weber",    "Wright",   "Young",    "Zhang",    "Ziegler"};

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

std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<std::string> heldout_names() {
  std::vector<std::string> out;
  for (const char* f : kFirstNames)
    for (const char* l : kLastNames) {
      std::string name = std::string(f) + " " + l;
      if (fnv1a64(name) % 7 == 0) out.push_back(std::move(name));
    }
  return out;
}

namespace {

// `k` distinct held-out names; about a third share the first or the last name of an earlier
// pick (so that matching one token of a name is not enough).
std::vector<std::string> pick_names(const std::vector<std::string>& pool, int k,
                                    std::mt19937_64& rng) {
  std::vector<std::string> names;
  std::uniform_int_distribution<std::size_t> any(0, pool.size() - 1);
  std::uniform_real_distribution<double> u(0, 1);
  auto first = [](const std::string& n) { return n.substr(0, n.find(' ')); };
  auto last = [](const std::string& n) { return n.substr(n.find(' ') + 1); };
  for (int tries = 0; static_cast<int>(names.size()) < k; ++tries) {
    std::string cand = pool[any(rng)];
    if (!names.empty() && u(rng) < 0.35 && tries < 1000) {
      // Another held-out name that shares a part with an earlier pick, if one is drawn.
      const std::string& ref =
          names[std::uniform_int_distribution<std::size_t>(0, names.size() - 1)(rng)];
      const bool same_first = u(rng) < 0.5;
      for (int t = 0; t < 64; ++t) {
        const auto& c = pool[any(rng)];
        if (c != ref && (same_first ? first(c) == first(ref) : last(c) == last(ref))) {
          cand = c;
          break;
        }
      }
    }
    if (std::find(names.begin(), names.end(), cand) == names.end()) names.push_back(cand);
  }
  return names;
}

// Exactly `n` filler ids: slices of the held-out filler at random offsets, else sentences.
std::vector<std::int32_t> fill(const Tokenizer& tok, const EvalFormat& f, int n,
                               std::mt19937_64& rng) {
  if (f.filler.empty()) return filler(tok, n, rng);
  std::vector<std::int32_t> out;
  std::uniform_int_distribution<std::size_t> at(0, f.filler.size() - 1);
  while (static_cast<int>(out.size()) < n) {
    const std::size_t s = at(rng);
    const std::size_t k = std::min(f.filler.size() - s, static_cast<std::size_t>(n) - out.size());
    out.insert(out.end(), f.filler.begin() + static_cast<std::ptrdiff_t>(s),
               f.filler.begin() + static_cast<std::ptrdiff_t>(s + k));
  }
  return out;
}

std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto p : parts) out.append(p);
  return out;
}

}  // namespace

EvalSet make_eval_set(const Tokenizer& tok, int context_tokens, int num_docs, int num_retrieval,
                      int scored_tokens, std::uint64_t seed, const EvalFormat& format) {
  if (context_tokens < 32) throw InvalidRequest("context", "context must be >= 32 tokens");
  if (format.facts < 1) throw InvalidRequest("facts", "at least one fact per context");
  EvalSet set;
  set.context_tokens = context_tokens;
  std::mt19937_64 rng(seed);
  for (int d = 0; d < num_docs; ++d) {
    EvalCase c;
    c.ids = fill(tok, format, context_tokens + scored_tokens, rng);
    c.prefill_len = context_tokens;
    c.score_from = context_tokens - 1;  // row P-1 predicts the first continuation token
    set.documents.push_back(std::move(c));
  }
  const auto pool = heldout_names();
  std::uniform_int_distribution<int> digit(10000, 99999);
  for (int r = 0; r < num_retrieval; ++r) {
    const auto names = pick_names(pool, format.facts, rng);
    std::vector<std::string> numbers;
    std::vector<std::vector<std::int32_t>> facts;
    for (const auto& name : names) {
      numbers.push_back(std::to_string(digit(rng)));
      facts.push_back(
          tok.encode(join({"The secret number of ", name, " is ", numbers.back(), ". "}), false));
    }
    // The asked fact (0) always; the others while the context has room for 16 filler tokens.
    int budget = context_tokens;
    std::size_t kept = 0;
    for (; kept < facts.size(); ++kept) {
      if (budget - static_cast<int>(facts[kept].size()) < 16) break;
      budget -= static_cast<int>(facts[kept].size());
    }
    if (kept == 0) throw InvalidRequest("context", "context too short for the retrieval fact");
    const bool paraphrase = r % 2 == 1;
    const std::string& name = names[0];
    const auto question =
        tok.encode(paraphrase ? join({"\nQuestion: which secret number was given to ", name,
                                      "?\nAnswer: The secret number of ", name, " is"})
                              : join({"\nQuestion: what is the secret number of ", name,
                                      "?\nAnswer: The secret number of ", name, " is"}),
                   false);
    const auto answer = tok.encode(join({" ", numbers[0]}), false);
    // Filler offsets: the asked fact at depth (r + 1/2) / n, the others uniformly.
    std::vector<std::pair<int, std::size_t>> places{
        {static_cast<int>((r + 0.5) / num_retrieval * budget), 0}};
    std::uniform_int_distribution<int> where(0, budget);
    for (std::size_t i = 1; i < kept; ++i) places.emplace_back(where(rng), i);
    std::sort(places.begin(), places.end());
    std::vector<std::int32_t> ctx;
    int prev = 0;
    for (const auto& [at, i] : places) {
      append(ctx, fill(tok, format, at - prev, rng));
      append(ctx, facts[i]);
      prev = at;
    }
    append(ctx, fill(tok, format, budget - prev, rng));
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
