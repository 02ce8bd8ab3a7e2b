// Batched completions prompts (OpenAI's `prompt: ["a", "b"]` or `[[ids], [ids]]`): one engine
// request per prompt, read as one stream. Choice j of prompt k is choice k * n + j (OpenAI's
// and vLLM's numbering); the parts are read in order (each part's events wait in its channel
// meanwhile), so a client sees prompt k's choices after prompt k - 1's; the usage of every part
// is summed onto the last event (token counts added, latencies their maximum).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/request.h"

namespace strata::api {

class BatchStream final : public TokenStream {
 public:
  // `parts[k]` streams prompt k's `n` choices.
  BatchStream(std::string id, std::vector<std::shared_ptr<TokenStream>> parts, int n);
  boost::asio::awaitable<std::optional<StreamEvent>> next() override;
  std::optional<StreamEvent> next_blocking() override;

 private:
  // Renumbers an event of the current part and folds its usage in (kept on the last part's).
  StreamEvent take(StreamEvent ev);
  std::vector<std::shared_ptr<TokenStream>> parts_;
  int n_ = 1;
  std::size_t at_ = 0;  // the part being read
  Usage usage_;
  int usage_parts_ = 0;
  double itl_weighted_ = 0.0, compression_sum_ = 0.0;
};

// Merges one part's usage into a batch's running total (exposed for tests).
void merge_usage(Usage& total, const Usage& part, int parts_before);

}  // namespace strata::api
