// A pre-quantized checkpoint's `quantization_config` (config.json), in the compressed-tensors
// layout that the FP8 Llama checkpoints on the Hugging Face hub use (llm-compressor's `FP8`
// and `FP8_DYNAMIC` schemes, e.g. RedHatAI/Meta-Llama-3-8B-Instruct-FP8 and -FP8-dynamic).
// What is accepted, and the tensors it implies, is docs/checkpoints.md; the loader
// (model_loader.h) checks the tensors against it.
//
// Accepted: quant_method "compressed-tensors", format "float-quantized" or "naive-quantized";
// one scheme in config_groups (several groups only when they are identical) with
//   weights           {num_bits 8, type "float", strategy "channel" | "tensor",
//                      symmetric true, dynamic false}
//   input_activations {num_bits 8, type "float", symmetric true, and strategy "token" with
//                      dynamic true, or strategy "tensor" with dynamic false}, or null
//                      (weight-only);
// output_activations null; `ignore` (module names or "re:" patterns) listing lm_head or
// modules outside the layers' linears; `kv_cache_scheme` parsed and kept (read by
// runtime/kv_scales.h for cache.kv_dtype fp8).
// Everything else is a ModelError naming the key and what is supported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

// One compressed-tensors QuantizationArgs, as written (kv_cache_scheme keeps one).
struct QuantArgs {
  int num_bits = 8;
  std::string type = "float";  // "float" | "int"
  std::string strategy;        // "channel" | "tensor" | "token" | ...
  bool symmetric = true;
  bool dynamic = false;
};

// How a linear weight's e4m3 codes are scaled: value[o][k] = e4m3(code[o][k]) · s.
enum class WeightScales : std::uint8_t {
  kChannel,  // one scale per output row: `weight_scale` [out, 1] (or [out])
  kTensor,   // one scale for the whole matrix: `weight_scale` [1] (or [])
};

// How the inputs of the linear layers are quantized at run time.
enum class ActivationScales : std::uint8_t {
  kNone,          // weight-only (input_activations null): activations stay unquantized
  kDynamicToken,  // one scale per token, amax/448, computed on the fly (FP8_DYNAMIC)
  kStaticTensor,  // the checkpoint's per-tensor `input_scale`, calibrated offline (FP8)
};

const char* to_string(WeightScales w);      // "channel" | "tensor"
const char* to_string(ActivationScales a);  // "none" | "dynamic-token" | "static-tensor"

struct CheckpointQuantization {
  bool prequantized = false;  // false: no quantization_config (a bf16/fp16/fp32 checkpoint)
  std::string quant_method;   // "compressed-tensors"
  std::string format;         // "float-quantized" | "naive-quantized"
  WeightScales weights = WeightScales::kChannel;
  ActivationScales activations = ActivationScales::kDynamicToken;
  std::vector<std::string> ignore;           // as written
  std::optional<QuantArgs> kv_cache_scheme;  // the FP8 KV cache's scales (runtime/kv_scales.h)

  // One line for logs and tools: "none", or e.g. "fp8 pre-quantized (compressed-tensors
  // float-quantized): weights per channel, activations dynamic per token".
  std::string summary() const;
};

// Parses `quantization_config` from config.json's text (absent or null: prequantized false).
// Throws ModelError "<source>: quantization_config.<key>: <why>" on anything not accepted.
CheckpointQuantization parse_quantization_config(const std::string& config_json,
                                                 const std::string& source);

// Whether the ignore list names `module` (e.g. "lm_head", "model.layers.3.mlp.down_proj"): an
// entry equal to it, or "re:<pattern>" matching from its first character (compressed-tensors
// uses Python's re.match; ECMAScript syntax here, the same for the patterns in use).
bool ignores_module(const CheckpointQuantization& q, const std::string& module);

}  // namespace strata
