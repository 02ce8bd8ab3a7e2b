// The fixed scales of an FP8 KV cache (cache.kv_dtype fp8, docs/kv-fp8.md): one fp32 scale per
// (layer, KV head) for K and one for V; a stored element is e4m3(x / s) and reads back as
// e4m3_to_float(code) * s (runtime/fp8.h's rounding: nearest-even, saturating at ±448).
//
// Scales never depend on a request: a cached prefix block means the same bytes for every request
// (the prefix cache relies on it). They come from, in this order:
//   1. given by the caller (tests: the GPU-vs-CPU oracle runs both backends on one set);
//   2. the checkpoint: compressed-tensors `kv_cache_scheme` with the per-layer tensors
//      `model.layers.<l>.self_attn.k_scale` / `v_scale` (shape [] or [1]: every head; or
//      [num_key_value_heads]), used as written;
//   3. calibration, once at start-up: the fixed prompts below prefilled through the backend's
//      native (bf16/fp32) KV path, every layer full, recording amax = max |K|, |V| per (layer,
//      KV head); scale = kv_scale_from_amax(amax), a power of two (exact to apply, and the same
//      for every run and for both backends unless an amax sits within bf16 rounding of a power of
//      two).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/fp8.h"
#include "runtime/step_plan.h"

namespace strata {

class Backend;
class ModelWeights;
struct ModelConfig;

struct KvScales {
  int layers = 0,
      kv_heads = 0;         // the model's layers and (global, before tensor parallelism) KV heads
  std::vector<float> k, v;  // [layers][kv_heads], > 0 and finite
  std::string source;       // "given" | "checkpoint" | "calibrated"

  bool empty() const { return k.empty(); }
  float k_at(int layer, int head) const {
    return k[static_cast<std::size_t>(layer) * kv_heads + head];
  }
  float v_at(int layer, int head) const {
    return v[static_cast<std::size_t>(layer) * kv_heads + head];
  }
  // Throws ConfigError("cache.kv_dtype") unless the shape is (layers, kv_heads) and every scale is
  // positive and finite.
  void check(int model_layers, int model_kv_heads) const;
};

inline std::uint8_t kv_quantize(float x, float scale) {
  return float_to_e4m3(x / scale);
}
inline float kv_dequantize(std::uint8_t code, float scale) {
  return e4m3_to_float(code) * scale;
}

// Calibrated scales leave this factor of headroom over the amax seen (real traffic may exceed
// the calibration prompts' range; saturation would clip, a binade of headroom costs only the
// smallest values' precision).
inline constexpr float kKvCalibrationHeadroom = 2.0f;
// 2^ceil(log2(headroom * amax / 448)): the smallest power of two with headroom * amax / s <= 448;
// 1 when amax is 0 or not finite.
float kv_scale_from_amax(float amax);

// max |K| and |V| per (layer, global KV head), filled by a backend while it runs the calibration.
struct KvAmax {
  int layers = 0, kv_heads = 0;
  std::vector<float> k, v;  // [layers][kv_heads]
  KvAmax() = default;
  KvAmax(int layers_, int kv_heads_);
  // head_dim values of K and of V of one token.
  void observe(int layer, int head, const float* kx, const float* vx, int head_dim);
};
KvScales kv_scales_from_amax(const KvAmax& amax);

// The checkpoint's KV scales, or nullopt when its quantization_config has no kv_cache_scheme.
// Throws ModelError naming the key or tensor when the scheme is not {num_bits 8, type float,
// symmetric, static, strategy tensor | attn_head | head} or a scale tensor is missing or misshaped.
std::optional<KvScales> kv_scales_from_checkpoint(const ModelWeights& w);

// The calibration set: kKvCalibrationPrompts prompts of min(kKvCalibrationLen, max_len) tokens,
// pseudo-random ids in [0, vocab) from fixed seeds (no tokenizer is needed, so every backend and
// model gets the same prompts without one).
inline constexpr int kKvCalibrationPrompts = 4;
inline constexpr int kKvCalibrationLen = 128;
std::vector<std::vector<std::int32_t>> kv_calibration_prompts(int vocab_size, int max_len);
// Pages one calibration prompt needs (every layer full, pages 0 .. n-1).
int kv_calibration_pages(const ModelConfig& c, int max_len);
// Runs every calibration prompt through `backend` (one prefill step each, every layer full, pages
// 0 .. kv_calibration_pages-1 reused; no token sampled) and returns kv_scales_from_amax(amax):
// `amax` is what the backend recorded while running them (the backend's calibration hook).
KvScales calibrate_kv_scales(Backend& backend, const KvAmax& amax, int max_len);

}  // namespace strata
