// Request parsing against what the operator allows and what clients get wrong (issue 16):
// per-request kv_sparsity bounds (sparsity.request_override), strict logit_bias keys, no
// echo of huge model names, errors naming the request's fields, chat max_tokens defaults.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "api/openai_request.h"

namespace strata::api {
namespace {

ParseContext ctx(RequestOverride mode = RequestOverride::kWithinLimits) {
  ParseContext c;
  c.model_names = {"tiny"};
  c.vocab_size = 1000;
  c.max_model_len = 256;
  c.num_layers = 4;
  c.base_profile.enabled = true;
  c.base_profile.capacity = 64;
  c.base_profile.window = 8;
  c.base_profile.full_layers = 1;
  c.sparsity_override = mode;
  return c;
}

ParsedRequest parse(const std::string& body, const ParseContext& c = ctx()) {
  return parse_openai_request(parse_json_body(body), Endpoint::kCompletions, c);
}

ApiError refusal(const std::string& body, const ParseContext& c = ctx()) {
  try {
    parse(body, c);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

TEST(RequestLimits, KvSparsityWithinLimitsOnlyLowersCapacityAndWindow) {
  auto p = parse(R"({"prompt":"x","kv_sparsity":{"capacity":32,"window":4}})");
  ASSERT_TRUE(p.request.sparsity);
  EXPECT_EQ(p.request.sparsity->capacity, 32);
  EXPECT_EQ(p.request.sparsity->window, 4);
  EXPECT_TRUE(parse(R"({"prompt":"x","kv_sparsity":{"policy":"window"}})").request.sparsity);
  EXPECT_EQ(refusal(R"({"prompt":"x","kv_sparsity":{"capacity":1024}})").param,
            "kv_sparsity.capacity");
  EXPECT_EQ(refusal(R"({"prompt":"x","kv_sparsity":{"window":16}})").param, "kv_sparsity.window");
  EXPECT_EQ(refusal(R"({"prompt":"x","kv_sparsity":{"enabled":false}})").param,
            "kv_sparsity.enabled");
  EXPECT_EQ(refusal(R"({"prompt":"x","kv_sparsity":{"full_layers":3}})").param,
            "kv_sparsity.full_layers");
  EXPECT_EQ(refusal(R"({"prompt":"x","kv_sparsity":{"full_layers":[0,2]}})").param,
            "kv_sparsity.full_layers");
  // Fewer full layers keep less: allowed.
  EXPECT_TRUE(parse(R"({"prompt":"x","kv_sparsity":{"full_layers":0}})").request.sparsity);
  // The operator's other choices.
  const auto any = ctx(RequestOverride::kAny);
  EXPECT_EQ(
      parse(R"({"prompt":"x","kv_sparsity":{"capacity":1024}})", any).request.sparsity->capacity,
      1024);
  EXPECT_FALSE(
      parse(R"({"prompt":"x","kv_sparsity":{"enabled":false}})", any).request.sparsity->enabled);
  const auto off = ctx(RequestOverride::kOff);
  const auto e = refusal(R"({"prompt":"x","kv_sparsity":{"capacity":32}})", off);
  EXPECT_EQ(e.param, "kv_sparsity");
  EXPECT_NE(std::string(e.what()).find("request_override: off"), std::string::npos) << e.what();
  EXPECT_FALSE(parse(R"({"prompt":"x"})", off).request.sparsity);
}

TEST(RequestLimits, KvSparsityErrorsNameTheRequestsField) {
  // Checked against the model's depth (4 layers) while parsing, named kv_sparsity.*.
  const auto e =
      refusal(R"({"prompt":"x","kv_sparsity":{"full_layers":9}})", ctx(RequestOverride::kAny));
  EXPECT_EQ(e.param, "kv_sparsity.full_layers");
  EXPECT_EQ(std::string(e.what()).find("sparsity.full_layers"),
            std::string(e.what()).find("kv_sparsity.full_layers") + 3)
      << e.what();
}

TEST(RequestLimits, LogitBiasKeysAreDigitsOnly) {
  EXPECT_EQ(parse(R"({"prompt":"x","logit_bias":{"5":1}})").request.params.logit_bias.size(), 1u);
  for (const char* key : {" 5", "5 ", "+5", "0x5", "5.0", "", "-", "99999999999999999999"})
    EXPECT_EQ(refusal(std::string(R"({"prompt":"x","logit_bias":{")") + key + R"(":1}})").param,
              "logit_bias")
        << "'" << key << "'";
  EXPECT_NE(std::string(refusal(R"({"prompt":"x","logit_bias":{"-1":1}})").what())
                .find("out of the vocabulary"),
            std::string::npos);
}

TEST(RequestLimits, HugeModelNamesAreNotEchoed) {
  const std::string name(1 << 20, 'm');
  const auto e = refusal(R"({"prompt":"x","model":")" + name + "\"}");
  EXPECT_EQ(e.status, 404);
  EXPECT_LT(std::string(e.what()).size(), 200u);
}

TEST(RequestLimits, ChatWithoutMaxTokensGetsWhatRemainsOfTheContext) {
  const auto p = parse_openai_request(
      parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"min_tokens":100})"),
      Endpoint::kChat, ctx());
  EXPECT_EQ(p.request.params.max_tokens, 0);  // resolved by the engine after tokenizing
  EXPECT_EQ(p.request.params.min_tokens, 100);
  // Token-id prompts of completions are checked by the engine too, with the text wording.
  EXPECT_EQ(parse(R"({"prompt":[1,2,3],"max_tokens":256})").request.params.max_tokens, 256);
  EXPECT_EQ(parse(R"({"prompt":"x"})").request.params.max_tokens, 16);
}

}  // namespace
}  // namespace strata::api
