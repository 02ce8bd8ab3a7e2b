#include "api/openai_response.h"

#include <boost/json.hpp>

#include "runtime/text/unicode.h"

namespace strata::api {

namespace json = boost::json;

namespace {

json::array bytes_of(const std::string& s) {
  json::array a;
  for (unsigned char c : s) a.push_back(static_cast<std::int64_t>(c));
  return a;
}

// Usage counts when the engine sent none (a failed stream): what the shaper saw.
Usage counted_usage(int prompt_tokens, const std::vector<int>& tokens) {
  Usage u;
  u.prompt_tokens = prompt_tokens;
  for (int t : tokens) u.completion_tokens += t;
  return u;
}

}  // namespace

ResponseMeta make_meta(const ParsedRequest& req, const std::string& id, std::int64_t created) {
  ResponseMeta m;
  m.id = id;
  m.model = req.model;
  m.created = created;
  m.endpoint = req.endpoint;
  m.n = req.request.n;
  m.include_usage = req.include_usage;
  m.continuous_usage = req.continuous_usage;
  m.logprobs = req.request.params.logprobs >= 0;
  m.tokens_as_ids = req.tokens_as_ids;
  m.echo_logprobs = req.echo_logprobs;
  m.prompt_logprobs_field = req.prompt_logprobs_field;
  if (req.echo && req.request.prompt_text) m.echo_text = *req.request.prompt_text;
  // A batch: n choices per prompt; each prompt's echo (token-id prompts: filled in by the
  // handler, which has the tokenizer).
  m.n_per_prompt = req.request.n;
  if (!req.more_prompts.empty()) {
    m.n = req.request.n * (1 + static_cast<int>(req.more_prompts.size()));
    if (req.echo) {
      m.echo_texts.push_back(m.echo_text);
      for (const auto& f : req.more_prompts) m.echo_texts.push_back(f.text.value_or(""));
    }
  }
  // Chat echo (vLLM): the reply continues the final message when it is the assistant's.
  if (req.echo && req.request.messages && !req.request.messages->empty() &&
      req.request.messages->back().role == "assistant")
    m.echo_text = req.request.messages->back().content;
  return m;
}

const char* finish_reason_name(FinishReason r) {
  // OpenAI's field is null/absent while a choice runs; the names are the engine's.
  return r == FinishReason::kNone ? "" : to_string(r);
}

std::string sse_data(const std::string& payload) {
  return "data: " + payload + "\n\n";
}

std::string sse_error(const ApiError& e) {
  return sse_data(error_json(e)) + sse_data("[DONE]");
}

json::object usage_json(const Usage& u, bool extended) {
  json::object o;
  o["prompt_tokens"] = u.prompt_tokens;
  o["completion_tokens"] = u.completion_tokens;
  o["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  // OpenAI's cached prompt tokens (the prefix cache's hit, a multiple of 16).
  o["prompt_tokens_details"] = json::object{{"cached_tokens", u.cached_tokens}};
  if (extended) {
    json::object s;
    s["queue_ms"] = u.queue_ms;
    s["ttft_ms"] = u.ttft_ms;
    s["e2e_ms"] = u.e2e_ms;
    s["mean_itl_ms"] = u.mean_itl_ms;
    s["compression_ratio"] = u.compression_ratio;
    o["strata"] = std::move(s);
  }
  return o;
}

json::value logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& lps,
                          const TokenText& token_bytes, int* text_offset, bool tokens_as_ids) {
  // The shown token: "token_id:N" (return_tokens_as_token_ids) or its bytes as valid UTF-8.
  auto shown = [&](std::int32_t id, const std::string& raw) {
    return tokens_as_ids ? "token_id:" + std::to_string(id) : unicode::lossy_utf8(raw);
  };
  auto bytes = [&](std::int32_t id, const std::string& raw) {
    return bytes_of(tokens_as_ids ? shown(id, raw) : raw);
  };
  if (endpoint == Endpoint::kChat) {
    json::array content;
    for (const auto& lp : lps) {
      const std::string raw = token_bytes(lp.token);
      json::object e;
      e["token"] = shown(lp.token, raw);
      e["logprob"] = lp.logprob;
      e["bytes"] = bytes(lp.token, raw);
      json::array top;
      for (const auto& t : lp.top) {
        const std::string tr = token_bytes(t.token);
        json::object a;
        a["token"] = shown(t.token, tr);
        a["logprob"] = t.logprob;
        a["bytes"] = bytes(t.token, tr);
        top.push_back(std::move(a));
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    json::object o;
    o["content"] = std::move(content);
    return o;
  }
  CompletionLogprobs c;
  append_completion_logprobs(c, lps, token_bytes, text_offset, tokens_as_ids, false);
  return c.json();
}

void append_completion_logprobs(CompletionLogprobs& c, const std::vector<TokenLogprob>& lps,
                                const TokenText& token_bytes, int* text_offset, bool tokens_as_ids,
                                bool prompt) {
  auto token_text = [&](std::int32_t id) {
    return tokens_as_ids ? "token_id:" + std::to_string(id) : unicode::lossy_utf8(token_bytes(id));
  };
  for (std::size_t i = 0; i < lps.size(); ++i) {
    const auto& lp = lps[i];
    const std::string tok = token_text(lp.token);
    c.tokens.push_back(json::value(tok));
    c.offsets.push_back(*text_offset);
    *text_offset += static_cast<int>(tok.size());
    if (prompt && i == 0) {  // the first prompt token: nothing precedes it
      c.token_logprobs.push_back(nullptr);
      c.top_logprobs.push_back(nullptr);
      continue;
    }
    c.token_logprobs.push_back(lp.logprob);
    json::object top;
    for (const auto& t : lp.top) top[token_text(t.token)] = t.logprob;
    // A prompt token is listed among its alternatives as OpenAI's legacy API and vLLM do.
    if (prompt) top[tok] = lp.logprob;
    c.top_logprobs.push_back(std::move(top));
  }
}

json::value CompletionLogprobs::json() const {
  json::object o;
  o["tokens"] = tokens;
  o["token_logprobs"] = token_logprobs;
  o["top_logprobs"] = top_logprobs;
  o["text_offset"] = offsets;
  return o;
}

json::value prompt_logprobs_json(const std::vector<TokenLogprob>& lps, const TokenText& token_bytes,
                                 bool tokens_as_ids) {
  auto shown = [&](std::int32_t id) {
    return tokens_as_ids ? "token_id:" + std::to_string(id) : unicode::lossy_utf8(token_bytes(id));
  };
  json::array a;
  for (std::size_t i = 0; i < lps.size(); ++i) {
    if (i == 0) {
      a.push_back(nullptr);
      continue;
    }
    const auto& lp = lps[i];
    json::object e;
    for (std::size_t r = 0; r < lp.top.size(); ++r) {
      const auto& t = lp.top[r];
      e[std::to_string(t.token)] = json::object{{"logprob", t.logprob},
                                                {"rank", static_cast<std::int64_t>(r + 1)},
                                                {"decoded_token", shown(t.token)}};
    }
    e[std::to_string(lp.token)] = json::object{{"logprob", lp.logprob},
                                               {"rank", static_cast<std::int64_t>(lp.rank)},
                                               {"decoded_token", shown(lp.token)}};
    a.push_back(std::move(e));
  }
  return a;
}

std::string vocab_string(std::string_view bytes) {
  // GPT-2's map: printable bytes stand for themselves, the others, in byte order, for
  // U+0100, U+0101, ...
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  };
  std::string out;
  for (const unsigned char b : bytes) {
    char32_t cp = b;
    if (!printable(b)) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
      cp = static_cast<char32_t>(256 + n);
    }
    unicode::append_utf8(out, cp);
  }
  return out;
}

// ---- streaming ----------------------------------------------------------------------------

StreamShaper::StreamShaper(ResponseMeta meta, TokenText token_text)
    : meta_(std::move(meta)),
      token_text_(std::move(token_text)),
      text_offset_(static_cast<std::size_t>(meta_.n), 0),
      tokens_(static_cast<std::size_t>(meta_.n), 0) {}

json::object StreamShaper::chunk() const {
  json::object c;
  c["id"] = meta_.id;
  c["object"] = meta_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  c["created"] = meta_.created;
  c["model"] = meta_.model;
  return c;
}

std::string StreamShaper::begin() {
  std::string out;
  for (int i = 0; i < meta_.n; ++i) {
    json::object choice;
    choice["index"] = i;
    if (meta_.endpoint == Endpoint::kChat) {
      json::object delta;
      delta["role"] = "assistant";
      delta["content"] = meta_.echo(i);
      choice["delta"] = std::move(delta);
    } else if (!meta_.echo(i).empty() && !meta_.echo_logprobs) {
      // (echo + logprobs: the echo comes with the prompt's logprobs, once they are scored)
      choice["text"] = meta_.echo(i);
      text_offset_[static_cast<std::size_t>(i)] = static_cast<int>(meta_.echo(i).size());
    } else {
      continue;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    json::object c = chunk();
    c["choices"] = json::array{std::move(choice)};
    out += sse_data(json::serialize(c));
  }
  return out;
}

std::string StreamShaper::on_event(const StreamEvent& ev) {
  std::string out;
  if (ev.index < 0 || ev.index >= meta_.n) return out;  // note: engine bug; never index out
  const auto i = static_cast<std::size_t>(ev.index);
  tokens_[i] += static_cast<int>(ev.token_ids.size());
  if (ev.usage) {
    usage_ = *ev.usage;
    have_usage_ = true;
  }
  if (ev.finish == FinishReason::kError) {
    failed_ = true;
    out += sse_data(error_json(
        ApiError(500, "internal_error", ev.error.empty() ? "generation failed" : ev.error)));
    return out;
  }
  if (!ev.prompt_logprobs.empty()) out += prompt_chunk(ev);
  const bool lp = meta_.logprobs && !ev.logprobs.empty();
  if (!ev.text.empty() || lp) {
    json::object choice;
    choice["index"] = ev.index;
    if (meta_.endpoint == Endpoint::kChat) {
      json::object delta;
      delta["content"] = ev.text;
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = ev.text;
    }
    choice["logprobs"] = lp ? logprobs_json(meta_.endpoint, ev.logprobs, token_text_,
                                            &text_offset_[i], meta_.tokens_as_ids)
                            : json::value(nullptr);
    choice["finish_reason"] = nullptr;
    json::object c = chunk();
    c["choices"] = json::array{std::move(choice)};
    if (meta_.continuous_usage) {
      c["usage"] = usage_json(counted_usage(prompt_tokens_hint_, tokens_), false);
    }
    out += sse_data(json::serialize(c));
  }
  if (ev.finish != FinishReason::kNone) {
    ++finished_;
    json::object choice;
    choice["index"] = ev.index;
    if (meta_.endpoint == Endpoint::kChat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason_name(ev.finish);
    json::object c = chunk();
    c["choices"] = json::array{std::move(choice)};
    out += sse_data(json::serialize(c));
  }
  return out;
}

// The prompt's logprobs of one choice: completions, the echo with them at the head of the
// choice's logprobs and/or vLLM's prompt_logprobs field in the choice; chat, the field on a chunk
// with no choices, once (every choice scores the same prompt).
std::string StreamShaper::prompt_chunk(const StreamEvent& ev) {
  const auto i = static_cast<std::size_t>(ev.index);
  json::object c = chunk();
  if (meta_.endpoint == Endpoint::kChat) {
    if (ev.index != 0 || !meta_.prompt_logprobs_field) return "";
    c["choices"] = json::array();
    c["prompt_logprobs"] =
        prompt_logprobs_json(ev.prompt_logprobs, token_text_, meta_.tokens_as_ids);
    return sse_data(json::serialize(c));
  }
  json::object choice;
  choice["index"] = ev.index;
  if (meta_.echo_logprobs) {
    choice["text"] = meta_.echo(ev.index);
    CompletionLogprobs lps;
    text_offset_[i] = 0;
    append_completion_logprobs(lps, ev.prompt_logprobs, token_text_, &text_offset_[i],
                               meta_.tokens_as_ids, true);
    choice["logprobs"] = lps.json();
  } else {
    choice["text"] = "";
    choice["logprobs"] = nullptr;
  }
  if (meta_.prompt_logprobs_field)
    choice["prompt_logprobs"] =
        prompt_logprobs_json(ev.prompt_logprobs, token_text_, meta_.tokens_as_ids);
  choice["finish_reason"] = nullptr;
  c["choices"] = json::array{std::move(choice)};
  return sse_data(json::serialize(c));
}

std::string StreamShaper::end() {
  std::string out;
  if (meta_.include_usage) {
    json::object c = chunk();
    c["choices"] = json::array();
    c["usage"] = usage_json(have_usage_ ? usage_ : counted_usage(prompt_tokens_hint_, tokens_));
    out += sse_data(json::serialize(c));
  }
  out += sse_data("[DONE]");
  return out;
}

// ---- non-streaming ------------------------------------------------------------------------

ResponseCollector::ResponseCollector(ResponseMeta meta, TokenText token_text)
    : meta_(std::move(meta)),
      token_text_(std::move(token_text)),
      choices_(static_cast<std::size_t>(meta_.n)) {}

void ResponseCollector::add(const StreamEvent& ev) {
  if (ev.finish == FinishReason::kError) {
    throw ApiError(500, "internal_error", ev.error.empty() ? "generation failed" : ev.error);
  }
  if (ev.index < 0 || ev.index >= meta_.n) return;
  auto& c = choices_[static_cast<std::size_t>(ev.index)];
  c.text += ev.text;
  if (!ev.prompt_logprobs.empty()) c.prompt = ev.prompt_logprobs;
  c.tokens += static_cast<int>(ev.token_ids.size());
  c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (ev.finish != FinishReason::kNone) c.finish = ev.finish;
  if (ev.usage) {
    usage_ = *ev.usage;
    have_usage_ = true;
  }
}

std::string ResponseCollector::body() const {
  json::object r;
  r["id"] = meta_.id;
  r["object"] = meta_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion";
  r["created"] = meta_.created;
  r["model"] = meta_.model;
  json::array choices;
  Usage u = usage_;
  if (!have_usage_) {
    u = Usage{};
    u.prompt_tokens = prompt_tokens_hint_;
    for (const auto& c : choices_) u.completion_tokens += c.tokens;
  }
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const auto& c = choices_[i];
    json::object o;
    o["index"] = static_cast<std::int64_t>(i);
    const std::string& echo = meta_.echo(static_cast<int>(i));
    int offset = static_cast<int>(echo.size());
    json::value lp = nullptr;
    if (meta_.echo_logprobs) {  // (completions) the prompt's entries, then the generated ones
      CompletionLogprobs all;
      offset = 0;
      append_completion_logprobs(all, c.prompt, token_text_, &offset, meta_.tokens_as_ids, true);
      append_completion_logprobs(all, c.logprobs, token_text_, &offset, meta_.tokens_as_ids, false);
      lp = all.json();
    } else if (meta_.logprobs) {
      lp = logprobs_json(meta_.endpoint, c.logprobs, token_text_, &offset, meta_.tokens_as_ids);
    }
    if (meta_.endpoint == Endpoint::kChat) {
      json::object msg;
      msg["role"] = "assistant";
      msg["content"] = echo + c.text;
      o["message"] = std::move(msg);
    } else {
      o["text"] = echo + c.text;
    }
    o["logprobs"] = std::move(lp);
    if (meta_.prompt_logprobs_field && meta_.endpoint == Endpoint::kCompletions)
      o["prompt_logprobs"] = prompt_logprobs_json(c.prompt, token_text_, meta_.tokens_as_ids);
    o["finish_reason"] = c.finish == FinishReason::kNone
                             ? json::value(nullptr)
                             : json::value(finish_reason_name(c.finish));
    choices.push_back(std::move(o));
  }
  r["choices"] = std::move(choices);
  // Chat: on the response (vLLM), from the first choice (every choice scores the same prompt).
  if (meta_.prompt_logprobs_field && meta_.endpoint == Endpoint::kChat)
    r["prompt_logprobs"] = choices_.empty() ? json::value(nullptr)
                                            : prompt_logprobs_json(choices_[0].prompt, token_text_,
                                                                   meta_.tokens_as_ids);
  r["usage"] = usage_json(u);
  return json::serialize(r);
}

}  // namespace strata::api
