#include "api/batch_stream.h"

#include <algorithm>

namespace strata::api {

void merge_usage(Usage& t, const Usage& u, int parts_before) {
  if (parts_before == 0) {
    t = u;
    return;
  }
  t.prompt_tokens += u.prompt_tokens;
  t.completion_tokens += u.completion_tokens;
  t.cached_tokens += u.cached_tokens;
  t.queue_ms = std::max(t.queue_ms, u.queue_ms);
  t.ttft_ms = std::max(t.ttft_ms, u.ttft_ms);
  t.e2e_ms = std::max(t.e2e_ms, u.e2e_ms);
  t.prefill_ms = std::max(t.prefill_ms, u.prefill_ms);
  t.decode_ms = std::max(t.decode_ms, u.decode_ms);
  t.inference_ms = std::max(t.inference_ms, u.inference_ms);
  t.max_tokens = std::max(t.max_tokens, u.max_tokens);
}

BatchStream::BatchStream(std::string id, std::vector<std::shared_ptr<TokenStream>> parts, int n)
    : parts_(std::move(parts)), n_(n) {
  id_ = std::move(id);
  for (const auto& p : parts_) prompt_tokens_ += p->prompt_tokens();
}

StreamEvent BatchStream::take(StreamEvent ev) {
  ev.index += static_cast<int>(at_) * n_;
  if (ev.usage) {
    const Usage& u = *ev.usage;
    merge_usage(usage_, u, usage_parts_);
    // Mean inter-token latency over every generated token; compression the parts' mean.
    itl_weighted_ += u.mean_itl_ms * u.completion_tokens;
    compression_sum_ += u.compression_ratio;
    ++usage_parts_;
    usage_.mean_itl_ms =
        usage_.completion_tokens > 0 ? itl_weighted_ / usage_.completion_tokens : 0.0;
    usage_.compression_ratio = compression_sum_ / usage_parts_;
    if (at_ + 1 < parts_.size())
      ev.usage.reset();
    else
      ev.usage = usage_;
  }
  return ev;
}

boost::asio::awaitable<std::optional<StreamEvent>> BatchStream::next() {
  while (at_ < parts_.size()) {
    auto ev = co_await parts_[at_]->next();
    if (ev) co_return take(std::move(*ev));
    ++at_;
  }
  co_return std::nullopt;
}

std::optional<StreamEvent> BatchStream::next_blocking() {
  while (at_ < parts_.size()) {
    auto ev = parts_[at_]->next_blocking();
    if (ev) return take(std::move(*ev));
    ++at_;
  }
  return std::nullopt;
}

}  // namespace strata::api
