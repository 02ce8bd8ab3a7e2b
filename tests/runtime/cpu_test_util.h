// Test helpers for the CPU backend: tiny models, a page allocator and a per-sequence driver
// that builds StepPlans by hand the way docs/contracts.md describes (the real cache manager
// lives in cache/).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/sparsity_profile.h"

namespace strata::test {

// A model directory made once per process and name.
inline std::shared_ptr<const ModelWeights> model(const std::string& name, MakeModelOptions o) {
  static std::map<std::string, std::shared_ptr<const ModelWeights>> cache;
  auto& m = cache[name];
  if (!m) {
    o.out_dir = ::testing::TempDir() + "/strata_cpu_" + name + "." + std::to_string(::getpid());
    std::filesystem::remove_all(o.out_dir);
    make_model(o);
    m = ModelWeights::load(o.out_dir);
  }
  return m;
}
inline std::shared_ptr<const ModelWeights> tiny() {
  return model("tiny", MakeModelOptions{});
}

// The engine tests' model on disk (3 layers, hidden 64, 4/2 heads of 16, fp32), written once per
// test binary: the actors' fixture and the cache tests that drive a CPU backend share it.
inline const std::string& tiny3_model_dir() {
  static const std::string dir = [] {
    const std::string d =
        ::testing::TempDir() + "/strata_tiny3_" + std::to_string(static_cast<long>(::getpid()));
    std::filesystem::remove_all(d);
    MakeModelOptions o;
    o.out_dir = d;
    o.preset = "tiny";
    o.layers = 3;
    o.hidden = 64;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 16;
    o.intermediate = 128;
    o.dtype = DType::kF32;
    make_model(o);
    return d;
  }();
  return dir;
}

// Hands out page ids from a (possibly shuffled) permutation of the pool.
class PageAlloc {
 public:
  explicit PageAlloc(int num_pages, std::uint64_t shuffle_seed = 0) : ids_(num_pages) {
    std::iota(ids_.begin(), ids_.end(), 0);
    if (shuffle_seed) std::shuffle(ids_.begin(), ids_.end(), std::mt19937_64(shuffle_seed));
  }
  std::int32_t take() {
    if (next_ >= ids_.size()) throw std::runtime_error("test pool exhausted");
    return ids_[next_++];
  }
  void cover(std::vector<std::int32_t>& table, int slots) {
    while (static_cast<int>(table.size()) * kBlockSize < slots) table.push_back(take());
  }

 private:
  std::vector<std::int32_t> ids_;
  std::size_t next_ = 0;
};

// One sequence's cache state, advanced after each step the way the cache manager does.
struct Seq {
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt, output;
  std::vector<LayerSlots> layers;
  int cached = 0;              // tokens in the cache
  bool scratch_select = true;  // a whole long prompt in one step uses backend scratch

  Seq(std::uint64_t id_, std::vector<std::int32_t> prompt_, const std::vector<LayerRule>& rules)
      : id(id_), prompt(std::move(prompt_)) {
    for (const auto& r : rules) layers.push_back(LayerSlots{r});
  }
  int prompt_len() const { return static_cast<int>(prompt.size()); }

  // Prefill chunk of n prompt tokens.
  SeqStep prefill(int n, PageAlloc& pages, bool logits = true) {
    SeqStep s;
    s.seq_id = id;
    s.tokens.assign(prompt.begin() + cached, prompt.begin() + cached + n);
    s.start = cached;
    s.prompt_len = prompt_len();
    s.prefill = true;
    s.return_logits = logits;
    const bool whole = cached == 0 && n == prompt_len();
    for (auto& ls : layers) {
      ls.action = LayerAction::kNone;
      if (ls.direct_prefill(prompt_len())) {
        pages.cover(ls.pages, cached + n);
      } else {
        if (!(whole && scratch_select)) pages.cover(ls.temp_pages, cached + n);
        if (cached + n == prompt_len()) {
          ls.action = LayerAction::kSelect;
          pages.cover(ls.pages, ls.rule.capacity);
        }
      }
      s.layers.push_back(ls);
    }
    return s;
  }
  SeqStep decode(std::int32_t token, PageAlloc& pages) {
    SeqStep s;
    s.seq_id = id;
    s.tokens = {token};
    s.start = cached;
    s.prompt_len = prompt_len();
    s.prefill = false;
    s.return_logits = true;
    for (auto& ls : layers) {
      ls.action = LayerAction::kNone;
      pages.cover(ls.pages, std::max(ls.valid, ls.decode_slot() + 1));
      s.layers.push_back(ls);
    }
    return s;
  }
  // The cache manager's bookkeeping after a step.
  void after(const SeqStep& s) {
    const int n = static_cast<int>(s.tokens.size());
    for (auto& ls : layers) {
      if (!s.prefill) {
        ls.advance_decode();
      } else if (ls.direct_prefill(prompt_len())) {
        ls.valid += n;
      } else if (ls.action == LayerAction::kSelect) {
        ls.valid = ls.rule.capacity;
        ls.ring_pos = 0;
        ls.temp_pages.clear();
      }
      ls.action = LayerAction::kNone;
    }
    cached += n;
  }
};

inline StepPlan plan_of(std::vector<SeqStep> steps) {
  static std::uint64_t id = 0;
  StepPlan p;
  p.step_id = ++id;
  p.seqs = std::move(steps);
  return p;
}

inline std::int32_t argmax(const float* row, int n) {
  return static_cast<std::int32_t>(std::max_element(row, row + n) - row);
}

inline std::vector<std::int32_t> tokens(int n, int vocab, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<std::int32_t>(g() % static_cast<std::uint64_t>(vocab - 16));
  return t;
}

}  // namespace strata::test
