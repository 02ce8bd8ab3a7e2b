// Test helper: writes a compressed-tensors FP8 checkpoint from an unquantized model directory
// (one `strata make-model` wrote), as llm-compressor lays it out (docs/checkpoints.md): the
// layers' seven linears as F8_E4M3 codes + `weight_scale` (+ `input_scale` for static
// activations), everything else copied as stored, config.json with a `quantization_config`.
// Its own safetensors writer and its own quantizer (written from the published format, not
// from the loader or the CPU backend), so the loader's tests read a file it did not write.
// The GPU machine's independent writer is tools/fp8/quantize_compressed_tensors.py.
#pragma once

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/fp8.h"
#include "runtime/model/safetensors.h"
#include "runtime/text_file.h"

namespace strata::test {

enum class CtWeights { kChannel, kTensor };
enum class CtActivations { kDynamicToken, kStaticTensor, kNone };

struct CtOptions {
  CtWeights weights = CtWeights::kChannel;
  CtActivations activations = CtActivations::kDynamicToken;
  std::string scale_dtype = "F32";  // F32 | BF16 (as the hub's FP8-dynamic checkpoints)
  bool scalar_scales = false;       // per-tensor scales of shape [] instead of [1]
  bool channel_scales_1d = false;   // channel scales of shape [out] instead of [out, 1]
  // Static input scales by projection ("q_proj", ..., "down_proj"); missing: 1.
  std::map<std::string, float> input_scales;
  // Malformations for the error tests.
  bool no_quantization_config = false;                    // F8 tensors, config.json without it
  std::function<void(boost::json::object&)> edit_config;  // edits quantization_config
  std::set<std::string> drop;                             // tensor names left out
  // Tensors written with another shape or dtype (the data is resized to match).
  std::map<std::string, std::vector<std::int64_t>> reshape;
  std::map<std::string, std::string> redtype;  // name -> "F8_E4M3" | "F32" | "BF16"
  std::map<std::string, float> scale_value;    // a weight/input scale tensor's every element
  std::set<std::string> unquantized;           // linears ("...q_proj") kept as stored
  // Extra F32 tensors written as given (name -> shape, values): e.g. an FP8 KV cache's
  // `model.layers.<l>.self_attn.k_scale` / `v_scale` with a kv_cache_scheme (edit_config).
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>> extra;
};

// What the writer produced for one linear, for exact comparisons.
struct CtLinear {
  std::vector<std::uint8_t> codes;  // [out][in]
  std::vector<float> scales;        // as stored (after rounding to scale_dtype), 1 or out
  float input_scale = 0;            // static only
};

namespace ct_detail {

inline std::uint16_t to_bf16(float f) {  // RNE, as safetensors writers (torch) round
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
};

inline std::vector<char> encode(const std::vector<float>& v, const std::string& dtype) {
  std::vector<char> out;
  if (dtype == "F32") {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (dtype == "BF16") {
    out.resize(v.size() * 2);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto h = to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {  // F8_E4M3
    out.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<char>(float_to_e4m3(v[i]));
  }
  return out;
}

inline std::size_t elem_bytes(const std::string& dtype) {
  return dtype == "F32" ? 4 : dtype == "F8_E4M3" ? 1 : 2;
}

// The safetensors layout: u64 header length, JSON header (padded to 8), raw data.
inline void write_file(const std::string& path, const std::vector<RawTensor>& ts) {
  boost::json::object header;
  std::size_t off = 0;
  for (const auto& t : ts) {
    boost::json::array shape;
    for (auto d : t.shape) shape.push_back(d);
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", shape},
                      {"data_offsets", boost::json::array{off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string hs = boost::json::serialize(header);
  while (hs.size() % 8 != 0) hs.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& t : ts) f.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline const char* kProjections[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                     "gate_proj", "up_proj", "down_proj"};

}  // namespace ct_detail

inline boost::json::object ct_quantization_config(const CtOptions& o) {
  namespace json = boost::json;
  json::object w{{"num_bits", 8},
                 {"type", "float"},
                 {"symmetric", true},
                 {"dynamic", false},
                 {"group_size", nullptr},
                 {"block_structure", nullptr},
                 {"observer", "minmax"},
                 {"actorder", nullptr},
                 {"strategy", o.weights == CtWeights::kChannel ? "channel" : "tensor"}};
  json::value in = nullptr;
  if (o.activations != CtActivations::kNone) {
    const bool dyn = o.activations == CtActivations::kDynamicToken;
    in = json::object{{"num_bits", 8},
                      {"type", "float"},
                      {"symmetric", true},
                      {"dynamic", dyn},
                      {"group_size", nullptr},
                      {"block_structure", nullptr},
                      {"strategy", dyn ? "token" : "tensor"},
                      {"observer", dyn ? json::value(nullptr) : json::value("minmax")}};
  }
  json::object group{{"targets", json::array{"Linear"}},
                     {"weights", w},
                     {"input_activations", in},
                     {"output_activations", nullptr}};
  return json::object{{"quant_method", "compressed-tensors"},
                      {"format", "float-quantized"},
                      {"quantization_status", "compressed"},
                      {"global_compression_ratio", nullptr},
                      {"config_groups", json::object{{"group_0", group}}},
                      {"ignore", json::array{"lm_head"}},
                      {"kv_cache_scheme", nullptr}};
}

// Writes `dst` from the unquantized model in `src` (config.json + model.safetensors, or the
// shards its index names); returns what it wrote for each linear, by module name
// ("model.layers.0.self_attn.q_proj"). Quantization (compressed-tensors' calculate_qparams and
// _quantize for an 8-bit float): s = amax / 448 (1 for an all-zero range), the stored scale is
// s rounded to scale_dtype, code = e4m3(clamp(w / stored_s, ±448)) with round-to-nearest-even.
inline std::map<std::string, CtLinear> write_ct_checkpoint(const std::string& src,
                                                           const std::string& dst,
                                                           const CtOptions& o) {
  namespace fs = std::filesystem;
  namespace json = boost::json;
  using namespace ct_detail;
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(src + "/" + f)) fs::copy_file(src + "/" + f, dst + "/" + f);
  json::value cfg = json::parse(read_text_file(src + "/config.json"));
  if (!o.no_quantization_config) {
    json::object q = ct_quantization_config(o);
    if (o.edit_config) o.edit_config(q);
    cfg.as_object()["quantization_config"] = q;
  }
  std::ofstream(dst + "/config.json") << json::serialize(cfg);

  std::vector<std::string> files;
  if (fs::exists(src + "/model.safetensors.index.json")) {
    std::set<std::string> u;
    for (const auto& [k, v] : json::parse(read_text_file(src + "/model.safetensors.index.json"))
                                  .at("weight_map")
                                  .as_object())
      u.insert(std::string(v.as_string()));
    for (const auto& f : u) files.push_back(src + "/" + f);
  } else {
    files.push_back(src + "/model.safetensors");
  }
  std::vector<std::unique_ptr<SafetensorsFile>> in;
  for (const auto& f : files) in.push_back(std::make_unique<SafetensorsFile>(f));

  std::map<std::string, CtLinear> wrote;
  std::vector<RawTensor> out;
  auto add = [&](RawTensor t) {
    if (o.drop.count(t.name)) return;
    if (auto it = o.redtype.find(t.name); it != o.redtype.end() && it->second != t.dtype) {
      t.bytes.resize(t.bytes.size() / elem_bytes(t.dtype) * elem_bytes(it->second));
      t.dtype = it->second;
    }
    if (auto it = o.reshape.find(t.name); it != o.reshape.end()) {
      std::size_t n = 1;
      for (auto d : it->second) n *= static_cast<std::size_t>(d);
      t.shape = it->second;
      t.bytes.resize(n * elem_bytes(t.dtype));
    }
    out.push_back(std::move(t));
  };
  auto scale_tensor = [&](const std::string& name, std::vector<float> v,
                          std::vector<std::int64_t> shape) {
    if (auto it = o.scale_value.find(name); it != o.scale_value.end())
      std::fill(v.begin(), v.end(), it->second);
    add({name, o.scale_dtype, std::move(shape), encode(v, o.scale_dtype)});
  };
  auto round_scale = [&](float s) { return o.scale_dtype == "BF16" ? from_bf16(to_bf16(s)) : s; };
  for (const auto& f : in) {
    for (const auto& [name, t] : f->tensors()) {
      std::string module;
      for (const char* p : kProjections)
        if (ends_with(name, std::string(p) + ".weight")) module = name.substr(0, name.size() - 7);
      if (module.empty() || o.unquantized.count(module)) {
        add({name, to_string(t.dtype), t.shape,
             std::vector<char>(reinterpret_cast<const char*>(t.data),
                               reinterpret_cast<const char*>(t.data) + t.bytes)});
        continue;
      }
      const auto w = t.to_float();
      const auto rows = static_cast<std::size_t>(t.shape[0]),
                 cols = static_cast<std::size_t>(t.shape[1]);
      CtLinear& l = wrote[module];
      auto scale_of = [&](std::size_t b, std::size_t e) {
        float amax = 0;
        for (std::size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(w[i]));
        return round_scale(amax > 0 ? amax / 448.0f : 1.0f);
      };
      if (o.weights == CtWeights::kChannel) {
        for (std::size_t r = 0; r < rows; ++r)
          l.scales.push_back(scale_of(r * cols, (r + 1) * cols));
      } else {
        l.scales.push_back(scale_of(0, w.size()));
      }
      l.codes.resize(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        const float s = l.scales[l.scales.size() == 1 ? 0 : i / cols];
        const float x = std::clamp(w[i] / s, -448.0f, 448.0f);
        l.codes[i] = float_to_e4m3(x);
      }
      add({name, "F8_E4M3", t.shape,
           std::vector<char>(reinterpret_cast<const char*>(l.codes.data()),
                             reinterpret_cast<const char*>(l.codes.data()) + l.codes.size())});
      const std::vector<std::int64_t> tensor_shape =
          o.scalar_scales ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1};
      std::vector<std::int64_t> scale_shape = tensor_shape;
      if (o.weights == CtWeights::kChannel)
        scale_shape = o.channel_scales_1d ? std::vector<std::int64_t>{t.shape[0]}
                                          : std::vector<std::int64_t>{t.shape[0], 1};
      scale_tensor(module + ".weight_scale", l.scales, scale_shape);
      if (o.activations == CtActivations::kStaticTensor) {
        float s = 1.0f;
        for (const char* p : kProjections)
          if (ends_with(module, p))
            if (auto it = o.input_scales.find(p); it != o.input_scales.end()) s = it->second;
        l.input_scale = round_scale(s);
        scale_tensor(module + ".input_scale", {l.input_scale}, tensor_shape);
      }
    }
  }
  for (const auto& [name, sv] : o.extra) add({name, "F32", sv.first, encode(sv.second, "F32")});
  write_file(dst + "/model.safetensors", out);
  return wrote;
}

}  // namespace strata::test
