// The chat template fields of chat and /tokenize requests (api/openai_request.h,
// parse_chat_options): vLLM's names and defaults, a 400 naming the field for a bad value.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "api/openai_request.h"
#include "tests/api/request_test_util.h"

namespace strata::api {
namespace {

namespace json = boost::json;

ParseContext ctx() {
  ParseContext c = test::tiny_context();
  return c;
}

const char* kMessages = R"("messages": [{"role": "user", "content": "hi"}])";

ChatOptions chat(const std::string& fields) {
  const std::string body =
      std::string("{") + kMessages + (fields.empty() ? "" : ", ") + fields + "}";
  return parse_openai_request(parse_json_body(body), Endpoint::kChat, ctx()).request.chat;
}

ChatOptions tokenize(const std::string& fields) {
  const std::string body =
      std::string("{") + kMessages + (fields.empty() ? "" : ", ") + fields + "}";
  return parse_tokenize_request(parse_json_body(body)).chat;
}

// Both endpoints refuse `fields` with a 400 naming `param`.
void expect_bad(const std::string& fields, const std::string& param, const std::string& needle) {
  for (int endpoint = 0; endpoint < 2; ++endpoint) {
    try {
      endpoint == 0 ? chat(fields) : tokenize(fields);
      ADD_FAILURE() << "accepted: " << fields;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << fields;
      EXPECT_EQ(e.param, param) << fields << " -> " << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(ChatOptions, DefaultsAreVllms) {
  for (const ChatOptions& c : {chat(""), tokenize("")}) {
    EXPECT_TRUE(c.add_generation_prompt);
    EXPECT_FALSE(c.continue_final_message);
    EXPECT_FALSE(c.request_template);
    EXPECT_TRUE(c.kwargs.empty());
  }
}

TEST(ChatOptions, FieldsAreRead) {
  for (const ChatOptions& c :
       {chat(R"("add_generation_prompt": false, "continue_final_message": true,
                "chat_template": "{{ messages[0].content }}",
                "chat_template_kwargs": {"enable_thinking": false, "date_string": "x"})"),
        tokenize(R"("add_generation_prompt": false, "continue_final_message": true,
                    "chat_template": "{{ messages[0].content }}",
                    "chat_template_kwargs": {"enable_thinking": false, "date_string": "x"})")}) {
    EXPECT_FALSE(c.add_generation_prompt);
    EXPECT_TRUE(c.continue_final_message);
    ASSERT_TRUE(c.request_template);
    EXPECT_EQ(
        c.request_template->render(json::parse(R"({"messages": [{"content": "m"}]})").as_object()),
        "m");
    EXPECT_EQ(c.kwargs.at("enable_thinking"), false);
    EXPECT_EQ(c.kwargs.at("date_string"), "x");
  }
  EXPECT_FALSE(chat(R"("chat_template": null, "chat_template_kwargs": null)").request_template);
}

TEST(ChatOptions, BadValuesAre400sNamingTheField) {
  expect_bad(R"("continue_final_message": true)", "continue_final_message",
             "add_generation_prompt");
  expect_bad(R"("continue_final_message": true, "add_generation_prompt": true)",
             "continue_final_message", "cannot be combined");
  expect_bad(R"("add_generation_prompt": 1)", "add_generation_prompt", "boolean");
  expect_bad(R"("continue_final_message": "yes")", "continue_final_message", "boolean");
  expect_bad(R"("chat_template": 3)", "chat_template", "string");
  expect_bad(R"("chat_template": "a\n{% for m in messages %}")", "chat_template", "line 2");
  expect_bad(R"("chat_template": "{{ x | wordwrap }}")", "chat_template",
             "line 1: unsupported filter 'wordwrap'");
  expect_bad(R"("chat_template": "{% include 'x' %}")", "chat_template", "unsupported tag");
  expect_bad(R"("chat_template_kwargs": "x")", "chat_template_kwargs", "object");
  expect_bad(R"("chat_template_kwargs": {"messages": []})", "chat_template_kwargs", "messages");
}

TEST(ChatOptions, CompletionsIgnoreThem) {
  const auto r = parse_openai_request(
      parse_json_body(R"({"prompt": "x", "chat_template": 3, "continue_final_message": true})"),
      Endpoint::kCompletions, ctx());
  EXPECT_TRUE(r.request.chat.add_generation_prompt);
}

}  // namespace
}  // namespace strata::api
