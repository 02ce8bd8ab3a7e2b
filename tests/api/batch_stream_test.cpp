// BatchStream (api/batch_stream.h): the parts of a batched completions request read as one
// stream — choices renumbered prompt-major, every part's events in order, one usage on the last
// event summing the parts'.
#include "api/batch_stream.h"

#include <gtest/gtest.h>

#include <deque>

namespace strata::api {
namespace {

class Scripted final : public TokenStream {
 public:
  Scripted(int prompt_tokens, std::deque<StreamEvent> evs) : evs_(std::move(evs)) {
    prompt_tokens_ = prompt_tokens;
  }
  boost::asio::awaitable<std::optional<StreamEvent>> next() override { co_return next_blocking(); }
  std::optional<StreamEvent> next_blocking() override {
    if (evs_.empty()) return std::nullopt;
    StreamEvent e = std::move(evs_.front());
    evs_.pop_front();
    return e;
  }

 private:
  std::deque<StreamEvent> evs_;
};

StreamEvent ev(int index, std::int32_t token, bool last = false, int prompt = 0, int completion = 0,
               double e2e = 0) {
  StreamEvent e;
  e.index = index;
  e.token_ids = {token};
  if (last) {
    e.finish = FinishReason::kLength;
    Usage u;
    u.prompt_tokens = prompt;
    u.completion_tokens = completion;
    u.e2e_ms = e2e;
    u.mean_itl_ms = e2e / completion;
    u.cached_tokens = 16;
    e.usage = u;
  }
  return e;
}

TEST(BatchStream, RenumbersChoicesAndSumsUsageOntoTheLastEvent) {
  std::vector<std::shared_ptr<TokenStream>> parts;
  // Two prompts, n = 2: each part's choices 0 and 1.
  parts.push_back(std::make_shared<Scripted>(
      5, std::deque<StreamEvent>{ev(0, 1), ev(1, 2), ev(0, 3, false), ev(1, 4, true, 5, 4, 10)}));
  parts.push_back(std::make_shared<Scripted>(
      7, std::deque<StreamEvent>{ev(1, 5), ev(0, 6, false), ev(0, 7), ev(1, 8, true, 7, 4, 30)}));
  BatchStream b("cmpl-9", std::move(parts), 2);
  EXPECT_EQ(b.id(), "cmpl-9");
  EXPECT_EQ(b.prompt_tokens(), 12);
  std::vector<int> index;
  std::vector<std::int32_t> tokens;
  std::vector<Usage> usages;
  while (auto e = b.next_blocking()) {
    index.push_back(e->index);
    tokens.push_back(e->token_ids.at(0));
    if (e->usage) usages.push_back(*e->usage);
  }
  EXPECT_EQ(index, (std::vector<int>{0, 1, 0, 1, 3, 2, 2, 3}));
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  ASSERT_EQ(usages.size(), 1u);  // only on the very last event
  EXPECT_EQ(usages[0].prompt_tokens, 12);
  EXPECT_EQ(usages[0].completion_tokens, 8);
  EXPECT_EQ(usages[0].cached_tokens, 32);
  EXPECT_DOUBLE_EQ(usages[0].e2e_ms, 30.0);                    // the slowest part
  EXPECT_DOUBLE_EQ(usages[0].mean_itl_ms, (10.0 + 30.0) / 8);  // over every token
}

}  // namespace
}  // namespace strata::api
