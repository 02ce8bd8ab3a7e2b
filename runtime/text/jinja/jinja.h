// A Jinja2 subset interpreter for Hugging Face chat templates. It renders byte-for-byte what
// transformers' apply_chat_template renders: jinja2 ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}),
// HF's {% generation %} block, and the globals raise_exception and strftime_now and HF's
// tojson (no HTML escaping, keys in insertion order). tests/runtime/text/chat_templates/ compares it
// with Python's jinja2 over real checkpoints' templates.
//
// What is supported is decided at parse time: a tag, filter, test, global function or method
// outside the subset makes parse() throw a TemplateError naming the construct and its line, so
// a checkpoint whose template cannot be rendered fails when it is loaded, not per request.
// Rendering errors (undefined attribute access, type errors, raise_exception) throw
// RenderError. Templates are immutable after parse; render() is thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata::jinja {

// A template that cannot be parsed or uses a construct outside the subset. what() is
// "line N: message".
class TemplateError : public std::runtime_error {
 public:
  TemplateError(int line, const std::string& message)
      : std::runtime_error("line " + std::to_string(line) + ": " + message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// Rendering failed. raised() is true for the template's own raise_exception(message), whose
// message is what() unchanged; other errors say what failed and on which line.
class RenderError : public std::runtime_error {
 public:
  RenderError(const std::string& message, bool raised = false)
      : std::runtime_error(message), raised_(raised) {}
  bool raised() const { return raised_; }

 private:
  bool raised_;
};

struct RenderOptions {
  std::optional<std::time_t> now;      // strftime_now's clock (local time); unset: now
  std::size_t max_output = 64u << 20;  // bytes
  std::size_t max_steps = 50'000'000;  // evaluated nodes (loops over huge ranges)
  int max_depth = 200;                 // macro call nesting
};

namespace detail {
struct Program;
}

class Template {
 public:
  // Throws TemplateError.
  static Template parse(std::string_view source);
  // `vars` are the template's variables (messages, bos_token, add_generation_prompt, ...).
  std::string render(const boost::json::object& vars, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace strata::jinja
