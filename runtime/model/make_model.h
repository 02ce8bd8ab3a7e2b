// Deterministic random Llama models (`strata make-model`): config.json, model.safetensors,
// tokenizer.json (a small byte-level BPE in Llama-3's format, or a copy of a given one)
// and tokenizer_config.json with the Llama-3 chat template.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"

namespace strata {

struct MakeModelOptions {
  std::string out_dir;
  std::string preset = "tiny";  // tiny | small | llama3-8b | llama3-70b
  std::uint64_t seed = 1;
  DType dtype = DType::kBF16;
  std::string tokenizer_json;  // copy this tokenizer.json (vocab_size follows it); empty: built-in
  int layers = 0;              // overrides (0 = preset's)
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int intermediate = 0;
  int head_dim = 0;
  bool tie_embeddings = false;
  bool llama3_rope = true;
  bool shards = false;  // write two shards + model.safetensors.index.json
};

// Shape of a preset (vocab from the built-in tokenizer unless the preset fixes it).
ModelConfig preset_config(const std::string& preset);
// Writes the model directory; returns its config. Throws ModelError / ConfigError.
ModelConfig make_model(const MakeModelOptions& opts);
// The deterministic value of element `index` of tensor `name` (normal-ish, std ~ `scale`).
float random_weight(std::uint64_t seed, const std::string& name, std::uint64_t index, float scale);
// Writes the built-in tokenizer files into `dir`; returns the vocabulary size, which is
// kBuiltinVocabSize (a test checks it): the vocabulary of presets that fix none (tiny, small).
int write_builtin_tokenizer(const std::string& dir);
inline constexpr int kBuiltinVocabSize = 684;  // 256 bytes + 412 merges + 16 special tokens

}  // namespace strata
