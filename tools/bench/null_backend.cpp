#include "tools/bench/null_backend.h"

#include <chrono>
#include <string>

#include "runtime/error.h"

namespace strata::bench {
namespace {

class NullBackend final : public Backend {
 public:
  explicit NullBackend(const NullBackendOptions& o) : o_(o) {
    const ModelConfig& m = o_.model;
    if (m.num_hidden_layers < 1 || m.num_key_value_heads < 1 || m.head_dim < 1 || m.vocab_size < 1)
      throw ConfigError("model",
                        "the null backend needs a model shape (layers, KV heads, "
                        "head_dim, vocab_size)");
    if (o_.num_pages < 1)
      throw ConfigError("num_pages", "must be >= 1, got " + std::to_string(o_.num_pages));
    if (o_.token_hi <= 0) o_.token_hi = m.vocab_size;
    if (o_.token_lo < 0 || o_.token_lo >= o_.token_hi || o_.token_hi > m.vocab_size)
      throw ConfigError("token range", "[" + std::to_string(o_.token_lo) + ", " +
                                           std::to_string(o_.token_hi) +
                                           ") is empty or outside the vocabulary");
    info_.name = "null";
    info_.layout = KvLayout{m.num_key_value_heads, m.head_dim, 2};
    info_.num_pages = o_.num_pages;
    info_.tp_size = 1;
  }

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& model() const override { return o_.model; }

  StepResult step(const StepPlan& plan) override {
    const auto t0 = std::chrono::steady_clock::now();
    const int L = o_.model.num_hidden_layers, V = o_.model.vocab_size, P = info_.num_pages;
    StepResult r;
    r.step_id = plan.step_id;
    r.seqs.resize(plan.seqs.size());
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      const SeqStep& s = plan.seqs[i];
      if (s.tokens.empty() || static_cast<int>(s.layers.size()) != L)
        throw InternalError("null backend: sequence " + std::to_string(s.seq_id) +
                            " has no tokens or the wrong number of layers");
      for (const std::int32_t t : s.tokens)
        if (t < 0 || t >= V)
          throw InternalError("null backend: token " + std::to_string(t) + " outside the vocab");
      // The pages the step writes must be covered; every id must be in the pool.
      const int end = s.start + static_cast<int>(s.tokens.size());
      for (const LayerSlots& ls : s.layers) {
        const bool direct = !s.prefill || ls.direct_prefill(s.prompt_len);
        const int need = !s.prefill ? pages_for_slots(ls.decode_slot() + 1)
                                    : (direct ? pages_for_slots(end) : 0);
        if (static_cast<int>(ls.pages.size()) < need)
          throw InternalError("null backend: sequence " + std::to_string(s.seq_id) +
                              " page table does not cover the step");
        std::int32_t bad = 0;
        for (const std::int32_t pg : ls.pages) bad |= static_cast<std::int32_t>(pg < 0 || pg >= P);
        for (const std::int32_t pg : ls.temp_pages)
          bad |= static_cast<std::int32_t>(pg < 0 || pg >= P);
        if (bad) throw InternalError("null backend: page id outside the pool");
      }
      tokens += static_cast<std::int64_t>(s.tokens.size());
      SeqResult& out = r.seqs[i];
      out.seq_id = s.seq_id;
      if (s.sample) out.token = sample(s.seq_id, end);
      if (s.return_logits) out.logits.assign(s.tokens.size() * static_cast<std::size_t>(V), 0.0f);
    }
    r.stats.tokens = tokens;
    r.stats.device_ms = 0.0;
    r.stats.host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

 private:
  std::int32_t sample(std::uint64_t seq_id, int position) const {
    std::uint64_t x = (static_cast<std::uint64_t>(o_.seed) << 32) ^
                      (seq_id * 0x9E3779B97F4A7C15ull) ^ static_cast<std::uint64_t>(position);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    const auto span = static_cast<std::uint64_t>(o_.token_hi - o_.token_lo);
    return o_.token_lo + static_cast<std::int32_t>(x % span);
  }

  NullBackendOptions o_;
  BackendInfo info_;
};

}  // namespace

std::unique_ptr<Backend> make_null_backend(const NullBackendOptions& options) {
  return std::make_unique<NullBackend>(options);
}

}  // namespace strata::bench
