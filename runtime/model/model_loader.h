// Loads a Hugging Face Llama model directory: config.json, model.safetensors or shards
// listed in model.safetensors.index.json (bf16/fp16/fp32, memory-mapped), and locates the
// tokenizer files. Every tensor's presence and shape is checked at load; errors are
// ModelError naming the file and tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/text_file.h"  // read_text_file (callers of the loader use it too)

namespace strata {

struct LayerWeights {
  const TensorView* input_norm;  // [hidden]
  const TensorView* q;           // [heads*head_dim, hidden]
  const TensorView* k;           // [kv_heads*head_dim, hidden]
  const TensorView* v;           // [kv_heads*head_dim, hidden]
  const TensorView* o;           // [hidden, heads*head_dim]
  const TensorView* post_norm;   // [hidden]
  const TensorView* gate;        // [intermediate, hidden]
  const TensorView* up;          // [intermediate, hidden]
  const TensorView* down;        // [hidden, intermediate]
};

class ModelWeights {
 public:
  // Throws ModelError. `dir` holds config.json and the safetensors file(s).
  static std::unique_ptr<ModelWeights> load(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const TensorView& embed() const { return *embed_; }      // [vocab, hidden]
  const TensorView& final_norm() const { return *norm_; }  // [hidden]
  const TensorView& lm_head() const { return *lm_head_; }  // [vocab, hidden] (= embed if tied)
  const LayerWeights& layer(int i) const { return layers_.at(static_cast<std::size_t>(i)); }
  std::size_t total_bytes() const { return total_bytes_; }
  const TensorView& tensor(const std::string& name) const;  // any tensor by HF name
  std::string tokenizer_json() const { return dir_ + "/tokenizer.json"; }
  std::string tokenizer_config_json() const { return dir_ + "/tokenizer_config.json"; }

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<LayerWeights> layers_;
  const TensorView *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::size_t total_bytes_ = 0;
};

}  // namespace strata
