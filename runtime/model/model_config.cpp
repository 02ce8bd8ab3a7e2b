#include "runtime/model/model_config.h"

#include <boost/json.hpp>
#include <cmath>
#include <numbers>

#include "runtime/error.h"

namespace strata {
namespace json = boost::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& msg) {
  throw ModelError(source + ": " + key + ": " + msg);
}

int get_int(const json::object& o, const char* key, const std::string& src, bool required,
            int def) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) {
    if (required) fail(src, key, "missing required key");
    return def;
  }
  if (!it->value().is_int64() && !it->value().is_uint64()) fail(src, key, "must be an integer");
  if (it->value().is_uint64() && it->value().as_uint64() > (1ull << 31)) fail(src, key, "out of range");
  auto v = it->value().to_number<std::int64_t>();
  if (v < 0 || v > (1ll << 31)) fail(src, key, "out of range");
  return static_cast<int>(v);
}

double get_double(const json::object& o, const char* key, const std::string& src, double def) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return def;
  if (!it->value().is_number()) fail(src, key, "must be a number");
  return it->value().to_number<double>();
}

std::vector<std::int32_t> get_ids(const json::object& o, const char* key, const std::string& src) {
  std::vector<std::int32_t> ids;
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return ids;
  if (it->value().is_array()) {
    for (auto& e : it->value().as_array()) {
      if (!e.is_int64()) fail(src, key, "must be an integer or a list of integers");
      ids.push_back(static_cast<std::int32_t>(e.as_int64()));
    }
  } else if (it->value().is_int64()) {
    ids.push_back(static_cast<std::int32_t>(it->value().as_int64()));
  } else {
    fail(src, key, "must be an integer or a list of integers");
  }
  return ids;
}

}  // namespace

std::int64_t ModelConfig::num_params() const {
  std::int64_t h = hidden_size, per_layer = 0;
  per_layer += h * q_dim() + 2 * h * kv_dim() + static_cast<std::int64_t>(q_dim()) * h;
  per_layer += 3 * h * intermediate_size + 2 * h;
  std::int64_t total = per_layer * num_hidden_layers + h * vocab_size + h;
  if (!tie_word_embeddings) total += h * vocab_size;
  return total;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  const int half = head_dim / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(rope_theta, (2.0 * i) / head_dim);
  if (rope_scaling.type == "llama3") {
    const auto& s = rope_scaling;
    const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  } else if (rope_scaling.type == "linear") {
    for (auto& f : inv) f /= rope_scaling.factor;
  }
  return inv;
}

ModelConfig parse_model_config(const std::string& text, const std::string& src) {
  json::value v;
  try {
    v = json::parse(text);
  } catch (const std::exception& e) {
    throw ModelError(src + ": invalid JSON: " + e.what());
  }
  if (!v.is_object()) throw ModelError(src + ": must hold a JSON object");
  const auto& o = v.as_object();
  ModelConfig c;
  if (auto it = o.find("architectures"); it != o.end() && it->value().is_array() &&
                                         !it->value().as_array().empty() &&
                                         it->value().as_array()[0].is_string()) {
    c.architecture = std::string(it->value().as_array()[0].as_string());
    if (c.architecture != "LlamaForCausalLM")
      fail(src, "architectures",
           "unsupported architecture '" + c.architecture + "' (supported: LlamaForCausalLM)");
  }
  c.hidden_size = get_int(o, "hidden_size", src, true, 0);
  c.intermediate_size = get_int(o, "intermediate_size", src, true, 0);
  c.num_hidden_layers = get_int(o, "num_hidden_layers", src, true, 0);
  c.num_attention_heads = get_int(o, "num_attention_heads", src, true, 0);
  c.num_key_value_heads = get_int(o, "num_key_value_heads", src, false, c.num_attention_heads);
  c.vocab_size = get_int(o, "vocab_size", src, true, 0);
  c.max_position_embeddings = get_int(o, "max_position_embeddings", src, false, 2048);
  if (c.hidden_size <= 0) fail(src, "hidden_size", "must be > 0");
  if (c.num_attention_heads <= 0) fail(src, "num_attention_heads", "must be > 0");
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    fail(src, "num_key_value_heads", "must divide num_attention_heads");
  c.head_dim = get_int(o, "head_dim", src, false, c.hidden_size / c.num_attention_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) fail(src, "head_dim", "must be even and > 0");
  if (c.num_hidden_layers <= 0) fail(src, "num_hidden_layers", "must be > 0");
  if (c.intermediate_size <= 0) fail(src, "intermediate_size", "must be > 0");
  if (c.vocab_size <= 0) fail(src, "vocab_size", "must be > 0");
  c.rms_norm_eps = get_double(o, "rms_norm_eps", src, 1e-5);
  // RoPE: legacy keys (`rope_theta`, `rope_scaling`) or transformers 5's `rope_parameters`
  // (rope_type, rope_theta and the scaling fields in one object). As in transformers, a
  // non-null `rope_scaling` wins; `rope_theta` comes from the top level when present.
  const json::object* rope_params = nullptr;
  if (auto it = o.find("rope_parameters"); it != o.end() && !it->value().is_null()) {
    if (!it->value().is_object()) fail(src, "rope_parameters", "must be an object or null");
    rope_params = &it->value().as_object();
  }
  c.rope_theta =
      get_double(o, "rope_theta", src,
                 rope_params ? get_double(*rope_params, "rope_theta", src, 10000.0) : 10000.0);
  const json::object* scaling = nullptr;
  std::string scaling_key = "rope_scaling";
  if (auto it = o.find("rope_scaling"); it != o.end() && !it->value().is_null()) {
    if (!it->value().is_object()) fail(src, "rope_scaling", "must be an object or null");
    scaling = &it->value().as_object();
  } else if (rope_params) {
    scaling = rope_params;
    scaling_key = "rope_parameters";
  }
  if (scaling) {
    const auto& rs = *scaling;
    std::string type = "default";
    for (const char* k : {"rope_type", "type"})
      if (auto t = rs.find(k); t != rs.end() && t->value().is_string())
        type = std::string(t->value().as_string());
    if (type != "llama3" && type != "linear" && type != "default")
      fail(src, scaling_key + ".rope_type",
           "unsupported '" + type + "' (supported: llama3, linear, default)");
    c.rope_scaling.type = type == "default" ? "" : type;
    c.rope_scaling.factor = get_double(rs, "factor", src, 1.0);
    c.rope_scaling.low_freq_factor = get_double(rs, "low_freq_factor", src, 1.0);
    c.rope_scaling.high_freq_factor = get_double(rs, "high_freq_factor", src, 4.0);
    c.rope_scaling.original_max_position_embeddings =
        get_int(rs, "original_max_position_embeddings", src, false, 8192);
    if (c.rope_scaling.type == "llama3" &&
        c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
      fail(src, scaling_key + ".high_freq_factor", "must exceed low_freq_factor");
  }
  if (auto it = o.find("tie_word_embeddings"); it != o.end() && it->value().is_bool())
    c.tie_word_embeddings = it->value().as_bool();
  c.bos_token_ids = get_ids(o, "bos_token_id", src);
  c.eos_token_ids = get_ids(o, "eos_token_id", src);
  if (auto it = o.find("torch_dtype"); it != o.end() && it->value().is_string())
    c.torch_dtype = std::string(it->value().as_string());
  return c;
}

std::string model_config_to_json(const ModelConfig& c) {
  json::object o;
  o["architectures"] = json::array{"LlamaForCausalLM"};
  o["model_type"] = "llama";
  o["hidden_size"] = c.hidden_size;
  o["intermediate_size"] = c.intermediate_size;
  o["num_hidden_layers"] = c.num_hidden_layers;
  o["num_attention_heads"] = c.num_attention_heads;
  o["num_key_value_heads"] = c.num_key_value_heads;
  o["head_dim"] = c.head_dim;
  o["rms_norm_eps"] = c.rms_norm_eps;
  o["rope_theta"] = c.rope_theta;
  // Both spellings: legacy `rope_scaling` (transformers 4.x, vLLM) and `rope_parameters`
  // (transformers 5.x, which also reads the legacy keys).
  json::object rp;
  rp["rope_type"] = c.rope_scaling.type.empty() ? "default" : c.rope_scaling.type;
  rp["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type.empty()) {
    o["rope_scaling"] = nullptr;
  } else {
    json::object rs;
    rs["rope_type"] = c.rope_scaling.type;
    rs["factor"] = c.rope_scaling.factor;
    if (c.rope_scaling.type == "llama3") {
      rs["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      rs["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      rs["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
    }
    for (const auto& [k, v] : rs) rp[k] = v;
    o["rope_scaling"] = rs;
  }
  o["rope_parameters"] = rp;
  o["vocab_size"] = c.vocab_size;
  o["tie_word_embeddings"] = c.tie_word_embeddings;
  o["max_position_embeddings"] = c.max_position_embeddings;
  auto ids = [](const std::vector<std::int32_t>& v) -> json::value {
    if (v.empty()) return nullptr;  // transformers 5 types bos_token_id as int | None
    if (v.size() == 1) return v[0];
    json::array a;
    for (auto x : v) a.push_back(x);
    return a;
  };
  o["bos_token_id"] = ids(c.bos_token_ids);
  o["eos_token_id"] = ids(c.eos_token_ids);
  o["torch_dtype"] = c.torch_dtype;
  o["attention_bias"] = false;
  o["mlp_bias"] = false;
  o["hidden_act"] = "silu";
  return json::serialize(o);
}

}  // namespace strata
