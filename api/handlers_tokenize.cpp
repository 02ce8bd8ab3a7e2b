// /tokenize and /detokenize. /tokenize assembles the prompt with the engine's own prompt
// assembly (Engine::prompt_ids -> assemble_prompt, actors/prompt.h), the one intake uses, so
// it reports exactly the ids a completion or chat request with the same input is prompted
// with. Parsing and tokenizing run off the I/O thread (megabyte prompts take a while).
#include <boost/json.hpp>

#include "api/openai_response.h"
#include "api/routes.h"
#include "runtime/text/tokenizer.h"

namespace strata::api {

namespace json = boost::json;

net::awaitable<bool> handle_tokenize(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  std::vector<std::int32_t> ids;
  bool token_strs = false;
  auto engine = srv.engine;
  const std::function<void()> job = [&] {
    TokenizeRequest t = parse_tokenize_request(parse_json_body(req.body()));
    if (!t.model.empty() && t.model != srv.opt.model_name)
      throw model_not_found(clip(t.model), srv.opt.model_name);
    token_strs = t.return_token_strs;
    PromptInput in;
    if (!t.messages.empty()) {
      in.messages = std::move(t.messages);
      in.chat = std::move(t.chat);
    } else {
      in.text = std::move(t.prompt);
    }
    in.add_special_tokens = t.add_special_tokens;
    ids = engine->prompt_ids(std::move(in));
  };
  co_await srv.offload(job);
  const auto& tok = engine->tokenizer();
  json::object o;
  json::array a;
  for (auto id : ids) a.push_back(id);
  o["count"] = static_cast<std::int64_t>(ids.size());
  o["max_model_len"] = srv.parse_context().max_model_len;
  o["tokens"] = std::move(a);
  if (token_strs) {
    json::array strs;
    for (auto id : ids)
      strs.push_back(json::value(tok.is_special(id) ? tok.token_bytes(id)
                                                    : vocab_string(tok.token_bytes(id))));
    o["token_strs"] = std::move(strs);
  }
  co_return co_await c.write(srv.response(req, http::status::ok, json::serialize(o)));
}

net::awaitable<bool> handle_detokenize(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  const auto ids =
      parse_detokenize_request(parse_json_body(req.body()), srv.parse_context().vocab_size);
  json::object o;
  o["prompt"] = srv.engine->tokenizer().decode(ids);
  co_return co_await c.write(srv.response(req, http::status::ok, json::serialize(o)));
}

}  // namespace strata::api
