#include "actors/intake_actor.h"

#include <algorithm>
#include <random>

#include "actors/prompt.h"
#include "runtime/error.h"
#include "runtime/sampler.h"

namespace strata::actors {

std::shared_ptr<PreparedRequest> IntakeActor::prepare(Request r) const {
  auto out = std::make_shared<PreparedRequest>();
  out->arrival = Clock::now();
  const bool chat = r.messages.has_value();
  PromptInput in;
  in.text = std::move(r.prompt_text);
  in.ids = std::move(r.prompt_ids);
  in.messages = std::move(r.messages);
  in.chat = std::move(r.chat);
  out->prompt = assemble_prompt(std::move(in), *s_.tokenizer, s_.chat.get());
  if (out->prompt.empty()) throw InvalidRequest("prompt", "the prompt is empty");
  if (r.truncate_prompt_tokens) {  // the last N tokens, as vLLM
    const auto keep = static_cast<std::size_t>(std::max(*r.truncate_prompt_tokens, 1));
    if (out->prompt.size() > keep)
      out->prompt.erase(out->prompt.begin(), out->prompt.end() - static_cast<std::ptrdiff_t>(keep));
  }
  const int vocab = s_.model.vocab_size;
  for (const auto id : out->prompt) {
    if (id < 0 || id >= vocab) {
      throw InvalidRequest("prompt", "token id " + std::to_string(id) +
                                         " is outside the vocabulary [0, " + std::to_string(vocab) +
                                         ")");
    }
  }
  if (r.n < 1 || r.n > s_.max_n) {
    throw InvalidRequest(
        "n", "n must be in [1, " + std::to_string(s_.max_n) + "], got " + std::to_string(r.n));
  }
  auto& p = r.params;
  if (p.max_tokens < 0) {
    throw InvalidRequest("max_tokens",
                         "max_tokens must be at least 1, got " + std::to_string(p.max_tokens));
  }
  validate_sampling_params(p, vocab);
  for (const auto& s : p.stop) {
    if (s.empty()) throw InvalidRequest("stop", "stop strings must not be empty");
  }
  // One wording for text, token-id and chat prompts. A prompt that alone fills the context
  // is the prompt's fault; one that leaves too little for max_tokens is max_tokens'.
  const std::int64_t prompt_len = static_cast<std::int64_t>(out->prompt.size());
  const std::string limit =
      "This model's maximum context length is " + std::to_string(s_.max_model_len) + " tokens";
  if (prompt_len >= s_.max_model_len) {
    const char* what = chat ? "messages" : "prompt";
    throw InvalidRequest(what, limit + ". However, the " + std::string(what) + " take" +
                                   (chat ? "" : "s") + " " + std::to_string(prompt_len) +
                                   " tokens, which leaves none for the completion. Please "
                                   "reduce the length of the " +
                                   what + ".");
  }
  if (p.max_tokens == 0) p.max_tokens = static_cast<int>(s_.max_model_len - prompt_len);
  if (prompt_len + p.max_tokens > s_.max_model_len) {
    throw InvalidRequest("max_tokens",
                         limit + ". However, you requested " +
                             std::to_string(prompt_len + p.max_tokens) + " tokens (" +
                             std::to_string(prompt_len) + " in the prompt, " +
                             std::to_string(p.max_tokens) +
                             " in the completion). Please reduce the length of the prompt or "
                             "completion.");
  }
  if (p.min_tokens > p.max_tokens) p.min_tokens = p.max_tokens;
  if (r.sparsity) {
    try {
      r.sparsity->resolve(s_.model.num_hidden_layers);
    } catch (const ConfigError& e) {
      // The profile checks name "sparsity.<field>"; the request's field is kv_sparsity.<field>.
      const bool ours = e.key().rfind("sparsity.", 0) == 0;
      throw InvalidRequest(ours ? "kv_" + e.key() : "kv_sparsity",
                           ours ? "kv_" + std::string(e.what()) : std::string(e.what()));
    }
  }
  if (r.random_seed) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    p.seed = rng();
  }
  out->id = r.id.empty() ? "cmpl-" + std::to_string(next_id_.fetch_add(1)) : std::move(r.id);
  out->params = std::move(p);
  out->n = r.n;
  out->sparsity = std::move(r.sparsity);
  out->cache_salt = std::move(r.cache_salt);
  out->skip_special_tokens = r.skip_special_tokens;
  if (r.prompt_logprobs < -1)
    throw InvalidRequest("prompt_logprobs", "prompt_logprobs must be >= 0 when given");
  out->prompt_logprobs = r.prompt_logprobs;
  if (r.deadline) {
    out->deadline = r.deadline;
  } else if (s_.request_timeout_s > 0) {
    out->deadline = out->arrival + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(s_.request_timeout_s));
  }
  return out;
}

}  // namespace strata::actors
