// Loads a Hugging Face Llama model directory: config.json, model.safetensors or shards
// listed in model.safetensors.index.json (bf16/fp16/fp32, memory-mapped), and locates the
// tokenizer files. Every tensor's presence, shape and dtype is checked at load; errors are
// ModelError naming the file and tensor.
//
// Pre-quantized FP8 checkpoints (config.json's `quantization_config` in the compressed-tensors
// layout, runtime/model/quantization_config.h, docs/checkpoints.md): the seven linear weights
// of every layer are F8_E4M3 codes, each with its `weight_scale` and, for static activations,
// its `input_scale`. What a consumer gets:
//   - quantization(): the scheme (prequantized, WeightScales, ActivationScales), one for every
//     layer; quantization().prequantized is false for a bf16/fp16/fp32 checkpoint;
//   - layer(i).q ... .down: the F8_E4M3 code views [out][in] (dtype kF8E4M3; to_float() gives
//     the *unscaled* decoded codes), and layer(i).fp8.q ... .down (Fp8Weight): the same codes,
//     their scales and input scale, with fp32 readers that broadcast a per-tensor scale;
//   - embeddings, norms and lm_head are never quantized (F32/F16/BF16; lm_head must be listed
//     in `ignore` or be unquantized in the file).
// A pre-quantized checkpoint runs as its quantization_config says, whatever
// `model.quantization` is (as vLLM serves such a checkpoint in fp8 without --quantization):
// the checkpoint's own codes and scales, no re-quantization and no dequantization to bf16.
// Checked at load: every linear is F8_E4M3 (an F8_E4M3 tensor without quantization_config, or
// elsewhere than a layer linear, is a ModelError), every weight_scale / input_scale is present
// with the strategy's shape, F32/BF16/F16, finite and > 0, and `ignore` names no layer linear.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/model/quantization_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/text_file.h"  // read_text_file (callers of the loader use it too)

namespace strata {

// One pre-quantized linear weight W [out][in]: W[o][k] = e4m3_to_float(codes[o][k]) · s[o],
// s[o] = the channel scale of row o (WeightScales::kChannel) or the one tensor scale
// (kTensor). Views into the mapped files (valid while the ModelWeights lives); all null for a
// checkpoint that is not pre-quantized.
struct Fp8Weight {
  const TensorView* codes = nullptr;         // F8_E4M3 [out][in] (the LayerWeights view)
  const TensorView* weight_scale = nullptr;  // F32/BF16/F16: [out, 1] or [out] (channel),
                                             // [1] or [] (tensor)
  const TensorView* input_scale = nullptr;   // F32/BF16/F16 [1] or []: static activations
                                             // (ActivationScales::kStaticTensor); else null

  // fp32 scales of output rows [begin, begin + count), one per row: the channel scales
  // (converted exactly from the stored dtype) or the tensor scale repeated. With tensor
  // parallelism pass the rows the rank keeps of `codes` (runtime/tp/tp_shard.h: a kRows
  // slice's begin/count; a kCols slice keeps every row, so 0/out): codes and scales then
  // stay row for row together, and a per-tensor scale replicates.
  std::vector<float> row_scales(std::int64_t begin, std::int64_t count) const;
  std::vector<float> row_scales() const;  // every row
  // The static activation scale s_x (codes = e4m3(x / s_x)); InternalError without input_scale.
  float static_input_scale() const;
};

struct Fp8LayerWeights {
  Fp8Weight q, k, v, o, gate, up, down;
};

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
  // Pre-quantized checkpoints: the seven linears' codes and scales (q ... down above are then
  // the same F8_E4M3 code views); all null otherwise.
  Fp8LayerWeights fp8{};
};

class ModelWeights {
 public:
  // Throws ModelError. `dir` holds config.json and the safetensors file(s).
  static std::unique_ptr<ModelWeights> load(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // The checkpoint's quantization_config (prequantized false when it has none).
  const CheckpointQuantization& quantization() const { return quantization_; }
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
  CheckpointQuantization quantization_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<LayerWeights> layers_;
  const TensorView *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::size_t total_bytes_ = 0;
};

}  // namespace strata
