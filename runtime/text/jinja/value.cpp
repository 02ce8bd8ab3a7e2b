#include "runtime/text/jinja/value.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/text/jinja/jinja.h"
#include "runtime/text/unicode.h"

namespace strata::jinja {

namespace json = boost::json;

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(std::int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::real(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::str(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(std::vector<Value> x, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.tuple = tuple;
  v.list = std::make_shared<const std::vector<Value>>(std::move(x));
  return v;
}
Value Value::dict(Object o) {
  Value v;
  v.kind = Kind::kDict;
  v.obj = std::make_shared<Object>(std::move(o));
  return v;
}
Value Value::callable(Function f) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Function>(std::move(f));
  return v;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.obj->items.empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::kDict: {
      if (a.obj->items.size() != b.obj->items.size()) return false;
      for (const auto& [k, v] : a.obj->items) {
        const Value* o = b.obj->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default:
      return a.obj == b.obj && a.fn == b.fn;
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s;  // UTF-8 = code points
  if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (std::size_t k = 0; k < x.size() && k < y.size(); ++k)
      if (!equal(x[k], y[k])) return compare(x[k], y[k], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw RenderError(std::string("'") + op + "' not supported between instances of '" +
                    type_name(a) + "' and '" + type_name(b) + "'");
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]xx.
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exp < -4 || exp >= 16) {
    out.append(digits, 0, 1);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0.";
    out.append(static_cast<std::size_t>(-exp - 1), '0');
    out += digits;
  } else {
    const std::size_t point = static_cast<std::size_t>(exp) + 1;
    if (digits.size() <= point) {
      out = digits;
      out.append(point - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, point);
      out.push_back('.');
      out.append(digits, point);
    }
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (std::size_t i = 0; i < s.size();) {
    const auto st = unicode::utf8_step(std::string_view(s).substr(i));
    const char32_t cp = st.kind == unicode::Utf8Step::kValid ? st.cp : 0xFFFD;
    const std::size_t len = st.len ? st.len : 1;
    char buf[16];
    if (cp == static_cast<char32_t>(q) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp == 0x2028 || cp == 0x2029) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out.push_back(q);
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

void json_value(std::string& out, const Value& v, int indent, bool sort_keys, int level,
                const char* item_sep, const char* key_sep) {
  const auto newline = [&](int lvl) {
    out.push_back('\n');
    out.append(static_cast<std::size_t>(indent * lvl), ' ');
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f < 0 ? "-Infinity" : "Infinity";
      else
        out += format_float(v.f);
      return;
    case Value::Kind::kString:
      json_string(out, v.s);
      return;
    case Value::Kind::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(level + 1);
        json_value(out, (*v.list)[k], indent, sort_keys, level + 1, item_sep, key_sep);
      }
      if (indent >= 0) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      if (v.obj->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : v.obj->items) items.push_back(&it);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(level + 1);
        json_string(out, items[k]->first);
        out += key_sep;
        json_value(out, items[k]->second, indent, sort_keys, level + 1, item_sep, key_sep);
      }
      if (indent >= 0) newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw RenderError(std::string("Object of type ") + type_name(v) +
                        " is not JSON serializable");
  }
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return repr_string(v.s);
    case Value::Kind::kList: {
      std::string out(1, v.tuple ? '(' : '[');
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out.push_back(',');
      out.push_back(v.tuple ? ')' : ']');
      return out;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = v.kind == Value::Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.obj->items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(x);
      }
      return out + (v.kind == Value::Kind::kNamespace ? "}>" : "}");
    }
    case Value::Kind::kUndefined:
      return "Undefined";
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return format_float(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kCallable:
      return "<function>";
    default:
      return repr(v);
  }
}

std::string to_json(const Value& v, int indent, bool sort_keys, const char* item_sep,
                    const char* key_sep) {
  std::string out;
  json_value(out, v, indent, sort_keys, 0,
             item_sep      ? item_sep
             : indent >= 0 ? ","
                           : ", ",
             key_sep ? key_sep : ": ");
  return out;
}

Value from_json(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return Value::none();
    case json::kind::bool_:
      return Value::boolean(v.get_bool());
    case json::kind::int64:
      return Value::integer(v.get_int64());
    case json::kind::uint64:
      return v.get_uint64() > static_cast<std::uint64_t>(INT64_MAX)
                 ? Value::real(static_cast<double>(v.get_uint64()))
                 : Value::integer(static_cast<std::int64_t>(v.get_uint64()));
    case json::kind::double_:
      return Value::real(v.get_double());
    case json::kind::string:
      return Value::str(std::string(v.get_string()));
    case json::kind::array: {
      std::vector<Value> out;
      out.reserve(v.get_array().size());
      for (const auto& e : v.get_array()) out.push_back(from_json(e));
      return Value::make_list(std::move(out));
    }
    case json::kind::object: {
      Object o;
      for (const auto& kv : v.get_object()) o.set(std::string(kv.key()), from_json(kv.value()));
      return Value::dict(std::move(o));
    }
  }
  return Value::none();
}

std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size();) {
    out.push_back(i);
    const auto st = unicode::utf8_step(s.substr(i));
    i += st.len ? st.len : 1;
  }
  out.push_back(s.size());
  return out;
}

std::size_t code_point_count(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t cp) {
  return unicode::is_white_space(cp) || (cp >= 0x1c && cp <= 0x1f);
}

std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars) {
  std::vector<char32_t> set;
  if (chars) {
    for (std::size_t i = 0; i < chars->size();) {
      const auto st = unicode::utf8_step(std::string_view(*chars).substr(i));
      set.push_back(st.cp);
      i += st.len ? st.len : 1;
    }
  }
  const auto strip_it = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_isspace(cp);
  };
  const auto offs = code_point_offsets(s);
  std::size_t b = 0, e = offs.size() - 1;
  const auto cp_at = [&](std::size_t k) { return unicode::utf8_step(s.substr(offs[k])).cp; };
  if (left)
    while (b < e && strip_it(cp_at(b))) ++b;
  if (right)
    while (e > b && strip_it(cp_at(e - 1))) --e;
  return std::string(s.substr(offs[b], offs[e] - offs[b]));
}

}  // namespace strata::jinja
