#include "runtime/model/model_loader.h"

#include <boost/json.hpp>
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

}  // namespace

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
  m->config_ = parse_model_config(read_text_file(cfg_path), cfg_path);
  const auto& c = m->config_;

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

  auto get = [&](const std::string& name, std::vector<std::int64_t> shape) -> const TensorView* {
    for (const auto& f : m->files_) {
      if (auto it = f->tensors().find(name); it != f->tensors().end()) {
        if (it->second.shape != shape)
          throw ModelError(f->path() + ": tensor '" + name + "' has shape " +
                           shape_str(it->second.shape) + ", expected " + shape_str(shape));
        return &it->second;
      }
    }
    throw ModelError(dir + ": missing tensor '" + name + "'");
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
    m->layers_.push_back(LayerWeights{
        get(p + "input_layernorm.weight", {h}),
        get(p + "self_attn.q_proj.weight", {q, h}),
        get(p + "self_attn.k_proj.weight", {kv, h}),
        get(p + "self_attn.v_proj.weight", {kv, h}),
        get(p + "self_attn.o_proj.weight", {h, q}),
        get(p + "post_attention_layernorm.weight", {h}),
        get(p + "mlp.gate_proj.weight", {in, h}),
        get(p + "mlp.up_proj.weight", {in, h}),
        get(p + "mlp.down_proj.weight", {h, in}),
    });
  }
  return m;
}

}  // namespace strata
