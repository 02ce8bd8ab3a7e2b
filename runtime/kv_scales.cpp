#include "runtime/kv_scales.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"

namespace strata {

void KvScales::check(int model_layers, int model_kv_heads) const {
  const auto n = static_cast<std::size_t>(model_layers) * static_cast<std::size_t>(model_kv_heads);
  if (layers != model_layers || kv_heads != model_kv_heads || k.size() != n || v.size() != n)
    throw ConfigError("cache.kv_dtype",
                      "KV scales (" + source + ") are for " + std::to_string(layers) +
                          " layers x " + std::to_string(kv_heads) + " KV heads, the model has " +
                          std::to_string(model_layers) + " x " + std::to_string(model_kv_heads));
  for (std::size_t i = 0; i < n; ++i)
    if (!(std::isfinite(k[i]) && k[i] > 0 && std::isfinite(v[i]) && v[i] > 0))
      throw ConfigError("cache.kv_dtype", "KV scale " + std::to_string(i) + " (" + source +
                                              ") is not positive and finite");
}

float kv_scale_from_amax(float amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
  const double want = static_cast<double>(kKvCalibrationHeadroom) * amax / kE4m3Max;
  int e = 0;
  const double m = std::frexp(want, &e);  // want = m * 2^e, m in [0.5, 1)
  if (m == 0.5) --e;                      // an exact power of two is its own ceiling
  return static_cast<float>(std::ldexp(1.0, e));
}

KvAmax::KvAmax(int layers_, int kv_heads_)
    : layers(layers_),
      kv_heads(kv_heads_),
      k(static_cast<std::size_t>(layers_) * kv_heads_, 0.0f),
      v(static_cast<std::size_t>(layers_) * kv_heads_, 0.0f) {}

void KvAmax::observe(int layer, int head, const float* kx, const float* vx, int head_dim) {
  const std::size_t i = static_cast<std::size_t>(layer) * kv_heads + head;
  for (int d = 0; d < head_dim; ++d) {
    k[i] = std::max(k[i], std::fabs(kx[d]));
    v[i] = std::max(v[i], std::fabs(vx[d]));
  }
}

KvScales kv_scales_from_amax(const KvAmax& amax) {
  KvScales s;
  s.layers = amax.layers;
  s.kv_heads = amax.kv_heads;
  s.source = "calibrated";
  for (const float a : amax.k) s.k.push_back(kv_scale_from_amax(a));
  for (const float a : amax.v) s.v.push_back(kv_scale_from_amax(a));
  return s;
}

std::optional<KvScales> kv_scales_from_checkpoint(const ModelWeights& w) {
  const auto& q = w.quantization();
  if (!q.prequantized || !q.kv_cache_scheme) return std::nullopt;
  const QuantArgs& a = *q.kv_cache_scheme;
  const std::string src = w.dir() + ": quantization_config.kv_cache_scheme";
  if (a.num_bits != 8 || a.type != "float" || !a.symmetric || a.dynamic)
    throw ModelError(src +
                     ": only {num_bits 8, type float, symmetric true, dynamic false} (e4m3 "
                     "with static scales) is supported");
  if (a.strategy != "tensor" && a.strategy != "attn_head" && a.strategy != "head")
    throw ModelError(src + ".strategy: '" + a.strategy +
                     "' is not supported (tensor, attn_head or head)");
  const auto& c = w.config();
  KvScales s;
  s.layers = c.num_hidden_layers;
  s.kv_heads = c.num_key_value_heads;
  s.source = "checkpoint";
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const char* part : {"k_scale", "v_scale"}) {
      const std::string name = "model.layers." + std::to_string(l) + ".self_attn." + part;
      const auto vals = w.tensor(name).to_float();
      if (vals.size() != 1 && vals.size() != static_cast<std::size_t>(c.num_key_value_heads))
        throw ModelError(w.dir() + ": " + name + " has " + std::to_string(vals.size()) +
                         " values, expected 1 or num_key_value_heads (" +
                         std::to_string(c.num_key_value_heads) + ")");
      auto& out = part[0] == 'k' ? s.k : s.v;
      for (int h = 0; h < c.num_key_value_heads; ++h)
        out.push_back(vals[vals.size() == 1 ? 0 : static_cast<std::size_t>(h)]);
    }
  try {
    s.check(c.num_hidden_layers, c.num_key_value_heads);
  } catch (const ConfigError& e) {
    throw ModelError(src + ": " + e.what());
  }
  return s;
}

std::vector<std::vector<std::int32_t>> kv_calibration_prompts(int vocab_size, int max_len) {
  const int len = std::max(1, std::min(kKvCalibrationLen, max_len));
  std::vector<std::vector<std::int32_t>> out;
  for (int p = 0; p < kKvCalibrationPrompts; ++p) {
    std::uint64_t x = 0x6b76'6670'3863'616cull + static_cast<std::uint64_t>(p);  // fixed seeds
    std::vector<std::int32_t> t;
    for (int i = 0; i < len; ++i) {
      // splitmix64
      x += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      t.push_back(static_cast<std::int32_t>(z % static_cast<std::uint64_t>(vocab_size)));
    }
    out.push_back(std::move(t));
  }
  return out;
}

int kv_calibration_pages(const ModelConfig& c, int max_len) {
  const int len = std::max(1, std::min(kKvCalibrationLen, max_len));
  return c.num_hidden_layers * pages_for_slots(len);
}

KvScales calibrate_kv_scales(Backend& backend, const KvAmax& amax, int max_len) {
  const ModelConfig& c = backend.model();
  const int per_layer = pages_for_slots(std::max(1, std::min(kKvCalibrationLen, max_len)));
  if (backend.info().num_pages < kv_calibration_pages(c, max_len))
    throw ConfigError("cache.kv_dtype", "the KV calibration needs " +
                                            std::to_string(kv_calibration_pages(c, max_len)) +
                                            " pages, the pool has " +
                                            std::to_string(backend.info().num_pages));
  std::uint64_t step = 0;
  for (auto& prompt : kv_calibration_prompts(c.vocab_size, max_len)) {
    StepPlan plan;
    plan.step_id = ++step;
    SeqStep s;
    s.seq_id = step;
    s.prompt_len = static_cast<std::int32_t>(prompt.size());
    s.tokens = std::move(prompt);
    s.start = 0;
    s.prefill = true;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      LayerSlots ls{LayerRule{}};
      for (int p = 0; p < per_layer; ++p) ls.pages.push_back(l * per_layer + p);
      s.layers.push_back(std::move(ls));
    }
    plan.seqs.push_back(std::move(s));
    backend.step(plan);
  }
  return kv_scales_from_amax(amax);
}

}  // namespace strata
