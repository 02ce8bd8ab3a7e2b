// vLLM's output fields (issue 16 items 8 and 10): skip_special_tokens, echo for chat and
// token-id prompts, return_tokens_as_token_ids, truncate_prompt_tokens, prompt logprobs (vLLM's
// prompt_logprobs field and the legacy API's echo with logprobs), and logprob `bytes` of tokens
// that are part of a UTF-8 sequence.
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
  // Prompt logprobs: vLLM's prompt_logprobs field (0 .. max_logprobs alternatives), and the
  // legacy API's echo + logprobs (the prompt's entries head the choice's logprobs).
  EXPECT_EQ(parse(R"({"prompt":"x","prompt_logprobs":1})").request.prompt_logprobs, 1);
  EXPECT_TRUE(parse(R"({"prompt":"x","prompt_logprobs":0})").prompt_logprobs_field);
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":true})"), "prompt_logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":-1})"), "prompt_logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":"2"})"), "prompt_logprobs");
  EXPECT_EQ(param_of(R"({"prompt":"x","prompt_logprobs":1000})"), "prompt_logprobs");
  EXPECT_EQ(parse(R"({"prompt":"x","prompt_logprobs":null})").request.prompt_logprobs, -1);
  EXPECT_EQ(
      parse(R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":2})", Endpoint::kChat)
          .request.prompt_logprobs,
      2);
  EXPECT_EQ(parse(R"({"prompt":"x","echo":true,"logprobs":1})").request.prompt_logprobs, 1);
  EXPECT_TRUE(parse(R"({"prompt":"x","echo":true,"logprobs":0})").echo_logprobs);
  EXPECT_EQ(parse(R"({"prompt":"x","echo":true,"logprobs":0,"prompt_logprobs":3})")
                .request.prompt_logprobs,
            3);  // both: the larger count serves both shapes
  EXPECT_FALSE(parse(R"({"prompt":"x","echo":true,"logprobs":null})").echo_logprobs);
  EXPECT_EQ(parse(R"({"prompt":"x","echo":true,"logprobs":null})").request.prompt_logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt":"x","echo":false,"logprobs":1})").request.prompt_logprobs, -1);
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

// Prompt logprobs as the engine sends them: one event per choice before its tokens, entry 0 the
// first prompt token alone.
StreamEvent prompt_event(int index = 0) {
  StreamEvent ev;
  ev.index = index;
  TokenLogprob first;
  first.token = 10;
  TokenLogprob second;
  second.token = 11;
  second.logprob = -0.5f;
  second.rank = 2;
  second.top = {{12, -0.25f}};
  ev.prompt_logprobs = {first, second};
  return ev;
}
StreamEvent token_event() {
  StreamEvent ev;
  ev.text = "c";
  ev.token_ids = {13};
  ev.logprobs = {{13, -0.125f, {{13, -0.125f}}}};
  ev.finish = FinishReason::kLength;
  return ev;
}
// The JSON of an SSE text's first event.
json::value first_data(const std::string& sse) {
  return json::parse(sse.substr(6, sse.find("\n\n") - 6));
}
const TokenText kNames = [](std::int32_t id) { return "t" + std::to_string(id); };

TEST(OutputFields, EchoWithLogprobsPutsThePromptsEntriesFirst) {
  const auto meta = make_meta(parse(R"({"prompt":"ab","echo":true,"logprobs":1})"), "cmpl-1", 0);
  EXPECT_TRUE(meta.echo_logprobs);
  ResponseCollector col(meta, kNames);
  col.add(prompt_event());
  col.add(token_event());
  const auto body = json::parse(col.body());
  const auto& ch = body.at("choices").at(0);
  EXPECT_EQ(ch.at("text"), "abc");
  const auto& lp = ch.at("logprobs");
  EXPECT_EQ(lp.at("tokens"), json::parse(R"(["t10","t11","t13"])"));
  EXPECT_EQ(lp.at("token_logprobs"), json::parse(R"([null,-0.5,-0.125])"));
  // The prompt token is among its own alternatives (OpenAI's legacy API, vLLM).
  EXPECT_EQ(lp.at("top_logprobs"),
            json::parse(R"([null,{"t12":-0.25,"t11":-0.5},{"t13":-0.125}])"));
  EXPECT_EQ(lp.at("text_offset"), json::parse("[0,3,6]"));
  EXPECT_FALSE(ch.as_object().contains("prompt_logprobs"));

  // Streaming: no echo chunk up front; the echo comes with the prompt's entries, and the
  // generated tokens' offsets go on from them.
  StreamShaper sh(meta, kNames);
  EXPECT_EQ(sh.begin(), "");
  const std::string first = sh.on_event(prompt_event());
  const auto c1 = first_data(first);
  EXPECT_EQ(c1.at("choices").at(0).at("text"), "ab");
  EXPECT_EQ(c1.at("choices").at(0).at("logprobs").at("token_logprobs"), json::parse("[null,-0.5]"));
  const std::string second = sh.on_event(token_event());
  const auto c2 = first_data(second);
  EXPECT_EQ(c2.at("choices").at(0).at("logprobs").at("text_offset"), json::parse("[6]"));
}

TEST(OutputFields, PromptLogprobsFieldHasRanksAndDecodedTokens) {
  const auto meta = make_meta(parse(R"({"prompt":"ab","prompt_logprobs":1})"), "cmpl-1", 0);
  ResponseCollector col(meta, kNames);
  col.add(prompt_event());
  col.add(token_event());
  const auto body = json::parse(col.body());
  const auto& ch = body.at("choices").at(0);
  EXPECT_EQ(ch.at("text"), "c");
  EXPECT_TRUE(ch.at("logprobs").is_null());
  EXPECT_EQ(ch.at("prompt_logprobs"), json::parse(R"([null,{
      "12":{"logprob":-0.25,"rank":1,"decoded_token":"t12"},
      "11":{"logprob":-0.5,"rank":2,"decoded_token":"t11"}}])"));
  // Streaming: a chunk of its own for the choice.
  StreamShaper sh(meta, kNames);
  const std::string out = sh.on_event(prompt_event());
  const auto c = first_data(out);
  EXPECT_EQ(c.at("choices").at(0).at("text"), "");
  EXPECT_EQ(c.at("choices").at(0).at("prompt_logprobs").at(1).at("11").at("rank"), 2);

  // Chat: on the response, once (vLLM).
  const auto chat_meta =
      make_meta(parse(R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":1,"n":2})",
                      Endpoint::kChat),
                "chatcmpl-1", 0);
  ResponseCollector chat(chat_meta, kNames);
  for (int i = 0; i < 2; ++i) {
    chat.add(prompt_event(i));
    StreamEvent t = token_event();
    t.index = i;
    chat.add(t);
  }
  const auto cb = json::parse(chat.body());
  EXPECT_EQ(cb.at("prompt_logprobs").at(1).at("12").at("logprob"), -0.25);
  EXPECT_FALSE(cb.at("choices").at(0).as_object().contains("prompt_logprobs"));
  StreamShaper csh(chat_meta, kNames);
  const std::string c0 = csh.on_event(prompt_event(0));
  EXPECT_NE(c0.find(R"("choices":[],"prompt_logprobs":[null,)"), std::string::npos) << c0;
  EXPECT_EQ(csh.on_event(prompt_event(1)), "");  // (once)
}

// Batched prompts: the first is the request's own, the others follow; choices are numbered
// prompt-major and each prompt keeps its own echo.
TEST(OutputFields, BatchedPromptsParseInOrderAndEchoPerPrompt) {
  const auto pr = parse(R"({"prompt":["ab","cd","ef"],"n":2,"echo":true})");
  EXPECT_EQ(*pr.request.prompt_text, "ab");
  ASSERT_EQ(pr.more_prompts.size(), 2u);
  EXPECT_EQ(*pr.more_prompts[0].text, "cd");
  EXPECT_EQ(*pr.more_prompts[1].text, "ef");
  const auto ids = parse(R"({"prompt":[[1,2],[3],[4,5,6]]})");
  EXPECT_EQ(*ids.request.prompt_ids, (std::vector<std::int32_t>{1, 2}));
  ASSERT_EQ(ids.more_prompts.size(), 2u);
  EXPECT_EQ(*ids.more_prompts[1].ids, (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_TRUE(parse(R"({"prompt":["one"]})").more_prompts.empty());  // a batch of one
  std::string big = R"({"prompt":[)";
  for (int i = 0; i <= kMaxBatchPrompts; ++i) big += (i ? ",\"x\"" : "\"x\"");
  EXPECT_EQ(param_of(big + "]}"), "prompt");

  const auto meta = make_meta(pr, "cmpl-1", 0);
  EXPECT_EQ(meta.n, 6);
  EXPECT_EQ(meta.echo(0), "ab");
  EXPECT_EQ(meta.echo(3), "cd");
  EXPECT_EQ(meta.echo(5), "ef");
  ResponseCollector col(meta, kNames);
  for (int i = 0; i < 6; ++i) {
    StreamEvent ev = token_event();
    ev.index = i;
    col.add(ev);
  }
  const auto body = json::parse(col.body());
  EXPECT_EQ(body.at("choices").at(4).at("text"), "efc");
  EXPECT_EQ(body.at("choices").at(2).at("index"), 2);
  StreamShaper sh(meta, kNames);
  const std::string begin = sh.begin();
  EXPECT_NE(begin.find(R"("index":3,"text":"cd")"), std::string::npos) << begin;
}

}  // namespace
}  // namespace strata::api
