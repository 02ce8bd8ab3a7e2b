#include "runtime/text/jinja/lexer.h"

#include <cstring>

#include "runtime/text/jinja/jinja.h"
#include "runtime/text/jinja/value.h"
#include "runtime/text/unicode.h"

namespace strata::jinja::detail {

namespace {

// The length of the Python-whitespace code point at s[i] (0: none).
std::size_t space_at(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  const auto st = unicode::utf8_step(s.substr(i));
  return st.kind == unicode::Utf8Step::kValid && py_isspace(st.cp) ? st.len : 0;
}

std::size_t skip_space(std::string_view s, std::size_t i) {
  while (std::size_t n = space_at(s, i)) i += n;
  return i;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's escapes resolved (as Jinja2 does with unicode-escape).
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(e);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (std::size_t k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) throw TemplateError(line, std::string("truncated \\") + e + " escape");
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) throw TemplateError(line, "escape beyond U+10FFFF");
        unicode::append_utf8(out, cp);
        i += n;
        break;
      }
      case 'N':
        throw TemplateError(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          unicode::append_utf8(out, cp);
        } else {  // unknown escapes stay as written
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Digits with single underscores between them ((\d+_)*\d+); returns the end or `i` if none.
std::size_t digits(std::string_view s, std::size_t i) {
  std::size_t j = i;
  while (j < s.size() && is_digit(s[j])) {
    ++j;
    if (j + 1 < s.size() && s[j] == '_' && is_digit(s[j + 1])) ++j;
  }
  return j;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    while (pos < s_.size()) {
      std::size_t tag = s_.find('{', pos);
      while (tag != std::string::npos && tag + 1 < s_.size() && !std::strchr("{%#", s_[tag + 1]))
        tag = s_.find('{', tag + 1);
      if (tag == std::string::npos || tag + 1 >= s_.size()) {
        text(s_.substr(pos));
        break;
      }
      const char kind = s_[tag + 1];
      const char sign =
          tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      std::string data = s_.substr(pos, tag - pos);
      const int data_newlines = count_newlines(data);
      if (sign == '-') {
        data = py_strip(data, false, true, nullptr);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        const std::size_t nl = data.rfind('\n');
        const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting_) && l_pos < data.size() &&
            skip_space(data, l_pos) == data.size())
          data.resize(l_pos);
      }
      text(data);
      line_ += data_newlines - count_newlines(data);
      pos = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = comment(pos);
      } else if (kind == '%' && raw_begin(pos)) {
        pos = raw(pos);
      } else {
        pos = tag_body(pos, kind == '%');
      }
    }
    out_.push_back({Token::Type::kEof, "", line_});
    return std::move(out_);
  }

 private:
  void text(std::string data) {
    if (data.empty()) return;
    out_.push_back({Token::Type::kText, data, line_});
    line_ += count_newlines(data);
  }

  // After `end` (the position just past a tag's closing characters): trim_blocks / `-`.
  std::size_t after_end(std::size_t end, char sign, bool block) {
    if (sign == '-')
      end = skip_space(s_, end);
    else if (sign != '+' && block && end < s_.size() && s_[end] == '\n')
      ++end;
    line_starting_ = end > 0 && s_[end - 1] == '\n';
    return end;
  }

  std::size_t comment(std::size_t pos) {
    const std::size_t end = s_.find("#}", pos);
    if (end == std::string::npos) throw TemplateError(line_, "missing end of comment tag");
    const char sign = end > pos && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    line_ += count_newlines(std::string_view(s_).substr(pos, end + 2 - pos));
    const std::size_t next = after_end(end + 2, sign, true);
    line_ += count_newlines(std::string_view(s_).substr(end + 2, next - end - 2));
    return next;
  }

  // {% raw %} ... {% endraw %}: the text between is output as is.
  bool raw_begin(std::size_t pos) const {
    const std::size_t i = skip_space(s_, pos);
    return s_.compare(i, 3, "raw") == 0 && i + 3 < s_.size() &&
           !(is_name_start(s_[i + 3]) || is_digit(s_[i + 3]));
  }
  std::size_t raw(std::size_t pos) {
    std::size_t i = skip_space(s_, skip_space(s_, pos) + 3);
    const bool dash = s_.compare(i, 3, "-%}") == 0;
    if (!dash && s_.compare(i, 2, "%}") != 0) throw TemplateError(line_, "malformed raw tag");
    i += dash ? 3 : 2;
    if (dash) i = skip_space(s_, i);
    for (std::size_t k = s_.find("{%", i); k != std::string::npos; k = s_.find("{%", k + 2)) {
      std::size_t j = k + 2;
      const char sign = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j] : 0;
      j = skip_space(s_, j + (sign ? 1 : 0));
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(s_, j + 6);
      const char esign = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j] : 0;
      if (s_.compare(j + (esign ? 1 : 0), 2, "%}") != 0) continue;
      std::string data = s_.substr(i, k - i);
      line_ += count_newlines(std::string_view(s_).substr(pos, i - pos));
      const int nl = count_newlines(data);
      if (sign == '-') data = py_strip(data, false, true, nullptr);
      text(data);
      line_ += nl - count_newlines(data);
      const std::size_t end = j + (esign ? 1 : 0) + 2;
      line_ += count_newlines(std::string_view(s_).substr(k, end - k));
      const std::size_t next = after_end(end, esign, true);
      line_ += count_newlines(std::string_view(s_).substr(end, next - end));
      return next;
    }
    throw TemplateError(line_, "missing end of raw directive");
  }

  std::size_t tag_body(std::size_t pos, bool block) {
    const int begin_line = line_;
    out_.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
    std::vector<char> balance;
    const char* close = block ? "%}" : "}}";
    for (;;) {
      const std::size_t ws = skip_space(s_, pos);
      line_ += count_newlines(std::string_view(s_).substr(pos, ws - pos));
      pos = ws;
      if (pos >= s_.size())
        throw TemplateError(begin_line, block ? "unexpected end of template: missing '%}'"
                                              : "unexpected end of template: missing '}}'");
      if (balance.empty()) {
        const char sign = s_[pos] == '-' || (block && s_[pos] == '+') ? s_[pos] : 0;
        if (s_.compare(pos + (sign ? 1 : 0), 2, close) == 0) {
          out_.push_back({block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
          const std::size_t end = pos + (sign ? 1 : 0) + 2;
          const std::size_t next = after_end(end, sign, block);
          line_ += count_newlines(std::string_view(s_).substr(end, next - end));
          return next;
        }
      }
      pos = token(pos, balance);
    }
  }

  std::size_t token(std::size_t pos, std::vector<char>& balance) {
    const char c = s_[pos];
    if (is_digit(c)) {
      std::size_t j = digits(s_, pos);
      bool is_float = false;
      if (j + 1 < s_.size() && s_[j] == '.' && is_digit(s_[j + 1])) {
        j = digits(s_, j + 1);
        is_float = true;
      }
      if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
        if (k < s_.size() && is_digit(s_[k])) {
          j = digits(s_, k);
          is_float = true;
        }
      }
      std::string num;
      for (std::size_t k = pos; k < j; ++k)
        if (s_[k] != '_') num.push_back(s_[k]);
      out_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, num, line_});
      return j;
    }
    if (is_name_start(c)) {
      std::size_t j = pos + 1;
      while (j < s_.size() && (is_name_start(s_[j]) || is_digit(s_[j]))) ++j;
      out_.push_back({Token::Type::kName, s_.substr(pos, j - pos), line_});
      return j;
    }
    if (c == '\'' || c == '"') {
      std::size_t j = pos + 1;
      while (j < s_.size() && s_[j] != c) j += s_[j] == '\\' ? 2 : 1;
      if (j >= s_.size()) throw TemplateError(line_, "unterminated string literal");
      const std::string_view body = std::string_view(s_).substr(pos + 1, j - pos - 1);
      out_.push_back({Token::Type::kString, unescape(body, line_), line_});
      line_ += count_newlines(body);
      return j + 1;
    }
    static const char* const kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/",
                                       "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                       ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
    for (const char* op : kOps) {
      const std::size_t n = std::strlen(op);
      if (s_.compare(pos, n, op) != 0) continue;
      if (n == 1 && std::strchr("([{", c)) balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      if (n == 1 && std::strchr(")]}", c)) {
        if (balance.empty()) throw TemplateError(line_, std::string("unexpected '") + c + "'");
        if (balance.back() != c)
          throw TemplateError(
              line_, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
        balance.pop_back();
      }
      out_.push_back({Token::Type::kOp, op, line_});
      return pos + n;
    }
    throw TemplateError(line_, std::string("unexpected character '") + c + "'");
  }

  std::string s_;
  std::vector<Token> out_;
  int line_ = 1;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {  // \r\n and \r -> \n
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace strata::jinja::detail
