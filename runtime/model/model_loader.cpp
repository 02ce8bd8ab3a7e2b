#include "runtime/model/model_loader.h"

#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/error.h"
#include "runtime/text_file.h"

namespace strata {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool is_scale_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace

std::vector<float> Fp8Weight::row_scales(std::int64_t begin, std::int64_t count) const {
  if (!codes || !weight_scale)
    throw InternalError("Fp8Weight::row_scales: not a pre-quantized weight");
  const std::int64_t rows = codes->shape.at(0);
  if (begin < 0 || count < 0 || begin + count > rows)
    throw InternalError("Fp8Weight::row_scales: rows [" + std::to_string(begin) + ", " +
                        std::to_string(begin + count) + ") of " + std::to_string(rows));
  const auto all = weight_scale->to_float();
  if (all.size() == 1) return std::vector<float>(static_cast<std::size_t>(count), all[0]);
  return {all.begin() + begin, all.begin() + begin + count};
}

std::vector<float> Fp8Weight::row_scales() const {
  if (!codes) throw InternalError("Fp8Weight::row_scales: not a pre-quantized weight");
  return row_scales(0, codes->shape.at(0));
}

float Fp8Weight::static_input_scale() const {
  if (!input_scale)
    throw InternalError("Fp8Weight::static_input_scale: " +
                        (codes ? codes->name : std::string("?")) + " has no input_scale");
  return input_scale->to_float().at(0);
}

const TensorView& ModelWeights::tensor(const std::string& name) const {
  for (const auto& f : files_)
    if (auto it = f->tensors().find(name); it != f->tensors().end()) return it->second;
  throw ModelError(dir_ + ": missing tensor '" + name + "'");
}

std::unique_ptr<ModelWeights> ModelWeights::load(const std::string& dir) {
  auto m = std::unique_ptr<ModelWeights>(new ModelWeights());
  m->dir_ = dir;
  if (!fs::is_directory(dir)) throw ModelError(dir + ": not a model directory");
  const std::string cfg_path = dir + "/config.json";
  if (!fs::exists(cfg_path)) throw ModelError(cfg_path + ": missing (not a Hugging Face model)");
  const std::string cfg_text = read_text_file(cfg_path);
  m->config_ = parse_model_config(cfg_text, cfg_path);
  m->quantization_ = parse_quantization_config(cfg_text, cfg_path);
  const auto& c = m->config_;
  const auto& quant = m->quantization_;

  // Files: one model.safetensors, or shards named by the index.
  std::vector<std::string> files;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    json::value iv;
    try {
      iv = json::parse(read_text_file(index));
    } catch (const ModelError&) {
      throw;
    } catch (const std::exception& e) {
      throw ModelError(index + ": invalid JSON: " + e.what());
    }
    const auto* wm = iv.is_object() ? iv.as_object().if_contains("weight_map") : nullptr;
    if (!wm || !wm->is_object()) throw ModelError(index + ": missing 'weight_map'");
    std::set<std::string> uniq;
    for (const auto& [k, v] : wm->as_object()) {
      if (!v.is_string())
        throw ModelError(index + ": weight_map['" + std::string(k) + "'] is not a file name");
      uniq.insert(std::string(v.as_string()));
    }
    for (const auto& f : uniq) files.push_back(dir + "/" + f);
  } else if (fs::exists(single)) {
    files.push_back(single);
  } else {
    throw ModelError(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& f : files) {
    if (!fs::exists(f)) throw ModelError(f + ": missing shard");
    m->files_.push_back(std::make_unique<SafetensorsFile>(f));
    for (const auto& [n, t] : m->files_.back()->tensors()) m->total_bytes_ += t.bytes;
  }

  auto find = [&](const std::string& name) -> const TensorView* {
    for (const auto& f : m->files_)
      if (auto it = f->tensors().find(name); it != f->tensors().end()) return &it->second;
    return nullptr;
  };
  auto check_shape = [&](const TensorView& t, const std::vector<std::int64_t>& shape) {
    if (t.shape != shape)
      throw ModelError(t.file + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) +
                       ", expected " + shape_str(shape));
  };
  // A tensor that is not a layer linear: never F8_E4M3.
  auto get = [&](const std::string& name, std::vector<std::int64_t> shape) -> const TensorView* {
    const TensorView* t = find(name);
    if (!t) throw ModelError(dir + ": missing tensor '" + name + "'");
    check_shape(*t, shape);
    if (t->dtype == DType::kF8E4M3)
      throw ModelError(t->file + ": tensor '" + name +
                       "' is F8_E4M3: only the layers' linear weights (q/k/v/o/gate/up/down_proj) "
                       "may be pre-quantized" +
                       (name == "lm_head.weight" ? " (Strata keeps lm_head unquantized)" : ""));
    return t;
  };
  // A scale tensor of a pre-quantized linear: F32/BF16/F16 of one of `shapes`, finite, > 0.
  auto get_scale = [&](const std::string& name,
                       const std::vector<std::vector<std::int64_t>>& shapes,
                       const std::string& why) -> const TensorView* {
    const TensorView* t = find(name);
    if (!t) throw ModelError(dir + ": missing tensor '" + name + "' (" + why + ")");
    bool ok = false;
    std::string want;
    for (const auto& s : shapes) {
      ok = ok || t->shape == s;
      want += (want.empty() ? "" : " or ") + shape_str(s);
    }
    if (!ok)
      throw ModelError(t->file + ": tensor '" + name + "' has shape " + shape_str(t->shape) +
                       ", expected " + want + " (" + why + ")");
    if (!is_scale_dtype(t->dtype))
      throw ModelError(t->file + ": tensor '" + name + "' is " + to_string(t->dtype) +
                       ", expected F32, BF16 or F16 (a scale)");
    const auto v = t->to_float();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]) || v[i] <= 0.0f)
        throw ModelError(t->file + ": tensor '" + name + "' element " + std::to_string(i) + " is " +
                         std::to_string(v[i]) + " (scales must be finite and > 0)");
    return t;
  };
  // A layer linear: unquantized (F32/F16/BF16) without quantization_config, F8_E4M3 codes with
  // their scales with it.
  auto linear = [&](const std::string& module, std::vector<std::int64_t> shape,
                    Fp8Weight* fp8) -> const TensorView* {
    const std::string name = module + ".weight";
    const TensorView* t = find(name);
    if (!t) throw ModelError(dir + ": missing tensor '" + name + "'");
    check_shape(*t, shape);
    if (!quant.prequantized) {
      if (t->dtype == DType::kF8E4M3)
        throw ModelError(t->file + ": tensor '" + name + "' is F8_E4M3 but " + cfg_path +
                         " has no quantization_config (a pre-quantized checkpoint says how its "
                         "scales are laid out there; docs/checkpoints.md)");
      return t;
    }
    if (ignores_module(quant, module))
      throw ModelError(cfg_path + ": quantization_config.ignore: lists '" + module +
                       "': every layer linear must be quantized (only lm_head and modules "
                       "outside the layers' linears may be ignored)");
    if (t->dtype != DType::kF8E4M3)
      throw ModelError(t->file + ": tensor '" + name + "' is " + to_string(t->dtype) +
                       ", expected F8_E4M3 (" + cfg_path +
                       " has a quantization_config that quantizes every layer linear)");
    fp8->codes = t;
    const bool channel = quant.weights == WeightScales::kChannel;
    fp8->weight_scale =
        get_scale(module + ".weight_scale",
                  channel ? std::vector<std::vector<std::int64_t>>{{shape[0], 1}, {shape[0]}}
                          : std::vector<std::vector<std::int64_t>>{{1}, {}},
                  std::string("quantization_config weights strategy ") + to_string(quant.weights));
    if (quant.activations == ActivationScales::kStaticTensor)
      fp8->input_scale = get_scale(module + ".input_scale", {{1}, {}},
                                   "quantization_config input_activations strategy tensor, static");
    return t;
  };
  const std::int64_t h = c.hidden_size, v = c.vocab_size, q = c.q_dim(), kv = c.kv_dim(),
                     in = c.intermediate_size;
  m->embed_ = get("model.embed_tokens.weight", {v, h});
  m->norm_ = get("model.norm.weight", {h});
  if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    m->lm_head_ = get("lm_head.weight", {v, h});
  }
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l{};
    l.input_norm = get(p + "input_layernorm.weight", {h});
    l.q = linear(p + "self_attn.q_proj", {q, h}, &l.fp8.q);
    l.k = linear(p + "self_attn.k_proj", {kv, h}, &l.fp8.k);
    l.v = linear(p + "self_attn.v_proj", {kv, h}, &l.fp8.v);
    l.o = linear(p + "self_attn.o_proj", {h, q}, &l.fp8.o);
    l.post_norm = get(p + "post_attention_layernorm.weight", {h});
    l.gate = linear(p + "mlp.gate_proj", {in, h}, &l.fp8.gate);
    l.up = linear(p + "mlp.up_proj", {in, h}, &l.fp8.up);
    l.down = linear(p + "mlp.down_proj", {h, in}, &l.fp8.down);
    m->layers_.push_back(l);
  }
  return m;
}

}  // namespace strata
