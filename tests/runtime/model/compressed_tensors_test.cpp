// Pre-quantized FP8 checkpoints (compressed-tensors): the quantization_config parser, F8_E4M3
// in the safetensors reader, and the loader on checkpoints written by
// compressed_tensors_writer.h — codes and scales read exactly, malformed ones refused with a
// ModelError naming the key or tensor (docs/checkpoints.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/model/quantization_config.h"
#include "tests/runtime/model/compressed_tensors_writer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "/strata_ct_" + name + "." + std::to_string(::getpid());
}

// A small unquantized model (2 layers, GQA 2, bf16), written once.
const std::string& source_dir() {
  static const std::string d = [] {
    MakeModelOptions o;
    o.out_dir = tmp("src");
    fs::remove_all(o.out_dir);
    o.layers = 2;
    o.hidden = 64;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 16;
    o.intermediate = 96;
    make_model(o);
    return o.out_dir;
  }();
  return d;
}

std::string load_error(const std::string& dir) {
  try {
    ModelWeights::load(dir);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(loaded)";
}

std::string error_of(const test::CtOptions& o, const std::string& name) {
  const std::string d = tmp(name);
  test::write_ct_checkpoint(source_dir(), d, o);
  return load_error(d);
}

// --- quantization_config ---

// The layout of RedHatAI/Meta-Llama-3-8B-Instruct-FP8-dynamic's config.json (llm-compressor's
// FP8_DYNAMIC), trimmed to the keys that matter plus a few it carries along.
constexpr const char* kFp8DynamicConfig = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
  "quantization_config": {
    "config_groups": {"group_0": {
      "input_activations": {"actorder": null, "block_structure": null, "dynamic": true,
        "group_size": null, "num_bits": 8, "observer": null, "observer_kwargs": {},
        "strategy": "token", "symmetric": true, "type": "float"},
      "output_activations": null, "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false,
        "group_size": null, "num_bits": 8, "observer": "minmax", "observer_kwargs": {},
        "strategy": "channel", "symmetric": true, "type": "float"}}},
    "format": "float-quantized", "global_compression_ratio": 1.4, "ignore": ["lm_head"],
    "kv_cache_scheme": null, "quant_method": "compressed-tensors",
    "quantization_status": "compressed"}})";

std::string with(const std::function<void(json::object&)>& edit) {
  json::value v = json::parse(kFp8DynamicConfig);
  edit(v.as_object()["quantization_config"].as_object());
  return json::serialize(v);
}
json::object& group0(json::object& q) {
  return q["config_groups"].as_object()["group_0"].as_object();
}
std::string parse_error(const std::string& text) {
  try {
    parse_quantization_config(text, "config.json");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(QuantizationConfig, HubLayoutsParse) {
  const auto none = parse_quantization_config(R"({"hidden_size": 8})", "c");
  EXPECT_FALSE(none.prequantized);
  EXPECT_EQ(none.summary(), "none");
  EXPECT_FALSE(parse_quantization_config(R"({"quantization_config": null})", "c").prequantized);

  const auto dyn = parse_quantization_config(kFp8DynamicConfig, "c");
  EXPECT_TRUE(dyn.prequantized);
  EXPECT_EQ(dyn.quant_method, "compressed-tensors");
  EXPECT_EQ(dyn.format, "float-quantized");
  EXPECT_EQ(dyn.weights, WeightScales::kChannel);
  EXPECT_EQ(dyn.activations, ActivationScales::kDynamicToken);
  EXPECT_EQ(dyn.ignore, std::vector<std::string>{"lm_head"});
  EXPECT_FALSE(dyn.kv_cache_scheme.has_value());
  EXPECT_EQ(dyn.summary(),
            "fp8 pre-quantized (compressed-tensors float-quantized): weights per channel, "
            "activations dynamic per token");

  // Meta-Llama-3-8B-Instruct-FP8 (llm-compressor's FP8): per-tensor weights, static inputs,
  // naive-quantized (older llm-compressor), an FP8 KV cache scheme.
  const auto st = parse_quantization_config(with([](json::object& q) {
                                              q["format"] = "naive-quantized";
                                              auto& g = group0(q);
                                              g["weights"].as_object()["strategy"] = "tensor";
                                              auto& a = g["input_activations"].as_object();
                                              a["strategy"] = "tensor";
                                              a["dynamic"] = false;
                                              q["kv_cache_scheme"] =
                                                  json::object{{"num_bits", 8},
                                                               {"type", "float"},
                                                               {"strategy", "tensor"},
                                                               {"dynamic", false},
                                                               {"symmetric", true}};
                                              q["ignore"] = json::array{"lm_head", "re:.*gate$"};
                                            }),
                                            "c");
  EXPECT_EQ(st.weights, WeightScales::kTensor);
  EXPECT_EQ(st.activations, ActivationScales::kStaticTensor);
  ASSERT_TRUE(st.kv_cache_scheme.has_value());
  EXPECT_EQ(st.kv_cache_scheme->strategy, "tensor");
  EXPECT_FALSE(st.kv_cache_scheme->dynamic);
  EXPECT_NE(st.summary().find("weights per tensor, activations static per tensor"),
            std::string::npos);
  EXPECT_TRUE(ignores_module(st, "lm_head"));
  EXPECT_TRUE(ignores_module(st, "model.layers.3.mlp.gate"));
  EXPECT_FALSE(ignores_module(st, "model.layers.3.mlp.gate_proj"));  // anchored at the end
  EXPECT_FALSE(ignores_module(st, "model.lm_head.x"));

  // Weight-only (FP8 W8A16): input_activations null.
  const auto wo = parse_quantization_config(
      with([](json::object& q) { group0(q)["input_activations"] = nullptr; }), "c");
  EXPECT_EQ(wo.activations, ActivationScales::kNone);
  EXPECT_NE(wo.summary().find("weight-only"), std::string::npos);

  // Two identical groups are one scheme.
  EXPECT_EQ(parse_error(with([](json::object& q) {
              auto& g = q["config_groups"].as_object();
              g["group_1"] = g["group_0"];
            })),
            "(accepted)");
}

TEST(QuantizationConfig, RefusesWhatItDoesNotSupportNamingTheKey) {
  const std::string w = "quantization_config.config_groups.group_0.weights.";
  const std::string a = "quantization_config.config_groups.group_0.input_activations.";
  struct Case {
    std::function<void(json::object&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json::object& q) { q["quant_method"] = "gptq"; },
       "config.json: quantization_config.quant_method: 'gptq' is not supported (supported: "
       "compressed-tensors)"},
      {[](json::object& q) { q.erase("quant_method"); },
       "quantization_config.quant_method: missing"},
      {[](json::object& q) { q["format"] = "pack-quantized"; },
       "quantization_config.format: 'pack-quantized' is not supported"},
      {[](json::object& q) { q.erase("config_groups"); },
       "quantization_config.config_groups: missing"},
      {[](json::object& q) { group0(q)["weights"].as_object()["num_bits"] = 4; },
       w + "num_bits: 4 is not supported"},
      {[](json::object& q) { group0(q)["weights"].as_object()["type"] = "int"; },
       w + "type: 'int' is not supported"},
      {[](json::object& q) { group0(q)["weights"].as_object()["strategy"] = "group"; },
       w + "strategy: 'group' is not supported for weights (supported: channel, tensor)"},
      {[](json::object& q) { group0(q)["weights"].as_object()["strategy"] = "block"; },
       w + "strategy: 'block' is not supported"},
      {[](json::object& q) { group0(q)["weights"].as_object()["symmetric"] = false; },
       w + "symmetric: false (asymmetric, zero points) is not supported"},
      {[](json::object& q) { group0(q)["weights"].as_object()["dynamic"] = true; },
       w + "dynamic: true is not supported for weights"},
      {[](json::object& q) { group0(q).erase("weights"); },
       w.substr(0, w.size() - 1) + ": missing"},
      {[](json::object& q) { group0(q)["input_activations"].as_object()["dynamic"] = false; },
       a + "dynamic: false with strategy token"},
      {[](json::object& q) {
         auto& x = group0(q)["input_activations"].as_object();
         x["strategy"] = "tensor";
       },
       a + "dynamic: true with strategy tensor is not supported"},
      {[](json::object& q) { group0(q)["input_activations"].as_object()["strategy"] = "group"; },
       a + "strategy: 'group' is not supported for input_activations"},
      {[](json::object& q) { group0(q)["input_activations"].as_object()["num_bits"] = 4; },
       a + "num_bits: 4 is not supported"},
      {[](json::object& q) { group0(q)["input_activations"].as_object()["dynamic"] = "local"; },
       a + "dynamic: 'local' is not supported"},
      {[](json::object& q) {
         group0(q)["output_activations"] = json::object{{"num_bits", 8}};
       },
       "group_0.output_activations: is not supported"},
      {[](json::object& q) {
         auto& g = q["config_groups"].as_object();
         g["group_1"] = g["group_0"];
         g["group_1"].as_object()["weights"].as_object()["strategy"] = "tensor";
       },
       "config_groups.group_1: weights tensor, activations dynamic-token differ from "
       "quantization_config.config_groups.group_0's"},
      {[](json::object& q) { q["ignore"] = "lm_head"; },
       "quantization_config.ignore: must be a list"},
      {[](json::object& q) { q["ignore"] = json::array{"re:(["}; },
       "quantization_config.ignore: bad pattern 're:(['"},
  };
  for (const auto& c : cases) {
    const auto e = parse_error(with(c.edit));
    EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e << "\nwant: " << c.expect;
  }
  EXPECT_NE(
      parse_error(R"({"quantization_config": 3})").find("quantization_config: must be an object"),
      std::string::npos);
}

// --- safetensors ---

TEST(SafetensorsF8, EveryE4m3CodeDecodesExactly) {
  const std::string d = tmp("f8codes");
  fs::create_directories(d);
  std::vector<char> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>(i);
  test::ct_detail::write_file(d + "/t.safetensors", {{"codes", "F8_E4M3", {16, 16}, bytes}});
  SafetensorsFile f(d + "/t.safetensors");
  const auto& t = f.tensors().at("codes");
  EXPECT_EQ(t.dtype, DType::kF8E4M3);
  EXPECT_EQ(t.bytes, 256u);
  EXPECT_EQ(dtype_bytes(DType::kF8E4M3), 1u);
  EXPECT_STREQ(to_string(DType::kF8E4M3), "F8_E4M3");
  const auto v = t.to_float();
  for (int c = 0; c < 256; ++c) {
    const float want = e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v[static_cast<std::size_t>(c)])) << c;
    } else {
      EXPECT_EQ(std::memcmp(&v[static_cast<std::size_t>(c)], &want, 4), 0) << c;  // -0 too
    }
  }
  EXPECT_EQ(v[0x7E], 448.0f);
  EXPECT_EQ(v[0x01], std::ldexp(1.0f, -9));
  // A data size that does not match one byte per element is refused.
  test::ct_detail::write_file(d + "/bad.safetensors", {{"codes", "F8_E4M3", {16, 17}, bytes}});
  EXPECT_THROW(SafetensorsFile(d + "/bad.safetensors"), ModelError);
  test::ct_detail::write_file(d + "/e5.safetensors", {{"codes", "F8_E5M2", {16, 16}, bytes}});
  try {
    SafetensorsFile g(d + "/e5.safetensors");
    FAIL() << "F8_E5M2 accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported dtype F8_E5M2"), std::string::npos);
  }
}

// --- the loader ---

void expect_linear_equals(const Fp8Weight& f, const test::CtLinear& want, bool static_in) {
  ASSERT_NE(f.codes, nullptr);
  ASSERT_NE(f.weight_scale, nullptr);
  EXPECT_EQ(f.codes->dtype, DType::kF8E4M3);
  ASSERT_EQ(f.codes->bytes, want.codes.size());
  EXPECT_EQ(std::memcmp(f.codes->data, want.codes.data(), want.codes.size()), 0) << f.codes->name;
  const auto rows = f.codes->shape[0];
  const auto s = f.row_scales();
  ASSERT_EQ(s.size(), static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(s[static_cast<std::size_t>(r)],
              want.scales[want.scales.size() == 1 ? 0 : static_cast<std::size_t>(r)]);
  // A row range (what a tensor-parallel rank reads) is the same rows' scales.
  const auto part = f.row_scales(rows / 2, rows - rows / 2);
  EXPECT_EQ(part, std::vector<float>(s.begin() + rows / 2, s.end()));
  EXPECT_THROW(f.row_scales(1, rows), InternalError);
  if (static_in) {
    ASSERT_NE(f.input_scale, nullptr);
    EXPECT_EQ(f.static_input_scale(), want.input_scale);
  } else {
    EXPECT_EQ(f.input_scale, nullptr);
    EXPECT_THROW(f.static_input_scale(), InternalError);
  }
}

void expect_checkpoint_read_exactly(const test::CtOptions& o, const std::string& name,
                                    WeightScales ws, ActivationScales as) {
  const std::string d = tmp(name);
  const auto wrote = test::write_ct_checkpoint(source_dir(), d, o);
  const auto m = ModelWeights::load(d);
  const auto src = ModelWeights::load(source_dir());
  EXPECT_TRUE(m->quantization().prequantized);
  EXPECT_EQ(m->quantization().weights, ws);
  EXPECT_EQ(m->quantization().activations, as);
  EXPECT_EQ(m->embed().dtype, DType::kBF16);
  EXPECT_EQ(m->lm_head().to_float(), src->lm_head().to_float());
  ASSERT_EQ(wrote.size(), 7u * static_cast<std::size_t>(m->config().num_hidden_layers));
  for (int l = 0; l < m->config().num_hidden_layers; ++l) {
    const auto& L = m->layer(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::pair<const Fp8Weight*, std::string> parts[] = {
        {&L.fp8.q, "self_attn.q_proj"}, {&L.fp8.k, "self_attn.k_proj"},
        {&L.fp8.v, "self_attn.v_proj"}, {&L.fp8.o, "self_attn.o_proj"},
        {&L.fp8.gate, "mlp.gate_proj"}, {&L.fp8.up, "mlp.up_proj"},
        {&L.fp8.down, "mlp.down_proj"}};
    for (const auto& [f, module] : parts)
      expect_linear_equals(*f, wrote.at(p + module), as == ActivationScales::kStaticTensor);
    EXPECT_EQ(L.q, L.fp8.q.codes);
    EXPECT_EQ(L.down, L.fp8.down.codes);
    EXPECT_EQ(L.input_norm->dtype, DType::kBF16);
  }
}

TEST(CompressedTensorsLoader, ChannelDynamicReadsCodesAndScalesExactly) {
  test::CtOptions o;
  expect_checkpoint_read_exactly(o, "chan_dyn", WeightScales::kChannel,
                                 ActivationScales::kDynamicToken);
  o.scale_dtype = "BF16";  // as the hub's FP8-dynamic checkpoints store them
  o.channel_scales_1d = true;
  expect_checkpoint_read_exactly(o, "chan_dyn_bf16", WeightScales::kChannel,
                                 ActivationScales::kDynamicToken);
}

TEST(CompressedTensorsLoader, TensorStaticReadsScalesAndInputScales) {
  test::CtOptions o;
  o.weights = test::CtWeights::kTensor;
  o.activations = test::CtActivations::kStaticTensor;
  o.input_scales = {{"q_proj", 0.01f},   {"k_proj", 0.011f},   {"v_proj", 0.012f},
                    {"o_proj", 0.02f},   {"gate_proj", 0.03f}, {"up_proj", 0.031f},
                    {"down_proj", 0.05f}};
  expect_checkpoint_read_exactly(o, "tensor_static", WeightScales::kTensor,
                                 ActivationScales::kStaticTensor);
  o.scalar_scales = true;  // shape [] as well as [1]
  expect_checkpoint_read_exactly(o, "tensor_static_scalar", WeightScales::kTensor,
                                 ActivationScales::kStaticTensor);
  o.activations = test::CtActivations::kNone;
  expect_checkpoint_read_exactly(o, "tensor_weight_only", WeightScales::kTensor,
                                 ActivationScales::kNone);
}

TEST(CompressedTensorsLoader, UnquantizedCheckpointHasNoFp8Views) {
  const auto m = ModelWeights::load(source_dir());
  EXPECT_FALSE(m->quantization().prequantized);
  EXPECT_EQ(m->layer(0).fp8.q.codes, nullptr);
  EXPECT_EQ(m->layer(0).fp8.q.weight_scale, nullptr);
  EXPECT_THROW(m->layer(0).fp8.q.row_scales(), InternalError);
}

TEST(CompressedTensorsLoader, MalformedCheckpointsAreClearModelErrors) {
  const std::string q0 = "model.layers.0.self_attn.q_proj";
  const std::string d1 = "model.layers.1.mlp.down_proj";
  struct Case {
    std::string name;
    std::function<void(test::CtOptions&)> set;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"no_scale", [&](test::CtOptions& o) { o.drop = {q0 + ".weight_scale"}; },
       "missing tensor '" + q0 + ".weight_scale' (quantization_config weights strategy channel)"},
      {"scale_shape",
       [&](test::CtOptions& o) {
         o.reshape = {{d1 + ".weight_scale", {32, 2}}};
       },
       "tensor '" + d1 + ".weight_scale' has shape [32, 2], expected [64, 1] or [64]"},
      {"tensor_scale_shape",
       [&](test::CtOptions& o) {
         o.weights = test::CtWeights::kTensor;
         o.reshape = {{q0 + ".weight_scale", {2}}};
       },
       "has shape [2], expected [1] or [] (quantization_config weights strategy tensor)"},
      {"channel_declared_tensor_written",
       [&](test::CtOptions& o) {
         o.weights = test::CtWeights::kTensor;
         o.edit_config = [](json::object& q) {
           group0(q)["weights"].as_object()["strategy"] = "channel";
         };
       },
       "has shape [1], expected [64, 1] or [64] (quantization_config weights strategy channel)"},
      {"scale_dtype",
       [&](test::CtOptions& o) {
         o.redtype = {{q0 + ".weight_scale", "F8_E4M3"}};
       },
       "tensor '" + q0 + ".weight_scale' is F8_E4M3, expected F32, BF16 or F16 (a scale)"},
      {"zero_scale",
       [&](test::CtOptions& o) {
         o.scale_value = {{q0 + ".weight_scale", 0.0f}};
       },
       "element 0 is 0.000000 (scales must be finite and > 0)"},
      {"nan_scale",
       [&](test::CtOptions& o) {
         o.scale_value = {{q0 + ".weight_scale", std::nanf("")}};
       },
       "(scales must be finite and > 0)"},
      {"no_input_scale",
       [&](test::CtOptions& o) {
         o.activations = test::CtActivations::kStaticTensor;
         o.drop = {d1 + ".input_scale"};
       },
       "missing tensor '" + d1 +
           ".input_scale' (quantization_config input_activations strategy tensor, static)"},
      {"negative_input_scale",
       [&](test::CtOptions& o) {
         o.activations = test::CtActivations::kStaticTensor;
         o.scale_value = {{d1 + ".input_scale", -1.0f}};
       },
       "'" + d1 + ".input_scale' element 0 is -1.000000"},
      {"no_config", [&](test::CtOptions& o) { o.no_quantization_config = true; },
       "tensor 'model.layers.0.self_attn.q_proj.weight' is F8_E4M3 but "},
      {"bf16_linear", [&](test::CtOptions& o) { o.unquantized = {d1}; },
       "tensor '" + d1 + ".weight' is BF16, expected F8_E4M3"},
      {"ignored_linear",
       [&](test::CtOptions& o) {
         o.edit_config = [](json::object& q) {
           q["ignore"] = json::array{"lm_head", "re:.*layers\\.1\\.mlp\\.down_proj$"};
         };
       },
       "quantization_config.ignore: lists '" + d1 + "': every layer linear must be quantized"},
      {"f8_lm_head",
       [&](test::CtOptions& o) {
         o.redtype = {{"lm_head.weight", "F8_E4M3"}};
       },
       "tensor 'lm_head.weight' is F8_E4M3: only the layers' linear weights"},
      {"f8_norm",
       [&](test::CtOptions& o) {
         o.redtype = {{"model.layers.0.input_layernorm.weight", "F8_E4M3"}};
       },
       "tensor 'model.layers.0.input_layernorm.weight' is F8_E4M3"},
      {"codes_shape",
       [&](test::CtOptions& o) {
         o.reshape = {{q0 + ".weight", {64, 63}}};
       },
       "tensor '" + q0 + ".weight' has shape [64, 63], expected [64, 64]"},
      {"strategy_block",
       [&](test::CtOptions& o) {
         o.edit_config = [](json::object& q) {
           group0(q)["weights"].as_object()["strategy"] = "block";
         };
       },
       "config.json: quantization_config.config_groups.group_0.weights.strategy: 'block' is not "
       "supported"},
  };
  for (const auto& c : cases) {
    test::CtOptions o;
    c.set(o);
    const auto e = error_of(o, c.name);
    EXPECT_NE(e.find(c.expect), std::string::npos)
        << c.name << "\ngot:  " << e << "\nwant: " << c.expect;
  }
}

}  // namespace
}  // namespace strata
