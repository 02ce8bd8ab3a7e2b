// Jinja2's lexer with trim_blocks and lstrip_blocks on, as Hugging Face configures it: template
// text, {{ }}, {% %} and {# #} with -/+ whitespace control, {% raw %}, Python string
// escapes, line numbers. Newlines are normalised to \n and one trailing newline is dropped
// (keep_trailing_newline=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja::detail {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;  // text data, name, decoded string literal, number or operator
  int line = 1;
};

std::vector<Token> lex(std::string_view source);  // throws TemplateError

}  // namespace strata::jinja::detail
