// assemble_prompt (actors/prompt.h), the one prompt assembly of intake and /tokenize, on the tiny
// model's tokenizer and chat template: each form, the add_special_tokens switch, the errors.
#include "actors/prompt.h"

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "tests/actors/engine_fixture.h"

namespace strata {
namespace {

class PromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = test::tiny_model_dir();
    tok_ = Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
    chat_ = ChatTemplate::load(dir + "/tokenizer_config.json", "auto");
    ASSERT_TRUE(chat_->available());
  }
  std::vector<std::int32_t> text(const std::string& t, bool special = true) {
    PromptInput in;
    in.text = t;
    in.add_special_tokens = special;
    return assemble_prompt(std::move(in), *tok_, chat_.get());
  }
  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const ChatTemplate> chat_;
};

std::string param_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidRequest& e) {
    return e.param();
  }
  return "(no InvalidRequest)";
}

TEST_F(PromptTest, TextIsTheTokenizersBosThenTheEncoding) {
  std::vector<std::int32_t> want;
  if (tok_->adds_bos() && tok_->bos_id()) want.push_back(*tok_->bos_id());
  const auto enc = tok_->encode("Hello world");
  want.insert(want.end(), enc.begin(), enc.end());
  EXPECT_EQ(text("Hello world"), want);
  // Without special tokens: no BOS, and special-token text is plain text.
  EXPECT_EQ(text("Hello world", false), tok_->encode("Hello world", false));
  EXPECT_NE(text("<|eot_id|>", false), text("<|eot_id|>"));
}

TEST_F(PromptTest, IdsAreUsedVerbatim) {
  PromptInput in;
  in.ids = std::vector<std::int32_t>{5, 4, 3, 99999};  // the vocabulary is intake's business
  EXPECT_EQ(assemble_prompt(std::move(in), *tok_, chat_.get()),
            (std::vector<std::int32_t>{5, 4, 3, 99999}));
}

TEST_F(PromptTest, MessagesAreTheChatTemplatesRenderingEncoded) {
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  for (const bool gen : {true, false}) {
    ChatOptions o;
    o.add_generation_prompt = gen;
    PromptInput in;
    in.messages = m;
    in.chat = o;
    in.add_special_tokens = false;  // text only: the template decides the special tokens
    EXPECT_EQ(assemble_prompt(std::move(in), *tok_, chat_.get()),
              chat_prompt_ids(*chat_, *tok_, m, o));
  }
}

TEST_F(PromptTest, ErrorsNameTheField) {
  EXPECT_EQ(param_of([&] { assemble_prompt(PromptInput{}, *tok_, chat_.get()); }), "prompt");
  EXPECT_EQ(param_of([&] {
              PromptInput in;
              in.text = "a";
              in.ids = std::vector<std::int32_t>{1};
              assemble_prompt(std::move(in), *tok_, chat_.get());
            }),
            "prompt");
  EXPECT_EQ(param_of([&] {
              PromptInput in;
              in.messages = std::vector<ChatMessage>{{"user", "Hi"}};
              assemble_prompt(std::move(in), *tok_, nullptr);  // an engine without a template
            }),
            "messages");
  EXPECT_EQ(param_of([&] {
              PromptInput in;
              in.messages = std::vector<ChatMessage>{};
              assemble_prompt(std::move(in), *tok_, chat_.get());
            }),
            "messages");
}

}  // namespace
}  // namespace strata
