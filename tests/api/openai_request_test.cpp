#include "api/openai_request.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>

#include "api/openai_response.h"
#include "runtime/error.h"
#include "tests/api/request_test_util.h"

namespace strata::api {
namespace {

namespace json = boost::json;

ParseContext ctx() {
  ParseContext c = test::tiny_context();
  c.base_profile.enabled = true;
  c.base_profile.capacity = 64;
  c.base_profile.window = 8;
  c.base_profile.full_layers = 1;
  return c;
}

ParsedRequest parse(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return parse_openai_request(parse_json_body(body), e, ctx());
}

// Expects a 400 naming `param` whose message contains `needle`.
void expect_bad(const std::string& body, const std::string& param, const std::string& needle,
                Endpoint e = Endpoint::kCompletions, int status = 400) {
  try {
    parse(body, e);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status, status) << body;
    EXPECT_EQ(err.param, param) << body << " -> " << err.what();
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos)
        << body << " -> " << err.what();
  }
}

TEST(OpenAiRequest, CompletionWithEveryParameter) {
  const auto p = parse(R"({"model":"tiny","prompt":"hello","max_tokens":7,"temperature":0.5,
    "top_p":0.9,"top_k":40,"min_p":0.05,"seed":42,"stop":["\n","END"],"stop_token_ids":[3,4],
    "ignore_eos":true,"min_tokens":2,"n":3,"presence_penalty":0.5,"frequency_penalty":-0.5,
    "repetition_penalty":1.1,"logit_bias":{"17":5.5,"2":-100},"logprobs":2,"stream":true,
    "stream_options":{"include_usage":true},"kv_sparsity":{"capacity":32}})");
  const auto& r = p.request;
  ASSERT_TRUE(r.prompt_text);
  EXPECT_EQ(*r.prompt_text, "hello");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_FALSE(r.random_seed);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<std::int32_t>{3, 4}));
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.min_tokens, 2);
  EXPECT_EQ(r.n, 3);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  ASSERT_EQ(r.params.logit_bias.size(), 2u);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  ASSERT_TRUE(r.sparsity);
  EXPECT_EQ(r.sparsity->capacity, 32);
  EXPECT_EQ(r.sparsity->window, 8);  // merged over the served profile
  EXPECT_EQ(p.model, "tiny");
}

TEST(OpenAiRequest, DefaultsAndPromptForms) {
  auto p = parse(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(p.request.prompt_ids);
  EXPECT_EQ(*p.request.prompt_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(p.request.params.max_tokens, 16);
  EXPECT_TRUE(p.request.random_seed);
  EXPECT_EQ(p.request.params.logprobs, -1);
  EXPECT_EQ(p.model, "tiny");
  p = parse(R"({"prompt":["one"],"seed":null,"max_tokens":null})");
  EXPECT_EQ(*p.request.prompt_text, "one");
  p = parse(R"({"prompt":[[5,6]]})");
  EXPECT_EQ(*p.request.prompt_ids, (std::vector<std::int32_t>{5, 6}));
  p = parse(R"({"messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
      "max_completion_tokens":5,"logprobs":true,"top_logprobs":3})",
            Endpoint::kChat);
  ASSERT_TRUE(p.request.messages);
  ASSERT_EQ(p.request.messages->size(), 2u);
  EXPECT_EQ((*p.request.messages)[1].content, "hi there");
  EXPECT_EQ(p.request.params.max_tokens, 5);
  EXPECT_EQ(p.request.params.logprobs, 3);
  EXPECT_TRUE(p.chat_logprobs);
}

TEST(OpenAiRequest, RejectsBadInputNamingTheParameter) {
  expect_bad("{", "", "invalid JSON");
  expect_bad("[1]", "", "JSON object");
  expect_bad(R"({"max_tokens":3})", "prompt", "required");
  expect_bad(R"({"prompt":5})", "prompt", "must be a string");
  expect_bad(R"({"prompt":"x","max_tokens":"5"})", "max_tokens",
             "must be an integer, got a string");
  expect_bad(R"({"prompt":"x","max_tokens":-1})", "max_tokens", "got -1");
  expect_bad(R"({"prompt":"x","max_tokens":1000000})", "max_tokens", "context is 256 tokens");
  expect_bad(R"({"prompt":"x","max_tokens":2.5})", "max_tokens", "integer");
  expect_bad(R"({"prompt":[1,2,1000]})", "prompt", "token id 1000");
  expect_bad(R"({"prompt":[1,-2]})", "prompt", "token id -2");
  // Prompt + max_tokens against the context: the engine's check, one wording for ids and text
  // (tests/actors/engine_test.cpp).
  EXPECT_EQ(parse(R"({"prompt":[1,2],"max_tokens":255})").request.params.max_tokens, 255);
  expect_bad(R"({"prompt":"x","temperature":-0.1})", "temperature", "must be in");
  expect_bad(R"({"prompt":"x","top_p":0})", "top_p", "(0, 1]");
  expect_bad(R"({"prompt":"x","n":0})", "n", "[1, 16]");
  expect_bad(R"({"prompt":"x","n":true})", "n", "boolean");
  expect_bad(R"({"prompt":"x","logit_bias":{"abc":1}})", "logit_bias", "token ids");
  expect_bad(R"({"prompt":"x","logit_bias":{"5000":1}})", "logit_bias", "out of the vocabulary");
  expect_bad(R"({"prompt":"x","logit_bias":{"5":101}})", "logit_bias", "[-100, 100]");
  expect_bad(R"({"prompt":"x","logprobs":21})", "logprobs", "[0, 20]");
  expect_bad(R"({"prompt":"x","stop":[""]})", "stop", "empty");
  expect_bad(R"({"prompt":"x","stop_token_ids":[99999]})", "stop_token_ids", "vocabulary");
  expect_bad(R"({"prompt":"x","min_tokens":20})", "min_tokens", "at most max_tokens");
  expect_bad(R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
             "stream");
  expect_bad(R"({"prompt":"x","kv_sparsity":{"capacity":"big"}})", "kv_sparsity.capacity", "");
  expect_bad(R"({"prompt":"x","kv_sparsity":{"bogus":1}})", "kv_sparsity.bogus", "unknown key");
  expect_bad(R"({"prompt":["a",[1,2]]})", "prompt", "one kind");
  expect_bad(R"({"prompt":[[1,2],[]]})", "prompt", "must not be empty");
  expect_bad(R"({"prompt":[[1,2],[3,"x"]]})", "prompt", "one kind");
  expect_bad(R"({"prompt":[[1,2],[99999]]})", "prompt", "vocabulary");
  expect_bad(R"({"prompt":"x","model":"gpt-4"})", "model", "does not exist", Endpoint::kCompletions,
             404);
  expect_bad(R"({"messages":[]})", "messages", "must not be empty", Endpoint::kChat);
  expect_bad(R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", "wizard",
             Endpoint::kChat);
  expect_bad(R"({"messages":[{"role":"user"}]})", "messages[0].content", "required",
             Endpoint::kChat);
  expect_bad(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs",
             "logprobs", Endpoint::kChat);
  expect_bad(R"({"prompt":"x"})", "messages", "required", Endpoint::kChat);
}

// Fields that would change the output but are not implemented are refused by name rather
// than ignored; the values that ask for nothing pass.
TEST(OpenAiRequest, RefusesOutputChangingFieldsItDoesNotImplement) {
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  const std::string tool =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{}}}]})";
  expect_bad(chat + tool, "tools", "tool or function calling", Endpoint::kChat);
  expect_bad(chat + R"("functions":[{"name":"f"}]})", "functions", "not supported",
             Endpoint::kChat);
  expect_bad(chat + R"("tool_choice":"required"})", "tool_choice", "\"none\" or \"auto\"",
             Endpoint::kChat);
  expect_bad(chat + R"("tool_choice":{"type":"function","function":{"name":"f"}}})", "tool_choice",
             "not supported", Endpoint::kChat);
  expect_bad(chat + R"("response_format":{"type":"json_object"}})", "response_format",
             "structured output", Endpoint::kChat);
  expect_bad(chat + R"("response_format":"json"})", "response_format", "structured output",
             Endpoint::kChat);
  expect_bad(chat + R"("modalities":["text","audio"]})", "modalities", "only", Endpoint::kChat);
  expect_bad(chat + R"("audio":{"voice":"alloy","format":"wav"}})", "audio", "not implemented",
             Endpoint::kChat);
  expect_bad(chat + R"("prediction":{"type":"content","content":"x"}})", "prediction",
             "not implemented", Endpoint::kChat);
  expect_bad(R"({"prompt":"x","guided_json":{"type":"object"}})", "guided_json", "guided decoding");
  expect_bad(R"({"prompt":"x","guided_choice":["a","b"]})", "guided_choice", "guided decoding");
  expect_bad(R"({"prompt":"x","use_beam_search":true})", "use_beam_search", "beam search");
  expect_bad(R"({"prompt":"x","include_stop_str_in_output":true})", "include_stop_str_in_output",
             "never part of the returned text");
  // No-ops pass, and so do fields that change nothing here (null counts as absent).
  const auto ok = parse(chat + R"("tools":[],"tool_choice":"none","function_call":"auto",)" +
                            R"("response_format":{"type":"text"},"modalities":["text"],)" +
                            R"("parallel_tool_calls":false,"audio":null,"store":false,)" +
                            R"("metadata":{"k":"v"},"user":"u"})",
                        Endpoint::kChat);
  ASSERT_TRUE(ok.request.messages.has_value());
  EXPECT_EQ(ok.request.messages->size(), 1u);
  const auto c =
      parse(R"({"prompt":"x","use_beam_search":false,"include_stop_str_in_output":false})");
  EXPECT_EQ(c.request.prompt_text.value_or(""), "x");
}

TEST(OpenAiRequest, CacheSaltIsANonEmptyString) {
  EXPECT_EQ(parse(R"({"prompt":"x","cache_salt":"tenant-a"})").request.cache_salt, "tenant-a");
  EXPECT_EQ(parse(R"({"prompt":"x"})").request.cache_salt, "");
  expect_bad(R"({"prompt":"x","cache_salt":""})", "cache_salt", "non-empty");
  expect_bad(R"({"prompt":"x","cache_salt":7})", "cache_salt", "string");
  Usage u;
  u.prompt_tokens = 40;
  u.cached_tokens = 32;
  EXPECT_EQ(usage_json(u, false).at("prompt_tokens_details").at("cached_tokens").as_int64(), 32);
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(parse_json_body(R"({"prompt":"ab","add_special_tokens":false})"));
  EXPECT_EQ(t.prompt, "ab");
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_EQ(parse_detokenize_request(parse_json_body(R"({"tokens":[1,2]})"), 10),
            (std::vector<std::int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize_request(parse_json_body(R"({"tokens":[10]})"), 10), ApiError);
  EXPECT_THROW(parse_tokenize_request(parse_json_body(R"({"prompt":1})")), ApiError);
}

// ---- response shaping -----------------------------------------------------------------------

std::string tok(std::int32_t t) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "<%d>", t);
  return buf;
}

std::vector<json::value> events_of(const std::string& sse, bool* done) {
  std::vector<json::value> out;
  *done = false;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    const auto end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string line = sse.substr(pos, end - pos);
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    const std::string payload = line.substr(6);
    EXPECT_FALSE(*done) << "data after [DONE]";
    if (payload == "[DONE]")
      *done = true;
    else
      out.push_back(json::parse(payload));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiResponse, ChatStreamHasRoleChunkDeltasFinishPerChoiceUsageAndDone) {
  auto req = parse(R"({"messages":[{"role":"user","content":"x"}],"n":2,"stream":true,
      "stream_options":{"include_usage":true}})",
                   Endpoint::kChat);
  StreamShaper s(make_meta(req, "chatcmpl-1", 1700000000), tok);
  std::string sse = s.begin();
  StreamEvent a;
  a.index = 1;
  a.text = "He";
  a.token_ids = {5};
  sse += s.on_event(a);
  StreamEvent b;
  b.index = 0;
  b.text = "llo";
  b.token_ids = {6};
  b.finish = FinishReason::kLength;
  sse += s.on_event(b);
  StreamEvent c;
  c.index = 1;
  c.finish = FinishReason::kStop;
  c.usage = Usage{4, 2, 0, 0, 0, 0, 2.5};
  sse += s.on_event(c);
  sse += s.end();
  bool done = false;
  const auto ev = events_of(sse, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(ev.size(), 2u + 2u + 2u + 1u);  // roles, 2 deltas, 2 finishes, usage
  for (int i = 0; i < 2; ++i) {
    const auto& ch = ev[i].at("choices").at(0);
    EXPECT_EQ(ev[i].at("object"), "chat.completion.chunk");
    EXPECT_EQ(ch.at("index").as_int64(), i);
    EXPECT_EQ(ch.at("delta").at("role"), "assistant");
  }
  EXPECT_EQ(ev[2].at("choices").at(0).at("delta").at("content"), "He");
  EXPECT_EQ(ev[3].at("choices").at(0).at("delta").at("content"), "llo");
  EXPECT_EQ(ev[4].at("choices").at(0).at("finish_reason"), "length");
  EXPECT_EQ(ev[4].at("choices").at(0).at("index").as_int64(), 0);
  EXPECT_EQ(ev[5].at("choices").at(0).at("finish_reason"), "stop");
  EXPECT_TRUE(ev[6].at("choices").as_array().empty());
  EXPECT_EQ(ev[6].at("usage").at("total_tokens").as_int64(), 6);
  EXPECT_DOUBLE_EQ(ev[6].at("usage").at("strata").at("compression_ratio").as_double(), 2.5);
  EXPECT_EQ(ev[6].at("id"), "chatcmpl-1");
}

TEST(OpenAiResponse, CompletionLogprobsAndErrorAfterStart) {
  auto req = parse(R"({"prompt":"x","logprobs":1,"stream":true})");
  StreamShaper s(make_meta(req, "cmpl-1", 1), tok);
  EXPECT_EQ(s.begin(), "");
  StreamEvent a;
  a.text = "ab";
  a.token_ids = {1, 2};
  a.logprobs = {{1, -0.5f, {{1, -0.5f}}}, {2, -1.0f, {{3, -0.25f}}}};
  bool done = false;
  auto ev = events_of(s.on_event(a), &done);
  ASSERT_EQ(ev.size(), 1u);
  const auto& lp = ev[0].at("choices").at(0).at("logprobs");
  EXPECT_EQ(lp.at("tokens").at(1), "<2>");
  EXPECT_EQ(lp.at("text_offset").at(1).as_int64(), 3);  // "<1>" is 3 bytes
  EXPECT_DOUBLE_EQ(lp.at("top_logprobs").at(1).at("<3>").as_double(), -0.25);
  StreamEvent err;
  err.finish = FinishReason::kError;
  err.error = "device lost";
  ev = events_of(s.on_event(err), &done);
  EXPECT_TRUE(s.failed());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].at("error").at("message"), "device lost");
  EXPECT_EQ(
      sse_error(ApiError(500, "internal_error", "x")).find("data: [DONE]") != std::string::npos,
      true);
}

TEST(OpenAiResponse, NonStreamingChatCollectsChoices) {
  auto req = parse(R"({"messages":[{"role":"user","content":"x"}],"n":2})", Endpoint::kChat);
  ResponseCollector col(make_meta(req, "chatcmpl-2", 5), tok);
  StreamEvent a;
  a.index = 1;
  a.text = "B";
  a.token_ids = {1};
  a.finish = FinishReason::kStop;
  col.add(a);
  StreamEvent b;
  b.index = 0;
  b.text = "A";
  b.token_ids = {2};
  b.finish = FinishReason::kLength;
  b.usage = Usage{3, 2};
  col.add(b);
  const auto r = json::parse(col.body());
  EXPECT_EQ(r.at("object"), "chat.completion");
  EXPECT_EQ(r.at("choices").at(0).at("message").at("content"), "A");
  EXPECT_EQ(r.at("choices").at(0).at("finish_reason"), "length");
  EXPECT_EQ(r.at("choices").at(1).at("message").at("content"), "B");
  EXPECT_EQ(r.at("usage").at("completion_tokens").as_int64(), 2);
  StreamEvent e;
  e.finish = FinishReason::kError;
  EXPECT_THROW(col.add(e), ApiError);
}

TEST(ApiErrors, MapsEngineExceptions) {
  auto m = [](auto ex) { return to_api_error(std::make_exception_ptr(ex)); };
  EXPECT_EQ(m(Overloaded("queue full")).status, 429);
  auto e = m(InvalidRequest("prompt", "prompt is 300 tokens, over the context of 256"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(m(std::runtime_error("boom")).status, 500);
  const auto body = json::parse(error_json(ApiError(401, "authentication_error", "no key")));
  EXPECT_EQ(body.at("error").at("type"), "authentication_error");
  EXPECT_TRUE(body.at("error").at("param").is_null());
}

}  // namespace
}  // namespace strata::api
