// The evaluation set of `strata eval` (tools/bench/quality.h): documents and held-out facts
// built from the tokenizer, the held-out name rule, and the cache compression of a profile.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"
#include "runtime/teacher_forcing.h"
#include "tools/bench/quality.h"

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

}  // namespace strata::bench
