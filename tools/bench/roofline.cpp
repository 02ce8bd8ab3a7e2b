#include "tools/bench/roofline.h"

#include <algorithm>
#include <cmath>

namespace strata::bench {

Roofline::Roofline(const ModelConfig& model, std::vector<LayerRule> rules, Ceilings c, int eb)
    : m_(model), rules_(std::move(rules)), c_(c), eb_(eb) {
  if (rules_.empty()) rules_.resize(static_cast<std::size_t>(m_.num_hidden_layers));
}

double Roofline::weight_bytes_per_step() const {
  // Every weight is read once per step except the embedding table (rows gathered).
  double params = static_cast<double>(m_.num_params());
  if (!m_.tie_word_embeddings) params -= static_cast<double>(m_.vocab_size) * m_.hidden_size;
  return params * eb_;
}

double Roofline::kv_bytes_per_token_layer() const {
  return 2.0 * m_.num_key_value_heads * m_.head_dim * eb_;
}

double Roofline::kept_kv_bytes(int context, int generated) const {
  double slots = 0;
  for (const auto& r : rules_) {
    if (!r.sparse()) {
      slots += context;
    } else if (r.policy == Policy::kSnapKv) {
      slots += std::min(context, r.capacity + generated);
    } else {
      slots += std::min(context, r.capacity);
    }
  }
  return slots * kv_bytes_per_token_layer();
}

double Roofline::full_kv_bytes(int context) const {
  return static_cast<double>(context) * m_.num_hidden_layers * kv_bytes_per_token_layer();
}

double Roofline::prefill_flops(int tokens) const {
  const double dense = 2.0 * (static_cast<double>(m_.num_params()) -
                              static_cast<double>(m_.vocab_size) * m_.hidden_size);
  // QK^T and PV, causal (half the square): 2 GEMMs * 2 FLOP * L^2/2 * q_dim per layer.
  const double attn =
      2.0 * static_cast<double>(tokens) * tokens * m_.q_dim() * m_.num_hidden_layers;
  // Only the last position needs the lm_head; dense above counts it for every token, so
  // remove (tokens - 1) lm_head products.
  const double lm = 2.0 * static_cast<double>(m_.vocab_size) * m_.hidden_size;
  return dense * tokens + attn - lm * (tokens - 1) * (m_.tie_word_embeddings ? 0.0 : 1.0);
}

double Roofline::prefill_floor_s(int tokens) const {
  return prefill_flops(tokens) / c_.flops_per_s;
}

double Roofline::decode_step_floor_s(int batch, int context, int generated) const {
  const double bytes = weight_bytes_per_step() + batch * kept_kv_bytes(context, generated);
  const double flops = 2.0 * weight_bytes_per_step() / eb_ * batch;
  return std::max(bytes / c_.bytes_per_s, flops / c_.flops_per_s);
}

int Roofline::max_sequences(double budget, const Workload& w) const {
  if (budget <= 0) return 1 << 30;
  const double peak = kept_kv_bytes(w.input_tokens + w.output_tokens, w.output_tokens);
  return static_cast<int>(std::floor(budget / peak));
}

double Roofline::best_output_throughput(int concurrency, const Workload& w, double budget) const {
  const int c = std::min(concurrency, max_sequences(budget, w));
  if (c <= 0) return 0;
  double decode = 0;
  for (int g = 0; g < w.output_tokens; ++g) decode += decode_step_floor_s(c, w.input_tokens + g, g);
  const double total = c * prefill_floor_s(w.input_tokens) + decode;
  return c * static_cast<double>(w.output_tokens) / total;
}

}  // namespace strata::bench
