// libFuzzer target over request parsing and response shaping (tests/scripts/api_fuzz.cmake).
// The first byte picks the parser; the rest is the body. A parser may reject input only with
// ApiError: any other exception, crash, hang or sanitizer report is a finding.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/api_error.h"
#include "api/openai_request.h"
#include "api/openai_response.h"
#include "runtime/text/jinja/jinja.h"

using namespace strata;
using namespace strata::api;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 4;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  static const ParseContext ctx = [] {
    ParseContext c;
    c.model_names = {"tiny"};
    c.vocab_size = 512;
    c.max_model_len = 1024;
    c.base_profile.enabled = true;
    c.base_profile.full_layers = 1;
    c.base_profile.capacity = 64;
    c.base_profile.window = 8;
    return c;
  }();
  try {
    const auto v = parse_json_body(body);
    switch (kind) {
      case 0:
      case 1: {
        const auto p =
            parse_openai_request(v, kind == 0 ? Endpoint::kCompletions : Endpoint::kChat, ctx);
        // Shape a response for what was accepted: exercises n, logprobs, usage options.
        StreamShaper s(make_meta(p, "cmpl-fuzz", 0),
                       [](std::int32_t t) { return std::to_string(t); });
        std::string out = s.begin();
        StreamEvent ev;
        ev.index = p.request.n - 1;
        ev.text = "x";
        ev.token_ids = {1};
        if (p.request.params.logprobs >= 0) ev.logprobs = {{1, -0.5f, {{2, -1.0f}}}};
        ev.finish = FinishReason::kLength;
        ev.usage = Usage{};
        out += s.on_event(ev);
        out += s.end();
        // A request's chat_template is rendered by the engine: render it here too, over the
        // request's messages (a RenderError is a valid outcome, anything else a finding).
        if (p.request.chat.request_template && p.request.messages) {
          boost::json::array msgs;
          for (const auto& m : *p.request.messages)
            msgs.push_back(boost::json::object{{"role", m.role}, {"content", m.content}});
          boost::json::object vars = p.request.chat.kwargs;
          vars["messages"] = std::move(msgs);
          vars["add_generation_prompt"] = p.request.chat.add_generation_prompt;
          strata::jinja::RenderOptions ro;
          ro.max_steps = 100000;
          ro.max_output = 1 << 20;
          try {
            (void)p.request.chat.request_template->render(vars, ro);
          } catch (const strata::jinja::RenderError&) {
          }
        }
        if (out.find("data: [DONE]") == std::string::npos) __builtin_trap();
        break;
      }
      case 2:
        (void)parse_tokenize_request(v);
        break;
      default:
        (void)parse_detokenize_request(v, ctx.vocab_size);
        break;
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 599) __builtin_trap();
  }
  return 0;
}
