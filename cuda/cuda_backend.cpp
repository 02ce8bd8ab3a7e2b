// The CUDA backend's public face (cuda/cuda_backend.h): the Backend contract over
// CudaBackendImpl (cuda/backend/), make_cuda_backends and the `random:` model shape parser.
#include "cuda/cuda_backend.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"

namespace strata::cuda {

ModelConfig random_model_config(const std::string& spec) {
  if (spec.rfind("random:", 0) != 0)
    throw ConfigError("model.path", "not a random model spec: " + spec);
  std::stringstream ss(spec.substr(7));
  std::string item;
  std::getline(ss, item, ',');
  ModelConfig c = preset_config(item);
  if (c.vocab_size == 0)
    c.vocab_size = 512 + 16;  // small presets: built-in tokenizer size (bench only)
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError("model.path", "expected key=value in '" + item + "'");
    const std::string k = item.substr(0, eq);
    int v = 0;
    try {
      v = std::stoi(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw ConfigError("model.path", "bad number in '" + item + "'");
    }
    if (v <= 0) throw ConfigError("model.path", "value must be positive in '" + item + "'");
    if (k == "layers")
      c.num_hidden_layers = v;
    else if (k == "hidden")
      c.hidden_size = v;
    else if (k == "heads")
      c.num_attention_heads = v;
    else if (k == "kv_heads")
      c.num_key_value_heads = v;
    else if (k == "intermediate")
      c.intermediate_size = v;
    else if (k == "head_dim")
      c.head_dim = v;
    else if (k == "vocab")
      c.vocab_size = v;
    else
      throw ConfigError(
          "model.path",
          "unknown key '" + k +
              "' (allowed: layers, hidden, heads, kv_heads, intermediate, head_dim, vocab)");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ConfigError("model.path", "kv_heads must divide heads");
  return c;
}

CudaBackend::CudaBackend(const Config& config, int device, CudaTpRank tp)
    : impl_(std::make_unique<CudaBackendImpl>(config, device, tp)) {}
CudaBackend::~CudaBackend() = default;
const BackendInfo& CudaBackend::info() const {
  return impl_->binfo;
}
const ModelConfig& CudaBackend::model() const {
  return impl_->full_mc;  // the whole model (impl_->mc holds this rank's local counts)
}
StepResult CudaBackend::step(const StepPlan& plan) {
  return impl_->step(plan);
}

std::vector<std::unique_ptr<Backend>> make_cuda_backends(const Config& config) {
  if (config.backend.tp_size != 1) return tp::make_cuda_tp_backends(config);
  const int dev = config.backend.devices.empty() ? 0 : config.backend.devices.front();
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<CudaBackend>(config, dev));
  return out;
}

}  // namespace strata::cuda
