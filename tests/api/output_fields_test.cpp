// vLLM's output fields (issue 16 items 8 and 10): skip_special_tokens, echo for chat and
// token-id prompts, return_tokens_as_token_ids, truncate_prompt_tokens, the refusal of
// prompt_logprobs (and of echo with logprobs), and logprob `bytes` of tokens that are part of a
// UTF-8 sequence.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "api/openai_request.h"
#include "api/openai_response.h"
#include "tests/api/request_test_util.h"

namespace strata::api {
namespace {

namespace json = boost::json;

ParseContext ctx() {
  ParseContext c = test::tiny_context();
  return c;
}

ParsedRequest parse(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return parse_openai_request(parse_json_body(body), e, ctx());
}

std::string param_of(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  try {
    parse(body, e);
  } catch (const ApiError& err) {
    return err.param;
  }
  return "(accepted)";
}

TEST(OutputFields, ParsedOrRefusedNeverIgnored) {
  EXPECT_TRUE(parse(R"({"prompt":"x"})").request.skip_special_tokens);  // vLLM's default
  EXPECT_FALSE(parse(R"({"prompt":"x","skip_special_tokens":false})").request.skip_special_tokens);
  EXPECT_EQ(param_of(R"({"prompt":"x","skip_special_tokens":1})"), "skip_special_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"x","spaces_between_special_tokens":false})"), "(accepted)");
  EXPECT_EQ(param_of(R"({"prompt":"x","spaces_between_special_tokens":"no"})"),
            "spaces_between_special_tokens");
  EXPECT_TRUE(parse(R"({"prompt":"x","return_tokens_as_token_ids":true})").tokens_as_ids);
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":1})"), "prompt_logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":null})"), "(accepted)");
  // echo + logprobs would owe the prompt tokens' logprobs (legacy completions): refused; either
  // alone, or with logprobs null, is accepted.
  EXPECT_EQ(param_of(R"({"prompt":"x","echo":true,"logprobs":1})"), "echo");
  EXPECT_EQ(param_of(R"({"prompt":"x","echo":true,"logprobs":0})"), "echo");
  EXPECT_EQ(param_of(R"({"prompt":"x","echo":true,"logprobs":null})"), "(accepted)");
  EXPECT_EQ(param_of(R"({"prompt":"x","echo":false,"logprobs":1})"), "(accepted)");
  EXPECT_EQ(param_of(R"({"prompt":"x","echo":true})"), "(accepted)");
  EXPECT_EQ(parse(R"({"prompt":"x","truncate_prompt_tokens":5})").request.truncate_prompt_tokens,
            5);
  EXPECT_EQ(parse(R"({"prompt":"x","truncate_prompt_tokens":-1})").request.truncate_prompt_tokens,
            256);  // -1: the context
  EXPECT_EQ(param_of(R"({"prompt":"x","truncate_prompt_tokens":0})"), "truncate_prompt_tokens");
  EXPECT_EQ(param_of(R"({"prompt":"x","truncate_prompt_tokens":257})"), "truncate_prompt_tokens");
  const auto chat = parse(
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],
          "echo":true,"skip_special_tokens":false})",
      Endpoint::kChat);
  EXPECT_TRUE(chat.echo);
  EXPECT_FALSE(chat.request.skip_special_tokens);
}

TEST(OutputFields, ChatEchoPrependsTheFinalAssistantMessage) {
  const auto pr = parse(
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}],
          "echo":true})",
      Endpoint::kChat);
  const auto meta = make_meta(pr, "chatcmpl-1", 0);
  EXPECT_EQ(meta.echo_text, "Hel");
  ResponseCollector col(meta, [](std::int32_t) { return std::string("x"); });
  StreamEvent ev;
  ev.text = "lo";
  ev.token_ids = {5};
  ev.finish = FinishReason::kStop;
  col.add(ev);
  EXPECT_EQ(json::parse(col.body()).at("choices").at(0).at("message").at("content"), "Hello");
  StreamShaper sh(meta, [](std::int32_t) { return std::string("x"); });
  EXPECT_NE(sh.begin().find(R"("content":"Hel")"), std::string::npos);
  // Not echoed when the last message is the user's.
  EXPECT_EQ(make_meta(parse(R"({"messages":[{"role":"user","content":"hi"}],"echo":true})",
                            Endpoint::kChat),
                      "chatcmpl-2", 0)
                .echo_text,
            "");
}

TEST(OutputFields, LogprobBytesAreTheTokensRealBytes) {
  // Token 226 of a byte-level vocabulary is the lone byte 0xE2 (the start of a 3-byte
  // sequence): its bytes are [226], its shown text U+FFFD.
  const TokenText bytes = [](std::int32_t id) {
    return id == 226 ? std::string("\xe2") : std::string("ok");
  };
  const std::vector<TokenLogprob> lps = {{226, -0.5f, {{226, -0.5f}, {7, -1.0f}}}};
  int offset = 0;
  auto v = logprobs_json(Endpoint::kChat, lps, bytes, &offset);
  const auto& e = v.at("content").at(0);
  EXPECT_EQ(e.at("bytes"), json::array({226}));
  EXPECT_EQ(e.at("token"), "\xef\xbf\xbd");
  EXPECT_EQ(e.at("top_logprobs").at(0).at("bytes"), json::array({226}));
  EXPECT_EQ(e.at("top_logprobs").at(1).at("bytes"), json::array({'o', 'k'}));
  // return_tokens_as_token_ids
  v = logprobs_json(Endpoint::kChat, lps, bytes, &offset, true);
  EXPECT_EQ(v.at("content").at(0).at("token"), "token_id:226");
  v = logprobs_json(Endpoint::kCompletions, lps, bytes, &offset, true);
  EXPECT_EQ(v.at("tokens").at(0), "token_id:226");
  EXPECT_TRUE(v.at("top_logprobs").at(0).as_object().contains("token_id:7"));
}

}  // namespace
}  // namespace strata::api
