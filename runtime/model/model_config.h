// Hugging Face Llama `config.json`, parsed and validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int vocab_size = 0;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 2048;
  std::vector<std::int32_t> bos_token_ids;
  std::vector<std::int32_t> eos_token_ids;
  std::string torch_dtype = "bfloat16";

  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  int gqa_ratio() const { return num_attention_heads / num_key_value_heads; }
  // Parameter count (embeddings, all layers, norm, lm_head unless tied).
  std::int64_t num_params() const;

  // Inverse RoPE frequencies (head_dim/2 of them) with rope_scaling applied, fp64.
  std::vector<double> rope_inv_freq() const;
};

// Parses config.json text. Throws ModelError naming `source` and the key on a missing
// required key or an inconsistent value.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
std::string model_config_to_json(const ModelConfig& c);

}  // namespace strata
