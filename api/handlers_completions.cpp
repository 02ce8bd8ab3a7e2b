// The inference routes /v1/completions and /v1/chat/completions on one connection: parse
// and submit off the I/O thread, then one JSON body or an SSE stream (chunked; the raw body
// for HTTP/1.0), with a read next to the response that notices a client going and aborts
// its request.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <ctime>

#include "api/batch_stream.h"
#include "api/openai_response.h"
#include "api/routes.h"
#include "runtime/text/tokenizer.h"

namespace strata::api {

using namespace boost::asio::experimental::awaitable_operators;
using net::as_tuple;
using net::use_awaitable;

net::awaitable<void> Conn::watch_close(const std::vector<std::string>& request_ids,
                                       std::string* side, bool* gone) {
  char tmp[4096];
  for (;;) {
    auto [ec, n] = co_await sock.async_read_some(net::buffer(tmp), as_tuple(use_awaitable));
    if (ec == net::error::operation_aborted && !timed_out) co_return;  // the response finished
    if (ec || side->size() > (1u << 20)) {
      *gone = true;
      if (srv.engine)
        for (const auto& id : request_ids) srv.engine->abort(id);
      co_return;
    }
    side->append(tmp, n);  // a pipelined next request: kept for later
  }
}

net::awaitable<bool> Conn::completions(Req& req, Endpoint endpoint) {
  auto engine = srv.engine;
  ParsedRequest pr;
  std::shared_ptr<TokenStream> ts;
  const std::string id = srv.new_id(endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl");
  std::vector<std::string> ids;  // the engine requests: `id`, or one per prompt of a batch
  std::optional<ApiError> err;
  try {
    // Parsing a large body and tokenizing its prompt (in submit) run off the I/O thread.
    const auto ctx = srv.parse_context();
    const std::function<void()> job = [&] {
      pr = parse_openai_request(parse_json_body(req.body()), endpoint, ctx);
      if (pr.more_prompts.empty()) {
        pr.request.id = id;
        ids = {id};
        ts = engine->submit(pr.request);
        return;
      }
      // A batch of prompts: one engine request each (ids "<id>-<k>"), read as one stream. A
      // part refused (a bad prompt, a full queue) refuses the whole request: the parts already
      // queued are aborted (dropping their streams does it too).
      std::vector<std::shared_ptr<TokenStream>> parts;
      try {
        for (std::size_t k = 0; k <= pr.more_prompts.size(); ++k) {
          Request r = pr.request;
          if (k > 0) {
            r.prompt_text = pr.more_prompts[k - 1].text;
            r.prompt_ids = pr.more_prompts[k - 1].ids;
          }
          r.id = id + "-" + std::to_string(k);
          ids.push_back(r.id);
          parts.push_back(engine->submit(std::move(r)));
        }
      } catch (...) {
        for (const auto& i : ids) engine->abort(i);
        throw;
      }
      ts = std::make_shared<BatchStream>(id, std::move(parts), pr.request.n);
    };
    co_await srv.offload(job);
  } catch (...) {
    err = to_api_error(std::current_exception());
  }
  if (err) co_return co_await write(srv.error_response(req, *err));

  auto meta = make_meta(pr, id, static_cast<std::int64_t>(std::time(nullptr)));
  if (pr.echo && pr.request.prompt_ids)
    meta.echo_text = engine->tokenizer().decode(*pr.request.prompt_ids);
  if (pr.echo && !meta.echo_texts.empty()) {
    meta.echo_texts[0] = meta.echo_text;
    for (std::size_t k = 0; k < pr.more_prompts.size(); ++k)
      if (pr.more_prompts[k].ids)
        meta.echo_texts[k + 1] = engine->tokenizer().decode(*pr.more_prompts[k].ids);
  }
  auto abort_all = [&] {
    for (const auto& i : ids) engine->abort(i);
  };
  auto text_of = [this](std::int32_t t) { return srv.token_bytes(t); };
  std::string side;
  bool gone = false;
  bool write_failed = false;
  auto observe = [this](const StreamEvent& ev) {
    if (ev.usage) srv.metrics.observe_request(*ev.usage, ev.finish);
  };

  if (!pr.stream) {
    ResponseCollector col(meta, text_of);
    col.set_prompt_tokens(ts->prompt_tokens());
    std::optional<ApiError> failure;
    auto collect = [&]() -> net::awaitable<void> {
      try {
        while (auto ev = co_await ts->next()) {
          observe(*ev);
          col.add(*ev);
        }
      } catch (...) {
        failure = to_api_error(std::current_exception());
        abort_all();
      }
    };
    co_await (collect() || watch_close(ids, &side, &gone));
    if (gone) co_return false;
    buf.commit(net::buffer_copy(buf.prepare(side.size()), net::buffer(side)));
    if (failure) co_return co_await write(srv.error_response(req, *failure));
    co_return co_await write(srv.response(req, http::status::ok, col.body()));
  }

  http::response<http::empty_body> head{http::status::ok, req.version()};
  srv.decorate(req, head.base());
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  // HTTP/1.0 has no chunked encoding: the stream is the body, ended by closing.
  const bool chunked = req.version() >= 11;
  head.keep_alive(chunked && req.keep_alive() && !srv.stopping);
  head.chunked(chunked);
  srv.metrics.observe_http(200);
  http::response_serializer<http::empty_body> sr{head};
  set_deadline(to_duration(srv.opt.server.write_timeout_s));
  auto [hec, hn] = co_await http::async_write_header(sock, sr, as_tuple(use_awaitable));
  clear_deadline();
  if (hec) {
    abort_all();
    co_return false;
  }
  StreamShaper shaper(meta, text_of);
  shaper.set_prompt_tokens(ts->prompt_tokens());
  auto send = [&](const std::string& s) -> net::awaitable<bool> {
    if (s.empty() || write_failed) co_return !write_failed;
    set_deadline(to_duration(srv.opt.server.write_timeout_s));
    auto [ec, n] = chunked
                       ? co_await net::async_write(sock, http::make_chunk(net::buffer(s)),
                                                   as_tuple(use_awaitable))
                       : co_await net::async_write(sock, net::buffer(s), as_tuple(use_awaitable));
    clear_deadline();
    if (ec) write_failed = true;
    co_return !ec;
  };
  auto pump = [&]() -> net::awaitable<void> {
    if (!co_await send(shaper.begin())) co_return;
    bool broke = false;
    std::optional<ApiError> thrown;
    try {
      while (auto ev = co_await ts->next()) {
        observe(*ev);
        if (!co_await send(shaper.on_event(*ev))) {
          broke = true;
          break;
        }
        if (shaper.failed()) break;
      }
    } catch (...) {
      thrown = to_api_error(std::current_exception());
    }
    if (thrown) {
      abort_all();
      co_await send(sse_error(*thrown));
      co_return;
    }
    if (broke) {
      abort_all();
      co_return;
    }
    if (shaper.failed()) {
      abort_all();
      co_await send(sse_data("[DONE]"));
      co_return;
    }
    co_await send(shaper.end());
  };
  co_await (pump() || watch_close(ids, &side, &gone));
  if (gone || write_failed) {
    abort_all();
    co_return false;
  }
  if (!chunked) co_return false;  // the end of the body is the close
  set_deadline(to_duration(srv.opt.server.write_timeout_s));
  auto [lec, ln] =
      co_await net::async_write(sock, http::make_chunk_last(), as_tuple(use_awaitable));
  clear_deadline();
  buf.commit(net::buffer_copy(buf.prepare(side.size()), net::buffer(side)));
  co_return !lec && head.keep_alive();
}

net::awaitable<bool> handle_completions(Conn& c, Req& req, const RouteArgs&) {
  co_return co_await c.completions(req, Endpoint::kCompletions);
}

net::awaitable<bool> handle_chat_completions(Conn& c, Req& req, const RouteArgs&) {
  co_return co_await c.completions(req, Endpoint::kChat);
}

}  // namespace strata::api
